"""Fault alias_unguarded: a reader's plain get lets the serde keep its view of shared memory.

Bug (a store that drops ALIAS's guard to save the reference-count check, or
one written before zero-copy serdes existed): the reader's ``get`` hands the
serde a view of the chunk in the segment and returns whatever the serde
made of it, without checking that the value holds no view of that memory.
A serde that returns an object over its input (``np.frombuffer``, a
pickle-5 out-of-band buffer, a slice of the view) then gives the caller a
value that changes when the writer reclaims the chunk and puts the next
objects on its bytes.

Must be caught by: NRR (the faults campaign's reader_serde_keeps_view: r1's
value of h1, made by a serde that kept its view, reads another object's bytes
after the writer's puts wrap the ring).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import layout, yieldpoints

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _deserialize(self, address, size):
        if self._keeps_buffer:
            return super()._deserialize(address, size)
        ring = self.ring_buffer
        lo = address % ring.data_buffer_size + layout.OBJECT_HEADER
        hi = lo - layout.OBJECT_HEADER + size
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("deserialize")
        view = memoryview(ring.shared_memory._mmap)[layout.DATA_OFFSET + lo : layout.DATA_OFFSET + hi]
        return self.ser_de.deserialize(view)  # BUG: no check that the value keeps no view of the segment


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
