"""Fault fit_tail_strict: off-by-one at the wrap, a chunk that exactly fills the tail is moved.

Bug: in ``reserve_buf`` the "does the chunk fit at the tail?" test is
``end % B + n >= B`` instead of ``> B``, so a chunk that would end exactly at
the end of the segment is treated as not fitting: ``end`` jumps to the next
multiple of ``B`` and the chunk goes to the front, wasting the tail and, when
the front is still occupied, failing with ``MemoryError`` although the chunk
fits.  (``reserve_buf`` below is impl's with only that comparison changed.)

Must be caught by: OOM (put raises ``MemoryError`` exactly when, after FIFO
reclaim, no contiguous room exists): the boundary campaign's tail-exact program.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage
from shmspec.impl import layout, yieldpoints
from shmspec.impl.layout import int32_to_bytes
from shmspec.impl.ring import _OOM_MESSAGE
from shmspec.model.errors import OutOfSpace

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def reserve_buf(self, size):
        self._require_writer("allocate buffers")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"Size must be a positive int, got {size!r}")
        data = self.data_region
        B = self.data_buffer_size
        n = size + self.MD_SIZE
        if n > layout.INT32_MAX:
            raise OutOfSpace(f"Chunk of {n} bytes does not fit the int32 size field")
        if self._abs_end - self._abs_start >= self.ID_MAX:
            raise OutOfSpace("Every monotonic id is held by a live chunk")
        end = self.data_buffer_end
        if end % B + n >= B:  # BUG: a chunk ending exactly at B fits
            new_end = (end // B + 1) * B
        else:
            new_end = end
        if new_end + n - self.data_buffer_start > B:
            raise OutOfSpace(_OOM_MESSAGE)
        monotonic_id = self._abs_end % self.ID_MAX
        header = int32_to_bytes(monotonic_id) + int32_to_bytes(n)
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("header_write")
        offset = new_end % B
        data[offset : offset + self.MD_SIZE] = header
        self._pending = (new_end, monotonic_id, end, self._abs_end)
        self.metadata[monotonic_id] = new_end
        self._sizes[monotonic_id] = n
        self.data_buffer_end = new_end + n
        self._abs_end += 1
        return new_end, monotonic_id


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
