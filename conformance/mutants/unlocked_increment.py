"""Fault unlocked_increment: a reader counts its read without the reader lock.

Bug (reader side of a missing lock): the reader re-checks liveness and
increments ``reader_count`` as a plain read-modify-write, without taking
``reader_lock`` (the lock is still required at construction).  The writer
reclaims under that lock, so the re-check and the increment are no longer
atomic with respect to reclaim: a writer that frees and reuses the chunk
between them gets the increment on the new chunk's count (and two readers can
lose each other's increments).

Must be caught by: RC (the preemption campaign pauses the reader before its
increment while the writer reuses the slot: a live chunk's ``reader_count``
exceeds the gets started against its handle).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import layout, yieldpoints
from shmspec.impl.layout import bytes_to_int32, int32_to_bytes

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def get(self, address, monotonic_id, signature=None, key=None):
        if self.is_writer:
            return self._writer_get(address, monotonic_id)
        cand, abs_end = self._authenticate(address, monotonic_id, signature, key)
        self._check_live(cand, abs_end, address, monotonic_id)
        size = self._check_header(address, monotonic_id)
        region = self.ring_buffer.data_region
        offset = address % self.ring_buffer.data_buffer_size
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("payload_read")
        payload = bytes(region[offset + layout.OBJECT_HEADER : offset + size])
        self._check_live(cand, abs_end, address, monotonic_id)
        count_at = offset + layout.MD_SIZE
        # BUG: "with self._locked():" missing around the re-check and the increment
        self._check_live(cand, abs_end, address, monotonic_id)
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("counter_increment")
        count = bytes_to_int32(region[count_at : count_at + self.flag_bytes])
        region[count_at : count_at + self.flag_bytes] = int32_to_bytes(min(count + 1, layout.INT32_MAX))
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("deserialize")
        return self.ser_de.deserialize(memoryview(payload))


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
