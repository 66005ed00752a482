"""Fault arena_any_reader: a slot counts as free once any one reader released it.

Bug: the writer's free check reads ``any`` of the readers' flags where the
protocol needs ``all`` of them (vLLM compares the sum with ``n_reader``; a
``>= 1`` there looks like a harmless simplification).  A slow reader's
message is overwritten while it has not even viewed it.

Must be caught by: NRR
"""

from shmspec.impl import slots as _s


class SlotArena(_s.SlotArena):
    def _free(self, i):
        _s.fence()
        return not self._flag(i, 0) or any(self._flag(i, 1 + r) for r in range(self.n_reader))
