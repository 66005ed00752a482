"""Variant auth_late_check: a reader deserializes before checking the signature.

Bug: a reader's ``get`` optimistically reads the chunk the handle points at and
deserializes it *before* the handle's signature is verified (e.g. to overlap
the HMAC with the copy); the verification still runs afterwards and still
rejects forged handles, so the caller sees the right error -- but attacker-chosen
bytes have already gone through the deserializer (vLLM's default serde
unpickles them).

Must be caught by: AUTH (a forged or altered handle is rejected before any
shared byte is read: the harness counts deserialize calls for rejected handles).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import layout, signing

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def get(self, address, monotonic_id, signature=None, key=None):
        if not self.is_writer:
            try:
                signing.validate_handle_fields(address, monotonic_id, signature, key)
                size = self._check_header(address, monotonic_id)
            except ValueError:
                pass  # let the checked path below raise the proper error
            else:
                # BUG: shared bytes are deserialized before the signature is checked.
                offset = address % self.ring_buffer.data_buffer_size
                region = self.ring_buffer.data_region
                self.ser_de.deserialize(
                    memoryview(bytes(region[offset + layout.OBJECT_HEADER : offset + size]))
                )
        return super().get(address, monotonic_id, signature, key)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
