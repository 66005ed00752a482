"""Fault window_lower_bound: a reader's liveness window has the wrong lower bound.

Bug: the liveness check compares the handle's absolute counter with the
id-space window ``[abs_end - 2**31, abs_end)`` (the bound used to *decode*
the 31-bit id) instead of the live window ``[abs_start, abs_end)``.  Every
freed or cleared handle then passes as live (the drain check, with its
``drain_hw``, is never consulted), and only the in-band header (``[id][size]``
at ``address % B``) stands between a stale handle and whatever bytes now lie
there -- vLLM's weakness again.  (``_validate`` below is impl's with only the
lower bound changed.)

Must be caught by: NRR (the adversarial campaign's fake chunks carrying the
stale id are returned).  CONFORMANCE and CLR are expected too.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import layout, yieldpoints
from shmspec.model.errors import StaleHandle

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _validate(self, cand, address, monotonic_id):
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("reader_check")
        ring = self.ring_buffer
        ctl = ring.control
        abs_end = ctl[layout.CTL_ABS_END]
        live = abs_end - ring.ID_MAX <= cand < abs_end  # BUG: not ctl[CTL_ABS_START] <= cand
        if not live:
            window = ring.drain_window()
            if window is None or not (window[0] <= cand < window[1]
                                      and address % ring.data_buffer_size >= window[2]):
                raise StaleHandle(address, monotonic_id)
        return live, self._check_header(address, monotonic_id)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
