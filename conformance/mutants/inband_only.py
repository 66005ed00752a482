"""Variant inband_only: a reader trusts the in-band chunk header, like vLLM.

Bug: a reader's ``get`` authenticates the handle, then validates it *only* by
comparing the id field of the chunk header found at ``address % B`` with the
handle's id -- exactly what vLLM 0.11 - 0.33 do.  The liveness check against
the writer-published control block (``abs_start <= cand < abs_end``, done
before and after copying the payload) is gone.  Once the chunk is freed and
its bytes are reused, any payload that happens to contain ``[stale id][size]``
where the stale handle points is taken for the original chunk: the reader
deserializes foreign bytes and even bumps a "reader count" inside another
object's data.

Must be caught by: NRR (the gate's adversarial campaign places fake headers
carrying the stale id in new payloads exactly where stale handles point; the
reader returns the FORGED object).  CONFORMANCE is also expected to differ.
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
        self._authenticate(address, monotonic_id, signature, key)
        # BUG: no _check_live(...) against the control block; the header id is trusted.
        size = self._check_header(address, monotonic_id)
        region = self.ring_buffer.data_region
        offset = address % self.ring_buffer.data_buffer_size
        payload = bytes(region[offset + layout.OBJECT_HEADER : offset + size])
        count_at = offset + layout.MD_SIZE
        with self._reader_lock:
            count = bytes_to_int32(region[count_at : count_at + self.flag_bytes])
            region[count_at : count_at + self.flag_bytes] = int32_to_bytes(
                min(count + 1, layout.INT32_MAX)
            )
        return self.ser_de.deserialize(memoryview(payload))


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
