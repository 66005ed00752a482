"""Zero-copy reads on impl: ``get(..., copy=False)`` (issue 28, item 5).

The value the serde builds over the ring holds a zero-copy lease on its chunk
until the last object over it is collected.  What must hold: NRR for every
leased value (its bytes never change while it lives, whatever the writer
does: fill, wrap, ``clear()``); the writer's put that needs leased bytes
raises ``OutOfSpace`` naming the lease, and succeeds once the value is gone;
a dead reader's leases are void; ``close()`` waits for the last value; a
forked child's copies release nothing.  Construction: vLLM's (a writer
without the readers' lock; readers in this process or forked from it)."""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
from typing import Any

import multiprocess
import pytest

from shmspec.impl import BufferPickleSerde, SingleWriterShmObjectStorage, SingleWriterShmRingBuffer, yieldpoints
from shmspec.impl.layout import MAX_LEASES
from shmspec.impl.serde import ObjectSerde
from shmspec.model.errors import OutOfSpace, StaleHandle

RING, MAX_OBJECT, PAYLOAD = 64 * 1024, 8 * 1024, 4000


class RawSerde(ObjectSerde):
    """Bytes as they are; ``copy=False`` returns the shared view itself."""

    def serialize(self, value: Any):
        return bytes(value), len(value), b"", 0

    def deserialize(self, view: memoryview) -> Any:
        return bytes(view)

    def deserialize_shared(self, view: memoryview) -> Any:
        return view


def _store(serde=RawSerde, n_readers=1, ring=RING, max_object=MAX_OBJECT, **kw):
    w = SingleWriterShmObjectStorage(max_object, n_readers, SingleWriterShmRingBuffer(ring, create=True),
                                     serde_class=serde, **kw)
    h = w.handle()
    h.reader_lock = multiprocess.Lock()
    return w, h


def _put(w, key, value):
    address, monotonic_id = w.put(key, value)
    return address, monotonic_id, w.get_signature(key), key


def _fill(w, prefix: str, reader=None, n: int = 200, size: int = PAYLOAD) -> tuple[int, str]:
    """Put (each object read once by ``reader``, so that no read is owed) until
    ``OutOfSpace``: ``(puts that succeeded, its message)``."""
    for k in range(n):
        try:
            handle = _put(w, f"{prefix}{k}", bytes([k % 251]) * size)
        except OutOfSpace as exc:
            return k, str(exc)
        if reader is not None:
            assert reader.get(*handle) == bytes([k % 251]) * size
    raise AssertionError(f"{n} puts all succeeded")


@pytest.fixture
def store():
    made = []

    def make(*a, **kw):
        w, h = _store(*a, **kw)
        r = SingleWriterShmObjectStorage.create_from_handle(h)
        made.append((w, r))
        return w, r, h

    yield make
    gc.collect()
    for w, r in made:
        r.close()
        w.close()


def test_a_leased_value_keeps_its_bytes_while_the_writer_fills_and_the_put_names_the_lease(store):
    w, r, _ = store()
    first = _put(w, "a", b"A" * PAYLOAD)
    value = r.get(*first, copy=False)
    assert isinstance(value, memoryview) and value.readonly and bytes(value) == b"A" * PAYLOAD
    with pytest.raises(OutOfSpace) as err:
        for k in range(100):  # wraps the ring: the oldest chunk, "a", is the one leased
            r.get(*_put(w, f"k{k}", bytes([k]) * PAYLOAD))
    assert "zero-copy lease of reader slot 0" in str(err.value) and f"pid {os.getpid()}" in str(err.value)
    assert bytes(value) == b"A" * PAYLOAD  # NRR: unchanged
    assert r.get(*first) == b"A" * PAYLOAD  # still live: the free check kept it
    del value
    gc.collect()
    w.put("after", b"B" * PAYLOAD)  # the lease ended: the reclaim goes on
    with pytest.raises(StaleHandle):
        r.get(*first)


