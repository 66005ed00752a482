"""Fault arena_no_reset: publishing a slot does not reset the readers' flags.

Bug: the writer sets ``written`` but leaves each reader's ``done`` flag as
the previous message left it (all set), so the slot looks free again the
moment it is published, and the next write overwrites a message no reader
has released.

Must be caught by: NRR
"""

from shmspec.impl import slots as _s


class SlotArena(_s.SlotArena):
    def _publish(self, i):
        _s.fence()
        self._set_flag(i, 0, 1)
        _s.fence()
