"""Fault arena_oversize_truncates: a message over the slot size is written truncated.

Bug: instead of falling back, the writer cuts the message to ``slot_bytes``
and hands out a stub of the cut size: the reader gets a prefix.

Must be caught by: FALLBACK
"""

from shmspec.impl import slots as _s


class SlotArena(_s.SlotArena):
    def write(self, data):
        return super().write(memoryview(data).cast("B")[:self.slot_bytes])
