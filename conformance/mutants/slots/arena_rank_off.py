"""Fault arena_rank_off: a reader releases with its rank off by one.

Bug: the reader sets flag ``reader_rank + 1`` counted from the first reader
flag (``1 + reader_rank + 1``, wrapping to the first reader), i.e. another
reader's flag: its own stays unset and the other's release is forged.

Must be caught by: CONFORMANCE
"""

from shmspec.impl import slots as _s


class SlotArena(_s.SlotArena):
    def flush_releases(self):
        done = []
        while self._pending:
            slot, gen = self._pending.pop()
            if self.generation(slot) == gen and self._flag(slot, 0):
                self._set_flag(slot, 1 + (self.reader_rank + 1) % self.n_reader, 1)
                done.append(slot)
        _s.fence()
        return done
