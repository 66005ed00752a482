"""Process faults against impl/ (segment v2): what a SIGKILLed or stopped
reader or writer does to the store (properties LIVE, NRR, RC, PROG, LEAK).

Every test runs real processes (:class:`~shmspec.conformance.concurrency.procs.ProcessPool`:
one writer process and reader processes ``r1``/``r2`` over one real store,
stopped at named yield points) against ``load_target("impl")``, and kills or
stops one of them at a chosen point.  The protocol under test is
docs/impl-protocol.md: reader slots held by OFD locks, hazard pins, per-reader
acks, drain after ``clear()``.

Geometry: ``B = 256`` data bytes, ``max_object_size = 64``, 2 readers (``r1``
attaches first: slot 0; ``r2``: slot 1), every object 40 data bytes -> object
4 + 8 + 40 = 52 bytes, chunk 60 bytes: four chunks fill the ring (240 bytes)
and a fifth put needs a reclaim; it then goes to physical offset 0 (virtual
address 256), over the first chunk's bytes.

Yield points (impl): reader ``pin``, ``reader_check``, ``payload_read`` (only
with a ``keeps_buffer`` serde: the harness serde is given that flag before
the fork for those cases), ``deserialize``, ``counter_increment``; writer
``pin_scan``, ``pin_wait``, ``header_write``, ``payload_write``, ``publish``,
``free_step``, ``clear``.  A writer at ``pin_wait`` is waiting for a reader's
hazard pin; each advance is one round of that wait.

Bounded waits: ``shmspec.impl.ring.PIN_TIMEOUT`` is lowered in the controller
before the pool forks (workers inherit it); every controller wait is bounded
by the pool's step timeout; each test runs under a SIGALRM hard limit.  Pools
are shut down in a fixture's ``finally`` and every segment a pool ever opened
(ring *and* reader table ``<name>_r``) is checked and removed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import multiprocess
import pytest

from shmspec.conformance.targets.adapter import segment_exists
from shmspec.conformance.targets.loader import load_target
from shmspec.conformance.concurrency.procs import ProcessPool, ScheduledSerde, StepOutcome
from shmspec.impl import ShmObjectStorageHandle, SingleWriterShmObjectStorage, SingleWriterShmRingBuffer
from shmspec.impl import layout
from shmspec.impl import ring as impl_ring
from shmspec.impl.layout import candidate_abs, generation
from shmspec.impl.signing import make_signature
from shmspec.model.errors import TooManyReaders

B = 256
MAX_OBJECT = 64
DATA_LEN = 40
CHUNK = 8 + 4 + 8 + DATA_LEN  # ring header + reader_count + harness metadata + data = 60
N_READERS = 2
STEP_TIMEOUT = 5.0
PIN_TIMEOUT_LONG = 3.0
"""PIN_TIMEOUT where a wait must end *before* it (a dead reader's pin)."""
PIN_TIMEOUT_SHORT = 0.5
"""PIN_TIMEOUT where a wait must run *into* it (a stopped live reader)."""
PROMPT = 1.0
"""A writer operation that does not wait for anyone completes well within this (seconds)."""
HARD_LIMIT = 60
"""Seconds after which a test is interrupted (SIGALRM), whatever it waits for."""

READ_POINTS = ("pin", "reader_check", "deserialize", "counter_increment")
PINNED_POINTS = ("reader_check", "payload_read", "deserialize", "counter_increment")
"""Reader yield points at which its hazard pin is published (``payload_read``:
keeps_buffer serde only)."""


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
    """Factory ``make(pin_timeout=PIN_TIMEOUT_LONG, keeps_buffer=False,
    lease_policy="forfeit")``: a ProcessPool on impl with a store open (B,
    64, 2 readers).

    ``PIN_TIMEOUT``, the writer's default lease policy (and, for
    ``keeps_buffer``, the harness serde's flag) are set before the fork.  Every pool is shut down afterwards, even when the
    test failed, and every segment it ever opened is removed.
    """
    pools: list[ProcessPool] = []
    seen: set[str] = set()

    def make(pin_timeout: float = PIN_TIMEOUT_LONG, keeps_buffer: bool = False,
             lease_policy: str = "forfeit") -> ProcessPool:
        monkeypatch.setattr(impl_ring, "PIN_TIMEOUT", pin_timeout)
        monkeypatch.setattr(SingleWriterShmObjectStorage, "LEASE_POLICY", lease_policy)
        if keeps_buffer:
            monkeypatch.setattr(ScheduledSerde, "keeps_buffer", True, raising=False)
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
        left = [name for name in seen if segment_exists(name)]
        for name in left:  # belt and braces: never leave a segment behind
            os.unlink(os.path.join("/dev/shm", name.lstrip("/")))
        assert not left, f"segments left behind: {left}"


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
        stop_at: str | None = None, max_steps: int = 100) -> tuple[StepOutcome, list[StepOutcome]]:
    """Run one operation step by step.  Returns ``(last outcome, every outcome)``.

    ``stop_at``: leave the process paused at that yield point (it must be reached).
    """
    out = pool.start(name, action, args)
    outs = [out]
    for _ in range(max_steps):
        if out.result is not None:
            break
        if out.point == stop_at:
            return out, outs
        out = pool.advance(name)
        outs.append(out)
    else:
        raise AssertionError(f"{name} {action} did not finish in {max_steps} steps (at {out.point})")
    assert stop_at is None, f"{name} {action} finished without reaching {stop_at}: {out.result}"
    return out, outs


