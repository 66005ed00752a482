"""Fault queue_no_wait: the queue's writer does not wait for its slot's readers.

Bug: ``acquire_write`` claims its next slot without checking that every
reader released it (a ring that trusts its size to keep the writer behind).

Must be caught by: NRR
"""

from shmspec.impl import slots as _s


class SlotQueue(_s.SlotQueue):
    def _free(self, i):
        return True
