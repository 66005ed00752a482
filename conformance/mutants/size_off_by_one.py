"""Variant size_off_by_one: the size check forgets the 4-byte reader count.

Bug: ``put`` compares ``len(metadata) + len(data)`` with ``max_object_size``
instead of ``4 + len(metadata) + len(data)``, so objects of up to
``max_object_size + 4`` bytes (as the store accounts them) are accepted.
(``put`` below is impl's, with only that comparison changed.)

Must be caught by: SIZE (an object over ``max_object_size`` is rejected, and
nothing changes).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import layout, yieldpoints
from shmspec.impl.storage import _ZERO_COUNT, _check_serialized
from shmspec.model.errors import BadHandleFields, DuplicateKey, ObjectTooLarge

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def put(self, key, value):
        nested = self._open_op("put objects")
        with self._wlock:
            self._begin(nested)
            if not isinstance(key, str):
                raise BadHandleFields(f"key must be a str, got {type(key).__name__}")
            if key in self._key_index:
                raise DuplicateKey(key)
            data, data_nbytes, metadata, md_nbytes = self.ser_de.serialize(value)
            pieces, md_view = _check_serialized(data, data_nbytes, metadata, md_nbytes)
            object_nbytes = self.flag_bytes + md_nbytes + data_nbytes
            if md_nbytes + data_nbytes > self.max_object_size:  # BUG: flag_bytes not counted
                raise ObjectTooLarge(object_nbytes, self.max_object_size)
            ring = self.ring_buffer
            try:
                address, monotonic_id = ring.reserve_buf(object_nbytes)
            except MemoryError:
                self._free_unused()
                address, monotonic_id = ring.reserve_buf(object_nbytes)
            pending = ring._pending
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("payload_write")
            region = ring.data_region
            pos = address % ring.data_buffer_size + layout.MD_SIZE
            region[pos : pos + self.flag_bytes] = _ZERO_COUNT
            pos += self.flag_bytes
            region[pos : pos + md_nbytes] = md_view
            pos += md_nbytes
            for piece in pieces:
                region[pos : pos + piece.nbytes] = piece
                pos += piece.nbytes
            self._do(("put", key, pending))
            return address, monotonic_id


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
