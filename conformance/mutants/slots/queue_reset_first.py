"""Fault queue_reset_first: the writer resets the readers' flags before the copy, without a claim.

Bug: ``acquire_write`` neither clears ``written`` nor waits for the copy to
reset the flags: it resets them at entry.  A reader that already read the
slot's old message sees it written and not read, and reads it again mid-copy
(the model's ``no_claim`` + ``reset_first``: docs/slots.md).

Must be caught by: FIFO
"""

from contextlib import contextmanager

from shmspec.impl import slots as _s


class SlotQueue(_s.SlotQueue):
    @contextmanager
    def acquire_write(self, timeout=None):
        self._wait(self._free, "writer", timeout)
        i = self.current_idx
        for r in range(self.n_reader):  # BUG: reset first, and no claim
            self._set_flag(i, 1 + r, 0)
        _s.fence()
        with self.buf[i * self.slot_bytes:(i + 1) * self.slot_bytes] as chunk:
            yield chunk
        self._set_flag(i, 0, 1)
        _s.fence()
        self.current_idx = (i + 1) % self.n_slots
