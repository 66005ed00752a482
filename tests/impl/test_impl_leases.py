"""impl's reader leases (SEMANTICS LEASE), in vLLM's construction: a writer
built without the readers' lock, readers forked after it, each building its
view from the writer's handle with one shared ``multiprocess.Lock()``.

What holds today (issue 28, first slices): a reader that is *gone* (its
process died, inside a get or between two, or its view closed) has its
promised reads forfeited at the writer's next reclaim, so the writer puts
on with no ``clear()`` and no replacement reader, and the survivors get
only their own objects.  A slot no reader has claimed yet keeps its reads
owed (vLLM's), and an ``OutOfSpace`` names the reader slots whose reads pin
the oldest chunk.  Before this, 19 of 60 puts succeeded after such a kill,
then ``MemoryError`` on every put (issue 28's "Why").  And a reader view's
``close()`` from another thread never gives up the pin under a ``get`` in
flight (before, the in-flight get deserialized the next object's bytes)."""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
from dataclasses import replace
from typing import Any

import multiprocess
import pytest

from shmspec.impl import SingleWriterShmObjectStorage, SingleWriterShmRingBuffer
from shmspec.impl.serde import ObjectSerde
from shmspec.model.errors import OutOfSpace

RING, MAX_OBJECT, PAYLOAD, PUTS = 4096, 1024, 300, 60


_READS: dict = {}
_DOOMED = [False]
"""Set in the reader process that a ``("die", ...)`` value kills."""


class KillingSerde(ObjectSerde):
    """Pickle, except that a value ``("die", ...)`` SIGKILLs a doomed
    reader's process inside ``deserialize``: inside its get, its hazard pin
    held."""

    def serialize(self, value: Any):
        data = pickle.dumps(value)
        return data, len(data), b"", 0

    def deserialize(self, view: memoryview) -> Any:
        value = pickle.loads(bytes(view))
        if _DOOMED[0] and isinstance(value, tuple) and value[0] == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        if _DOOMED[0] and isinstance(value, tuple) and value[0] == "stop":  # ("stop", n): at its n-th read
            _READS[value] = _READS.get(value, 0) + 1
            if _READS[value] == value[1]:
                os.kill(os.getpid(), signal.SIGSTOP)
        return value


def _reader(handle, conn, doomed: bool) -> None:
    _DOOMED[0] = doomed
    view = SingleWriterShmObjectStorage.create_from_handle(handle)
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            break
        address, monotonic_id, sig, key = msg
        try:
            conn.send(("ok", view.get(address, monotonic_id, sig, key)))
        except Exception as exc:  # noqa: BLE001 - reported to the test
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    view.close()


@pytest.fixture
def deployed():
    """``make(n_readers, started=n_readers)`` -> ``(writer, [(process,
    conn), ...])``: the writer in this process, ``started`` readers forked
    after it (the first one doomed: see :class:`KillingSerde`); everything
    closed afterwards."""
    made: list[Any] = []
    ctx = multiprocess.get_context("fork")

    def make(n_readers: int = 2, started: int | None = None, **kw):
        ring = SingleWriterShmRingBuffer(RING, create=True)
        writer = SingleWriterShmObjectStorage(MAX_OBJECT, n_readers, ring, serde_class=KillingSerde, **kw)
        made.append(writer)
        handle = replace(writer.handle(), reader_lock=ctx.Lock())
        readers = []
        for i in range(started if started is not None else n_readers):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_reader, args=(handle, theirs, i == 0), daemon=True)
            p.start()
            assert mine.poll(10) and mine.recv() == "ready"
            readers.append((p, mine))
            made.append((p, mine))
        return writer, readers

    yield make
    for m in reversed(made):
        if isinstance(m, tuple):
            p, conn = m
            if p.is_alive():
                os.kill(p.pid, signal.SIGCONT)
                try:
                    conn.send(None)
                except OSError:
                    pass
                p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        else:
            m.close()


