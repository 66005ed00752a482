"""Variant count_before_validate: a reader counts its read before validating the handle.

Bug: to "pin" the chunk while it copies, a reader's ``get`` increments the
chunk's ``reader_count`` first and validates the handle afterwards.  For a
stale handle whose memory already holds a younger chunk, the increment lands
on that younger chunk: it now counts a read that never happened, so the
writer may reclaim it before every reader has read it.  (The value returned
is still right: validation rejects the stale handle.)

Must be caught by: RC, in the controlled campaign (a live chunk's
``reader_count`` exceeds the gets started against its handle).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import layout, yieldpoints
from shmspec.impl.layout import bytes_to_int32, int32_to_bytes

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def get(self, address, monotonic_id, signature=None, key=None):
        if self.is_writer:
            return super().get(address, monotonic_id, signature, key)
        cand, abs_end = self._authenticate(address, monotonic_id, signature, key)
        region = self.ring_buffer.data_region
        offset = address % self.ring_buffer.data_buffer_size
        count_at = offset + layout.MD_SIZE
        if count_at + self.flag_bytes <= self.ring_buffer.data_buffer_size:
            with self._locked():  # BUG: counted before the handle is validated
                if yieldpoints.HOOK is not None:
                    yieldpoints.HOOK("counter_increment")
                count = bytes_to_int32(region[count_at : count_at + self.flag_bytes])
                region[count_at : count_at + self.flag_bytes] = int32_to_bytes(count + 1)
        self._check_live(cand, abs_end, address, monotonic_id)
        size = self._check_header(address, monotonic_id)
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("payload_read")
        payload = bytes(region[offset + layout.OBJECT_HEADER : offset + size])
        self._check_live(cand, abs_end, address, monotonic_id)
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("deserialize")
        return self.ser_de.deserialize(memoryview(payload))


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
