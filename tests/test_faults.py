"""Process faults against impl/: what a SIGKILLed reader or writer does to the store.

Every test runs real processes (:class:`~shmspec.conformance.procs.ProcessPool`:
one writer process and reader processes ``r1``/``r2`` over one real segment,
stopped at named yield points) against ``load_target("impl")`` and kills one of
them at a chosen point.  What is measured here is what the "Faults" paragraph
of :class:`shmspec.impl.storage.SingleWriterShmObjectStorage` states.

Geometry: ``B = 256`` data bytes, ``max_object_size = 64``, 2 readers, every
object 40 data bytes -> object 4 + 8 + 40 = 52 bytes, chunk 60 bytes: four
chunks fill the ring (240 bytes) and a fifth put needs a reclaim.

Bounded waits: impl's ``LOCK_TIMEOUT`` is lowered to 0.3 s in the controller
before the pool forks (workers inherit it); every controller wait is bounded
by the pool's step timeout (plus ``LOCK_TIMEOUT`` for a step forced into a held
lock); and each test runs under a SIGALRM hard limit.  Pools are shut down in
a fixture's ``finally``, so a failing test still leaves no process and no
segment behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import multiprocess
import pytest

from shmspec.conformance.adapter import segment_exists
from shmspec.conformance.loader import load_target
from shmspec.conformance.procs import ProcessPool, ScheduleError, StepOutcome
from shmspec.impl import SingleWriterShmRingBuffer
from shmspec.impl import storage as impl_storage
from shmspec.impl.layout import candidate_abs, generation
from shmspec.impl.signing import make_signature

B = 256
MAX_OBJECT = 64
DATA_LEN = 40
CHUNK = 8 + 4 + 8 + DATA_LEN  # ring header + reader_count + harness metadata + data = 60
N_READERS = 2
LOCK_TIMEOUT = 0.3
STEP_TIMEOUT = 5.0
HARD_LIMIT = 60
"""Seconds after which a test is interrupted (SIGALRM), whatever it waits for."""


# ---------------------------------------------------------------- fixtures
@pytest.fixture(autouse=True)
def hard_limit():
    def on_alarm(signum, frame):
        raise TimeoutError(f"test exceeded its {HARD_LIMIT} s hard limit")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(HARD_LIMIT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def make_pool(monkeypatch):
    """Factory: a ProcessPool on impl with a store open (B, 64, 2 readers).

    ``LOCK_TIMEOUT`` is set before the fork.  Every pool is shut down
    afterwards, even when the test failed, and any segment it ever opened is
    removed.
    """
    monkeypatch.setattr(impl_storage, "LOCK_TIMEOUT", LOCK_TIMEOUT)
    pools: list[ProcessPool] = []
    seen: set[str] = set()

    def make() -> ProcessPool:
        pool = ProcessPool(load_target("impl"), ("r1", "r2"), step_timeout=STEP_TIMEOUT)
        pools.append(pool)
        pool.open_store(B, MAX_OBJECT, N_READERS)
        seen.update(pool.segments)
        return pool

    try:
        yield make
    finally:
        for pool in pools:
            seen.update(pool.segments)
            pool.shutdown()
        for name in seen:  # belt and braces: never leave a segment behind
            if segment_exists(name):
                os.unlink(os.path.join("/dev/shm", name.lstrip("/")))


# ----------------------------------------------------------------- helpers
@dataclass(frozen=True)
class Handle:
    key: str
    address: int
    id: int
    signature: list
    data: bytes

    @property
    def args(self) -> dict:
        return {"address": self.address, "id": self.id, "signature": self.signature, "key": self.key}

    @property
    def expected(self) -> dict:
        return {"blob": self.data.hex()}


def data_for(i: int) -> bytes:
    return bytes([i % 256]) * DATA_LEN


def run(pool: ProcessPool, name: str, action: str, args: dict, *,
        stop_at: str | None = None, force: bool = False) -> tuple[StepOutcome, list[StepOutcome]]:
    """Run one operation step by step.  Returns ``(last outcome, every outcome)``.

    ``stop_at``: leave the process paused at that yield point (it must be
    reached).  ``force``: let it run into a reader lock held by another
    (killed) process.
    """
    out = pool.start(name, action, args)
    outs = [out]
    for _ in range(100):
        if out.result is not None:
            break
        if out.point == stop_at:
            return out, outs
        out = pool.advance(name, force=force)
        outs.append(out)
    else:
        raise AssertionError(f"{name} {action} did not finish in 100 steps")
    assert stop_at is None, f"{name} {action} finished without reaching {stop_at}: {out.result}"
    return out, outs


def put(pool: ProcessPool, key: str, i: int) -> Handle:
    out, _ = run(pool, "writer", "put", {"key": key, "data": data_for(i).hex()})
    assert out.result["error"] is None, out.result
    v = out.result["value"]
    return Handle(key, v["handle"][0], v["handle"][1], v["signature"], data_for(i))


def put_error(pool: ProcessPool, key: str, i: int, force: bool = False) -> str | None:
    out, _ = run(pool, "writer", "put", {"key": key, "data": data_for(i).hex()}, force=force)
    return out.result["error"]


def get(pool: ProcessPool, reader: str, h: Handle, *, args: dict | None = None,
        force: bool = False) -> tuple[dict, list, list[StepOutcome]]:
    """A reader's get of ``h``; asserts NRR on the way: the result is ``h``'s
    object or an error, and nothing but ``h``'s object was deserialized."""
    out, outs = run(pool, reader, "get", args or h.args, force=force)
    res = out.result
    assert res["error"] is not None or res["value"] == h.expected, res
    assert all(d == h.expected for d in out.deserialized), out.deserialized
    return res, out.deserialized, outs