def _put(writer, key: str, value: Any) -> tuple:
    address, monotonic_id = writer.put(key, value)
    return address, monotonic_id, writer.get_signature(key), key


def _get(conn, handle: tuple, timeout: float = 10.0) -> tuple:
    conn.send(handle)
    assert conn.poll(timeout), "the reader did not answer"
    return conn.recv()


def _wait_dead(p, timeout: float = 10.0) -> None:
    p.join(timeout)
    assert p.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("where", ["inside its get", "between two gets"])
def test_a_dead_reader_does_not_stop_the_writer_and_the_survivor_gets_its_own_objects(deployed, where):
    writer, [(p1, c1), (p2, c2)] = deployed()
    first = _put(writer, "k0", ("die", 0) if where == "inside its get" else ("v", 0))
    assert _get(c2, first)[0] == "ok"
    if where == "inside its get":
        c1.send(first)  # its serde kills it inside the get, its pin held
    else:
        os.kill(p1.pid, signal.SIGKILL)
    _wait_dead(p1)
    t0 = time.monotonic()
    for i in range(1, PUTS + 1):  # no clear(), no replacement reader: every put succeeds
        value = ("v", i, os.urandom(PAYLOAD // 2).hex())
        h = _put(writer, f"k{i}", value)
        assert _get(c2, h) == ("ok", value)
    assert time.monotonic() - t0 < 10  # within the pin wait's bound: nothing waited on the dead reader
    assert writer.forfeited.get(0, 0) >= 1 and 1 not in writer.forfeited
    assert len(writer._forfeit_seen) <= len(writer.key_index)  # the bookkeeping goes with the chunks


def test_a_slot_no_reader_has_claimed_keeps_its_reads_owed_and_the_error_names_it(deployed):
    writer, [(p1, c1)] = deployed(n_readers=2, started=1)  # slot 1 never claimed: its reads stay owed (vLLM's)
    with pytest.raises(OutOfSpace) as err:
        for i in range(PUTS):
            h = _put(writer, f"k{i}", ("v", i, "x" * PAYLOAD))
            assert _get(c1, h)[0] == "ok"
    msg = str(err.value)
    assert msg.startswith("Not enough space in the data buffer")
    assert "waits for 1 read(s) by reader slot 1 (no reader attached yet)" in msg and "key 'k0'" in msg
    assert writer.forfeited == {}


def test_the_error_names_the_live_reader_whose_unmade_reads_pin_the_head(deployed):
    writer, [(p1, c1), (p2, c2)] = deployed()
    with pytest.raises(OutOfSpace, match=rf"reader slot 0 \(pid {p1.pid}\)$"):
        for i in range(PUTS):
            _get(c2, _put(writer, f"k{i}", ("v", i, "x" * PAYLOAD)))  # reader slot 0 reads nothing


def test_a_replacement_reader_in_the_dead_readers_slot_owes_its_reads_again(deployed):
    """The lease is the view's, not the slot's: a new reader in the slot
    (alive) makes the writer wait for its reads again, as vLLM's would."""
    writer, [(p1, c1), (p2, c2)] = deployed()
    os.kill(p1.pid, signal.SIGKILL)
    _wait_dead(p1)
    view = SingleWriterShmObjectStorage.create_from_handle(replace(writer.handle(), reader_lock=threading.Lock()))
    try:
        assert view._slot == 0
        with pytest.raises(OutOfSpace, match=rf"reader slot 0 \(pid {os.getpid()}\)"):
            for i in range(PUTS):
                _get(c2, _put(writer, f"k{i}", ("v", i, "x" * PAYLOAD)))
    finally:
        view.close()


def test_a_reader_that_closed_its_view_forfeits_what_it_still_owed():
    ring = SingleWriterShmRingBuffer(RING, create=True)
    writer = SingleWriterShmObjectStorage(MAX_OBJECT, 2, ring, serde_class=KillingSerde)
    handle = replace(writer.handle(), reader_lock=threading.Lock())
    views = [SingleWriterShmObjectStorage.create_from_handle(handle) for _ in range(2)]
    try:
        views[0].close()  # its lease ends with its view
        for i in range(PUTS):
            value = ("v", i, "x" * PAYLOAD)
            assert views[1].get(*_put(writer, f"k{i}", value)) == value
        assert writer.forfeited.get(0, 0) >= 1
    finally:
        views[1].close()
        writer.close()


class _Gate:
    """Held open by the test: a deserialize that waits on it (bounded)."""

    entered = threading.Event()
    go = threading.Event()


class BlockingSerde(KillingSerde):
    def deserialize(self, view: memoryview) -> Any:
        _Gate.entered.set()
        assert _Gate.go.wait(20)
        return super().deserialize(view)


@pytest.mark.parametrize("wait", ["the read ends within the wait", "the read outlasts the wait"])
def test_close_under_a_get_in_another_thread_never_gives_up_the_pin_under_the_read(monkeypatch, wait):
    from shmspec.impl import ring as impl_ring
    from shmspec.impl import storage

    monkeypatch.setattr(storage, "CLOSE_WAIT", 5.0 if wait == "the read ends within the wait" else 0.2)
    monkeypatch.setattr(impl_ring, "PIN_TIMEOUT", 0.3)
    _Gate.entered.clear()
    _Gate.go.clear()
    ring = SingleWriterShmRingBuffer(RING, create=True)
    writer = SingleWriterShmObjectStorage(MAX_OBJECT, 1, ring, serde_class=BlockingSerde)
    view = SingleWriterShmObjectStorage.create_from_handle(replace(writer.handle(), reader_lock=threading.Lock()))
    try:
        first = ("v", 0, "x" * PAYLOAD)
        h = _put(writer, "k0", first)
        got: list = []
        t = threading.Thread(target=lambda: got.append(view.get(*h)))
        t.start()
        assert _Gate.entered.wait(10)
        closer = threading.Thread(target=view.close)
        closer.start()
        if wait == "the read ends within the wait":
            time.sleep(0.2)
            assert closer.is_alive()  # close waits for the read
            _Gate.go.set()
        else:
            closer.join(5)
            assert not closer.is_alive()  # past CLOSE_WAIT: the close is left to the read
            writer.clear()  # the writer now wants k0's bytes: the read's pin still holds them
            from shmspec.model.errors import ReaderStalled

            with pytest.raises(ReaderStalled):
                for i in range(1, PUTS):
                    _put(writer, f"k{i}", ("v", i, "y" * PAYLOAD))
            _Gate.go.set()
        t.join(10)
        closer.join(10)
        assert got == [first]  # its own object, never the bytes of a later put
        with pytest.raises(ValueError, match="Buffer has been closed"):
            view.get(*h)
        assert view._closed_now  # the close was made, by close() or by the read
        for i in range(PUTS, PUTS + 20):  # the slot and its pin are given up: the writer reuses the memory
            _put(writer, f"k{i}", ("v", i, "z" * PAYLOAD))
    finally:
        _Gate.go.set()
        view.close()
        writer.close()


LEASE_S = 1.0


@pytest.mark.parametrize("reading", ["a promised read", "a re-read of a read chunk"])
def test_a_reader_stopped_inside_a_get_loses_its_lease_and_the_writer_puts_on(deployed, reading):
    """A lease time (``lease_seconds``): one of two readers SIGSTOPs itself
    inside a get (in its serde, its pin up).  Within the lease time plus 1 s
    the writer puts again, with no ``clear()`` and no replacement reader:
    the stuck pin revokes the lease (a promised read: at the writer's next
    reclaim; a re-read: in the wait for the pin), the reads the reader owed
    are forfeited.  The other reader gets every object right; the stopped
    reader, resumed, gets the stale-handle error for the get it was in, and
    its next get renews its lease and reads right."""
    writer, [(p1, c1), (p2, c2)] = deployed(lease_seconds=LEASE_S)
    assert writer.lease_seconds == LEASE_S
    first = _put(writer, "k0", ("stop", 1 if reading == "a promised read" else 2, "x" * PAYLOAD))
    assert _get(c2, first)[0] == "ok"
    if reading == "a re-read of a read chunk":
        assert _get(c1, first)[0] == "ok"  # its promised read made: the chunk is reclaimable
    c1.send(first)  # stops itself inside the get
    deadline = time.monotonic() + 10
    while open(f"/proc/{p1.pid}/stat").read().split(") ")[1][0] != "T":
        assert time.monotonic() < deadline, "the reader did not stop"
        time.sleep(0.01)
    t0, done = time.monotonic(), 0
    while done < PUTS:  # a sender retries a full ring (vLLM's sends the item inline meanwhile)
        value = ("v", done, os.urandom(PAYLOAD // 2).hex())
        try:
            h = _put(writer, f"n{done}", value)
        except MemoryError:
            assert time.monotonic() - t0 < LEASE_S + 1, "no put within the lease time plus 1 s"
            time.sleep(0.05)
            continue
        assert _get(c2, h) == ("ok", value)
        done += 1
        if done == 1:
            first_put = time.monotonic() - t0
    assert first_put < LEASE_S + 1
    assert writer.forfeited.get(0, 0) >= 1
    os.kill(p1.pid, signal.SIGCONT)
    assert c1.poll(10)
    got = c1.recv()
    assert got[0] == "error" and "StaleHandle" in got[1] and "has been modified or is invalid" in got[1], got
    value = ("v", "after")
    h = _put(writer, "after", value)
    assert _get(c1, h) == ("ok", value)  # the lease renewed: it reads again
    assert _get(c2, h) == ("ok", value)


def test_without_a_lease_time_a_stopped_reader_still_stalls_the_writer(deployed, monkeypatch):
    """The default (no ``lease_seconds``): as before, a put that must reuse
    memory a stopped reader pins waits ``PIN_TIMEOUT`` and raises
    ``ReaderStalled``, and its owed reads pin the head."""
    from shmspec.impl import ring as impl_ring
    from shmspec.model.errors import ReaderStalled

    monkeypatch.setattr(impl_ring, "PIN_TIMEOUT", 0.3)
    writer, [(p1, c1), (p2, c2)] = deployed()
    assert writer.lease_seconds is None
    first = _put(writer, "k0", ("stop", 2, "x" * PAYLOAD))
    assert _get(c2, first)[0] == "ok" and _get(c1, first)[0] == "ok"
    c1.send(first)  # a re-read: the chunk is reclaimable, the stopped reader's pin holds its bytes
    time.sleep(0.3)
    with pytest.raises(ReaderStalled):
        for i in range(PUTS):
            _get(c2, _put(writer, f"n{i}", ("v", i, "x" * PAYLOAD)))


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_the_gate_passes_impl_with_a_lease_time_and_checks_lease_on_it():
    """``--target impl-leased``: every campaign of the ci gate (controlled
    concurrency: the preemption sweep and the controlled schedules over the
    leased read path's yield points, the faults campaign with LEASE) passes."""
    from shmspec.conformance.runner.gate import run_gate
    from shmspec.conformance.targets.loader import load_target

    target = load_target("impl-leased")
    assert target.module.SingleWriterShmObjectStorage.LEASE_SECONDS == 10.0
    result = run_gate(target, "ci", 0)
    assert result.verdict == "pass", [v.message for v in result.violations]
    assert result.properties["LEASE"] == "pass" and result.properties["NRR"] == "pass"


def _rogue(writer):
    """A reader view in this process whose words the test then overwrites."""
    return SingleWriterShmObjectStorage.create_from_handle(replace(writer.handle(), reader_lock=threading.Lock()))


@pytest.mark.parametrize("garbage", ["a fixed stale pin, no acks", "the pin and the epoch rewritten"])
def test_a_reader_writing_garbage_into_its_pin_delays_the_writer_at_most_one_lease_time(deployed, garbage):
    """Issue 28's "Why": a reader that writes garbage into its own pin word
    (and never acknowledges anything) wedged the writer.  With a lease
    time: the stuck pin revokes its lease once, its owed reads are
    forfeited, and the writer puts on; rewriting its epoch afterwards does
    not make the same pin hold the writer again.  The honest reader gets
    every object right."""
    writer, [(p2, c2)] = deployed(n_readers=2, started=1, lease_seconds=LEASE_S)
    rogue = _rogue(writer)
    try:
        h0 = _put(writer, "k0", ("v", 0, "x" * PAYLOAD))
        assert _get(c2, h0)[0] == "ok"
        words, pin = rogue._words, rogue._pin_at
        words[pin] = (0xBEEF << 48) | 1  # "reading" allocation 0, for ever
        t0, done, waits = time.monotonic(), 0, []
        while done < PUTS:
            value = ("v", done, os.urandom(PAYLOAD // 2).hex())
            t = time.monotonic()
            try:
                h = _put(writer, f"n{done}", value)
            except MemoryError:
                assert time.monotonic() - t0 < 2 * LEASE_S + 1, "no put within the lease time plus 1 s"
                time.sleep(0.05)
                continue
            waits.append(time.monotonic() - t)
            assert _get(c2, h) == ("ok", value)
            done += 1
            if garbage == "the pin and the epoch rewritten" and done % 10 == 0:
                words[rogue._epoch_at] += 7  # "renews" its lease by hand, the pin unchanged
        assert sum(w > LEASE_S / 2 for w in waits) <= 1  # one lease time's wait at most, not one per put
        assert writer.forfeited.get(rogue._slot, 0) >= 1
    finally:
        rogue._words[rogue._pin_at] = 0
        rogue.close()


def test_a_reader_writing_garbage_into_its_acks_harms_only_itself(deployed):
    """Huge acknowledgement counts: the writer reclaims chunks the rogue
    reader never read (its own later gets find them stale), but never one
    the honest reader still owes: RC holds for it."""
    writer, [(p2, c2)] = deployed(n_readers=2, started=1)
    rogue = _rogue(writer)
    try:
        table = writer.ring_buffer.reader_table
        handles = []
        for i in range(PUTS):
            value = ("v", i, "x" * PAYLOAD)
            h = _put(writer, f"k{i}", value)
            for k in range(table.max_chunks):
                rogue._words[rogue._ack_at + k] += 1000  # "reads" everything, many times over
            handles.append((h, value))
            if i % 3 == 2:  # the honest reader lags by up to three objects, then reads them
                for hh, vv in handles[-3:]:
                    assert _get(c2, hh) == ("ok", vv)
        with pytest.raises(ValueError, match="has been modified or is invalid"):
            rogue.get(*handles[0][0])  # reclaimed long ago
    finally:
        rogue.close()


def test_the_error_during_a_stuck_readers_lease_says_when_a_put_can_succeed(deployed):
    """Found by a fresh-user trial: with a lease time, a put that finds the
    head owed by a reader stuck inside a read raises ``OutOfSpace`` at once,
    and only a put after the lease time succeeds; the message says so."""
    writer, [(p2, c2)] = deployed(n_readers=2, started=1, lease_seconds=LEASE_S)
    rogue = _rogue(writer)
    try:
        rogue._words[rogue._pin_at] = (0xBEEF << 48) | 1  # inside a read of allocation 0, never acking
        with pytest.raises(OutOfSpace, match=rf"reader slot {rogue._slot} \(pid \d+, inside one read: its lease "
                                             r"is revoked in [01]\.\d s, and a put after that can reclaim the "
                                             r"chunk\)"):
            for i in range(PUTS):
                _get(c2, _put(writer, f"n{i}", ("v", i, "x" * PAYLOAD)))
        time.sleep(LEASE_S)
        _get(c2, _put(writer, "after", ("v", "after")))  # the lease has run out: the retry succeeds
    finally:
        rogue._words[rogue._pin_at] = 0
        rogue.close()
