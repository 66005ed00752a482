"""The reader table: one slot per reader, its hazard pin and its acks.

Segment ``<ring name>_r``, laid out in :mod:`shmspec.impl.layout`, created by
the writer's storage and attached by every reader view.  Slot ``r`` is owned
by the reader view that holds an OFD lock (``F_OFD_SETLK``, Linux) on the
slot's first byte: the kernel drops that lock when the view's file
description is closed, also when its process dies, so the writer can tell a
dead reader from a slow one without any lock of ours.

What lives in slot ``r`` (docs/impl-protocol.md):

* ``owner pid``: the process that claimed it (diagnostics);
* ``pin``: ``(seq << 48) | (abs + 1)`` while reader ``r`` reads allocation
  ``abs``, else 0 (the hazard pointer the writer honours before reusing memory);
* ``ack[k mod K]``: how many reads of allocation ``k`` reader ``r`` has made
  since the slot was last re-based (the writer keeps the base);
* ``epoch``: reader ``r``'s lease epoch, and ``revoked``: the epoch the
  writer revoked (a store with a lease time, ``TBL_LEASE_US``): the lease
  is revoked while ``revoked == epoch``; the reader renews it (``epoch + 1``)
  at its next get;
* ``leases`` and up to 16 lease entries: the chunks that values returned by
  ``get(..., copy=False)`` still point into (:data:`layout.LEASE_WORDS`);
  the writer does not reuse their bytes while ``r``'s slot is held.

Only reader ``r`` writes its slot, except ``revoked``, which only the
writer writes.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
import weakref
from contextlib import suppress
from typing import Any

from shmspec.model.errors import GeometryMismatch, TooManyReaders

from . import layout, segment

logger = logging.getLogger("shmspec.impl.storage")

_FLOCK = struct.Struct("hhxxxxqqixxxx")  # struct flock on Linux (x86-64, aarch64): 32 bytes
_HAS_OFD = hasattr(fcntl, "F_OFD_SETLK")

_FENCE_LOCK = threading.Lock()
FORK_GENERATION = [0]
"""Incremented in every forked child (:func:`_after_fork_in_child`): a view
built under another generation is a forked copy (cheaper than ``getpid``)."""
_CLAIMING: "weakref.WeakSet[ReaderTable]" = weakref.WeakSet()
"""Table views of this process that hold a slot (see :func:`_after_fork_in_child`)."""


def fence() -> None:
    """A full memory barrier: the acquire and release of a private lock are
    ``lock``-prefixed read-modify-writes on x86-64, which order every earlier
    store before every later load (the StoreLoad order plain x86 stores and
    loads do not give).  See docs/impl-protocol.md for other architectures."""
    with _FENCE_LOCK:  # a with statement: no asynchronous exception leaves it held
        pass


def table_name(ring_name: str) -> str:
    """The reader table's segment name for ring segment ``ring_name``."""
    return ring_name.lstrip("/") + "_r"


def _flock(fd: int, cmd: int, ltype: int, start: int) -> bytes:
    return fcntl.fcntl(fd, cmd, _FLOCK.pack(ltype, os.SEEK_SET, start, 1, 0))