def finish(pool: ProcessPool, name: str, limit: float = 10.0) -> tuple[StepOutcome, list[StepOutcome], float]:
    """Advance paused process ``name`` until its operation finishes (a writer
    at ``pin_wait`` takes one round per step).  Returns ``(last outcome,
    outcomes, wall seconds)``; bounded by ``limit`` seconds."""
    t0 = time.monotonic()
    outs = []
    while True:
        out = pool.advance(name)
        outs.append(out)
        if out.result is not None:
            return out, outs, time.monotonic() - t0
        assert time.monotonic() - t0 < limit, f"{name} still at {out.point} after {limit} s"


def handle_from(out: StepOutcome, key: str, data: bytes) -> Handle:
    assert out.result["error"] is None, out.result
    v = out.result["value"]
    return Handle(key, v["handle"][0], v["handle"][1], v["signature"], data)


def put(pool: ProcessPool, key: str, i: int) -> Handle:
    out, _ = run(pool, "writer", "put", {"key": key, "data": data_for(i).hex()})
    return handle_from(out, key, data_for(i))


def put_timed(pool: ProcessPool, key: str, i: int) -> tuple[StepOutcome, list[StepOutcome], float]:
    """A put run to completion whatever it waits for; ``(outcome, outcomes, seconds)``."""
    t0 = time.monotonic()
    out = pool.start("writer", "put", {"key": key, "data": data_for(i).hex()})
    outs = [out]
    if out.result is None:
        out, more, _ = finish(pool, "writer")
        outs += more
    return out, outs, time.monotonic() - t0


def put_error(pool: ProcessPool, key: str, i: int) -> str | None:
    out, _ = run(pool, "writer", "put", {"key": key, "data": data_for(i).hex()})
    return out.result["error"]


def check_nrr(out: StepOutcome, h: Handle) -> dict:
    """NRR on a finished get of ``h``: the result is ``h``'s object or an
    error, and nothing but ``h``'s object was deserialized on the way."""
    res = out.result
    assert res["error"] is not None or res["value"] == h.expected, res
    assert all(d == h.expected for d in out.deserialized), out.deserialized
    return res


def get(pool: ProcessPool, reader: str, h: Handle, *, args: dict | None = None) -> tuple[dict, list]:
    out, _ = run(pool, reader, "get", args or h.args)
    return check_nrr(out, h), out.deserialized


def get_ok(pool: ProcessPool, reader: str, h: Handle) -> None:
    res, _ = get(pool, reader, h)
    assert res["error"] is None and res["value"] == h.expected, res


def get_error(pool: ProcessPool, reader: str, h: Handle, *, args: dict | None = None) -> str:
    """The error kind of a get that must fail, having returned and deserialized nothing."""
    res, deserialized = get(pool, reader, h, args=args)
    assert res["error"] is not None and res["value"] is None, res
    assert deserialized == []
    return res["error"]


def segment_name(pool: ProcessPool) -> str:
    return pool.handle_fields["ring_buffer_handle"][1]


def table_segment(pool: ProcessPool) -> str:
    return segment_name(pool).lstrip("/") + "_r"


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


def control_words(segment: str) -> dict:
    """The published control block, read by a fresh ring view in the controller."""
    ring = SingleWriterShmRingBuffer(B, segment)
    try:
        c = ring.control
        return {"abs_start": c[layout.CTL_ABS_START], "abs_end": c[layout.CTL_ABS_END],
                "drain_seq": c[layout.CTL_DRAIN_SEQ], "drain_lo": c[layout.CTL_DRAIN_LO],
                "drain_hi": c[layout.CTL_DRAIN_HI], "drain_hw": c[layout.CTL_DRAIN_HW]}
    finally:
        ring.close()


