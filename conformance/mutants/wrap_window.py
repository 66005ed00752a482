"""Variant wrap_window: readers judge liveness by an id window that ignores wraparound.

Bug: a reader's liveness check also requires ``monotonic_id_start <= id <
monotonic_id_end`` on the 31-bit ids (as published), instead of comparing
absolute counters only.  Across the id wraparound (``id_start = 2**31 - 2``,
``id_end = 1``) the window is empty, so every live handle is taken for a
dead one and, not being a drain chunk either, is rejected as stale.
(``_validate`` below is impl's with only that test added to ``live``.)

Must be caught by: PROM (the boundary campaign's id-wrap program: a live
handle a reader was promised gives StaleHandle; CONFORMANCE sees it too); the
random campaigns never reach 2**31 ids.
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
        live = (ctl[layout.CTL_ABS_START] <= cand < ctl[layout.CTL_ABS_END]
                and ring.monotonic_id_start <= monotonic_id < ring.monotonic_id_end)  # BUG: no wraparound
        if not live:
            window = ring.drain_window()
            if window is None or not (window[0] <= cand < window[1]
                                      and address % ring.data_buffer_size >= window[2]):
                raise StaleHandle(address, monotonic_id)
        return live, self._check_header(address, monotonic_id)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
