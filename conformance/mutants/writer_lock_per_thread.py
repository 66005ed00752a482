"""Fault writer_lock_per_thread: the writer's private lock excludes nobody.

Bug: the writer's lock is kept per thread (a ``threading.local`` holding one
lock for each thread that uses the writer), as a refactor that wanted
"re-entrant within one thread" might write it.  One thread sees no
difference: nested operations still find the lock held, every single-thread
test passes.  Two threads each take their own lock, so their puts, reclaims
and clears interleave freely: both pass the duplicate check of one key, or
both reclaim the same chunks.

Must be caught by: SW (the sw campaign: two threads put one key, or put into
a full ring, preempted at a writer yield point).
"""

import threading

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle

SHMSPEC_PROFILE = "impl"


class _PerThreadLock:
    """An RLock per thread: re-entrant, and no exclusion between threads."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _lock(self) -> threading.RLock:
        lock = getattr(self._local, "lock", None)
        if lock is None:
            lock = self._local.lock = threading.RLock()  # BUG: one lock per thread
        return lock

    def acquire(self, *args, **kwargs) -> bool:
        return self._lock().acquire(*args, **kwargs)

    def release(self) -> None:
        self._lock().release()

    def _is_owned(self) -> bool:
        return self._lock()._is_owned()

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self.release()


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    pass


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.is_writer:
            self._wlock = _PerThreadLock()


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
