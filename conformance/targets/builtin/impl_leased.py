"""Variant impl_leased: impl with a lease time (``--target impl-leased``).

``shmspec.impl`` with ``lease_seconds`` defaulting to 10 s (its
``PIN_TIMEOUT``) instead of None: a get copies its bytes out under its pin
and fails with the stale-handle error if its lease was revoked meanwhile;
the writer revokes the lease of a reader whose pin has stayed for the lease
time, where impl without a lease time raises ``ReaderStalled``.  The gate's
campaigns run the read path of a store with leases on it (SEMANTICS LEASE).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    pass


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    LEASE_SECONDS = 10.0


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
