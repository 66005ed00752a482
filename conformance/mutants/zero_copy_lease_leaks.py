"""Fault zero_copy_lease_leaks: a zero-copy lease is never given back.

Bug (a release path lost in a refactor: the value's finalizer still runs,
but the reader's lease entry is left in its slot): once a reader has taken a
zero-copy lease on a chunk, the writer keeps honouring it for as long as the
reader lives, after the value is long gone, so the oldest chunk is never
reclaimed again and every put that needs its bytes fails.

Must be caught by: PROG (the faults campaign's reader_keeps_zero_copy: r1
drops its only value of get(copy=False), and the writer's next puts still
fail, naming the leaked lease).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle
from shmspec.impl import zerocopy as _zerocopy

SHMSPEC_PROFILE = "impl"


class _LeakyLeases(_zerocopy.ReaderLeases):
    def _release_one(self, cand):
        return None  # BUG: the entry stays in the slot


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    pass


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _shared_get(self, cand, address, monotonic_id):
        if self._leases is None:
            self._leases = _LeakyLeases(self.ring_buffer.reader_table, self._slot, self)
        return super()._shared_get(cand, address, monotonic_id)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
