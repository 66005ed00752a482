"""Fault zero_copy_read_unrevoked: a lease time that does not bound a zero-copy read still building its value.

Bug (impl before 2026-12-07, found by a fresh-user trial): with a lease
time, the writer revokes the lease of a reader whose hazard pin stays for
the lease time, but a ``get(copy=False)`` clears its pin once its lease
entry is written, before the serde builds the value.  A reader stopped
there (SIGSTOP, a debugger, a hung serde) looks to the writer like one that
keeps a value, and a kept value's lease is never revoked while its holder
lives: every put that needs those bytes is refused for as long as the
reader stays stopped.

Must be caught by: LIVE (the faults campaign's
reader_stopped_mid_zero_copy_get: the put that needs h1's bytes is refused
past the lease time plus 5 s).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    def live_leases(self):
        table = self.reader_table
        return [] if table is None else table.live_leases(revoke_stalled=False)  # BUG: a stalled read keeps it


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    LEASE_SECONDS = 10.0


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
