"""Fault oom_reclaim_short: the reclaim before the retry frees too little.

Bug: ``_free_unused`` (``free_unused``, and the reclaim inside ``put``)
reclaims at most ``max_object_size`` bytes instead of ``2 * max_object_size``
(vLLM's bound).  One object's worth looks enough, but it is not when the next
chunk must wrap: the tail gap is wasted and the chunk needs room at the front,
so ``put`` raises ``MemoryError`` although FIFO reclaim of the full amount
would have made room.

Must be caught by: OOM (``put`` raises ``MemoryError`` exactly when, after
FIFO reclaim, no contiguous room exists), through the boundary program
``reclaim-past-max``, whose last put fits only after more than one object's
worth is freed.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _free_unused(self):
        # BUG: the bound is 2 * max_object_size
        self.ring_buffer.free_buf(self.default_is_free_check, self.max_object_size, journal=self)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
