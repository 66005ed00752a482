"""Fault stale_start: ``start`` is not advanced when a chunk is freed.

Bug: ``free_buf`` drops the oldest chunk (ids, metadata, the published
``abs_start``) but leaves ``data_buffer_start`` where it was; only when the
ring becomes empty are ``start = end = 0`` reset.  The writer's idea of the
free space is stale: bytes already reclaimed still count as used, so puts fail
with ``MemoryError`` (or wrap) where the space is free.  (``free_buf`` below
is impl's with only the pointer update removed.)

Must be caught by: OOM (put raises ``MemoryError`` exactly when, after FIFO
reclaim, no contiguous room exists: on the store's own chunks, FIFO reclaim
leaves room that its stale ``start`` hides).  CONFORMANCE (``start`` differs
from the model) usually comes first.
"""

from itertools import chain

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage
from shmspec.impl import yieldpoints

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def free_buf(self, is_free_fn, nbytes=None):
        self._require_writer("free buffers")
        data = self.data_region
        B = self.data_buffer_size
        if nbytes is None:
            nbytes = B
        first_id = self.monotonic_id_start
        freed = 0
        while self._abs_start < self._abs_end and freed < nbytes:
            oldest = self._abs_start % self.ID_MAX
            address = self.metadata[oldest]
            size = self._sizes[oldest]
            offset = address % B
            with data[offset + self.MD_SIZE : offset + size] as view:
                if not is_free_fn(oldest, view):
                    break
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("free_step")
            self._abs_start += 1
            self._publish_start()
            del self.metadata[oldest]
            del self._sizes[oldest]
            nxt = self._abs_start % self.ID_MAX
            if self._abs_start >= self._abs_end:
                self.data_buffer_start = self.data_buffer_end = 0
            # BUG: else branch "start += (metadata[nxt] - start) % B" missing
            freed += size
        if self.data_buffer_start >= B:
            self.data_buffer_start -= B
            self.data_buffer_end -= B
        last_id = self.monotonic_id_start
        if last_id >= first_id:
            return range(first_id, last_id)
        return chain(range(first_id, self.ID_MAX), range(0, last_id))


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
