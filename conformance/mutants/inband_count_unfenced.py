"""Fault inband_count_unfenced: the landed segment-v1 read path, with vLLM's writer.

Bug: readers count their reads as impl did up to segment version 1 -- and as
vLLM does: validate the handle against the control block, copy the payload
out, re-validate the copy, then take the reader lock, re-validate once more
and increment the chunk's in-band ``reader_count`` (the 4 bytes after its
header); the writer frees a chunk once ``reader_count >= writer_count *
n_readers``.  That was safe only while the writer also held the readers' lock
when it reclaimed.  Built as vLLM builds its writer -- without the lock -- and
with no hazard pins (readers publish none, so the writer's pin scan finds
nothing to wait for), the writer can reclaim the chunk and reuse its memory
between a reader's last re-check and its increment, and the late increment
lands inside the new chunk: on its count (a read that never happened) or its
payload (a corrupted object).  Measured on impl v1 on 2026-12-01: 87 wrong
objects in 3.6M gets (docs/impl-protocol.md).  Everything else is impl's
segment-v2 store (drain after ``clear()`` included); ``reads``/``warp_reads``
are hidden so the harness reads and warps the in-band count, as on vLLM.

Must be caught by: RC (the preemption campaign pauses a reader at its
increment, under the lock the writer does not take, while the writer clears
or reclaims and reuses the slot: the new chunk's count exceeds the gets
started against its handle).  The aggregate threshold also lets one reader's
second read stand in for another's: CONFORMANCE and OOM (the model counts per
reader) come first, in the lockstep campaigns.
"""

import os

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import layout, yieldpoints
from shmspec.impl.layout import bytes_to_int32, int32_to_bytes
from shmspec.impl.readers import FORK_GENERATION
from shmspec.model.errors import WrongProcess

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    reads = None
    warp_reads = None

    def default_is_free_check(self, id, buf):
        if id in self._touched:
            return False
        reader_count = bytes_to_int32(buf[: self.flag_bytes])
        return reader_count >= self._writer_flag.get(id, 0) * self.n_readers

    def get(self, address, monotonic_id, signature=None, key=None):
        if self.is_writer:
            return self._writer_get(address, monotonic_id)
        cand = self._authenticate(address, monotonic_id, signature, key)
        with self._rlock:
            if FORK_GENERATION[0] != self._generation:
                raise WrongProcess("reader", self._pid, os.getpid())
            # BUG: no hazard pin; the read is counted in-band, and only the reader lock
            # (which vLLM's writer does not hold) orders the increment against reclaim.
            live, size = self._validate(cand, address, monotonic_id)
            region = self.ring_buffer.data_region
            offset = address % self.ring_buffer.data_buffer_size
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("payload_read")
            payload = bytes(region[offset + layout.OBJECT_HEADER : offset + size])
            live, _ = self._validate(cand, address, monotonic_id)
            if live:
                count_at = offset + layout.MD_SIZE
                with self._reader_lock:
                    live, _ = self._validate(cand, address, monotonic_id)
                    if yieldpoints.HOOK is not None:
                        yieldpoints.HOOK("counter_increment")
                    count = bytes_to_int32(region[count_at : count_at + self.flag_bytes])
                    region[count_at : count_at + self.flag_bytes] = int32_to_bytes(
                        min(count + 1, layout.INT32_MAX))
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("deserialize")
        return self.ser_de.deserialize(memoryview(payload))


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
