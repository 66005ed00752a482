"""Variant early_free: a chunk is reclaimed before every reader has read it.

Bug: the reclaim check ``default_is_free_check`` adds up the reads of every
reader slot and frees a chunk once ``sum(reads) >= writer_count *
n_readers`` -- vLLM's aggregate threshold, applied to impl's per-reader
acknowledgements.  A reader that reads a handle twice then stands in for a
reader that has not read it yet, whose read finds the chunk reclaimed.
(Realistic: the aggregate is what vLLM does, and it looks equivalent.)

Must be caught by: RC (a chunk is never reclaimed before every reader has read
it ``writer_count`` times: RC's per-reader form, which impl promises).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def default_is_free_check(self, id, buf):
        if id in self._touched:
            return False
        promised = self._writer_flag.get(id, 0)
        # BUG: aggregate, not per reader: a surplus read by one reader stands in for another's
        return sum(self.ring_buffer.reads_since_alloc(id)) >= promised * self.n_readers


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
