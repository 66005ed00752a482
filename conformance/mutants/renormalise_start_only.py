"""Fault renormalise_start_only: the ``start >= B`` renormalisation forgets ``end``.

Bug: after freeing, once ``start`` has moved past ``B`` both virtual pointers
must drop by ``B``; here only ``start`` does.  ``end - start`` then exceeds the
used bytes by ``B``, so the ring believes itself full: puts fail with
``MemoryError`` until it empties completely, and handles carry addresses one
``B`` too high.  (``free_buf`` below is impl's with only that line changed.)

Must be caught by: OOM (put raises ``MemoryError`` exactly when, after FIFO
reclaim, no contiguous room exists: the store's own chunks leave room that its
inflated ``end`` hides).  CONFORMANCE (the pointers differ from the model)
usually comes first.
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
            if self._abs_start < self._abs_end:
                self.data_buffer_start += (self.metadata[nxt] - self.data_buffer_start) % B
            else:
                self.data_buffer_start = self.data_buffer_end = 0
            freed += size
        if self.data_buffer_start >= B:
            self.data_buffer_start -= B  # BUG: data_buffer_end must drop by B too
        last_id = self.monotonic_id_start
        if last_id >= first_id:
            return range(first_id, last_id)
        return chain(range(first_id, self.ID_MAX), range(0, last_id))


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