def test_a_slice_of_the_value_holds_the_lease_after_the_value_is_gone(store):
    w, r, _ = store()
    first = _put(w, "a", b"0123456789" * 400)
    piece = r.get(*first, copy=False)[10:20]
    gc.collect()
    assert "zero-copy lease" in _fill(w, "k", r)[1]
    assert bytes(piece) == b"0123456789"
    del piece
    gc.collect()
    w.put("after", b"x" * PAYLOAD)


def test_clear_does_not_free_leased_bytes(store):
    w, r, _ = store()
    first = _put(w, "a", b"A" * PAYLOAD)
    value = r.get(*first, copy=False)
    w.clear()  # the chunk is no longer live; its bytes are still leased
    n, why = _fill(w, "k", r)
    assert n < RING // PAYLOAD and "has held a zero-copy lease on chunk id 0" in why
    assert bytes(value) == b"A" * PAYLOAD
    del value
    gc.collect()
    for k in range(3 * RING // PAYLOAD):
        r.get(*_put(w, f"m{k}", b"m" * PAYLOAD))


def test_two_values_of_one_chunk_share_one_lease_and_the_last_one_ends_it(store):
    w, r, _ = store()
    first = _put(w, "a", b"A" * PAYLOAD)
    one, two = r.get(*first, copy=False), r.get(*first, copy=False)
    table = w.ring_buffer.reader_table
    assert len(table.leases(0)) == 1
    del one
    gc.collect()
    assert len(table.leases(0)) == 1
    del two
    gc.collect()
    assert table.leases(0) == []


def test_a_value_dropped_in_another_thread_ends_its_lease(store):
    w, r, _ = store()
    first = _put(w, "a", b"A" * PAYLOAD)
    box = [r.get(*first, copy=False)]
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    gc.collect()
    assert w.ring_buffer.reader_table.leases(0) == []


def test_past_the_lease_entries_a_zero_copy_get_copies_and_says_so_once(store, caplog):
    w, r, _ = store(ring=1 << 20)
    handles = [_put(w, f"k{i}", bytes([i]) * 64) for i in range(MAX_LEASES + 2)]
    with caplog.at_level(logging.WARNING, logger="shmspec.impl.storage"):
        values = [r.get(*h, copy=False) for h in handles]
    assert len(w.ring_buffer.reader_table.leases(0)) == MAX_LEASES
    assert [bytes(v) for v in values] == [bytes([i]) * 64 for i in range(MAX_LEASES + 2)]
    assert [type(v) for v in values[MAX_LEASES:]] == [memoryview, memoryview]
    assert sum("copy their bytes" in rec.getMessage() for rec in caplog.records) == 1
    del values
    gc.collect()
    assert w.ring_buffer.reader_table.leases(0) == []


def test_close_waits_for_the_last_zero_copy_value(store):
    w, r, _ = store()
    first = _put(w, "a", b"A" * PAYLOAD)
    value = r.get(*first, copy=False)
    r.close()
    table = w.ring_buffer.reader_table
    assert table.alive(0)  # the slot is kept: its lease still binds the writer
    assert "zero-copy lease" in _fill(w, "k")[1]
    with pytest.raises(ValueError, match="closed"):
        r.get(*first)
    assert bytes(value) == b"A" * PAYLOAD
    del value
    gc.collect()
    assert not table.alive(0)  # the deferred close ran
    w.put("after", b"B" * PAYLOAD)


def test_a_writers_zero_copy_get_copies(store):
    w, r, _ = store()
    address, monotonic_id, _, _ = _put(w, "a", b"A" * PAYLOAD)
    assert w.get(address, monotonic_id, copy=False) == b"A" * PAYLOAD  # RawSerde.deserialize: bytes


def test_a_revoked_lease_time_read_gives_no_zero_copy_value(store, monkeypatch):
    w, r, _ = store(lease_seconds=30)
    first = _put(w, "a", b"A" * PAYLOAD)
    table = w.ring_buffer.reader_table

    def revoke(point):
        if point == "payload_read":
            table.revoke(0)  # the writer revokes the read between its validation and its lease

    monkeypatch.setattr(yieldpoints, "HOOK", revoke)
    with pytest.raises(StaleHandle):
        r.get(*first, copy=False)
    monkeypatch.setattr(yieldpoints, "HOOK", None)
    gc.collect()
    assert table.leases(0) == []
    assert bytes(r.get(*first, copy=False)) == b"A" * PAYLOAD  # the lease is renewed at the next get


class StallingSerde(RawSerde):
    """``copy=False`` waits in ``deserialize_shared`` until :attr:`go` is set
    (a reader stopped or hung while its value is being built)."""

    entered = threading.Event()
    go = threading.Event()

    def deserialize_shared(self, view: memoryview) -> Any:
        StallingSerde.entered.set()
        StallingSerde.go.wait(30)
        return view


def test_a_zero_copy_get_stalled_building_its_value_is_revoked_after_the_lease_time(store, caplog):
    """Found by a fresh-user trial (2026-12-07): with ``lease_seconds=1`` a
    reader stopped inside ``get(copy=False)``, after its pin had cleared,
    held the writer for as long as it stayed stopped (every put
    ``OutOfSpace``, "held by a zero-copy lease").  Issue 28: the writer puts
    again within one lease time plus 1 s; the resumed get raises
    ``StaleHandle`` (never a value over reused bytes), and the reader's next
    get renews its lease."""
    StallingSerde.entered.clear()
    StallingSerde.go.clear()
    w, r, _ = store(serde=StallingSerde, lease_seconds=1)
    first = _put(w, "a", b"A" * PAYLOAD)
    out: dict[str, Any] = {}

    def read() -> None:
        try:
            out["value"] = r.get(*first, copy=False)
        except Exception as exc:  # noqa: BLE001 - checked below
            out["error"] = exc

    t = threading.Thread(target=read)
    t.start()
    try:
        assert StallingSerde.entered.wait(10)
        caplog.set_level(logging.INFO, logger="shmspec.impl.storage")
        t0, refusals, k = time.monotonic(), [], 0
        while time.monotonic() - t0 < 5.0 and k < 40:  # puts until the ring has wrapped over "a"'s bytes
            try:
                w.put(f"k{k}", bytes([k]) * PAYLOAD)
                k += 1
            except OutOfSpace as exc:
                refusals.append((time.monotonic() - t0, str(exc)))
                time.sleep(0.05)
        took = time.monotonic() - t0
    finally:
        StallingSerde.go.set()
        t.join(10)
    assert k == 40, (k, refusals[-1:])
    assert refusals and refusals[-1][0] < 1.0 + 1.0, refusals[-1]  # within one lease time plus 1 s
    assert "inside a get(copy=False) for" in refusals[0][1] and "its lease is revoked in" in refusals[0][1]
    assert took < 5.0
    assert isinstance(out.get("error"), StaleHandle), out  # the resumed get: the store's error, not the value
    assert "inside one get(copy=False) for over 1 s: its lease is revoked" in caplog.text
    assert "lost its lease (revoked" in caplog.text and "is gone" not in caplog.text
    gc.collect()
    assert w.ring_buffer.reader_table.leases(0) == []
    assert bytes(r.get(*_put(w, "z", b"Z" * PAYLOAD), copy=False)) == b"Z" * PAYLOAD  # the lease renewed


def _holder(handle, address, monotonic_id, sig, key, conn):
    r = SingleWriterShmObjectStorage.create_from_handle(handle)
    value = r.get(address, monotonic_id, sig, key, copy=False)
    conn.send(bytes(value[:4]))
    conn.recv()  # hold it until told (or killed)
    del value
    r.close()
    conn.send("closed")


def test_a_dead_readers_leases_are_void():
    ctx = multiprocess.get_context("fork")
    w, h = _store()
    try:
        first = _put(w, "a", b"A" * PAYLOAD)
        ours, theirs = ctx.Pipe()
        p = ctx.Process(target=_holder, args=(h, *first, theirs))
        p.start()
        assert ours.recv() == b"AAAA"
        assert "zero-copy lease of reader slot 0" in _fill(w, "k")[1]  # a live process's lease binds the writer
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        for k in range(3 * RING // PAYLOAD):  # and a dead one's does not: the ring wraps three times
            w.put(f"m{k}", bytes([k % 251]) * PAYLOAD)
    finally:
        w.close()


def test_a_forked_child_releases_none_of_its_parents_leases(store):
    w, r, _ = store()
    first = _put(w, "a", b"A" * PAYLOAD)
    value = r.get(*first, copy=False)
    pid = os.fork()
    if pid == 0:  # the child drops its copy of the value
        try:
            del value
            gc.collect()
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    assert len(w.ring_buffer.reader_table.leases(0)) == 1
    assert "zero-copy lease" in _fill(w, "k", r)[1]
    assert bytes(value) == b"A" * PAYLOAD


def test_buffer_pickle_serde_copies_unless_asked_not_to(store):
    np = pytest.importorskip("numpy")
    w, r, _ = store(serde=BufferPickleSerde, ring=1 << 20, max_object=300 * 1024)
    a = np.arange(20_000, dtype=np.float64)
    first = _put(w, "a", {"a": a, "strided": a[::2], "n": 3})
    copied = r.get(*first)
    assert copied["a"].flags.writeable and (copied["a"] == a).all() and (copied["strided"] == a[::2]).all()
    shared = r.get(*first, copy=False)
    arr = shared["a"]
    assert not arr.flags.writeable and (arr == a).all() and shared["n"] == 3
    del shared
    gc.collect()
    assert len(w.ring_buffer.reader_table.leases(0)) == 1  # the array alone holds it
    with pytest.raises(OutOfSpace, match="zero-copy lease"):
        for k in range(100):
            r.get(*_put(w, f"k{k}", np.full(20_000, k, dtype=np.float64)))
    assert (arr == a).all()  # NRR for the kept array
    del arr
    gc.collect()
    w.put("after", a)


def _expected(k: int, size: int) -> bytes:
    return (k.to_bytes(4, "little") * (size // 4 + 1))[:size]


def _keeper(handle, conn, seed: int) -> None:
    """A forked reader that keeps up to 3 zero-copy values, drops them in a
    random order, and checks every value it holds after every get."""
    import random

    rnd = random.Random(seed)
    r = SingleWriterShmObjectStorage.create_from_handle(handle)
    held: list = []
    wrong = 0
    while True:
        msg = conn.recv()
        if msg is None:
            break
        if msg == "drop":
            held.clear()
            conn.send("dropped")
            continue
        k, size, h = msg
        held.append((k, size, r.get(*h, copy=False)))
        if len(held) > 3:
            held.pop(rnd.randrange(len(held)))
        wrong += sum(bytes(v) != _expected(j, n) for j, n, v in held)
        conn.send("ok")
    held.clear()
    r.close()
    conn.send(wrong)


def test_nrr_for_kept_values_across_processes_while_the_writer_wraps():
    """vLLM's construction, two forked readers keeping zero-copy values across
    later puts (dropped in random order): no held value ever changes, and
    the writer's put, refused while a lease holds the bytes it needs, goes on
    once the readers let go."""
    ctx = multiprocess.get_context("fork")
    w, h = _store(n_readers=2, ring=32 * 1024, max_object=8 * 1024)
    conns, procs = [], []
    try:
        for seed in range(2):
            ours, theirs = ctx.Pipe()
            p = ctx.Process(target=_keeper, args=(h, theirs, seed))
            p.start()
            conns.append(ours)
            procs.append(p)
        refused = 0
        for k in range(300):
            size = 1000 + (k * 7919) % 5000
            for attempt in range(2):
                try:
                    handle = _put(w, f"k{k}", _expected(k, size))
                    break
                except OutOfSpace as exc:
                    assert attempt == 0 and "zero-copy lease" in str(exc), str(exc)
                    refused += 1
                    for c in conns:
                        c.send("drop")
                    assert [c.recv() for c in conns] == ["dropped", "dropped"]
            for c in conns:
                c.send((k, size, handle))
            assert [c.recv() for c in conns] == ["ok", "ok"]
        for c in conns:
            c.send(None)
        assert [c.recv() for c in conns] == [0, 0]  # no wrong byte in any held value
        assert refused > 10  # the leases did hold the writer back
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        w.close()
