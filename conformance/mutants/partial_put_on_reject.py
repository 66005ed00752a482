"""Fault partial_put_on_reject: a rejected oversize put leaves its chunk behind.

Bug: ``put`` allocates the chunk first ("allocate, then fill": reserved and
committed, because impl's ``_settle`` would drop a mere reservation) and only
then checks the object against ``max_object_size``; the ``ObjectTooLarge``
raised afterwards does not roll the allocation back.  The half-made chunk
(header written, no payload, no key) stays in the ring and takes space and an
id.

Must be caught by: SIZE (an object over ``max_object_size`` is rejected, and
nothing changes).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl.storage import _check_serialized
from shmspec.model.errors import ObjectTooLarge

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def put(self, key, value):
        if self.is_writer and isinstance(key, str) and key not in self.key_index:
            data, data_nbytes, metadata, md_nbytes = self.ser_de.serialize(value)
            _check_serialized(data, data_nbytes, metadata, md_nbytes)
            object_nbytes = self.flag_bytes + md_nbytes + data_nbytes
            if object_nbytes > self.max_object_size:
                try:  # BUG: allocated before the size check, never rolled back
                    self.ring_buffer.allocate_buf(object_nbytes)
                except MemoryError:
                    pass
                raise ObjectTooLarge(object_nbytes, self.max_object_size)
        return super().put(key, value)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
