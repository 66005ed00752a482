"""Variant deserialize_in_place: a reader deserializes shared memory without a hazard pin.

Bug: to save the pin's two stores and the fence, a reader's ``get``
validates the handle and hands the serde a view of the shared segment itself
*without publishing its pin*; to stay "safe" it re-validates the handle
after deserializing and only then acknowledges the read.  The re-check still
turns a reclaimed handle into ``StaleHandle``, so the value a caller receives
is right -- but the writer, which waits only for *pinned* readers before it
reuses memory, may reclaim and rewrite the chunk while the serde is reading
it (a re-read racing with the writer): the serde has already parsed another
object's bytes (vLLM's default serde unpickles them), and a zero-copy serde
would hand out an object aliasing memory the writer is rewriting.

Under the read-once protocol and without ``clear()`` this cannot happen (a
chunk is not reclaimed before every reader has acknowledged it); it needs a
``clear()`` (which drops every chunk at once: the next put writes over a
chunk a reader is draining) or a re-read of a handle every reader has already
read, between the reader's validation and the serde's read.

Must be caught by: NRR ("never returns, or deserializes, bytes of a chunk that
was freed and reused"), seen by the preemption campaign (and the free-running
run) through the objects its serde records as deserialized (the returned
values stay right).
"""

import os

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import yieldpoints
from shmspec.impl.readers import FORK_GENERATION
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
            # BUG: no hazard pin (words[pin] = pin_word(...); fence()): the writer does not wait for this read
            live, size = self._validate(cand, address, monotonic_id)
            value = self._deserialize(address, size)
            live, _ = self._validate(cand, address, monotonic_id)  # re-validated, but too late
            if live:
                if yieldpoints.HOOK is not None:
                    yieldpoints.HOOK("counter_increment")
                self._words[self._ack_at + cand % self._max_chunks] += 1
        return value


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
