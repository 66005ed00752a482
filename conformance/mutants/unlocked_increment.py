"""Fault unlocked_increment: a reader acknowledges its read after unpinning.

Bug (the reader side of a missing protection, v2's counterpart of "counts its
read without the reader lock"): a reader's ``get`` clears its hazard pin as
soon as the serde is done and acknowledges the read afterwards, outside the
pin's protection.  The writer honours pins before it reuses memory *and*
before it re-bases an ack word for a new allocation (allocation ``j`` takes
over word ``j mod K`` of every reader; its base is the word's value then).
With the pin gone, the writer may reclaim the chunk (on a re-read: every
promised read is in) and allocate ``K`` more chunks before the late ack
lands, which then counts for the younger chunk that owns the word: a read
that never happened, so that chunk can be reclaimed before every reader has
read it.  (``get`` below is impl's with the ack moved after the unpin.)

Geometry: the word is taken over only ``K`` allocations later; impl's default
``K`` (1024) is never reached by the gate's 256-byte sessions, so this fault
builds its rings with ``max_chunks = 2`` (see ``MAX_CHUNKS``) and the
preemption sweep's churn reuses the word.  Two live chunks at most is below
the model's bound: OOM and CONFORMANCE (a put that has room gets
``MemoryError``) are expected too, and come first.

Must be caught by: RC (the preemption campaign pauses a re-reading reader
between its unpin and its ack while the writer reclaims and allocates: a live
chunk's reads exceed the gets started against its handle).
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
                live, size = self._validate(cand, address, monotonic_id)
                value = self._deserialize(address, size)
            finally:
                words[at] = 0
            # BUG: acknowledged after the pin is cleared: the writer may have re-based the word since
            if live:
                if yieldpoints.HOOK is not None:
                    yieldpoints.HOOK("counter_increment")
                words[self._ack_at + cand % self._max_chunks] += 1
        return value


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
