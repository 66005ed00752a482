"""Variant leaky_close: closing the writer does not unlink the segment.

Bug: the ring's ``close()`` releases the mapping but never unlinks the
segment name (the writer is treated like a reader), so every closed store
leaves a ``/dev/shm`` entry behind until reboot.  ``__del__`` goes through the
same ``close()``, so garbage collection does not rescue it either.

Must be caught by: LEAK (closing the writer leaves no shared-memory segment
behind).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage
from shmspec.impl import segment

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def close(self):
        if self._closed or not hasattr(self, "shared_memory"):
            return
        self._closed = True
        for view in (self._ctl, self._data):
            if view is not None:
                view.release()
        self._ctl = None
        self._data = None
        segment.release_segment(self.shared_memory, unlink=False)  # BUG: writer must unlink


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
