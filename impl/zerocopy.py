"""Zero-copy reads: a reader view's leases on chunks its values point into.

``get(..., copy=False)`` (issue 28, item 5) hands the serde a read-only view
of the chunk in shared memory and returns whatever the serde builds over it
(numpy arrays, memoryviews, tensors).  The view is exported by a ctypes array
made for that get (``from_buffer`` over the segment's mapping), so every
slice, cast, ``np.frombuffer`` or pickle-5 out-of-band buffer made from it
keeps that array alive; when the last of them is garbage-collected, the
array's own view of the mapping goes and a ``weakref.finalize`` on that view
gives the lease back.  While the lease is held, an entry in the reader's slot
of the reader table (``[pin word][physical offset][bytes][start us]``,
:mod:`shmspec.impl.layout`) tells the writer which bytes it must not reuse:
its free check keeps a leased chunk live and its allocations refuse leased
bytes (:meth:`shmspec.impl.ring.SingleWriterShmRingBuffer.check_leases`).

Finalizers run in whichever thread drops the last reference, also inside
another get of the same view: a release is queued and applied under a
non-blocking lock by whoever holds it next (this module never blocks in a
finalizer).  A forked child's copies of values release nothing (the parent's
entries stay).  A lease is one entry per chunk with a local count of the
values that hold it; when all :data:`~shmspec.impl.layout.MAX_LEASES`
entries are in use a further ``copy=False`` get of another chunk copies its
bytes out instead (logged once per view).
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from . import layout
from .readers import FORK_GENERATION, ReaderTable

logger = logging.getLogger("shmspec.impl.storage")


class ReaderLeases:
    """The zero-copy leases of one reader view (reader side; slot ``slot`` of ``table``).

    ``owner`` (the storage view) is held strongly: a pending finalizer keeps
    the view, and with it the slot's OFD lock, alive, so a view dropped while
    its values live does not make the writer think its reader is gone.
    """

    def __init__(self, table: ReaderTable, slot: int, owner: Any):
        self._words = table.words
        self._count_at = table.slot_word(slot, layout.SLOT_LEASES)
        self._entry_at = tuple(table.lease_index(slot, i) for i in range(layout.MAX_LEASES))
        self._owner = owner
        self._by_cand: dict[int, list[int]] = {}  # allocation -> [entry, values holding it]
        self._free = list(range(layout.MAX_LEASES - 1, -1, -1))
        self._released: deque[int] = deque()
        self._lock = threading.Lock()
        self._generation = FORK_GENERATION[0]
        self._full_logged = False
        self.on_empty: Callable[[], None] | None = None
        """Called once no lease is held any more (a deferred ``close``)."""

    # ------------------------------------------------------------ reader side
    def held(self) -> int:
        """Chunks this view holds a lease on now."""
        self.drain()
        return len(self._by_cand)

    def has_room(self, cand: int) -> bool:
        """Whether a ``copy=False`` get of allocation ``cand`` can take a lease
        (already leased, or an entry is free); logs once when it cannot."""
        self.drain()
        if cand in self._by_cand or self._free:
            return True
        if not self._full_logged:
            self._full_logged = True
            logger.warning("reader view holds zero-copy leases on %d chunks, the most a reader slot records: "
                           "further get(copy=False) calls of other chunks copy their bytes until some of "
                           "those values are garbage-collected", layout.MAX_LEASES)
        return False

    def acquire(self, cand: int, pin: int, offset: int, nbytes: int) -> int | None:
        """Count one more value on allocation ``cand`` (chunk bytes ``[offset,
        offset + nbytes)`` of the data region), writing its entry if it is new:
        offset, bytes and time first, the entry's word, then the count (the
        writer reads them in the other order).  Call with the hazard pin
        ``pin`` up and :meth:`has_room` true.  Returns the entry's index when
        it is new, None when a value already held it."""
        with self._lock:
            got = self._by_cand.get(cand)
            if got is not None:
                got[1] += 1
                return None
            entry = self._free.pop()
            w, at = self._words, self._entry_at[entry]
            w[at + 1] = offset
            w[at + 2] = nbytes
            w[at + 3] = time.monotonic_ns() // 1000
            w[at] = pin
            w[self._count_at] += 1
            self._by_cand[cand] = [entry, 1]
        self.drain()  # releases queued by a finalizer that ran while the lock was held
        return entry

    def release(self, cand: int) -> None:
        """One value on ``cand`` is gone (a finalizer, any thread): queued,
        applied now if no other thread is applying releases."""
        if FORK_GENERATION[0] != self._generation:
            return  # a forked child's copy: the parent's values still hold the lease
        self._released.append(cand)
        self.drain()

    def drain(self) -> None:
        """Apply queued releases (never blocks)."""
        while self._released and self._lock.acquire(blocking=False):
            try:
                while self._released:
                    self._release_one(self._released.popleft())
            finally:
                self._lock.release()
        if not self._by_cand and self.on_empty is not None and not self._released:
            hook, self.on_empty = self.on_empty, None
            hook()

    def _release_one(self, cand: int) -> None:
        got = self._by_cand.get(cand)
        if got is None:
            return
        got[1] -= 1
        if got[1]:
            return
        del self._by_cand[cand]
        w, at = self._words, self._entry_at[got[0]]
        try:
            w[at] = 0
            w[self._count_at] -= 1
        except ValueError:  # the table view is released (the store closed under an interpreter exit)
            return
        self._free.append(got[0])

    def export(self, cand: int, mm: Any, data_offset: int, data_bytes: int, lo: int, n: int) -> memoryview:
        """A read-only view of bytes ``[lo, lo + n)`` of the data region (which
        starts at ``data_offset`` of mapping ``mm`` and has ``data_bytes``
        bytes) whose last derived view, when collected, releases one value of
        ``cand`` (:meth:`release`).  The exporting ctypes array spans the next
        power of two of ``n`` bytes (so ctypes caches few array types)."""
        span = min(1 << max(n - 1, 0).bit_length(), data_bytes)
        off = min(lo, data_bytes - span)
        arr = (ctypes.c_ubyte * span).from_buffer(mm, data_offset + off)
        kept = getattr(arr, "_objects", None)
        # the array's own view of the mapping: its finalizer fires once the mapping's export is gone too
        anchor = next(iter(kept.values())) if isinstance(kept, dict) and len(kept) == 1 else arr
        fin = weakref.finalize(anchor, self.release, cand)
        fin.atexit = False
        view = memoryview(arr).cast("B").toreadonly()
        del arr, anchor, kept
        return view[lo - off : lo - off + n]
