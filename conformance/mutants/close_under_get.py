"""Fault close_under_get: a reader view's ``close()`` gives up its hold under a get in flight.

Bug: ``close()`` called by one thread of a reader process while another
thread of it is inside ``get()`` gives the reader's slot back at once (the
mapping itself is left to the read, as impl does): the hazard pin is
cleared and the slot's lease ends, so the writer's next
reclaim forfeits the read still owed and reuses the chunk's bytes while the
in-flight get is about to deserialize them (impl before issue 28 item 4,
which makes ``close()`` wait for the read, up to ``CLOSE_WAIT``, or leave
the close to the read).

Must be caught by: NRR (the faults campaign's ``reader_closed_mid_get``:
r1's promised read of h1 is paused at ``deserialize`` while another thread
closes its view; the writer's puts wrap onto h1's bytes, and r1's resumed
get deserializes the newer object).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def close(self):
        table = self.ring_buffer.reader_table
        if not self.is_writer and table is not None and self._slot is not None:
            table.release(self._slot)  # BUG: slot and pin given back before the read in flight has ended
        super().close()  # the mapping itself is still left to the read, as in impl


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