def get_ok(pool: ProcessPool, reader: str, h: Handle) -> None:
    res, _, _ = get(pool, reader, h)
    assert res["error"] is None and res["value"] == h.expected, res


def get_error(pool: ProcessPool, reader: str, h: Handle, *, args: dict | None = None,
              force: bool = False) -> str:
    """The error kind of a get that must fail, having returned and deserialized nothing."""
    res, deserialized, _ = get(pool, reader, h, args=args, force=force)
    assert res["error"] is not None and res["value"] is None, res
    assert deserialized == []
    return res["error"]


def timed_lock_timeout(pool: ProcessPool, name: str, action: str, args: dict) -> float:
    """Run ``action`` into the held lock; assert LockTimeout after about
    LOCK_TIMEOUT seconds, with nothing returned or deserialized.  Returns the wait."""
    out, outs = run(pool, name, action, args, force=True)
    assert out.result["error"] == "LockTimeout", out.result
    assert out.result["value"] in (None, {"handle": None, "signature": None})  # put: no handle
    assert "LockTimeout" in out.result["detail"] and "reader lock" in out.result["detail"]
    assert out.deserialized == []
    assert outs[-2].point == "lock_acquire"
    waited = outs[-1].seconds
    assert LOCK_TIMEOUT * 0.9 <= waited < LOCK_TIMEOUT + 2.0, waited
    return waited


def segment_name(pool: ProcessPool) -> str:
    return pool.handle_fields["ring_buffer_handle"][1]


def forge_signature(segment: str, key: str, address: int, monotonic_id: int) -> list[int]:
    """Sign ``(key, address, id)`` with the segment's own secret, exactly as a
    reader would check it: the strongest handle an attacker (or a reader
    guessing the half-written chunk) could present."""
    ring = SingleWriterShmRingBuffer(B, segment)
    try:
        gen = generation(candidate_abs(monotonic_id, ring.published_abs_end()))
        return list(make_signature(ring.get_auth_secret(), key, address, monotonic_id, gen))
    finally:
        ring.close()


def snapshot(pool: ProcessPool):
    snap = pool.snapshot()
    assert snap is not None
    return snap


def workers(pool: ProcessPool) -> list:
    return [ps.process for ps in pool.procs.values()]


