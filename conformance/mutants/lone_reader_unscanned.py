"""Fault lone_reader_unscanned: with a single reader, the writer reuses memory without scanning its pin.

Bug (an optimisation that holds only in the construction its author tested):
the ring's ``prepare_reuse`` skips the fence, the hazard-pin scan and the wait
when the store has one reader ("a chunk is reclaimed only once every reader
acknowledged it; with one reader, that reader is done with it").  It is not:
the lone reader may be re-reading a chunk it already acknowledged (an n > 1
fan-out reads one handle twice), or draining a pre-clear handle after
``clear()``, straight from shared memory, while the writer reclaims the chunk
and writes the next object there.  With two readers or more impl's protocol is
intact, so a gate that runs only two-reader stores passes this fault.
(``prepare_reuse`` below is impl's, with the one-reader short cut.)

Must be caught by: NRR (the constructions campaign's one-reader construction:
its preemption sweep pauses the reader before its deserialization while the
writer clears or reclaims and reuses the slot).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def prepare_reuse(self, abs_counter, phys_end):
        table = self.reader_table
        if table is None or table.n_readers > 1:
            return super().prepare_reuse(abs_counter, phys_end)
        lo, hi, hw = self._drain or self._drain_words()
        if lo < hi and phys_end > hw:
            if phys_end >= self.data_buffer_size:
                self._set_drain(hi, hi, 0)
            else:
                self._set_drain(lo, hi, phys_end)
        # BUG: one reader, so no fence(), no pin scan, no wait for a read of a chunk that is no longer live
        return table.acks(abs_counter)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
