"""Fault arena_fallback_claims: the writer claims a slot before checking it is free.

Bug: each probe clears ``written`` (the claim) first and checks the readers'
flags after; a busy slot is left unwritten when the writer moves on, so a
fallback changes the arena, and its readers lose the message.

Must be caught by: FALLBACK
"""

from shmspec.impl import slots as _s


class SlotArena(_s.SlotArena):
    def write(self, data):
        busy = [i for i in range(self.n_slots) if not self._free(i)]
        stub = super().write(data)
        if stub is None:
            for i in busy:
                self._set_flag(i, 0, 0)  # BUG: claimed while probing, never restored
        return stub