def shutdown_clean(pool: ProcessPool, extra_processes: list = (), segments: set[str] = frozenset()) -> list[str]:
    """Shut the pool down and assert no worker process and no segment is left.
    Returns what shutdown had to unlink itself."""
    processes = workers(pool) + list(extra_processes)
    segs = set(pool.segments) | set(segments)
    leaked = pool.shutdown()
    assert not [p for p in processes if p.is_alive()]
    assert not [p for p in multiprocess.active_children() if p.name.startswith("shmspec-")]
    assert not [s for s in segs if segment_exists(s)]
    return leaked


def fill(pool: ProcessPool, first: int = 0) -> list[Handle]:
    """Four puts: the ring is full (4 * 60 = 240 of 256 bytes)."""
    hs = [put(pool, f"k{i}", i) for i in range(first, first + 4)]
    assert [h.address for h in hs] == [hs[0].address + j * CHUNK for j in range(4)]
    return hs


# ------------------------------------------ 1. reader killed holding the lock
@pytest.mark.parametrize("point", ["counter_increment", "lock_release"])
def test_reader_killed_holding_lock_gets_and_reclaims_raise_lock_timeout(make_pool, point):
    pool = make_pool()
    hs = [put(pool, f"k{i}", i) for i in range(3)]
    run(pool, "r1", "get", hs[0].args, stop_at=point)
    assert pool.lock_holder == "r1"
    pool.kill("r1")
    assert pool.lock_holder == "r1 (killed)"

    # Without force the controller refuses to let r2 block on the dead lock.
    out = pool.start("r2", "get", hs[0].args)
    while out.point != "lock_acquire":
        out = pool.advance("r2")
    with pytest.raises(ScheduleError, match="would block"):
        pool.advance("r2")
    # Forced, r2's get times out: LockTimeout, nothing returned or deserialized.
    out = pool.advance("r2", force=True)
    assert out.result["error"] == "LockTimeout" and out.deserialized == []
    assert LOCK_TIMEOUT * 0.9 <= out.seconds < LOCK_TIMEOUT + 2.0
    # ... and so does every later get: the lock stays held for ever.
    for h in hs:
        timed_lock_timeout(pool, "r2", "get", h.args)
    assert pool.lock_holder == "r1 (killed)"

    # The writer's reclaims fence with the same lock: they time out too, and
    # change nothing.
    before = snapshot(pool).comparable()
    timed_lock_timeout(pool, "writer", "free_unused", {})
    timed_lock_timeout(pool, "writer", "clear", {})
    assert snapshot(pool).comparable() == before
    # A put that fits needs no lock; the put that needs a reclaim times out
    # and leaves nothing behind.
    put(pool, "k3", 3)
    before = snapshot(pool).comparable()
    timed_lock_timeout(pool, "writer", "put", {"key": "k4", "data": data_for(4).hex()})
    assert snapshot(pool).comparable() == before
    assert "k4" not in snapshot(pool).key_index

    # Shutdown: the writer was alive, so it unlinked its own segment.
    assert shutdown_clean(pool) == []


def test_reader_killed_holding_lock_only_a_new_lock_recovers(make_pool):
    pool = make_pool()
    h0 = put(pool, "k0", 0)
    run(pool, "r1", "get", h0.args, stop_at="counter_increment")
    killed = workers(pool)
    pool.kill("r1")

    # A restarted reader and a new store on the same pool lock do not help.
    pool.restart("r1")
    pool.open_store(B, MAX_OBJECT, N_READERS)
    assert pool.lock_holder == "r1 (killed)"
    h = put(pool, "k0", 10)
    timed_lock_timeout(pool, "r1", "get", h.args)
    timed_lock_timeout(pool, "r2", "get", h.args)

    # A new lock (fresh processes, fresh store) does.
    pool.respawn()
    assert pool.lock_holder is None and pool.clean()
    pool.open_store(B, MAX_OBJECT, N_READERS)
    h = put(pool, "k0", 11)
    get_ok(pool, "r1", h)
    get_ok(pool, "r2", h)
    assert shutdown_clean(pool, killed) == []


