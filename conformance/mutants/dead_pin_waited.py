"""Fault dead_pin_waited: the writer waits out a dead reader's hazard pin.

Bug: when the writer must reuse memory a reader has pinned, it waits until
the pin word changes or ``PIN_TIMEOUT`` (10 s) runs out, but no longer asks
whether the pinning reader's slot is still held (``ReaderTable.alive``).  A
reader killed while reading (its pin left behind, its slot's OFD lock
released by the kernel) then stalls the next put that reaches the memory it
was reading for the full timeout, and the put fails with ``ReaderStalled``:
a live process blocked by a dead one.

Must be caught by: LIVE (the faults campaign: r1 is killed at deserialize
while re-reading h1; the writer's puts wrap the ring onto h1's bytes).
"""

import time

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle
from shmspec.impl import ring as _ring
from shmspec.impl import yieldpoints
from shmspec.model.errors import ReaderStalled

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    @staticmethod
    def _wait_unpinned(table, reader, word):
        words, at = table.words, table.pin_index(reader)
        deadline = None
        spins = 0
        while words[at] == word:  # impl's wait, yield point included ...
            spins += 1
            hooked = yieldpoints.HOOK is not None
            if hooked:
                yieldpoints.HOOK("pin_wait")
                if words[at] != word:
                    return
            elif spins < 200:
                continue
            if deadline is None:
                deadline = time.monotonic() + _ring.PIN_TIMEOUT
            # BUG: ... but "if not table.alive(reader): return" is gone
            if time.monotonic() > deadline:
                raise ReaderStalled(_ring.PIN_TIMEOUT, reader, table.owner_pid(reader))
            if not hooked:
                time.sleep(0 if spins < 2000 else 0.0005)


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    pass


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
