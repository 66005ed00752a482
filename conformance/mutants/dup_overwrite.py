"""Variant dup_overwrite: a duplicate put silently replaces the cached entry.

Bug: ``put`` of a key that is already cached does not raise
``ValueError("Key '...' already exists in the storage.")``; it forgets the old
index entry and stores the new value under the key ("last write wins").  The
old chunk stays in the ring with its stale ``id_index`` entry, and the
writer's promise to the readers holding the old handle is silently dropped.

Must be caught by: DUP (a put of a cached key is rejected, and nothing is lost
or changed by it).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def put(self, key, value):
        if self.is_writer and isinstance(key, str):
            self.key_index.pop(key, None)  # BUG: overwrite instead of DuplicateKey
        return super().put(key, value)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
