"""Variant early_free: a chunk is reclaimed before every reader has read it.

Bug: the reclaim check ``default_is_free_check`` ignores ``n_readers`` and
frees a chunk once ``reader_count >= writer_count`` -- i.e. as soon as *one*
reader has read each promised handle, while the others still have it queued.
(Realistic: written for the single-reader case, never revisited for TP > 1.)

Must be caught by: RC (a chunk is never reclaimed while
``reader_count < writer_count * n_readers``).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl.layout import bytes_to_int32

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def default_is_free_check(self, id, buf):
        if id in self._touched:
            return False
        reader_count = bytes_to_int32(buf[: self.flag_bytes])
        return reader_count >= self.writer_flag.get(id, 0)  # BUG: "* self.n_readers" dropped


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
