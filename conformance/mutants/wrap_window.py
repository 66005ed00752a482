"""Variant wrap_window: readers judge liveness by an id window that ignores wraparound.

Bug: a reader's liveness check is ``monotonic_id_start <= id < monotonic_id_end``
on the 31-bit ids (as published), instead of comparing absolute counters.
Across the id wraparound (``id_start = 2**31 - 2``, ``id_end = 1``) the window
is empty, so every live handle is rejected as stale.  (impl's store with only
that check added.)

Must be caught by: CONFORMANCE (the boundary campaign's id-wrap program: a
live handle gives StaleHandle); the random campaigns never reach 2**31 ids.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.model.errors import StaleHandle

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _check_live(self, cand, abs_end, address, monotonic_id):
        rb = self.ring_buffer
        if not rb.monotonic_id_start <= monotonic_id < rb.monotonic_id_end:  # BUG: no wraparound
            raise StaleHandle(address, monotonic_id)
        super()._check_live(cand, abs_end, address, monotonic_id)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
