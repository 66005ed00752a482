"""Variant auth_late_check: a reader deserializes before checking the signature.

Bug: a reader's ``get`` optimistically deserializes the chunk the handle points
at straight from shared memory (impl's own ``_deserialize``), *before* the
handle's signature is verified (e.g. to overlap the HMAC with the
deserialization); the verification still runs afterwards (impl's ``get``) and
still rejects forged handles, so the caller sees the right error -- but
attacker-chosen bytes have already gone through the deserializer (vLLM's
default serde unpickles them).

Must be caught by: AUTH (a forged or altered handle is rejected before any
shared byte is read: the harness counts deserialize calls for rejected handles).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import signing

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
                self._deserialize(address, size)
        return super().get(address, monotonic_id, signature, key)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
