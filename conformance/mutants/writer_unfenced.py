"""Fault writer_unfenced: the writer reclaims without the reader lock.

Bug (writer side of a missing lock): ``free_unused`` (and so the reclaim
inside ``put``) walks and frees chunks without holding ``reader_lock``,
although it was given one.  A reader's re-check and increment under the lock
are then no longer atomic with respect to reclaim: the writer can free and
reuse a chunk between a reader's re-check and its increment, which lands on
the new chunk.

Must be caught by: RC (the preemption campaign pauses a re-reading reader
before its increment, inside the lock the writer no longer takes, while the
writer reclaims and reuses the slot: a live chunk's ``reader_count`` exceeds
the gets started against its handle).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def free_unused(self):
        self._require_writer("free objects")
        # BUG: "with self._locked():" missing
        freed = list(self.ring_buffer.free_buf(self.default_is_free_check, 2 * self.max_object_size))
        for freed_id in freed:
            key = self.id_index.pop(freed_id, None)
            if key is not None:
                self.key_index.pop(key, None)
            self.writer_flag.pop(freed_id, None)
            self._touched.discard(freed_id)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
