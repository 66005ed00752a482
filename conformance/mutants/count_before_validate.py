"""Variant count_before_validate: a reader acknowledges its read before validating the handle.

Bug: a reader's ``get`` publishes its pin and, "while it is at it", bumps its
ack word for the handle's allocation (``ack[r][k mod K] += 1``) *before* it
validates the handle against the control block; a handle that then turns out
stale raises ``StaleHandle`` with the ack left in place.  Ack words are
indexed by allocation modulo ``K`` (``max_chunks``): for a stale handle ``K``
or more allocations old, the word now belongs to a younger live chunk, which
thereby counts a read that never happened, so the writer may reclaim it
before every reader has read it.  (The value returned is still right:
validation rejects the stale handle.)  ``get`` below is impl's with the ack
moved up.

Geometry: the ack word is reused only after ``K`` allocations; impl's default
``K`` (1024) is never reached by the gate's 256-byte sessions, so this fault
builds its rings with ``max_chunks = 2`` (see ``MAX_CHUNKS``) and the
preemption sweep's few puts reuse the word.  Two live chunks at most is below
the model's bound: OOM and CONFORMANCE (a put that has room gets
``MemoryError``) are expected too, and come first.

Must be caught by: RC, in the preemption campaign (a live chunk's reads exceed
the gets started against its handle: a read was counted on the wrong chunk).
"""

import os

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle
from shmspec.impl import yieldpoints
from shmspec.impl.layout import pin_word
from shmspec.impl.readers import FORK_GENERATION, fence
from shmspec.model.errors import WrongProcess

SHMSPEC_PROFILE = "impl"

MAX_CHUNKS = 2
"""Live-chunk bound (= ack words per reader) of this fault's rings."""


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def __init__(self, data_buffer_size, name=None, create=False, max_chunks=None):
        super().__init__(data_buffer_size, name, create, max_chunks or MAX_CHUNKS)


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def get(self, address, monotonic_id, signature=None, key=None):
        if self.is_writer:
            return self._writer_get(address, monotonic_id)
        cand = self._authenticate(address, monotonic_id, signature, key)
        with self._rlock:
            if FORK_GENERATION[0] != self._generation:
                raise WrongProcess("reader", self._pid, os.getpid())
            words, at = self._words, self._pin_at
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("pin")
            self._seq += 1
            try:
                words[at] = pin_word(self._seq, cand)
                fence()
                # BUG: acknowledged before the handle is validated (and never taken back)
                if yieldpoints.HOOK is not None:
                    yieldpoints.HOOK("counter_increment")
                words[self._ack_at + cand % self._max_chunks] += 1
                live, size = self._validate(cand, address, monotonic_id)
                value = self._deserialize(address, size)
                if live and yieldpoints.HOOK is not None:
                    yieldpoints.HOOK("unpin")
            finally:
                words[at] = 0
        return value


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
