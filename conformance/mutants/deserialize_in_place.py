"""Variant deserialize_in_place: a reader deserializes straight from the segment.

Bug: to save a copy, a reader's ``get`` hands the serde a memoryview of the
shared segment itself, *before* it counts the read and re-validates the
handle; only then does it re-check liveness (under the lock) and count.  The
re-check still turns a reclaimed handle into ``StaleHandle``, so the value a
caller receives is right -- but when the writer reclaims and reuses the slot
while the serde is reading it (a stale re-read racing with the writer), the
serde has already parsed another object's bytes (vLLM's default serde
unpickles them), and a zero-copy serde would even hand out an object that
aliases memory the writer is rewriting.

Under the read-once protocol this cannot happen (a chunk is not reclaimed
before every reader has counted it); it needs a re-read of a handle every
reader has already read, whose chunk the writer frees and overwrites in the
few microseconds between the reader's liveness check and the serde's read.

Must be caught by: NRR ("never returns, or deserializes, bytes of a chunk that
was freed and reused"), seen by the free-running run through the objects its
serde records as deserialized (the returned values stay right).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import layout
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
        # BUG: zero-copy -- the serde reads shared memory the writer may be reusing.
        with region[offset + layout.OBJECT_HEADER : offset + size] as view:
            obj = self.ser_de.deserialize(view)
        count_at = offset + layout.MD_SIZE
        with self._locked():
            self._check_live(cand, abs_end, address, monotonic_id)  # re-validated, but too late
            count = bytes_to_int32(region[count_at : count_at + self.flag_bytes])
            region[count_at : count_at + self.flag_bytes] = int32_to_bytes(
                min(count + 1, layout.INT32_MAX)
            )
        return obj


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
