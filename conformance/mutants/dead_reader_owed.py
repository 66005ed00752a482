"""Fault dead_reader_owed: a dead reader's promised reads are never forfeited.

Bug: the writer's free check asks only whether every reader slot has made
its promised reads of the oldest chunk, and no longer whether the slots
that have not are still held (``ReaderTable.alive``).  A reader killed
inside a get, or between two, then owes its reads for ever: once the ring
has wrapped every put raises ``OutOfSpace`` until ``clear()`` or a
replacement reader makes the reads (vLLM's behaviour, and impl's before
its reader leases).

Must be caught by: LEASE (the faults campaign: r1 is killed at deserialize
while re-reading h1; the writer's puts must wrap the ring while r2 reads).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    pass


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def default_is_free_check(self, id, buf):
        if id in self._touched:
            return False
        promised = self._writer_flag.get(id, 0)
        reads = self.ring_buffer.reads_since_alloc(id)
        return not reads or min(reads) >= promised  # BUG: a gone reader's slot still owes its reads


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
