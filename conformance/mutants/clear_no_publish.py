"""Fault clear_no_publish: ``clear()`` does not publish the new window to readers.

Bug: the ring's ``apply_clear`` (what ``clear()`` applies) opens the drain
window and sets the writer's ``abs_start = abs_end``, but forgets to store
``abs_start`` into the control block; readers keep the pre-clear window (every
dropped chunk still looks *live*) until the next reclaim publishes it.  A
pre-clear handle then skips the drain check (whose ``drain_hw`` says which
bytes were reused since the clear) and is validated by its in-band header
alone: once a new chunk's payload carries that header where the handle
points, the handle resolves to it.  (``apply_clear`` below is impl's with only
the publication removed.)

Must be caught by: CLR (a handle issued before ``clear()`` never resolves to
another object after it; the adversarial campaign's fake chunks carrying the
pre-clear id).  The same step returns the forged object, so NRR is reported
first and excused, and CLR follows in the next round.  CONFORMANCE comes
earlier still (the stale campaign: a handle whose drain a second ``clear()``
ended still resolves, to its own object).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def apply_clear(self, plan):
        lo, hi = plan
        self._set_drain(lo, hi, 0)
        self._abs_start = hi  # BUG: self._publish_start() missing
        self.metadata.clear()
        self._sizes.clear()
        self._base.clear()
        self._pending = None
        self.data_buffer_start = 0
        self.data_buffer_end = 0


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
