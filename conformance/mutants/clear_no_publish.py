"""Fault clear_no_publish: ``clear()`` does not publish the new window to readers.

Bug: the ring's ``clear()`` resets the writer's private pointers and
``abs_start = abs_end`` but forgets to store ``abs_start`` into the control
block; readers keep the pre-clear window until the next free publishes it.  A
handle issued before the clear whose bytes have not been overwritten yet still
passes the liveness check and the header check, and resolves.

Must be caught by: CLR (a handle issued before ``clear()`` never resolves
after it; the stale campaign's clear-then-reread).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage
from shmspec.impl import yieldpoints

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def clear(self):
        self._require_writer("clear the buffer")
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("clear")
        self._abs_start = self._abs_end  # BUG: self._publish_start() missing
        self.metadata.clear()
        self._sizes.clear()
        self._pending = None
        self.data_buffer_start = 0
        self.data_buffer_end = 0


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
