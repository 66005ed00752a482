"""Fault window_lower_bound: a reader's liveness window has the wrong lower bound.

Bug: the liveness check compares the handle's absolute counter with the
id-space window ``[abs_end - 2**31, abs_end)`` (the bound used to *decode*
the 31-bit id) instead of the live window ``[abs_start, abs_end)``.  Every
freed or cleared handle then passes as live, and only the in-band header
(``[id][size]`` at ``address % B``) stands between a stale handle and
whatever bytes now lie there -- vLLM's weakness again.

Must be caught by: NRR (the adversarial campaign's fake chunks carrying the
stale id are returned).  CONFORMANCE and CLR are expected too.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import yieldpoints
from shmspec.model.errors import StaleHandle

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _check_live(self, cand, abs_end, address, monotonic_id):
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("reader_check")
        if not (abs_end - self.ring_buffer.ID_MAX <= cand < abs_end):  # BUG: not published_abs_start()
            raise StaleHandle(address, monotonic_id)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
