"""Fault writer_gets_uncounted: a writer built with the readers' lock reads without standing in for its readers.

Bug: vLLM 0.33.0's writer, when it is given the readers' lock, counts its
own gets (``reader_count += 1``), so ``n_readers`` gets by the writer make
a chunk reclaimable, and vLLM's own store tests depend on it: they read each
chunk through the writer, then fill the ring again.  This writer counts its
gets (``stand_in_reads`` reports them) but the reclaim check forgets them:
it frees a chunk only when every reader slot has read it (impl before issue
28 item 6), so every chunk stays owed to readers that never come and the
ring fills up for good.  Without the readers' lock a writer's get is not
counted in either store, so only the writer-lock construction shows it.

Must be caught by: OOM (the lockstep campaign with the writer given the
readers' lock: a put the model fits after the writer's gets freed the
oldest chunk is refused with ``OutOfSpace``).
Construction: writer-lock
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _owed(self, id):
        promised = self._writer_flag.get(id, 0)
        reads = self.ring_buffer.reads_since_alloc(id)
        if not reads or min(reads) >= promised:
            return []
        return [r for r, n in enumerate(reads) if n < promised]  # BUG: the writer's counted gets make up nothing


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
