"""Variant leaky_close: closing the writer does not unlink the segment.

Bug: the ring's ``close()`` releases the mapping (and closes the reader
table) but never unlinks the ring segment's name (the writer is treated like a
reader), so every closed store leaves a ``/dev/shm`` entry behind until
reboot.  ``__del__`` goes through the same ``close()``, so garbage collection
does not rescue it either.  (``close`` below is impl's with only the unlink
flag changed.)

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
        table, self.reader_table = self.reader_table, None
        try:
            if table is not None:
                table.close()
        finally:
            for view in (self._ctl, self._data):
                if view is not None:
                    view.release()
            self._ctl = None
            self._data = None
            segment.release_segment(self.shared_memory, unlink=False)  # BUG: the writer must unlink


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
