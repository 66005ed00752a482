"""Fault arena_release_on_view: a reader releases its slot when it takes the view.

Bug: the release is made at ``view`` (as if the message had been copied
out) instead of when the zero-copy view is dropped, so the writer may reuse
the slot under a view still in use: the arena's release-before-drop error
(docs/slots.md, ``early_release`` in the model).

Must be caught by: NRR
"""

from shmspec.impl import slots as _s


class SlotArena(_s.SlotArena):
    def view(self, stub):
        v = super().view(stub)
        self._release(stub.slot)
        return v
