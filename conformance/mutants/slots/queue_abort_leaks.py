"""Fault queue_abort_leaks: a reader's slot stays held when its caller raises.

Bug: the release follows the ``yield`` with no ``finally``, so a caller that
raises inside ``acquire_read`` leaves the chunk unreleased and the writer
waits on it for ever (vLLM's #45224 before its fix).

Must be caught by: PROG
"""

from contextlib import contextmanager

from shmspec.impl import slots as _s


class SlotQueue(_s.SlotQueue):
    @contextmanager
    def acquire_read(self, timeout=None):
        self._wait(self._readable, f"reader {self.reader_rank}", timeout)
        i = self.current_idx
        with self.buf[i * self.slot_bytes:(i + 1) * self.slot_bytes] as chunk, chunk.toreadonly() as ro:
            yield ro
        self._release(i)  # BUG: skipped when the caller raised
        self.current_idx = (i + 1) % self.n_slots
