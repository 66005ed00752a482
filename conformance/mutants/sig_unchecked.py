"""Fault sig_unchecked: a reader's ``get`` never verifies the handle's signature.

Bug: the HMAC check is skipped on the read path (e.g. disabled "for speed"
behind a flag that defaults off); fields are still validated and the handle
still has to be live, so any handle a client can guess or alter (another key,
a flipped signature byte, an equivalent address) is served.  (``_authenticate``
below is impl's without ``require_signature`` / ``check_signature``.)

Must be caught by: AUTH (a forged or altered handle is rejected: the auth
campaign's forged gets are accepted).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import signing
from shmspec.impl.layout import candidate_abs

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _authenticate(self, address, monotonic_id, signature, key):
        signing.validate_handle_fields(address, monotonic_id, signature, key)
        # BUG: require_signature / check_signature skipped
        return candidate_abs(monotonic_id, self.ring_buffer.published_abs_end())


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