def pins(pool: ProcessPool) -> list[int]:
    """Every slot's pin word, read from the reader table by the controller."""
    from shmspec.impl.segment import attach_segment

    shm = attach_segment(table_segment(pool))
    try:
        words = shm.buf[: shm.size - shm.size % 8].cast("Q")
        try:
            k = words[layout.TBL_MAX_CHUNKS]
            return [words[(layout.slot_offset(r, k) + 8 * layout.SLOT_PIN) // 8] for r in range(N_READERS)]
        finally:
            words.release()
    finally:
        shm.close()


def controller_view(pool: ProcessPool) -> SingleWriterShmObjectStorage:
    """A reader view built in the controller from the pool's handle (it
    claims a slot, or raises TooManyReaders)."""
    f = pool.handle_fields
    handle = ShmObjectStorageHandle(f["max_object_size"], f["n_readers"], tuple(f["ring_buffer_handle"]),
                                    ScheduledSerde, threading.Lock())
    return SingleWriterShmObjectStorage.create_from_handle(handle)


def reattach(pool: ProcessPool, name: str) -> None:
    """Restart reader ``name`` (a new process) and attach a new view to the
    store that is open now."""
    pool.restart(name)
    pool._send(name, ("attach", pool.handle_fields, *pool.geometry))
    pool._recv(name, "attachment")


def snapshot(pool: ProcessPool):
    snap = pool.snapshot()
    assert snap is not None
    return snap


def state(pool: ProcessPool) -> tuple:
    """The writer's state (ring, indexes, counts per slot) and the published control words."""
    snap = snapshot(pool)
    return snap.comparable(), tuple(c.reads for c in snap.chunks), control_words(segment_name(pool))


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


def stop_reader(pool: ProcessPool, reader: str, h: Handle, point: str) -> StepOutcome:
    """Start ``reader``'s get of ``h`` and leave it paused at ``point``."""
    out, outs = run(pool, reader, "get", h.args, stop_at=point)
    assert [o.point for o in outs][-1] == point
    return out


def reclaimable_head(pool: ProcessPool) -> list[Handle]:
    """Fill the ring and let both readers read k0 once: k0 is reclaimable,
    k1..k3 are not (nobody read them)."""
    hs = fill(pool)
    get_ok(pool, "r1", hs[0])
    get_ok(pool, "r2", hs[0])
    assert snapshot(pool).chunks[0].reads == (1, 1)
    return hs


# ----------------------------- (a) a killed reader never blocks anyone (LIVE)
@pytest.mark.parametrize("point", ["between_ops", "pin", "reader_check", "payload_read", "deserialize",
                                   "counter_increment"])
def test_reader_killed_anywhere_blocks_nobody_and_frees_its_slot(make_pool, point):
    """r1 re-reads k0 (already read by both readers) and is SIGKILLed at
    ``point``, holding a hazard pin on k0 from ``reader_check`` on.  The
    writer reclaims k0 and puts k4 over k0's bytes: its pin scan finds the dead
    reader's pin on a chunk that is no longer live and stops waiting at the
    first check (the kernel released the slot's OFD lock), far below
    PIN_TIMEOUT; k1 and k2, which only the dead r1 still owed a read of, go
    with it (its lease ended: LEASE, the forfeit policy).  r2 is never
    blocked and never gets a wrong object; the slot is free again (a
    restarted r1 claims it)."""
    pool = make_pool(keeps_buffer=point == "payload_read")
    hs = reclaimable_head(pool)
    pinned = point in PINNED_POINTS
    if point != "between_ops":
        stop_reader(pool, "r1", hs[0], point)
        assert pins(pool)[0] != 0 if pinned else pins(pool)[0] == 0
    # Both slots are held: a third view is refused.
    with pytest.raises(TooManyReaders):
        controller_view(pool)
    pin_before = pins(pool)[0]
    t_kill = time.monotonic()
    pool.kill("r1")
    assert pins(pool)[0] == pin_before  # a dead reader's pin stays in its slot ...

    # r2 reads every live object at once, right.
    for h in hs:
        t0 = time.monotonic()
        get_ok(pool, "r2", h)
        assert time.monotonic() - t0 < PROMPT
    # ... but the writer ignores it at once: it reclaims k0 (read by both),
    # k1 and k2 (the dead r1's reads forfeited; free_unused frees up to two
    # objects' bytes) and puts k4 over k0's bytes, with one pin_wait round at most.
    out, _ = run(pool, "writer", "free_unused", {})
    assert out.result["error"] is None and [c.id for c in snapshot(pool).chunks] == [3]
    out, outs, seconds = put_timed(pool, "k4", 4)
    h4 = handle_from(out, "k4", data_for(4))
    assert (h4.address, h4.id) == (B, 4)  # physical offset 0: k0's bytes
    waits = [o for o in outs if o.point == "pin_wait"]
    assert len(waits) == (1 if pinned else 0), [o.point for o in outs]
    assert seconds < PROMPT < PIN_TIMEOUT_LONG, seconds
    print(f"\n[{point}] writer put over the dead reader's pinned chunk: {seconds * 1e3:.1f} ms, "
          f"{len(waits)} pin_wait round(s); kill -> put done {1e3 * (time.monotonic() - t_kill):.0f} ms")
    assert get_error(pool, "r2", hs[0]) == "StaleHandle"  # k0's bytes were reused
    get_ok(pool, "r2", h4)

    # The kernel freed the dead reader's slot: a restarted r1 claims it (the
    # pin is reset), and then every slot is held again.
    reattach(pool, "r1")
    assert pins(pool) == [0, 0]
    with pytest.raises(TooManyReaders):
        controller_view(pool)
    get_ok(pool, "r1", h4)
    assert snapshot(pool).chunks[-1].reads == (1, 1)  # the new r1 reads in slot 0
    assert shutdown_clean(pool) == []


@pytest.mark.parametrize("point", PINNED_POINTS)
def test_reader_killed_while_writer_waits_for_its_pin_ends_the_wait_at_once(make_pool, point):
    """The writer is already waiting (``pin_wait``) for r1's pin on reclaimed
    k0 when r1 is SIGKILLed: the next round of the wait sees the slot
    released and the put completes; the time from the kill to the put's
    completion is measured, and r2 gets every object right meanwhile."""
    pool = make_pool(keeps_buffer=point == "payload_read")
    hs = reclaimable_head(pool)
    stop_reader(pool, "r1", hs[0], point)
    out, _ = run(pool, "writer", "free_unused", {})
    assert out.result["error"] is None
    out, _ = run(pool, "writer", "put", {"key": "k4", "data": data_for(4).hex()}, stop_at="pin_wait")
    # While r1 is alive the writer stays in its wait, round after round.
    for _ in range(20):
        assert pool.advance("writer").point == "pin_wait"
    for h in hs[1:]:
        get_ok(pool, "r2", h)  # other readers are not blocked by the waiting writer
    t_kill = time.monotonic()
    pool.kill("r1")
    out, outs, _ = finish(pool, "writer")
    delay = time.monotonic() - t_kill
    h4 = handle_from(out, "k4", data_for(4))
    assert [o.point for o in outs].count("pin_wait") <= 1
    assert delay < PROMPT < PIN_TIMEOUT_LONG, delay
    print(f"\n[{point}] kill of the pinning reader -> writer's put done: {delay * 1e3:.1f} ms")
    get_ok(pool, "r2", h4)
    assert get_error(pool, "r2", hs[0]) == "StaleHandle"
    assert shutdown_clean(pool) == []


def test_reader_killed_mid_get_unhooked_writer_stops_waiting_promptly(monkeypatch):
    """The same without the pool's yield points (the writer's real spin/sleep
    wait): a writer in this process, a forked reader process that pins
    reclaimed chunk k0 inside ``deserialize`` and blocks there.  The put
    waits (it would for PIN_TIMEOUT = 5 s); SIGKILL of the reader ends the
    wait within a few milliseconds."""
    monkeypatch.setattr(impl_ring, "PIN_TIMEOUT", 5.0)
    ring = SingleWriterShmRingBuffer(B, create=True)
    writer = SingleWriterShmObjectStorage(MAX_OBJECT, 1, ring, BlockingSerde)
    names = [ring.shared_memory.name, ring.reader_table.shm.name]
    ctx = multiprocess.get_context("fork")
    lock = ctx.Lock()
    parent, child = ctx.Pipe()
    proc = None
    try:
        handles = [(writer.put(f"k{i}", data_for(i)), f"k{i}") for i in range(4)]
        h0, key0 = handles[0]
        sig0 = writer.get_signature(key0)
        proc = ctx.Process(target=_blocking_reader, args=(writer.handle(), lock, child, h0, sig0, key0),
                           daemon=True)
        proc.start()
        assert parent.poll(5) and parent.recv() == "read once"  # k0 read once: reclaimable
        assert parent.poll(5) and parent.recv() == "pinned"  # re-read of live k0, blocked in deserialize
        writer.free_unused()  # k0 is reclaimed under the reader's pin
        assert writer.key_index == {"k1": handles[1][0], "k2": handles[2][0], "k3": handles[3][0]}
        result, done = [], threading.Event()

        def do_put():
            try:
                result.append(writer.put("k4", data_for(4)))
            except BaseException as exc:  # noqa: BLE001
                result.append(exc)
            done.set()

        t = threading.Thread(target=do_put, daemon=True)
        t.start()
        assert not done.wait(0.3), result  # the writer waits for the live reader's pin
        t_kill = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        assert done.wait(5)
        delay = time.monotonic() - t_kill
        assert result == [(B, 4)], result
        assert delay < 0.5, delay
        print(f"\nunhooked writer: reader SIGKILL -> put done in {delay * 1e3:.1f} ms")
    finally:
        if proc is not None and proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
        if proc is not None:
            proc.join(5)
        writer.close()
    assert not [n for n in names if segment_exists(n)]


class BlockingSerde:
    """bytes in, bytes out; ``deserialize`` blocks while ``BLOCK`` is set
    (after reporting ``"pinned"`` on ``PIPE``)."""

    BLOCK = False
    PIPE = None

    def serialize(self, value):
        return value, len(value), b"", 0

    def deserialize(self, data):
        if BlockingSerde.BLOCK:
            BlockingSerde.PIPE.send("pinned")
            time.sleep(60)
        return bytes(data)


def _blocking_reader(handle, lock, conn, h, sig, key):
    import dataclasses

    view = SingleWriterShmObjectStorage.create_from_handle(dataclasses.replace(handle, reader_lock=lock))
    assert view.get(*h, sig, key) == data_for(0)
    conn.send("read once")
    BlockingSerde.BLOCK, BlockingSerde.PIPE = True, conn
    view.get(*h, sig, key)  # a re-read: validated while k0 is live, then blocks in deserialize
    os._exit(0)


# ------------------- (b) a reader killed before acking pins the FIFO head (RC)
@pytest.mark.parametrize("kill", [None, "between_ops", "pin", "reader_check", "payload_read", "deserialize",
                                  "counter_increment"])
def test_reader_killed_before_ack_pins_fifo_head_clear_recovers(make_pool, kill):
    """Under ``lease_policy="refuse"`` (vLLM's behaviour; the forfeit
    policy's counterpart is the next test): r1 dies before acknowledging its
    read of k0 (at any yield point of the
    get: the ack is its last step) or, ``between_ops``, after reading k0 and
    before reading k1.  Its slot keeps the dead reader's acks, so the oldest
    chunk it had not acknowledged is not reclaimable: once the ring is full
    every put raises OutOfSpace (a MemoryError), changing nothing, and
    free_unused frees nothing.  r2 keeps reading every object right.
    clear() recovers: capacity is back; pre-clear handles drain (their own
    object until a later allocation reaches their bytes, then StaleHandle)."""
    pool = make_pool(keeps_buffer=kill == "payload_read", lease_policy="refuse")
    hs = fill(pool)
    if kill is None:
        for h in hs:
            get_ok(pool, "r1", h)
        pinned = None
    elif kill == "between_ops":
        get_ok(pool, "r1", hs[0])
        pool.kill("r1")
        pinned = hs[1]
    else:
        stop_reader(pool, "r1", hs[0], kill)
        pool.kill("r1")
        pinned = hs[0]  # the ack is the get's last step: not made
    for h in hs:
        get_ok(pool, "r2", h)

    if pinned is None:  # control: every chunk read by both readers: puts reclaim FIFO
        for i in range(4, 8):
            h = put(pool, f"k{i}", i)
            get_ok(pool, "r1", h)
            get_ok(pool, "r2", h)
        assert shutdown_clean(pool) == []
        return

    live = hs
    if pinned is hs[1]:
        h4 = put(pool, "k4", 4)  # k0 was read by both: reclaimed, room for one more
        get_ok(pool, "r2", h4)
        live = hs[1:] + [h4]
    snap = snapshot(pool)
    head = snap.chunks[0]
    assert head.handle == (pinned.address, pinned.id)
    assert head.reads == (0, 1) and head.writer_count == 1  # slot 0 (dead r1) never acked it
    assert all(c.reads == (0, 1) for c in snap.chunks)

    before = state(pool)
    for i in range(10, 13):
        assert put_error(pool, f"k{i}", i) == "OutOfSpace"
        assert state(pool) == before
    out, _ = run(pool, "writer", "free_unused", {})
    assert out.result["error"] is None
    assert state(pool) == before  # nothing freed, nothing changed
    for h in live:
        get_ok(pool, "r2", h)  # still readable, still right

    out, _ = run(pool, "writer", "clear", {})
    assert out.result["error"] is None
    assert snapshot(pool).chunks == [] and snapshot(pool).key_index == {}
    # Drain: before any allocation, every pre-clear handle is its own object ...
    for h in live:
        get_ok(pool, "r2", h)
    fresh = [put(pool, f"n{i}", 20 + i) for i in range(4)]  # capacity back: four chunks fit again
    assert [f.address % B for f in fresh] == [0, 60, 120, 180]
    # ... and once the new chunks covered their bytes, stale.
    for h in live:
        assert get_error(pool, "r2", h) == "StaleHandle"
    for h in fresh:
        get_ok(pool, "r2", h)
    assert shutdown_clean(pool) == []


@pytest.mark.parametrize("kill", ["between_ops", "pin", "deserialize", "counter_increment"])
def test_reader_killed_before_ack_forfeits_its_reads_and_the_writer_puts_on(make_pool, kill):
    """The forfeit policy (impl's default, LEASE): r1 dies before
    acknowledging its read of k0 (inside the get) or after reading k0
    (``between_ops``).  The writer's next reclaim finds the slots that still
    owe reads gone and drops those chunks: the ring wraps on put after put,
    r2 reads every object right, and a reader that claims the slot
    afterwards finds the forfeited handles stale (never another object)."""
    pool = make_pool()
    hs = fill(pool)
    if kill == "between_ops":
        get_ok(pool, "r1", hs[0])
    else:
        stop_reader(pool, "r1", hs[0], kill)
    pool.kill("r1")
    for h in hs:
        get_ok(pool, "r2", h)
    fresh = []
    for i in range(4, 12):  # two laps of the ring, no clear(), no replacement reader
        h = put(pool, f"k{i}", i)
        get_ok(pool, "r2", h)
        fresh.append(h)
    live = [c.id for c in snapshot(pool).chunks]
    assert len(live) >= 2 and live == [h.id for h in fresh[-len(live):]]  # the newest, FIFO
    reattach(pool, "r1")
    for h in hs:
        assert get_error(pool, "r1", h) == "StaleHandle"
    get_ok(pool, "r1", fresh[-1])
    assert shutdown_clean(pool) == []


@pytest.mark.parametrize("kill", ["between_ops", "reader_check", "counter_increment"])
def test_restarted_reader_inherits_the_dead_readers_slot_and_promises(make_pool, kill):
    """Under ``lease_policy="refuse"``: the kernel frees a dead reader's slot; a restarted reader (a new view)
    claims it -- the first free slot, 0 -- with the dead reader's pin cleared
    and its acks kept.  So it sees the store exactly as the dead reader left
    it: reads the dead reader made still count (no re-read is needed), and
    the promised reads it had not made are now the new reader's to make: its
    first read of the pinned head is counted in slot 0 and unpins the FIFO
    head, and the put that needed the room succeeds."""
    pool = make_pool(lease_policy="refuse")
    hs = fill(pool)
    if kill == "between_ops":
        get_ok(pool, "r1", hs[0])
        pool.kill("r1")
        pinned = hs[1]
    else:
        stop_reader(pool, "r1", hs[0], kill)
        pool.kill("r1")
        pinned = hs[0]
    for h in hs:
        get_ok(pool, "r2", h)
    if pinned is hs[1]:
        put(pool, "k4", 4)
    assert put_error(pool, "k9", 9) == "OutOfSpace"

    reattach(pool, "r1")
    with pytest.raises(TooManyReaders):
        controller_view(pool)  # the new r1 took the free slot: both are held again
    snap = snapshot(pool)
    assert snap.chunks[0].handle == (pinned.address, pinned.id) and snap.chunks[0].reads == (0, 1)
    if pinned is hs[1]:
        assert (hs[0].address, hs[0].id) not in [c.handle for c in snap.chunks]  # the dead r1's read counted
    get_ok(pool, "r1", pinned)
    assert snapshot(pool).chunks[0].reads == (1, 1)  # counted in the dead reader's slot 0
    h = put(pool, "k9", 9)  # the head is reclaimable now: room
    assert [c.id for c in snapshot(pool).chunks][0] == pinned.id + 1
    get_ok(pool, "r1", h)
    get_ok(pool, "r2", h)
    assert shutdown_clean(pool) == []


# ------------- (c) a stopped live reader's pin: the put waits, then ReaderStalled
@pytest.mark.parametrize("point", ["reader_check", "deserialize"])
@pytest.mark.parametrize("how", ["free_unused", "reclaim_in_put"])
def test_stopped_reader_pin_on_reclaimed_chunk_put_raises_reader_stalled(make_pool, point, how):
    """r1 (alive, stopped at ``point``) holds a pin on k0, which is reclaimed
    (``free_unused``: by an earlier free_unused; ``reclaim_in_put``: by the
    put's own reclaim).  The put that would reuse memory waits for the pin,
    round after round, and after PIN_TIMEOUT raises ReaderStalled naming r1's
    slot and pid; it publishes no allocation (the put's own reclaim, a
    committed step of its own, stays, as after a put's OutOfSpace).  Then
    r1 goes on: its get ends as NRR allows (its own object if it had
    validated, else StaleHandle), and the same put succeeds at once."""
    pool = make_pool(pin_timeout=PIN_TIMEOUT_SHORT)
    hs = reclaimable_head(pool)
    stop_reader(pool, "r1", hs[0], point)
    r1_pid = pool.procs["r1"].process.pid
    if how == "free_unused":
        out, _ = run(pool, "writer", "free_unused", {})
        assert out.result["error"] is None
    before = state(pool)
    out, outs, seconds = put_timed(pool, "k4", 4)
    rounds = [o.point for o in outs].count("pin_wait")
    print(f"\n[{how}/{point}] put blocked by a stopped reader: ReaderStalled after {seconds:.3f} s, "
          f"{rounds} pin_wait rounds (PIN_TIMEOUT {PIN_TIMEOUT_SHORT} s)")
    assert out.result["error"] == "ReaderStalled", out.result
    assert f"slot 0 (pid {r1_pid})" in out.result["detail"]
    assert rounds > 1
    assert PIN_TIMEOUT_SHORT <= seconds < PIN_TIMEOUT_SHORT + 2.0
    after = state(pool)
    if how == "free_unused":
        assert after == before  # nothing changed
    else:
        snap = snapshot(pool)  # k0 reclaimed (the put's reclaim step), k4 not allocated
        assert [c.id for c in snap.chunks] == [1, 2, 3] and set(snap.key_index) == {"k1", "k2", "k3"}
        assert after[2]["abs_start"] == 1 and after[2]["abs_end"] == 4
    # r2 was never blocked.
    for h in hs[1:]:
        get_ok(pool, "r2", h)
    # r1 goes on: it had validated k0 while live (deserialize) or finds it reclaimed.
    out, _, _ = finish(pool, "r1")
    res = check_nrr(out, hs[0])
    if point == "deserialize":
        assert res["value"] == hs[0].expected
    else:
        assert res["error"] == "StaleHandle" and out.deserialized == []
    assert pins(pool) == [0, 0]
    out, outs, seconds = put_timed(pool, "k4", 4)
    h4 = handle_from(out, "k4", data_for(4))
    assert "pin_wait" not in [o.point for o in outs] and seconds < PROMPT
    get_ok(pool, "r1", h4)
    get_ok(pool, "r2", h4)
    assert shutdown_clean(pool) == []


@pytest.mark.parametrize("point", ["reader_check", "deserialize"])
def test_stopped_reader_pin_on_drain_chunk_reader_stalled_changes_no_index_but_ends_drains(make_pool, point):
    """After clear(), r1 (alive, stopped at ``point``) reads pre-clear k1 as a
    drain chunk.  A put (it would go to offset 0, bytes [0, 60)) waits for
    that pin and raises ReaderStalled after PIN_TIMEOUT.  It changes no
    index, chunk or counter of the writer, and publishes no allocation
    (``abs_start``/``abs_end`` unchanged).  But, as ``put``'s docstring
    states, it has already published what its allocation kills (step 1 of
    the writer's protocol, before the pin scan) and does not take it back:
    ``drain_hw`` is now 60, so pre-clear k0 at [0, 60) -- whose bytes the
    failed put never wrote -- is StaleHandle from then on, while k1..k3
    (offsets >= 60) still drain to their own objects.  (docs/impl-protocol.md,
    ``ring.PIN_TIMEOUT`` and ``ReaderStalled``'s docstring still say
    "nothing changed".)"""
    pool = make_pool(pin_timeout=PIN_TIMEOUT_SHORT)
    hs = fill(pool)
    out, _ = run(pool, "writer", "clear", {})
    assert out.result["error"] is None
    get_ok(pool, "r2", hs[0])  # drain: k0 resolves to its own object
    stop_reader(pool, "r1", hs[1], point)
    before = state(pool)
    assert before[2]["drain_hw"] == 0 and (before[2]["drain_lo"], before[2]["drain_hi"]) == (0, 4)
    out, outs, seconds = put_timed(pool, "k4", 4)
    assert out.result["error"] == "ReaderStalled", out.result
    assert PIN_TIMEOUT_SHORT <= seconds < PIN_TIMEOUT_SHORT + 2.0
    after = state(pool)
    assert after[:2] == before[:2]  # the writer's ring, indexes and counts
    changed = {k: (before[2][k], after[2][k]) for k in before[2] if before[2][k] != after[2][k]}
    assert changed == {"drain_hw": (0, CHUNK), "drain_seq": (before[2]["drain_seq"], before[2]["drain_seq"] + 2)}
    assert get_error(pool, "r2", hs[0]) == "StaleHandle"  # its bytes are intact, but it no longer drains
    for h in hs[2:]:
        get_ok(pool, "r2", h)
    out, _, _ = finish(pool, "r1")
    assert check_nrr(out, hs[1])["value"] == hs[1].expected  # k1 at offset 60 still drains
    h4 = handle_from(put_timed(pool, "k4", 4)[0], "k4", data_for(4))  # no pin now: the put succeeds
    assert h4.address % B == 0
    get_ok(pool, "r2", h4)
    assert shutdown_clean(pool) == []


# ------------------ (d), (e), (f) writer killed mid-put; restart; its segments
@pytest.mark.parametrize("point", [None, "pin_scan", "header_write", "payload_write", "publish"])
def test_writer_killed_mid_put_readers_keep_old_handles_restart_rejects_them(make_pool, point):
    """The writer is SIGKILLed before (None) or inside its third put.  The
    half-made chunk was never published: even a handle signed with the
    segment's real secret is StaleHandle (an unsigned guess fails its
    signature first), and nothing is deserialized.  Earlier handles still
    resolve to their own objects.  Both of the dead writer's segments (ring
    and reader table) stay while the pool runs.  A restarted writer has a new
    segment and secret: old handles fail BadSignature, even where the new
    store holds a chunk at the same (address, id, key).  Shutdown unlinks
    both dead segments."""
    pool = make_pool()
    old_segment, old_table = segment_name(pool), table_segment(pool)
    assert segment_exists(old_segment) and segment_exists(old_table)
    h0 = put(pool, "k0", 0)
    h1 = put(pool, "k1", 1)
    get_ok(pool, "r1", h0)
    half = Handle("k2", h1.address + CHUNK, h1.id + 1, [], data_for(2))
    if point is not None:
        run(pool, "writer", "put", {"key": "k2", "data": half.data.hex()}, stop_at=point)
    killed_writer = pool.procs["writer"].process
    pool.kill("writer")
    check_dead_writer_half_chunk(pool, old_segment, half, [h0, h1], h1)
    restart_writer_rejects_old_handles(pool, old_segment, old_table, [h0, h1], half, killed_writer)


def check_dead_writer_half_chunk(pool, old_segment, half, handles, signed_example) -> list:
    forged = forge_signature(old_segment, half.key, half.address, half.id)
    assert forge_signature(old_segment, signed_example.key, signed_example.address,
                           signed_example.id) == signed_example.signature  # forging is faithful
    for r in ("r1", "r2"):
        assert get_error(pool, r, half, args={**half.args, "signature": forged}) == "StaleHandle"
        assert get_error(pool, r, half, args={**half.args, "signature": signed_example.signature}) == "BadSignature"
    for h in handles:
        get_ok(pool, "r1", h)
        get_ok(pool, "r2", h)
    # The dead writer unlinked nothing, and nothing else does while the pool
    # runs (the workers share the controller's resource tracker).
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        assert segment_exists(old_segment) and segment_exists(old_segment.lstrip("/") + "_r")
        time.sleep(0.05)
    return forged


def restart_writer_rejects_old_handles(pool, old_segment, old_table, handles, half, killed_writer):
    forged = forge_signature(old_segment, half.key, half.address, half.id)
    pool.restart("writer")
    pool.open_store(B, MAX_OBJECT, N_READERS)
    new_segment, new_table = segment_name(pool), table_segment(pool)
    assert new_segment != old_segment and segment_exists(old_segment) and segment_exists(old_table)
    h0 = handles[0]
    for i in range(h0.id + 1):  # the same sizes as the old store: the same (address, id) for h0's key
        n0 = put(pool, f"k{i}", 100 + i)
    assert n0.key == h0.key
    assert (n0.address, n0.id) == (h0.address, h0.id) and n0.signature != h0.signature
    for r in ("r1", "r2"):
        for h in handles:
            assert get_error(pool, r, h) == "BadSignature"
        assert get_error(pool, r, half, args={**half.args, "signature": forged}) == "BadSignature"
        get_ok(pool, r, n0)
    leaked = shutdown_clean(pool, [killed_writer], {old_segment, old_table, new_segment, new_table})
    assert sorted(s.lstrip("/") for s in leaked) == sorted([old_segment.lstrip("/"), old_table])


def test_writer_killed_waiting_for_a_pin_readers_unaffected(make_pool):
    """The writer is SIGKILLed at ``pin_wait`` (its put over reclaimed k0
    waits for r1's pin): the new chunk (address 256, id 4) was never
    published -- StaleHandle even when validly signed -- r1's pinned read of
    k0 completes with k0's own object (its bytes were never overwritten), and
    the live handles keep resolving."""
    pool = make_pool()
    old_segment, old_table = segment_name(pool), table_segment(pool)
    hs = reclaimable_head(pool)
    stop_reader(pool, "r1", hs[0], "deserialize")
    run(pool, "writer", "free_unused", {})
    run(pool, "writer", "put", {"key": "k4", "data": data_for(4).hex()}, stop_at="pin_wait")
    killed_writer = pool.procs["writer"].process
    pool.kill("writer")
    out, _, _ = finish(pool, "r1")
    assert check_nrr(out, hs[0])["value"] == hs[0].expected
    half = Handle("k4", B, 4, [], data_for(4))
    check_dead_writer_half_chunk(pool, old_segment, half, hs[1:], hs[1])
    assert get_error(pool, "r2", hs[0]) == "StaleHandle"  # reclaimed before the kill
    restart_writer_rejects_old_handles(pool, old_segment, old_table, hs[1:], half, killed_writer)


@pytest.mark.parametrize("point", ["free_step", "clear"])
def test_writer_killed_mid_reclaim_or_clear_blocks_no_reader(make_pool, point):
    """v2 readers take no lock: a writer SIGKILLed inside a reclaim (a put's
    ``free_step``, before ``abs_start`` moves) or at ``clear`` (before the
    drain window opens) blocks no reader.  Nothing was reclaimed or cleared:
    every handle, k0 included, still resolves to its own object at once."""
    pool = make_pool()
    old_segment, old_table = segment_name(pool), table_segment(pool)
    hs = reclaimable_head(pool)
    if point == "free_step":
        run(pool, "writer", "put", {"key": "k4", "data": data_for(4).hex()}, stop_at="free_step")
    else:
        run(pool, "writer", "clear", {}, stop_at="clear")
    killed_writer = pool.procs["writer"].process
    before = control_words(old_segment)
    pool.kill("writer")
    assert control_words(old_segment) == before
    assert before["abs_start"] == 0 and before["abs_end"] == 4 and before["drain_seq"] % 2 == 0
    for r in ("r1", "r2"):
        for h in hs:
            t0 = time.monotonic()
            get_ok(pool, r, h)
            assert time.monotonic() - t0 < PROMPT
    restart_writer_rejects_old_handles(pool, old_segment, old_table, hs, Handle("k4", B, 4, [], data_for(4)),
                                       killed_writer)


def test_writer_killed_standalone_its_resource_tracker_unlinks_both_segments():
    """A writer that is a top-level process (as vLLM's API process is) has its
    own resource tracker, a separate process that outlives it: when the writer
    is SIGKILLed the tracker unlinks its ring segment *and* its reader table
    (with a "leaked shared_memory" warning).  Under ProcessPool the tracker is
    shared with the controller instead, so both stay until ``shutdown``."""
    script = (
        "import time\n"
        "from shmspec.impl import SingleWriterShmRingBuffer, SingleWriterShmObjectStorage\n"
        f"ring = SingleWriterShmRingBuffer({B}, None, True)\n"
        f"store = SingleWriterShmObjectStorage({MAX_OBJECT}, 2, ring)\n"
        "store.put('k', b'x' * 10)\n"
        "print(ring.shared_memory.name, ring.reader_table.shm.name, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    names: list[str] = []
    try:
        line = proc.stdout.readline().split()
        names = [n.lstrip("/") for n in line]
        assert len(names) == 2, proc.stderr.read()
        assert names[1] == names[0] + "_r"
        assert all(segment_exists(n) for n in names)
        proc.kill()
        _, err = proc.communicate(timeout=10)  # EOF once the tracker has exited too
        deadline = time.monotonic() + 5
        while any(segment_exists(n) for n in names) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [n for n in names if segment_exists(n)]
        assert "leaked shared_memory" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        for n in names:
            if segment_exists(n):
                os.unlink(os.path.join("/dev/shm", n))
