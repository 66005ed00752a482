"""Fault garbage_pin_unrevoked: a lease time the writer's pin wait ignores.

Bug: the store declares a lease time (10 s) and its reclaim revokes a
reader whose acknowledgements are overdue, but the writer's wait for a
reader's pin on bytes it must reuse never revokes: it waits for the pin
word to change, as a store without a lease time does, and raises
``ReaderStalled`` after ``PIN_TIMEOUT``.  A reader that writes garbage into
its own pin word (a read that never ends) then holds every put that needs
the pinned bytes, for as long as it lives: item 2 of issue 28 ("garbage in
a reader's own words delays the writer at most one lease time").

Must be caught by: LIVE (the faults campaign's ``reader_writes_garbage``:
r1 pins h1 for ever and acknowledges everything; the writer's put that
wraps onto h1's bytes is refused past the lease time plus 5 s).  The gate
finds it first as LEASE, in ``reader_stopped_mid_get`` (a stopped reader's
pin is as unending).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle

SHMSPEC_PROFILE = "impl"


class _NoLease:
    """The reader table as the pin wait sees it: no lease time."""

    lease_us = 0

    def __init__(self, table):
        self._table = table

    def __getattr__(self, name):
        return getattr(self._table, name)


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    @staticmethod
    def _wait_unpinned(table, reader, word):
        _impl.SingleWriterShmRingBuffer._wait_unpinned(_NoLease(table), reader, word)  # BUG: never revokes


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    LEASE_SECONDS = 10.0


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
