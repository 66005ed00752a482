"""Fault put_not_exception_safe: ``put`` commits before it writes the payload, with no intent and no rollback.

Bug: ``put`` records the new object -- ``writer_flag``, ``key_index``,
``id_index``, the ring's metadata and pointers, and the published ``abs_end``
-- as soon as the chunk is reserved, and writes the payload afterwards (the
segment-v1 order, minus its rollback), without staging the change as an
intent for ``_settle``.  An exception while the payload is written (an
asynchronous ``KeyboardInterrupt``, a serde piece that cannot be copied, ...)
leaves the key cached and published on a chunk whose payload is partly the
previous occupant's bytes: ``get_cached`` hands the handle out, and readers
return a torn object.  impl stages the put as an intent, writes every byte
first and commits in one idempotent step.

Must be caught by: EXC (the exception campaign raises at the put's
``payload_write`` yield point: afterwards the key is cached on a chunk that
does not hold the object put).
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
            if object_nbytes > self.max_object_size:
                raise ObjectTooLarge(object_nbytes, self.max_object_size)
            ring = self.ring_buffer
            try:
                address, monotonic_id = ring.reserve_buf(object_nbytes)
            except MemoryError:
                self._free_unused()
                address, monotonic_id = ring.reserve_buf(object_nbytes)
            # BUG: committed (indexes, ring, abs_end) before the payload is written; no intent, no rollback
            self._writer_flag[monotonic_id] = 1
            self._key_index[key] = (address, monotonic_id)
            self._id_index[monotonic_id] = key
            ring.commit_buf(ring._pending)
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
            return address, monotonic_id


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