class ReaderTable:
    """A view of one store's reader table (writer or reader side).

    ``words`` is the whole table as native 8-byte words; :meth:`pin_index` and
    :meth:`ack_index` give a slot's word positions.
    """

    def __init__(self, shm: Any, owner: bool):
        self.shm = shm
        self.owner = owner
        self.words = shm.buf[: shm.size - shm.size % 8].cast("Q")
        self.n_readers = self.words[layout.TBL_N_READERS]
        self.max_chunks = self.words[layout.TBL_MAX_CHUNKS]
        self.max_object_size = self.words[layout.TBL_MAX_OBJECT]
        self.data_bytes = self.words[layout.TBL_DATA_BYTES]
        self.lease_us = self.words[layout.TBL_LEASE_US]
        """The writer's lease time (microseconds; 0: none)."""
        self.revoked_pins: dict[int, int] = {}
        """Writer: reader slot -> the pin word whose lease it revoked last."""
        self._voided: set[tuple[int, tuple[int, int, int, int]]] = set()  # zero-copy reads voided, logged once
        self._slot_words = layout.slot_bytes(self.max_chunks) // 8
        self._base = layout.TABLE_HEADER_BYTES // 8
        self._closed = False
        n = range(self.n_readers)
        self._pin_words = tuple(self.pin_index(r) for r in n)
        self._ack_words = tuple(self.ack_index(r, 0) for r in n)  # + abs % max_chunks: allocation abs's word
        self._generation = FORK_GENERATION[0]

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, ring_name: str, n_readers: int, max_chunks: int, data_bytes: int,
               max_object_size: int, lease_us: int = 0, serde_name: str = "") -> "ReaderTable":
        """Writer: create and reserve the table (raises ``SharedMemoryFull``).
        Any exception before it is returned (a KeyboardInterrupt from a
        cancelled run included) unlinks the half-made table."""
        shm = segment.create_segment(layout.table_size(n_readers, max_chunks), table_name(ring_name))
        try:
            words = shm.buf[: shm.size - shm.size % 8].cast("Q")
            words[layout.TBL_N_READERS] = n_readers
            words[layout.TBL_MAX_OBJECT] = max_object_size
            words[layout.TBL_DATA_BYTES] = data_bytes
            words[layout.TBL_MAX_CHUNKS] = max_chunks
            words[layout.TBL_LEASE_US] = lease_us
            name = serde_name.encode("utf-8", "replace")[: layout.TBL_SERDE_BYTES]
            shm.buf[layout.TBL_SERDE_OFFSET : layout.TBL_SERDE_OFFSET + len(name)] = name
            words[layout.TBL_MAGIC] = layout.TABLE_MAGIC  # last: the table is complete
            words.release()
            return cls(shm, owner=True)
        except BaseException:
            segment.release_segment(shm, unlink=True)
            raise

    @classmethod
    def attach(cls, ring_name: str, n_readers: int, max_object_size: int,
               serde_name: str | None = None) -> "ReaderTable":
        """Reader: attach to the writer's table and check the geometry.

        Raises:
            GeometryMismatch: ``n_readers`` or ``max_object_size`` differ from
                the writer's, or ``serde_name`` (a serde family, see storage's ``_serde_name``)
                from the writer's serde class, or the table is not a version-3 table.
            FileNotFoundError: no writer storage was built on this ring.
        """
        shm = segment.attach_segment(table_name(ring_name))
        try:
            table = cls(shm, owner=False)
        except BaseException:
            segment.release_segment(shm, unlink=False)
            raise
        try:
            if table.words[layout.TBL_MAGIC] != layout.TABLE_MAGIC:
                raise GeometryMismatch("reader table version", layout.TABLE_VERSION, "another layout", table_name(ring_name))
            for name, given, recorded in (("n_readers", n_readers, table.n_readers),
                                          ("max_object_size", max_object_size, table.max_object_size)):
                if given != recorded:
                    raise GeometryMismatch(name, given, recorded, ring_name)
            recorded_serde = table.serde_name
            if serde_name is not None and recorded_serde and serde_name != recorded_serde:
                raise GeometryMismatch("serde_class", serde_name, recorded_serde, ring_name)
        except BaseException:
            table.close()
            raise
        return table

    @property
    def serde_name(self) -> str:
        """The writer's serde class name (``__qualname__``; ``""`` if none recorded)."""
        raw = bytes(self.shm.buf[layout.TBL_SERDE_OFFSET : layout.TBL_SERDE_OFFSET + layout.TBL_SERDE_BYTES])
        return raw.rstrip(b"\0").decode("utf-8", "replace")

    def close(self) -> None:
        """Release the view (the writer's owner view also unlinks the table)."""
        if self._closed:
            return
        self._closed = True
        self.words.release()
        segment.release_segment(self.shm, unlink=self.owner and FORK_GENERATION[0] == self._generation)

    # ------------------------------------------------------------ positions
    def slot_word(self, reader: int, word: int) -> int:
        return self._base + reader * self._slot_words + word

    def pin_index(self, reader: int) -> int:
        return self.slot_word(reader, layout.SLOT_PIN)

    def ack_index(self, reader: int, abs_counter: int) -> int:
        return self._base + reader * self._slot_words + layout.SLOT_HEADER_BYTES // 8 + abs_counter % self.max_chunks

    def acks(self, abs_counter: int) -> tuple[int, ...]:
        """Every reader's ack word for allocation ``abs_counter`` (writer side)."""
        w, k = self.words, abs_counter % self.max_chunks
        return tuple([w[a + k] for a in self._ack_words])

    def pins(self) -> list[int]:
        """Every reader's pin word, in slot order."""
        w = self.words
        return [w[i] for i in self._pin_words]

    def lease_index(self, reader: int, entry: int) -> int:
        """Word of zero-copy lease entry ``entry`` of slot ``reader`` (its pin word; the
        physical offset, byte count and start time follow)."""
        return self.slot_word(reader, layout.SLOT_LEASE_BASE + layout.LEASE_WORDS * entry)

    def leases(self, reader: int) -> list[tuple[int, int, int, int]]:
        """Writer: slot ``reader``'s zero-copy leases in use, as ``(pin word,
        physical offset, bytes, start in CLOCK_MONOTONIC microseconds)``;
        ``[]`` at once when its ``leases`` count is 0 (the count is written
        after an entry and read before it: see :meth:`shmspec.impl.ring.
        SingleWriterShmRingBuffer.prepare_reuse` for the order)."""
        w = self.words
        if not w[self.slot_word(reader, layout.SLOT_LEASES)]:
            return []
        out = []
        for i in range(layout.MAX_LEASES):
            at = self.lease_index(reader, i)
            word = w[at]
            if word:
                out.append((word, w[at + 1], w[at + 2], w[at + 3]))
        return out

    def live_leases(self, revoke_stalled: bool = True) -> list[tuple[int, tuple[int, int, int, int]]]:
        """Writer: ``(slot, lease)`` for every lease of a slot still held by a
        live view (a dead or closed reader's leases are void: nothing of its
        process can read the bytes any more).  With a lease time
        (``lease_us``) and ``revoke_stalled``, a slot's ``get(copy=False)``
        that has been building its value for longer than the lease time
        (:data:`~shmspec.impl.layout.SLOT_SHARED_READ`: a stopped or hung
        reader) has its lease revoked, and its entry is void (left out) if
        that read is still in flight after the revocation's fence: either
        the writer sees the read end (the value holds the lease) or the
        reader sees the revocation and its get raises ``StaleHandle``."""
        w, out = self.words, []
        for r in range(self.n_readers):
            if w[self.slot_word(r, layout.SLOT_LEASES)] and self.alive(r):
                leases = self.leases(r)
                if revoke_stalled and self.lease_us and w[self.slot_word(r, layout.SLOT_SHARED_READ)]:
                    leases = self._void_stalled_read(r, leases)
                out.extend((r, lease) for lease in leases)
        return out

    def shared_read(self, reader: int) -> tuple[int, int, int, int] | None:
        """Writer: slot ``reader``'s lease entry of a ``get(copy=False)`` still
        building its value (:data:`~shmspec.impl.layout.SLOT_SHARED_READ`), or None."""
        w = self.words
        marker = w[self.slot_word(reader, layout.SLOT_SHARED_READ)]
        if not 0 < marker <= layout.MAX_LEASES:
            return None
        at = self.lease_index(reader, marker - 1)
        entry = (w[at], w[at + 1], w[at + 2], w[at + 3])
        return entry if entry[0] else None

    def _void_stalled_read(self, r: int, leases: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
        w = self.words
        marker_at = self.slot_word(r, layout.SLOT_SHARED_READ)
        marker, entry = w[marker_at], self.shared_read(r)
        if entry is None or entry not in leases or time.monotonic_ns() // 1000 - entry[3] < self.lease_us:
            return leases
        if self.revoked(r):
            fence()
        else:
            self.revoke(r)  # fences
        if w[marker_at] != marker:
            return leases  # the read ended before the revocation: its value holds the lease
        if (r, entry) not in self._voided:
            self._voided.add((r, entry))
            logger.info("reader slot %d (pid %d) has been inside one get(copy=False) for over %g s: its lease is "
                        "revoked, that read's bytes may be reused and its get raises StaleHandle when it resumes",
                        r, self.owner_pid(r), self.lease_us / 1e6)
        return [lease for lease in leases if lease != entry]

    def owner_pid(self, reader: int) -> int:
        return self.words[self.slot_word(reader, layout.SLOT_OWNER_PID)]

    # ------------------------------------------------------------ ownership
    def claim(self) -> int:
        """Take the first free slot for this view; returns its index.

        Raises:
            TooManyReaders: every slot is held by a live view.
        """
        fd = self.shm._fd
        for r in range(self.n_readers):
            if _HAS_OFD:
                try:
                    _flock(fd, fcntl.F_OFD_SETLK, fcntl.F_WRLCK, layout.slot_offset(r, self.max_chunks))
                except OSError:
                    continue
            elif self.owner_pid(r) and _pid_alive(self.owner_pid(r)):
                continue
            w = self.words
            w[self.pin_index(r)] = 0
            for i in range(layout.MAX_LEASES):  # a dead owner's leases are void
                w[self.lease_index(r, i)] = 0
            w[self.slot_word(r, layout.SLOT_LEASES)] = 0
            w[self.slot_word(r, layout.SLOT_EPOCH)] = w[self.slot_word(r, layout.SLOT_REVOKED)] + 1  # a fresh lease
            w[self.slot_word(r, layout.SLOT_OWNER_PID)] = os.getpid()
            _CLAIMING.add(self)
            return r
        raise TooManyReaders(self.n_readers)

    def release(self, reader: int) -> None:
        """Give slot ``reader`` back (pin cleared first)."""
        if self._closed:
            return
        self.words[self.pin_index(reader)] = 0
        if _HAS_OFD:
            with suppress(OSError):
                _flock(self.shm._fd, fcntl.F_OFD_SETLK, fcntl.F_UNLCK, layout.slot_offset(reader, self.max_chunks))

    def revoked(self, reader: int) -> bool:
        """Whether reader ``reader``'s current lease is revoked (writer or reader side)."""
        w = self.words
        return w[self.slot_word(reader, layout.SLOT_REVOKED)] == w[self.slot_word(reader, layout.SLOT_EPOCH)]

    def revoke(self, reader: int) -> None:
        """Writer: revoke reader ``reader``'s current lease, then fence (before
        any reuse of memory it pinned).  The pin word it had is remembered:
        that pin never holds the writer again, even if the reader rewrites
        its epoch (a reader writing garbage into its own words delays the
        writer at most one lease time per pin word)."""
        w = self.words
        w[self.slot_word(reader, layout.SLOT_REVOKED)] = w[self.slot_word(reader, layout.SLOT_EPOCH)]
        self.revoked_pins[reader] = w[self.pin_index(reader)]
        fence()

    def alive(self, reader: int) -> bool:
        """Whether a live view still holds slot ``reader`` (writer side)."""
        if not _HAS_OFD:
            pid = self.owner_pid(reader)
            return bool(pid) and _pid_alive(pid)
        got = _flock(self.shm._fd, fcntl.F_OFD_GETLK, fcntl.F_WRLCK, layout.slot_offset(reader, self.max_chunks))
        return _FLOCK.unpack(got)[0] != fcntl.F_UNLCK


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _after_fork_in_child() -> None:
    """A forked child does not own its parent's slots: it closes its copies of
    the descriptors whose OFD locks hold them (the locks stay with the parent's
    descriptors), so the slot is released when the parent's view closes or the
    parent dies, whatever the child does.  The child's copy of such a view
    raises ``WrongProcess`` when used (the storage checks its pid)."""
    FORK_GENERATION[0] += 1
    for table in list(_CLAIMING):
        fd = getattr(table.shm, "_fd", -1)
        if fd >= 0:
            with suppress(OSError):
                os.close(fd)
            table.shm._fd = -1
    _CLAIMING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
