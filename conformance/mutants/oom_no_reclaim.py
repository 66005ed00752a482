"""Variant oom_no_reclaim: ``put`` gives up on the first ``MemoryError``.

Bug: when the allocation fails, ``put`` is meant to run the reclaim
(``_free_unused``: FIFO reclaim of up to ``2 * max_object_size`` bytes) and
allocate once more.  Here the reclaim inside ``put`` is a no-op (e.g. it was
guarded by a flag that is never set), so ``put`` raises ``MemoryError`` while
fully-read chunks could have been reclaimed.  An explicit ``free_unused()``
still works.

Must be caught by: OOM (``put`` raises ``MemoryError`` exactly when, after FIFO
reclaim, no contiguous room exists).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    _inside_put = False

    def put(self, key, value):
        self._inside_put = True
        try:
            return super().put(key, value)
        finally:
            self._inside_put = False

    def _free_unused(self):
        if self._inside_put:
            return  # BUG: no reclaim before the retry, so the retry fails too
        super()._free_unused()


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
