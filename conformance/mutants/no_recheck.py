"""Fault no_recheck: a reader copies the payload after validating and counting, and never re-validates.

Bug: a reader's ``get`` validates the handle (liveness, header), counts its
read under the lock, and only then copies the payload out and deserializes
the copy, with no re-check after the copy: the time-of-check/time-of-use race.
Once the count is in, the writer may reclaim the chunk (every promised read
is counted) and reuse its memory while the reader is still copying, so the
copy holds the next object's bytes (or a torn mix) and is returned under the
old handle.  impl copies *before* counting and re-validates the copy.

Must be caught by: NRR (the preemption campaign pauses the reader between
its count and its copy while the writer clears or reclaims and reuses the slot).
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
        count_at = offset + layout.MD_SIZE
        with self._locked():
            self._check_live(cand, abs_end, address, monotonic_id)
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("counter_increment")
            count = bytes_to_int32(region[count_at : count_at + self.flag_bytes])
            region[count_at : count_at + self.flag_bytes] = int32_to_bytes(
                min(count + 1, layout.INT32_MAX)
            )
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("payload_read")
        # BUG: copied after the count released the chunk, and never re-validated
        payload = bytes(region[offset + layout.OBJECT_HEADER : offset + size])
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("deserialize")
        return self.ser_de.deserialize(memoryview(payload))


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
