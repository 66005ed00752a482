"""Variant disj_overlap: the space check ignores the skipped tail on wrap-around.

Bug: in ``plan`` (what ``reserve_buf`` / ``allocate_buf`` allocate by), when
the chunk does not fit at the tail and ``end`` jumps to the next multiple of
``B``, the "enough room?" test still uses the old ``end`` (``end + n - start
> B``) instead of the new one.  The chunk is then placed at the front of the
segment on top of the oldest live chunk(s).  (``plan`` below is impl's with
only that line changed.)

Must be caught by: DISJ (live chunks never overlap).  The same step is also an
OOM divergence (the model says ``MemoryError``), which the gate reports first
and excuses; DISJ follows in the next round.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage
from shmspec.impl import layout
from shmspec.impl.ring import _OOM_MESSAGE
from shmspec.model.errors import OutOfSpace

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def plan(self, size):
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"Size must be a positive int, got {size!r}")
        B = self.data_buffer_size
        n = size + self.MD_SIZE
        if n > layout.INT32_MAX:
            raise OutOfSpace(f"Chunk of {n} bytes does not fit the int32 size field")
        if self._abs_end - self._abs_start >= min(self.max_chunks, self.ID_MAX):
            raise OutOfSpace(f"{self._abs_end - self._abs_start} chunks are live, the most this ring holds "
                             f"(max_chunks={self.max_chunks})")
        end = self.data_buffer_end
        new_end = (end // B + 1) * B if end % B + n > B else end
        if end + n - self.data_buffer_start > B:  # BUG: must test new_end, not end
            raise OutOfSpace(_OOM_MESSAGE)
        return new_end, n, self._abs_end


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
