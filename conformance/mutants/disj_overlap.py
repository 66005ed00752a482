"""Variant disj_overlap: the space check ignores the skipped tail on wrap-around.

Bug: in ``reserve_buf`` (``allocate_buf``), when the chunk does not fit at the
tail and ``end`` jumps to the next multiple of ``B``, the "enough room?" test
still uses the old ``end`` (``end + n - start > B``) instead of the new one.
The chunk is then placed at the front of the segment on top of the oldest
live chunk(s).  (``reserve_buf`` below is impl's with only that line changed.)

Must be caught by: DISJ (live chunks never overlap).  The same step is also an
OOM divergence (the model says ``MemoryError``), which the gate reports first
and excuses; DISJ follows in the next round.
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
        if end % B + n > B:
            new_end = (end // B + 1) * B
        else:
            new_end = end
        if end + n - self.data_buffer_start > B:  # BUG: must test new_end, not end
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
