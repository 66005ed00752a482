"""Fault zero_copy_unleased: the writer ignores the readers' zero-copy leases.

Bug (a writer that predates ``get(copy=False)``, or an optimisation that
skips "rarely used" bookkeeping): readers record a lease on every chunk a
value of ``get(..., copy=False)`` still points into, but the writer's free
check reclaims a leased chunk once its reads are made, and its allocations
never look at the leases.  A value a reader keeps then changes under it when
the writer puts the next objects on those bytes.

Must be caught by: NRR (the faults campaign's reader_keeps_zero_copy: r1
keeps its value of h1 while the writer's puts wrap the ring; r1's kept value
reads another object's bytes).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def check_leases(self, phys_start, phys_end):
        return None  # BUG: leased bytes are written over


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _leased_by(self, id):
        return []  # BUG: a leased chunk is reclaimed like any other


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