# -------------------------------------------- 2. reader killed outside the lock
@pytest.mark.parametrize("kill", [None, "payload_read", "lock_acquire", "deserialize", "between_ops"])
def test_reader_killed_outside_lock_pins_fifo_head(make_pool, kill):
    pool = make_pool()
    hs = fill(pool)
    if kill in ("payload_read", "lock_acquire"):  # before step g: the read is not counted
        run(pool, "r1", "get", hs[0].args, stop_at=kill)
        pool.kill("r1")
        pinned = hs[0]  # r1 never counted k0: k0 pins the head
    elif kill == "deserialize":  # after step g: counted, though never deserialized
        run(pool, "r1", "get", hs[0].args, stop_at=kill)
        pool.kill("r1")
        pinned = hs[1]
    elif kill == "between_ops":
        get_ok(pool, "r1", hs[0])
        pool.kill("r1")
        pinned = hs[1]  # k0 fully read (2/2); r1 never read k1: k1 pins the head
    else:
        for h in hs:
            get_ok(pool, "r1", h)
        pinned = None
    assert pool.lock_holder is None  # the lock was not held by r1 when it died

    # The surviving reader still gets every object right.
    for h in hs:
        get_ok(pool, "r2", h)

    if pinned is None:
        # Control: every chunk fully read; puts keep reclaiming FIFO.
        for i in range(4, 8):
            h = put(pool, f"k{i}", i)
            get_ok(pool, "r1", h)
            get_ok(pool, "r2", h)
        return

    if pinned is hs[1]:
        h4 = put(pool, "k4", 4)  # k0 was fully read: reclaimed, room for one more
        get_ok(pool, "r2", h4)
        hs = hs[1:] + [h4]
    snap = snapshot(pool)
    head = snap.chunks[0]
    assert head.handle == (pinned.address, pinned.id)
    assert (head.reader_count, head.writer_count) == (1, 1)  # 1 < 1 * n_readers
    # Every live chunk was read by r2 only: none is reclaimable.
    assert all(c.reader_count == 1 and c.writer_count == 1 for c in snap.chunks)

    # Puts fail with OutOfSpace for ever: counts never reach writer_count * 2.
    before = snap.comparable()
    for i in range(10, 13):
        assert put_error(pool, f"k{i}", i) == "OutOfSpace"
    out, _ = run(pool, "writer", "free_unused", {})
    assert out.result["error"] is None
    assert snapshot(pool).comparable() == before  # nothing freed, nothing changed

    # clear() reclaims regardless of counts; old handles are stale (CLR);
    # capacity is back.
    out, _ = run(pool, "writer", "clear", {})
    assert out.result["error"] is None
    assert snapshot(pool).chunks == []
    for h in hs:
        assert get_error(pool, "r2", h) == "StaleHandle"
    fresh = [put(pool, f"n{i}", 20 + i) for i in range(4)]
    for h in fresh:
        get_ok(pool, "r2", h)
    assert shutdown_clean(pool) == []


# --------------------------------------------------------- 3. writer killed
@pytest.mark.parametrize("point", [None, "header_write", "payload_write", "publish"])
def test_writer_killed_readers_keep_old_handles_restart_rejects_them(make_pool, point):
    pool = make_pool()
    old_segment = segment_name(pool)
    h0 = put(pool, "k0", 0)
    h1 = put(pool, "k1", 1)
    get_ok(pool, "r1", h0)  # r1 has read k0; the rest is still pending
    # The chunk the writer is (or would next be) putting: right after k1.
    half = Handle("k2", h1.address + CHUNK, h1.id + 1, [], data_for(2))
    if point is not None:
        run(pool, "writer", "put", {"key": "k2", "data": half.data.hex()}, stop_at=point)
    killed_writer = pool.procs["writer"].process
    pool.kill("writer")
    assert pool.lock_holder is None

    # The half-written chunk was never published: even a handle signed with
    # the segment's real secret is stale; an unsigned guess is rejected first.
    forged = forge_signature(old_segment, "k2", half.address, half.id)
    assert forge_signature(old_segment, "k1", h1.address, h1.id) == h1.signature  # forging is faithful
    assert get_error(pool, "r1", half, args={**half.args, "signature": forged}) == "StaleHandle"
    assert get_error(pool, "r2", half, args={**half.args, "signature": h1.signature}) == "BadSignature"

    # Handles issued before the kill still resolve to their own objects.
    get_ok(pool, "r2", h0)
    get_ok(pool, "r1", h1)
    get_ok(pool, "r2", h1)

    # The dead writer did not unlink its segment, and nothing else does while
    # the pool runs (the workers share the controller's resource tracker).
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        assert segment_exists(old_segment)
        time.sleep(0.05)

    # Restart: a new writer, a new segment with a new secret; readers reattach.
    pool.restart("writer")
    pool.open_store(B, MAX_OBJECT, N_READERS)
    new_segment = segment_name(pool)
    assert new_segment != old_segment and segment_exists(old_segment)
    # Old handles are rejected by signature, before any byte is read -- even
    # where the new store holds a chunk at the very same (address, id, key).
    n0 = put(pool, "k0", 100)
    assert (n0.address, n0.id) == (h0.address, h0.id) and n0.signature != h0.signature
    for r in ("r1", "r2"):
        for h in (h0, h1):
            assert get_error(pool, r, h) == "BadSignature"
        assert get_error(pool, r, half, args={**half.args, "signature": forged}) == "BadSignature"
    get_ok(pool, "r1", n0)
    get_ok(pool, "r2", n0)

    # Shutdown unlinks the dead writer's segment (and only that one: the new
    # writer unlinks its own); nothing is left.
    leaked = shutdown_clean(pool, [killed_writer], {old_segment, new_segment})
    assert leaked == [old_segment]


