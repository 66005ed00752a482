"""Fault drain_ignores_hw: the drain check forgets which bytes were reused since the clear.

Bug: a reader accepts a handle dropped by the latest ``clear()`` when its
allocation lies in the drain range ``[drain_lo, drain_hi)``, but no longer
compares its address with ``drain_hw`` (the allocations since the clear cover
bytes ``[0, drain_hw)``: a chunk below it has been, or is being, overwritten).
Only the in-band header then stands between a pre-clear handle and the bytes
now at its address: a new chunk's payload that carries the old ``[id][size]``
there is taken for the original chunk, and a pre-clear handle validated while
the writer is writing over it reads the new object's bytes (the writer waits
for pins only after it has published ``drain_hw``).  (``_validate`` below is
impl's with only the ``drain_hw`` test removed.)

Must be caught by: NRR (the adversarial campaign's fake chunks carrying a
pre-clear id where its handle points: the reader returns the FORGED object).
CLR (a pre-clear handle resolved to another object) is found in the next round.
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
        live = ctl[layout.CTL_ABS_START] <= cand < ctl[layout.CTL_ABS_END]
        if not live:
            window = ring.drain_window()
            if window is None or not window[0] <= cand < window[1]:  # BUG: address % B >= drain_hw not checked
                raise StaleHandle(address, monotonic_id)
        return live, self._check_header(address, monotonic_id)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
