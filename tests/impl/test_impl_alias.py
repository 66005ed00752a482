"""ALIAS on impl: after ``get`` returns, nothing reachable from its value
points into the ring, whatever the serde, or ``get`` raises ``BufferError``
and the chunk stays intact (unacknowledged, so the writer keeps it).

Each serde below keeps shared memory in its value another way.  Before
2026-12-04 impl's guard (the view's own ``release()``) caught only a value
that exported the view itself; a slice, a new memoryview over it (what
``np.frombuffer`` makes) or a pickle-5 out-of-band buffer escaped, and the
value changed when the writer reused the address (issue 28)."""

from __future__ import annotations

import ctypes
import pickle
import threading
from dataclasses import replace
from typing import Any

import pytest

from shmspec.impl import SingleWriterShmObjectStorage, SingleWriterShmRingBuffer
from shmspec.impl.serde import ObjectSerde


class _Raw(ObjectSerde):
    """``serialize`` of bytes as they are; ``keep(view)`` makes the value."""

    def serialize(self, value: Any):
        return bytes(value), len(value), b"", 0

    def deserialize(self, view: memoryview) -> Any:
        return self.keep(view)


def _serde(name: str, keep) -> type:
    return type(name, (_Raw,), {"keep": staticmethod(keep)})


class Pickle5(ObjectSerde):
    """Protocol 5 with the payload out of band, handed back as a slice of the view."""

    def serialize(self, value: Any):
        oob: list = []
        head = pickle.dumps(pickle.PickleBuffer(bytearray(value)), protocol=5, buffer_callback=oob.append)
        body = oob[0].raw()
        return [len(head).to_bytes(4, "little"), head, body], 4 + len(head) + body.nbytes, b"", 0

    def deserialize(self, view: memoryview) -> Any:
        n = int.from_bytes(view[:4], "little")
        return pickle.loads(view[4:4 + n], buffers=[view[4 + n:]])


ALIASING = {
    "the view itself": _serde("KeepView", lambda v: v),
    "a slice of the view": _serde("KeepSlice", lambda v: v[2:]),
    "a new memoryview over it (what np.frombuffer makes)": _serde("KeepNewView", lambda v: memoryview(v)),
    "a cast of the view": _serde("KeepCast", lambda v: v.cast("B")),
    "a PickleBuffer": _serde("KeepPickleBuffer", lambda v: pickle.PickleBuffer(v)),
    "ctypes from_buffer": _serde("KeepCtypes", lambda v: (ctypes.c_char * len(v)).from_buffer(v)),
    "a slice inside a container": _serde("KeepNested", lambda v: {"rows": [bytes(v[:1]), v[1:]]}),
    "a pickle-5 out-of-band buffer": Pickle5,
}


def _store(serde: type):
    ring = SingleWriterShmRingBuffer(4096, create=True)
    writer = SingleWriterShmObjectStorage(1024, 1, ring, serde_class=serde)
    reader = SingleWriterShmObjectStorage.create_from_handle(replace(writer.handle(), reader_lock=threading.Lock()))
    return writer, reader


@pytest.mark.parametrize("how", list(ALIASING))
def test_a_value_that_keeps_shared_memory_is_refused_and_the_chunk_stays_intact(how):
    writer, reader = _store(ALIASING[how])
    try:
        payload = b"\x07" * 64
        h = writer.put("k", payload)
        sig = writer.get_signature("k")
        with pytest.raises(BufferError, match="kept a view of shared memory"):
            reader.get(*h, sig, "k")
        assert writer.reads(h[1]) == (0,)  # not acknowledged: the writer keeps the chunk
        writer.free_unused()
        assert writer.is_cached("k")
    finally:
        import gc

        gc.collect()  # the refused value is gone: the mapping can close
        reader.close()
        writer.close()


def test_a_serde_that_copies_passes_and_a_serde_that_raises_keeps_its_own_error():
    writer, reader = _store(_serde("Copy", lambda v: bytes(v[2:])))
    try:
        h = writer.put("k", b"abcdef")
        assert reader.get(*h, writer.get_signature("k"), "k") == b"cdef"
        assert writer.reads(h[1]) == (1,)
    finally:
        reader.close()
        writer.close()

    def boom(v):
        raise ValueError("not my format")

    writer, reader = _store(_serde("Boom", boom))
    try:
        h = writer.put("k", b"abcdef")
        with pytest.raises(ValueError, match="not my format"):
            reader.get(*h, writer.get_signature("k"), "k")
    finally:
        reader.close()
        writer.close()


def test_real_numpy_frombuffer_is_refused():
    np = pytest.importorskip("numpy")
    writer, reader = _store(_serde("Frombuffer", lambda v: np.frombuffer(v, dtype=np.uint8)))
    try:
        h = writer.put("k", b"\x01" * 32)
        with pytest.raises(BufferError, match="kept a view of shared memory"):
            reader.get(*h, writer.get_signature("k"), "k")
    finally:
        import gc

        gc.collect()
        reader.close()
        writer.close()


def test_with_a_lease_time_a_value_may_keep_its_private_copy_and_the_next_get_does_not_touch_it():
    """A store with a lease time copies into a private scratch buffer (reused
    from get to get); a value that keeps a view of it takes the buffer with
    it, and the next get copies into a fresh one."""
    ring = SingleWriterShmRingBuffer(4096, create=True)
    writer = SingleWriterShmObjectStorage(1024, 1, ring, serde_class=ALIASING["a slice of the view"],
                                          lease_seconds=5.0)
    reader = SingleWriterShmObjectStorage.create_from_handle(replace(writer.handle(), reader_lock=threading.Lock()))
    try:
        h1 = writer.put("a", b"..first object")
        first = reader.get(*h1, writer.get_signature("a"), "a")
        assert bytes(first) == b"first object"
        h2 = writer.put("b", b"..second")
        second = reader.get(*h2, writer.get_signature("b"), "b")
        assert bytes(first) == b"first object" and bytes(second) == b"second"
    finally:
        del first, second
        reader.close()
        writer.close()
