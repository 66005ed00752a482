"""Fault arena_flush_all: a flush releases every slot the reader has viewed.

Bug: the reader keeps a list of the slots it viewed and a flush releases
all of them, held or dropped, instead of the ones whose views were dropped.

Must be caught by: NRR
"""

from shmspec.impl import slots as _s


class SlotArena(_s.SlotArena):
    def view(self, stub):
        self.__dict__.setdefault("_viewed", set()).add(stub.slot)
        return super().view(stub)

    def flush_releases(self):
        done = super().flush_releases()
        for slot in sorted(self.__dict__.get("_viewed", ())):
            if self._flag(slot, 0):
                self._release(slot)
        self.__dict__.get("_viewed", set()).clear()
        return done
