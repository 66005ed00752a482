"""Fault free_out_of_order: reclaim scans past a busy chunk.

Bug: ``free_buf`` is meant to stop at the first chunk that is still being
read (strict FIFO: a busy chunk blocks everything younger).  Here, after the
FIFO walk stops at a busy oldest chunk, the scan goes on and reclaims every
younger chunk whose reads are complete ("free whatever is free"): their ids are
returned as freed and the store drops their keys, although the ring's ``start``
cannot move past the busy chunk.  (The parked chunks are put back for the next
FIFO walk, so the ring's own pointers stay consistent.)

Must be caught by: FIFO (chunks are reclaimed oldest first; a busy chunk
blocks reclaim of younger ones).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    _parked: dict = {}

    def free_buf(self, is_free_fn, nbytes=None):
        parked, self._parked = self._parked, {}
        self.metadata.update(parked)  # the FIFO walk needs every chunk's address back
        freed = list(super().free_buf(lambda i, view: i in parked or is_free_fn(i, view), nbytes))
        # BUG: go on past the busy head and reclaim younger chunks that are done.
        head = self.monotonic_id_start
        B = self.data_buffer_size
        for i, address in list(self.metadata.items()):
            if i == head:
                continue
            offset = address % B
            with self.data_region[offset + self.MD_SIZE : offset + self._sizes[i]] as view:
                done = is_free_fn(i, view)
            if done:
                self._parked[i] = self.metadata.pop(i)
                freed.append(i)
        return freed


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
