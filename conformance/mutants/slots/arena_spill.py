"""Fault arena_spill: the copy writes one byte past the message.

Bug: the writer copies ``nbytes + 1`` bytes (a length that counts a
terminator), so a message of the full slot size spills its last byte into
the next slot (or the first metadata row).

Must be caught by: DISJ
"""

from shmspec.impl import slots as _s


class SlotArena(_s.SlotArena):
    def write(self, data):
        src = bytes(memoryview(data).cast("B"))
        if len(src) > self.slot_bytes:
            return super().write(src)
        stub = super().write(src)
        if stub is not None:
            end = stub.slot * self.slot_bytes + len(src)
            self.buf[end] = 0xA5  # BUG: the extra byte lands past the message
        return stub
