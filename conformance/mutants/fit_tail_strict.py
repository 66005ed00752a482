"""Fault fit_tail_strict: off-by-one at the wrap, a chunk that exactly fills the tail is moved.

Bug: in ``plan`` (what ``reserve_buf`` allocates by) the "does the chunk fit
at the tail?" test is ``end % B + n >= B`` instead of ``> B``, so a chunk
that would end exactly at the end of the segment is treated as not fitting:
``end`` jumps to the next multiple of ``B`` and the chunk goes to the front,
wasting the tail and, when the front is still occupied, failing with
``MemoryError`` although the chunk fits.  (``plan`` below is impl's with only
that comparison changed.)

Must be caught by: OOM (put raises ``MemoryError`` exactly when, after FIFO
reclaim, no contiguous room exists): the random campaigns when a put happens
to end at ``B``, and the boundary campaign every run (its full-ring program;
tail-exact shows the misplaced chunk as CONFORMANCE).
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
        new_end = (end // B + 1) * B if end % B + n >= B else end  # BUG: a chunk ending exactly at B fits
        if new_end + n - self.data_buffer_start > B:
            raise OutOfSpace(_OOM_MESSAGE)
        return new_end, n, self._abs_end


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
