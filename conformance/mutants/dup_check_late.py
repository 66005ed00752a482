"""Fault dup_check_late: the duplicate-key check runs after the allocation.

Bug: ``put`` allocates (reserves and commits) the chunk first and checks
whether the key is already cached only when it is about to index it; the
``DuplicateKey`` it then raises does not roll the allocation back.  The
caller sees the right error, but an orphan chunk (no key, never readable,
never promised to readers) now occupies the ring.

Must be caught by: DUP (a put of a cached key is rejected, and nothing is lost
or changed by it).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl.storage import _check_serialized
from shmspec.model.errors import DuplicateKey

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def put(self, key, value):
        if self.is_writer and isinstance(key, str) and key in self.key_index:
            data, data_nbytes, metadata, md_nbytes = self.ser_de.serialize(value)
            _check_serialized(data, data_nbytes, metadata, md_nbytes)
            object_nbytes = self.flag_bytes + md_nbytes + data_nbytes
            if object_nbytes <= self.max_object_size:
                try:  # BUG: allocated before the duplicate check, never rolled back
                    self.ring_buffer.allocate_buf(object_nbytes)
                except MemoryError:
                    pass
            raise DuplicateKey(key)
        return super().put(key, value)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
