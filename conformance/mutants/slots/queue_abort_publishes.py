"""Fault queue_abort_publishes: a writer's failed block is published.

Bug: the publish sits in a ``finally``, so when the writer's caller raises
halfway through its copy the partial chunk is published and every reader
receives a message that was never sent.

Must be caught by: FIFO
"""

from contextlib import contextmanager

from shmspec.impl import slots as _s


class SlotQueue(_s.SlotQueue):
    @contextmanager
    def acquire_write(self, timeout=None):
        self._wait(self._free, "writer", timeout)
        i = self.current_idx
        self._claim(i)
        try:
            with self.buf[i * self.slot_bytes:(i + 1) * self.slot_bytes] as chunk:
                yield chunk
        finally:  # BUG: also when the caller raised
            self._publish(i)
            self.current_idx = (i + 1) % self.n_slots
