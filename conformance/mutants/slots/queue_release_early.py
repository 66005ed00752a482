"""Fault queue_release_early: a reader releases its slot when it enters the block.

Bug: ``acquire_read`` sets the reader's flag before yielding the chunk, so
the writer may rewrite it while the caller is still reading.

Must be caught by: NRR
"""

from contextlib import contextmanager

from shmspec.impl import slots as _s


class SlotQueue(_s.SlotQueue):
    @contextmanager
    def acquire_read(self, timeout=None):
        self._wait(self._readable, f"reader {self.reader_rank}", timeout)
        i = self.current_idx
        self._release(i)  # BUG: before the caller has read
        try:
            with self.buf[i * self.slot_bytes:(i + 1) * self.slot_bytes] as chunk, chunk.toreadonly() as ro:
                yield ro
        finally:
            self.current_idx = (i + 1) % self.n_slots
