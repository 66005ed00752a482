"""Fault touch_unsigned: a reader's ``touch`` accepts unsigned or forged handles.

Bug: ``get`` checks the handle's signature, but the reader-side ``touch``
(vLLM >= 0.32: validate a handle without reading it) was written separately and
only checks the fields, the control block and the chunk header; a missing,
flipped or wrong-key signature is accepted, so a client learns which forged
handles are live.

Must be caught by: AUTH (a forged or altered handle is rejected; the auth
campaign's forged touches).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import signing
from shmspec.impl.layout import candidate_abs

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def touch(self, key, address=0, monotonic_id=0, signature=None):
        if self.is_writer:
            return super().touch(key, address, monotonic_id, signature)
        signing.validate_handle_fields(address, monotonic_id, None, None)
        cand = candidate_abs(monotonic_id, self.ring_buffer.published_abs_end())  # BUG: signature never checked
        self._validate(cand, address, monotonic_id)
        self._validate(cand, address, monotonic_id)
        return None


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
