"""Fault arena_probe_one: the writer probes only the slot after its last write.

Bug: the arena falls back as soon as its next slot is busy, although another
slot is free (a ring's rule applied to an arena whose writer must probe every
slot): the caller pays the pickle path with a slot to spare.

Must be caught by: PROG
"""

from shmspec.impl import slots as _s


class SlotArena(_s.SlotArena):
    def write(self, data):
        if not self._free(self._next):
            self.fallbacks += 1
            return None
        return super().write(data)
