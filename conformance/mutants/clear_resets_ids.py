"""Variant clear_resets_ids: ``clear()`` resets the monotonic ids to 0.

Bug: like vLLM < 0.32, the ring's ``clear()`` sets ``id_start = id_end = 0``
(here: both absolute counters back to 0, published to readers) instead of
keeping ``id_end``.  The first put after the clear gets handle ``(0, 0)`` again,
so a reader still holding the pre-clear handle ``(0, 0)`` finds a live chunk
with the matching id at that address and reads the new object.

Must be caught by: CLR (a handle issued before ``clear()`` never resolves after
it).  The gate reports the state divergence (CONFORMANCE) and the wrong object
(NRR) first, excuses them, and finds CLR in a later round.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage
from shmspec.impl import layout

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def clear(self):
        super().clear()
        # BUG: ids restart at 0 (vLLM < 0.32) instead of continuing.
        self._abs_start = self._abs_end = 0
        self._ctl[layout.SLOT_ABS_START] = 0
        self._ctl[layout.SLOT_ABS_END] = 0


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
