"""Fault aggregate_reads: reclaim counts reads in aggregate, not per reader.

Bug: ``default_is_free_check`` frees a chunk once the reads of all readers
add up to ``writer_flag[id] * n_readers`` (vLLM's threshold over its one
in-band ``reader_count``), instead of once every reader has read it
``writer_flag[id]`` times.  Under the read-once protocol the two agree; but
a reader that reads a handle twice (an n>1 fan-out of one request) stands in
for another reader, the chunk is reclaimed and its memory reused before
that other reader has made its promised read, which then fails.

Must be caught by: PROM (the protocol campaign: a reader re-reads a handle,
the chunk is reclaimed and reused, the drain's owed read by the other reader
fails).  RC per reader and CONFORMANCE (impl's model counts per reader) see
the early reclaim too.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def default_is_free_check(self, id, buf):
        if id in self._touched:
            return False
        promised = self._writer_flag.get(id, 0)
        reads = self.ring_buffer.reads_since_alloc(id)
        return not reads or sum(reads) >= promised * len(reads)  # BUG: aggregate, as vLLM's reader_count


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
