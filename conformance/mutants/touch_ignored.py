"""Fault touch_ignored: the reclaim check forgets touch protection.

Bug: ``default_is_free_check`` only compares the reads with the promises; it
no longer asks whether the writer protected the chunk with ``touch(key)``
(vLLM >= 0.32: a touched chunk stays until the next ``get_cached(key)`` or
``release_touches()``).  A chunk the writer touched because it is about to
hand its handle out again is reclaimed and its memory reused.

Must be caught by: RC (a chunk is never reclaimed while protected by touch;
the touch campaign).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def default_is_free_check(self, id, buf):
        # BUG: "if id in self._touched: return False" dropped
        promised = self._writer_flag.get(id, 0)
        return all(reads >= promised for reads in self.ring_buffer.reads_since_alloc(id))


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
