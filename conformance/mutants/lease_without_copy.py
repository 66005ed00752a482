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

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    pass


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    LEASE_SECONDS = 10.0

    def _leased_get(self, cand, address, monotonic_id):
        return self._plain_get(cand, address, monotonic_id)  # BUG: in place, the revocation never checked


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
