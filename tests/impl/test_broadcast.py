"""impl's ``MessageQueue`` (:mod:`shmspec.impl.broadcast`): what its module
docstring says differs from vLLM 0.33.0's, each checked here with a writer
and a reader in this process (the deployed construction's campaigns run
it across processes: tests/conformance/protocols/test_slots_deployed.py)."""

from __future__ import annotations

import gc
import pickle
import threading

import pytest

from shmspec.impl import broadcast
from shmspec.model.errors import SlotTimeout

MiB = 1 << 20


class SmallArena(broadcast.MessageQueue):
    """The arena scaled down: two slots of 4 MiB, buffers of 2 MiB and more diverted."""

    ARENA_SLOTS, ARENA_SLOT_BYTES, ARENA_MIN_BYTES = 2, 4 * MiB, 2 * MiB


def _pair(cls=broadcast.MessageQueue, chunk_bytes=256 * 1024, chunks=2, **kw):
    writer = cls(1, 1, max_chunk_bytes=chunk_bytes, max_chunks=chunks, **kw)
    reader = cls.create_from_handle(writer.export_handle(), 0)
    t = threading.Thread(target=reader.wait_until_ready)
    t.start()
    writer.wait_until_ready()
    t.join(10)
    return writer, reader


@pytest.fixture
def pair(request):
    made = []

    def make(*args, **kw):
        made.extend(_pair(*args, **kw))
        return made[-2], made[-1]

    yield make
    gc.collect()
    for q in reversed(made):
        q.close()


def _oob(data: bytearray) -> pickle.PickleBuffer:
    return pickle.PickleBuffer(data)  # travels out of band; the reader gets the buffer object itself


def test_a_writers_timeout_names_the_readers_holding_the_chunk(pair):
    writer, reader = pair()
    writer.enqueue("a", timeout=1)
    writer.enqueue("b", timeout=1)
    with pytest.raises(SlotTimeout, match=r"readers \[0\] have not released it"):
        writer.enqueue("c", timeout=0.05)
    assert reader.dequeue(timeout=1) == "a"  # nothing was consumed or lost by the timeout
    writer.enqueue("c", timeout=1)
    assert [reader.dequeue(timeout=1) for _ in range(2)] == ["b", "c"]


def test_an_out_of_band_value_is_copied_out_of_the_chunk(pair):
    writer, reader = pair(chunk_bytes=3 * MiB)
    first = bytearray(b"\x01" * (MiB + 17))
    writer.enqueue(_oob(first), timeout=1)
    got = reader.dequeue(timeout=1)
    for i in range(4):  # the writer reuses both chunks
        writer.enqueue(_oob(bytearray(bytes([i + 2]) * (MiB + 17))), timeout=1)
        reader.dequeue(timeout=1)
    assert isinstance(got, bytearray) and bytes(got) == bytes(first)


def test_the_caller_may_reuse_its_buffers_once_enqueue_returns(pair):
    writer, reader = pair(chunk_bytes=64 * 1024)  # a 2 MiB buffer takes the overflow path (the socket)
    sent = []
    for i in range(6):
        data = bytearray(bytes([i + 1]) * (2 * MiB))
        writer.enqueue(_oob(data), timeout=1)
        sent.append(bytes(data))
        data[:] = bytes(len(data))  # reused at once, as a scheduler reuses a tensor's memory
        assert bytes(reader.dequeue(timeout=5)) == sent[-1]


def test_an_arena_value_is_a_zero_copy_view_held_until_it_is_dropped(pair):
    writer, reader = pair(SmallArena, enable_shm_tensor_arena=True)
    data = bytearray(b"\x07" * (3 * MiB))
    writer.enqueue(_oob(data), timeout=1)
    got = reader.dequeue(timeout=1)
    assert isinstance(got, memoryview) and got.readonly and bytes(got) == bytes(data)
    arena = writer.tensor_arena
    assert arena.row(0) == b"\x01\x00"  # in slot 0, the reader holds it
    writer.enqueue("next", timeout=1)
    assert reader.dequeue(timeout=1) == "next"
    assert arena.row(0) == b"\x01\x00"  # still held: its value is alive
    del got
    writer.enqueue("after", timeout=1)
    assert reader.dequeue(timeout=1) == "after"  # the dequeue released it
    assert arena.row(0) == b"\x01\x01" and arena.fallbacks == 0


def test_an_enqueue_that_raises_gives_its_arena_slots_back(pair):
    class Unpicklable:
        def __reduce__(self):
            raise pickle.PicklingError("no")

    writer, reader = pair(SmallArena, enable_shm_tensor_arena=True)
    for _ in range(3):
        with pytest.raises(pickle.PicklingError):
            writer.enqueue([_oob(bytearray(3 * MiB)), Unpicklable()], timeout=1)
    arena = writer.tensor_arena
    assert [arena.row(i)[0] for i in range(2)] == [0, 0]  # both slots free again
    writer.enqueue([_oob(bytearray(b"\x01" * (3 * MiB))), _oob(bytearray(b"\x02" * (3 * MiB)))], timeout=1)
    a, b = reader.dequeue(timeout=1)
    assert arena.fallbacks == 0 and bytes(a[:1]) == b"\x01" and bytes(b[:1]) == b"\x02"


def test_a_ring_timeout_gives_the_arena_slots_back(pair):
    writer, reader = pair(SmallArena, chunks=1, enable_shm_tensor_arena=True)
    writer.enqueue("fills the ring", timeout=1)
    with pytest.raises(SlotTimeout):
        writer.enqueue(_oob(bytearray(3 * MiB)), timeout=0.05)
    assert writer.tensor_arena.row(0)[0] == 0 and writer.tensor_arena.row(1)[0] == 0


def test_the_arena_is_off_with_remote_readers():
    q = SmallArena(2, 1, max_chunk_bytes=64 * 1024, max_chunks=2, enable_shm_tensor_arena=True)
    try:
        assert q.tensor_arena is None and q.export_handle().tensor_arena_handle is None
    finally:
        q.close()


def test_a_readers_timeout_between_an_overflow_chunk_and_its_frames_loses_nothing(pair):
    """Found by the deployed fault run (writer-killed-mid-write, loaded
    machine): the reader read an overflow chunk, its socket wait timed out
    before the writer's frames came, and the next dequeue returned the
    message after.  The frames come late here by holding the writer's send."""
    writer, reader = pair(chunk_bytes=1024)
    held = []
    send = writer._send
    writer._send = lambda sock, frames: held.append((sock, frames))
    writer.enqueue(b"x" * 4096, timeout=1)  # too large for a chunk: the flag now, the frames over the socket
    writer._send = send
    with pytest.raises(TimeoutError):
        reader.dequeue(timeout=0.05)
    writer.enqueue("after", timeout=1)  # in the chunk, published before the late frames
    for sock, frames in held:
        send(sock, frames)
    assert reader.dequeue(timeout=1) == b"x" * 4096  # FIFO: the timed-out message first
    assert reader.dequeue(timeout=1) == "after"
    with pytest.raises(TimeoutError):
        reader.dequeue(timeout=0.05)
