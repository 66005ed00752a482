"""Fault renormalise_start_only: the ``start >= B`` renormalisation forgets ``end``.

Bug: after freeing, once ``start`` has moved past ``B`` both virtual pointers
must drop by ``B``; here only ``start`` does.  ``end - start`` then exceeds the
used bytes by ``B``, so the ring believes itself full: puts fail with
``MemoryError`` until it empties completely, and handles carry addresses one
``B`` too high.  (``reclaim_plan`` below is impl's with only the shifted ``end``
changed.)

Must be caught by: OOM (put raises ``MemoryError`` exactly when, after FIFO
reclaim, no contiguous room exists: the store's own chunks leave room that its
inflated ``end`` hides).  CONFORMANCE (the pointers differ from the model)
usually comes first.
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
            if abs_counter + 1 < self._abs_end:
                start += (self.metadata[(abs_counter + 1) % self.ID_MAX] - start) % B
            else:
                start = end = 0
            retires.append((abs_counter, oldest, start, end))
            abs_counter += 1
            freed += size
        return retires, ((start - B, end) if start >= B else None)  # BUG: end must drop by B too


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
