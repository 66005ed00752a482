"""Fault no_recheck: a reader copies after validating and never re-validates.

Bug: a reader's ``get`` checks the handle (liveness, header), copies the
payload out and deserializes the copy, but skips the re-check after the copy
(step f) and the re-check under the lock (step g): the classic
time-of-check/time-of-use race.  If the writer reclaims and reuses the chunk
between the check and the copy (a re-read of a handle every reader has
consumed), the copy holds the new object's bytes and is returned as the old
one; the count lands on the new chunk.

Must be caught by: NRR (the controlled campaign pauses the reader at
``payload_read`` while the writer reuses the slot).
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
        # BUG: no re-check of liveness after the copy, none under the lock
        count_at = offset + layout.MD_SIZE
        with self._locked():
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("counter_increment")
            count = bytes_to_int32(region[count_at : count_at + self.flag_bytes])
            region[count_at : count_at + self.flag_bytes] = int32_to_bytes(
                min(count + 1, layout.INT32_MAX)
            )
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("deserialize")
        return self.ser_de.deserialize(memoryview(payload))


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
