"""Fault queue_no_advance: a reader does not move on after a read.

Bug: ``acquire_read`` releases the chunk but leaves ``current_idx`` where it
was, so the reader waits on a chunk it already read while the next one
holds its next message.

Must be caught by: PROG
"""

from contextlib import contextmanager

from shmspec.impl import slots as _s


class SlotQueue(_s.SlotQueue):
    @contextmanager
    def acquire_read(self, timeout=None):
        self._wait(self._readable, f"reader {self.reader_rank}", timeout)
        i = self.current_idx
        try:
            with self.buf[i * self.slot_bytes:(i + 1) * self.slot_bytes] as chunk, chunk.toreadonly() as ro:
                yield ro
        finally:
            self._release(i)  # BUG: current_idx not advanced
