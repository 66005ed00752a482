"""Fault lease_without_copy: a lease time whose reads are not copied out.

Bug: the store has a lease time (10 s) and its writer revokes a read that
lasts longer, but the reader still lets the serde deserialize straight from
shared memory under its pin (the read path without a lease time) and never
looks at the revocation.  A reader stopped inside a get past its lease time
then resumes deserializing bytes the writer has reused since, and returns
another object's bytes.

Must be caught by: NRR (the faults campaign: r1 is stopped at deserialize
while re-reading h1; the writer's puts wrap onto h1's bytes once its lease
is revoked; r1's resumed get).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle
from shmspec.impl import yieldpoints
from shmspec.impl.layout import pin_word
from shmspec.impl.readers import fence

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    pass


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    LEASE_SECONDS = 10.0

    def _leased_get(self, cand, address, monotonic_id):
        words, at = self._words, self._pin_at
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("pin")
        self._seq += 1
        try:
            words[at] = pin_word(self._seq, cand)
            fence()
            live, size = self._validate(cand, address, monotonic_id)
            value = self._deserialize(address, size)  # BUG: in place, the revocation never checked
            if live:
                if yieldpoints.HOOK is not None:
                    yieldpoints.HOOK("counter_increment")
                words[self._ack_at + cand % self._max_chunks] += 1
        finally:
            words[at] = 0
        return value


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
