"""impl with the strict CLR contract: clear() opens no drain window, so no
handle issued before a clear resolves after it.  Declares the model profile
``impl-strict`` (the contract a store that chooses it is judged by)."""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, PickleSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl-strict"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _apply_intent(self, intent):
        super()._apply_intent(intent)
        if intent[0] == "clear":  # close the window the clear opened
            ring = self.ring_buffer
            ring._set_drain(ring._abs_end, ring._abs_end, 0)


__all__ = ["ObjectSerde", "PickleSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage",
           "SingleWriterShmRingBuffer"]
