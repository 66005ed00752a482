"""Variant clear_resets_ids: ``clear()`` resets the monotonic ids to 0.

Bug: like vLLM < 0.32, the ring's ``apply_clear`` (what ``clear()`` applies)
sets ``id_start = id_end = 0`` (here: both absolute counters back to 0,
published to readers) instead of keeping ``id_end``.  The first put after the
clear gets handle ``(0, 0)`` again, so a reader still holding the pre-clear
handle ``(0, 0)`` finds a live chunk with the matching id (and the same
signature: generation 0) at that address and reads the new object.

Must be caught by: CLR (a handle issued before ``clear()`` never resolves to
another object after it).  The gate reports the state divergence
(CONFORMANCE) and the wrong object (NRR) first, excuses them, and finds CLR
in a later round.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmObjectStorage
from shmspec.impl import layout

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def apply_clear(self, plan):
        super().apply_clear(plan)
        # BUG: ids restart at 0 (vLLM < 0.32) instead of continuing.
        self._abs_start = self._abs_end = 0
        self.control[layout.CTL_ABS_START] = 0
        self.control[layout.CTL_ABS_END] = 0


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