@pytest.mark.parametrize("point", ["free_step", "clear"])
def test_writer_killed_holding_lock_blocks_readers_until_new_lock(make_pool, point):
    pool = make_pool()
    hs = fill(pool)
    for h in hs[:1]:
        get_ok(pool, "r1", h)
        get_ok(pool, "r2", h)
    if point == "free_step":  # a put that must reclaim k0, stopped inside the reclaim
        run(pool, "writer", "put", {"key": "k4", "data": data_for(4).hex()}, stop_at="free_step")
    else:
        run(pool, "writer", "clear", {}, stop_at="clear")
    assert pool.lock_holder == "writer"
    killed_writer = pool.procs["writer"].process
    old_segment = segment_name(pool)
    pool.kill("writer")
    assert pool.lock_holder == "writer (killed)"

    # Nothing was reclaimed or cleared (the writer died before publishing
    # abs_start), but every read needs the lock: LockTimeout, never an object.
    for h in hs[1:]:
        assert get_error(pool, "r1", h, force=True) == "LockTimeout"
    # A restarted writer on the same pool lock does not help the readers.
    pool.restart("writer")
    pool.open_store(B, MAX_OBJECT, N_READERS)
    h = put(pool, "k0", 50)
    assert get_error(pool, "r2", h, force=True) == "LockTimeout"
    # A new lock does.
    segs = {old_segment, segment_name(pool)}
    pool.respawn()
    pool.open_store(B, MAX_OBJECT, N_READERS)
    segs.add(segment_name(pool))
    h = put(pool, "k0", 51)
    get_ok(pool, "r1", h)
    get_ok(pool, "r2", h)
    assert shutdown_clean(pool, [killed_writer], segs) == []


def test_writer_killed_standalone_its_resource_tracker_unlinks_segment():
    """A writer that is a top-level process (as vLLM's API process is) has its
    own resource tracker, a separate process that outlives it: when the writer
    is SIGKILLed the tracker unlinks the segment (with a "leaked
    shared_memory" warning).  Under ProcessPool the tracker is shared with the
    controller instead, so the segment stays until ``shutdown``."""
    script = (
        "import time\n"
        "from shmspec.impl import SingleWriterShmRingBuffer\n"
        f"ring = SingleWriterShmRingBuffer({B}, None, True)\n"
        "print(ring.shared_memory.name, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    name = ""
    try:
        name = proc.stdout.readline().strip()
        assert name and segment_exists(name), proc.stderr.read() if not name else name
        proc.kill()
        _, err = proc.communicate(timeout=10)  # EOF once the tracker has exited too
        deadline = time.monotonic() + 5
        while segment_exists(name) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not segment_exists(name)
        assert "leaked shared_memory" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if name and segment_exists(name):
            os.unlink(os.path.join("/dev/shm", name))
