"""Fault touch_counts: a writer touch also promises a read, as vLLM 0.12 - 0.31's did.

Bug: ``touch(key)`` on the writer protects the chunk (vLLM >= 0.32) *and*
raises ``writer_flag[id]`` by one, the counting touch of vLLM 0.12 - 0.31.
The client's protocol of vLLM >= 0.32 makes one read per reader for each
``get_cached`` and none for a touch (the touch only holds the chunk until
that ``get_cached``), so after a touch every reader owes the store a read
it will never make: once the readers have read the handle as promised and
the touches are released, the chunk still waits for one more read each and
stays live for ever; FIFO reclaim stops at it and the ring fills up.

Must be caught by: PROG (the touch campaign: touch, get_cached, every
promised read, release_touches, then the ring never empties).  CONFORMANCE
sees the extra promise in the writer's count first.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def touch(self, key, address=0, monotonic_id=0, signature=None):
        super().touch(key, address, monotonic_id, signature)
        if self.is_writer and isinstance(key, str) and key in self._key_index:
            monotonic_id = self._key_index[key][1]
            self._writer_flag[monotonic_id] = self._writer_flag.get(monotonic_id, 0) + 1  # BUG: counting touch


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
