"""Variant lockless_reader: a reader view can be built without a lock.

Bug: neither ``__init__`` nor ``create_from_handle`` insists on a reader lock;
a missing lock silently becomes "no locking" (``contextlib.nullcontext``).
impl's segment-v2 readers take no lock on any path, but vLLM raises
``ValueError("Lock must be provided for readers.")`` and its readers need the
lock for their read-modify-write of ``reader_count``; a drop-in that accepts a
lockless reader lets a caller written against impl break on vLLM (and impl's
own contract, LOCK, requires the lock).

Must be caught by: LOCK (a reader without a lock cannot be built).
"""

import contextlib

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def __init__(self, max_object_size, n_readers, ring_buffer, serde_class=_impl.PickleSerde,
                 reader_lock=None):
        if reader_lock is None and not ring_buffer.is_writer:
            reader_lock = contextlib.nullcontext()  # BUG: should raise MissingReaderLock
        super().__init__(max_object_size, n_readers, ring_buffer, serde_class, reader_lock)

    @classmethod
    def create_from_handle(cls, handle):
        ring = SingleWriterShmRingBuffer(*handle.ring_buffer_handle)  # BUG: no lock check
        try:
            return cls(
                max_object_size=handle.max_object_size,
                n_readers=handle.n_readers,
                ring_buffer=ring,
                serde_class=handle.serde_class,
                reader_lock=handle.reader_lock,
            )
        except BaseException:
            ring.close()
            raise


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
