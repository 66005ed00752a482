"""impl's slot-flag stores (shmspec.impl.slots): the protocol's behaviour
and each hardening its module docstring claims over vLLM 0.33.0."""

from __future__ import annotations

import gc
import os

import pytest

from shmspec.impl.slots import GEN_MOD, SlotArena, SlotQueue
from shmspec.model.errors import SlotTimeout, StaleSlot, StoreError


@pytest.fixture
def arena():
    w = SlotArena(2, 16, 2)
    rs = [SlotArena(2, 16, 2, name=w.name, reader_rank=r) for r in range(2)]
    yield w, rs
    gc.collect()
    for s in [*rs, w]:
        s.close()
    assert not os.path.exists(f"/dev/shm/{w.name}")


@pytest.fixture
def queue():
    w = SlotQueue(2, 16, 2)
    rs = [SlotQueue(2, 16, 2, name=w.name, reader_rank=r) for r in range(2)]
    yield w, rs
    for s in [*rs, w]:
        s.close()


def _consume(reader, stub):
    v = reader.view(stub)
    data = bytes(v)
    del v
    reader.flush_releases()
    return data


def test_the_arena_falls_back_when_full_or_oversized_and_changes_nothing(arena):
    w, rs = arena
    assert w.write(b"x" * 17) is None  # over slot_bytes
    a, b = w.write(b"aa"), w.write(b"bb")
    rows = [w.row(0), w.row(1)]
    assert (a.slot, b.slot) == (0, 1) and w.write(b"cc") is None and [w.row(0), w.row(1)] == rows
    assert w.fallbacks == 2
    for r in rs:
        assert _consume(r, a) == b"aa"
    c = w.write(b"cc")  # slot 0 is free again; slot 1 is not
    assert c.slot == 0 and c.generation == a.generation + 1


def test_a_slot_is_released_only_when_its_last_view_is_gone(arena):
    w, rs = arena
    stub = w.write(b"hello")
    v = rs[0].view(stub)
    part = v[1:3]  # a view kept after the first one is dropped (the arena's client deviation)
    del v
    assert rs[0].flush_releases() == [] and w.row(0) == b"\x01\x00\x00"
    del part
    assert rs[0].flush_releases() == [0] and w.row(0) == b"\x01\x01\x00"


def test_a_stub_of_a_reused_slot_is_refused_not_read(arena):
    """vLLM's get_tensor maps whatever the slot holds; impl's view checks the generation."""
    w, rs = arena
    old = w.write(b"old")
    w.write(b"pad")
    for r in rs:
        _consume(r, old)
    new = w.write(b"new")
    assert new.slot == old.slot
    with pytest.raises(StaleSlot, match="generation 1 is gone .*generation 2; reused") as exc:
        rs[1].view(old)
    assert isinstance(exc.value, StoreError) and exc.value.kind == "StaleSlot"
    assert _consume(rs[1], new) == b"new"
    with pytest.raises(StaleSlot, match="already released"):
        rs[1].view(new)


def test_a_late_release_never_releases_the_next_message(arena):
    w, rs = arena
    old = w.write(b"old")
    v = rs[0].view(old)
    _consume(rs[1], old)
    del v  # queued, not flushed
    # reader 0 has not flushed: the slot is still held, so the writer takes the other one
    assert w.write(b"x").slot == 1
    # the pending release is for generation 1; once applied the slot is reused at generation 2
    rs[0].flush_releases()
    new = w.write(b"new")
    assert new.slot == 0 and new.generation == 2
    v2 = rs[0].view(new)
    rs[0]._pending.append((0, 1))  # a stale release of generation 1 arriving late
    assert rs[0].flush_releases() == [] and w.row(0) == b"\x01\x00\x00"
    del v2


def test_reader_ranks_and_roles_are_checked():
    w = SlotArena(2, 8, 1)
    try:
        with pytest.raises(ValueError, match="reader_rank must be in 0..1"):
            SlotArena(2, 8, 1, name=w.name, reader_rank=-1)
        with pytest.raises(ValueError, match="reader_rank must be in 0..1"):
            SlotArena(2, 8, 1, name=w.name, reader_rank=2)
        with pytest.raises(ValueError, match="writer cannot view"):
            w.view(w.write(b"a"))
        with pytest.raises(ValueError, match="positive int"):
            SlotArena(0, 8, 1)
    finally:
        w.close()
    assert GEN_MOD == 2**31


def test_the_queue_broadcasts_in_order_and_its_waits_are_bounded(queue):
    w, rs = queue
    w.enqueue(b"a")
    w.enqueue(b"b")
    with pytest.raises(SlotTimeout, match="writer waited") as exc:
        w.enqueue(b"c", timeout=0.01)
    assert isinstance(exc.value, TimeoutError)
    assert [rs[0].dequeue(), rs[0].dequeue()] == [b"a", b"b"]
    with pytest.raises(SlotTimeout, match="reader 0 waited"):
        rs[0].dequeue(timeout=0.01)
    with pytest.raises(SlotTimeout):  # reader 1 has not read slot 0: still no room
        w.enqueue(b"c", timeout=0.01)
    assert rs[1].dequeue() == b"a"
    w.enqueue(b"c", timeout=0.01)
    assert [rs[1].dequeue(), rs[0].dequeue(), rs[1].dequeue()] == [b"b", b"c", b"c"]
    with pytest.raises(ValueError, match="over the chunk"):
        w.enqueue(b"x" * 13)


def test_a_writer_caller_that_raises_publishes_nothing_and_a_reader_caller_that_raises_consumes(queue):
    w, rs = queue
    with pytest.raises(RuntimeError):
        with w.acquire_write(timeout=0) as chunk:
            chunk[0:4] = b"\x01\x00\x00\x00"
            raise RuntimeError("the caller failed mid-copy")
    assert w.row(0)[0] == 0 and w.current_idx == 0  # not published, the ring where it was
    with pytest.raises(SlotTimeout):
        rs[0].dequeue(timeout=0)
    w.enqueue(b"ok")
    with pytest.raises(RuntimeError):
        with rs[0].acquire_read(timeout=0):
            raise RuntimeError("the reader's caller failed")
    assert w.row(0) == b"\x01\x01\x00" and rs[0].current_idx == 1  # released (no leaked slot, vLLM #45224)
    assert rs[1].dequeue() == b"ok"


def test_a_segment_closed_under_a_held_view_is_kept_until_the_view_is_gone():
    """``close`` with a reader's view still held: the writer's name is gone at
    once, the reader's mapping stays (its descriptor closed) and is closed by
    a later release, never by a garbage collection that would raise
    BufferError in ``SharedMemory.__del__`` (impl.segment.UNCLOSED)."""
    import sys

    from shmspec.impl import segment

    seen = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(f"{u.exc_type.__name__} in {u.object!r}")
    try:
        w = SlotArena(1, 64, 2)
        r = SlotArena(1, 64, 2, name=w.name, reader_rank=0)
        view = r.view(w.write(b"kept"))
        shm = r.shm
        r.close()
        w.close()
        assert not os.path.exists(f"/dev/shm/{w.name.lstrip('/')}")  # unlinked by its creator
        assert any(s is shm for s in segment.UNCLOSED) and shm._fd == -1
        del r
        gc.collect()
        assert bytes(view) == b"kept" and seen == []  # still mapped, nothing raised
        del view
        gc.collect()
        assert segment.retry_unclosed() == 0 and all(s is not shm for s in segment.UNCLOSED)
        del shm
        gc.collect()
        assert seen == []
    finally:
        sys.unraisablehook = previous
