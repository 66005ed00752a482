"""Fault writer_unfenced: the writer reuses memory without honouring the readers' pins.

Bug (the writer side of a missing protection, v2's counterpart of "reclaims
without the reader lock"): before it writes a new allocation, the ring's
``prepare_reuse`` still publishes what the allocation kills (the drain
window) but no longer fences, scans the readers' hazard pins and waits for
those on chunks that are no longer live ("readers are fast, and the scan costs
a pass over every slot").  A reader that validated a chunk and is still
deserializing it straight from shared memory (a pre-clear handle draining
after a ``clear()``, or a re-read of a chunk every reader has acknowledged,
which the writer may reclaim) then reads the bytes of the object the writer
is putting there.  (``prepare_reuse`` below is impl's
without the fence, the scan and the wait.)

Must be caught by: NRR (the preemption campaign pauses a reader before its
deserialization while the writer clears or reclaims and reuses the slot: the
reader deserializes, and returns, another object's bytes).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def prepare_reuse(self, abs_counter, phys_end):
        lo, hi, hw = self._drain_words()
        if lo < hi:
            new_lo = max(lo, abs_counter - self.max_chunks + 1)
            new_hw = max(hw, phys_end)
            if new_lo >= hi:
                new_lo, new_hw = hi, 0
            if (new_lo, new_hw) != (lo, hw):
                self._set_drain(new_lo, hi, new_hw)
        table = self.reader_table
        if table is None:
            return ()
        # BUG: no fence(), no pin scan, no wait for readers still reading a chunk that is no longer live
        return table.acks(abs_counter)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
