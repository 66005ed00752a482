"""Fault stale_start: ``start`` is not advanced when a chunk is freed.

Bug: reclaiming the oldest chunk drops it (ids, metadata, the published
``abs_start``) but leaves ``data_buffer_start`` where it was; only when the
ring becomes empty are ``start = end = 0`` reset.  The writer's idea of the
free space is stale: bytes already reclaimed still count as used, so puts fail
with ``MemoryError`` (or wrap) where the space is free.  (``reclaim_plan``
below is impl's with only the ``start`` update removed.)

Must be caught by: OOM (put raises ``MemoryError`` exactly when, after FIFO
reclaim, no contiguous room exists: on the store's own chunks, FIFO reclaim
leaves room that its stale ``start`` hides).  CONFORMANCE (``start`` differs
from the model) usually comes first.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage
from shmspec.impl import yieldpoints

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def reclaim_plan(self, is_free_fn, nbytes=None):
        data = self.data_region
        B = self.data_buffer_size
        if nbytes is None:
            nbytes = B
        start, end, abs_counter = self.data_buffer_start, self.data_buffer_end, self._abs_start
        retires = []
        freed = 0
        while abs_counter < self._abs_end and freed < nbytes:
            oldest = abs_counter % self.ID_MAX
            offset = self.metadata[oldest] % B
            size = self._sizes[oldest]
            with data[offset + self.MD_SIZE : offset + size] as view:
                if not is_free_fn(oldest, view):
                    break
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("free_step")
            if abs_counter + 1 >= self._abs_end:
                start = end = 0
            # BUG: else branch "start += (metadata[next] - start) % B" missing
            retires.append((abs_counter, oldest, start, end))
            abs_counter += 1
            freed += size
        return retires, ((start - B, end - B) if start >= B else None)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
