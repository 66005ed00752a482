"""impl whose second reader's acknowledgements are lost: a get by the reader
in slot 1 returns the object but leaves that reader's ack words as they were,
so no chunk is ever read by every reader and the ring fills for good (PROG).
A test target of the controlled campaign's drain-and-put check."""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, PickleSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def get(self, address, monotonic_id, signature=None, key=None):
        if self.is_writer or self._slot != 1:
            return super().get(address, monotonic_id, signature, key)
        span = slice(self._ack_at, self._ack_at + self._max_chunks)
        saved = list(self._words[span])
        try:
            return super().get(address, monotonic_id, signature, key)
        finally:
            for i, w in enumerate(saved):
                self._words[span.start + i] = w


__all__ = ["ObjectSerde", "PickleSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage",
           "SingleWriterShmRingBuffer"]
