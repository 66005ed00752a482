"""Fault no_recheck: a reader validates the handle before publishing its pin, and never re-validates.

Bug: a reader's ``get`` validates the handle against the control block (and
its header) first and only then publishes its hazard pin, fences,
deserializes and acknowledges -- with no re-validation after the pin: the
time-of-check/time-of-use race.  A writer that drops the chunk (a
``clear()``, or a reclaim once every promised read is acknowledged, e.g. on a
re-read) and scans the pins between the reader's check and its pin sees no
pin and reuses the memory, so the reader deserializes the next object's bytes
(or a torn mix) and returns them under the old handle.  impl pins *first* and validates after the fence, so
either the reader sees the reclaim or the writer sees the pin (Dekker).

Must be caught by: NRR (the preemption campaign pauses the reader between its
check and its pin while the writer clears or reclaims and reuses the slot).
"""

import os

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import yieldpoints
from shmspec.impl.layout import pin_word
from shmspec.impl.readers import FORK_GENERATION, fence
from shmspec.model.errors import WrongProcess

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def get(self, address, monotonic_id, signature=None, key=None):
        if self.is_writer:
            return self._writer_get(address, monotonic_id)
        cand = self._authenticate(address, monotonic_id, signature, key)
        with self._rlock:
            if FORK_GENERATION[0] != self._generation:
                raise WrongProcess("reader", self._pid, os.getpid())
            words, at = self._words, self._pin_at
            live, size = self._validate(cand, address, monotonic_id)  # BUG: checked before the pin ...
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("pin")
            self._seq += 1
            try:
                words[at] = pin_word(self._seq, cand)
                fence()
                value = self._deserialize(address, size)  # ... and never re-validated under it
                if live:
                    if yieldpoints.HOOK is not None:
                        yieldpoints.HOOK("counter_increment")
                    words[self._ack_at + cand % self._max_chunks] += 1
                    if yieldpoints.HOOK is not None:
                        yieldpoints.HOOK("unpin")
            finally:
                words[at] = 0
        return value


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
