"""Single-writer ring buffer over one shared-memory segment (segment version 2).

Drop-in for vLLM 0.32/0.33's ``SingleWriterShmRingBuffer``: same constructor,
attributes and methods, and the same allocation policy, so the same sequence
of allocation sizes yields the same ``(address, monotonic_id)`` handles.
What differs is the segment (:mod:`shmspec.impl.layout`): a writer-only
control block publishes the absolute counters ``abs_start`` / ``abs_end``
and the drain window of the latest ``clear()``, which readers use to decide
liveness without trusting chunk bytes; and before the writer reuses memory it
honours the readers' hazard pins (:meth:`SingleWriterShmRingBuffer.prepare_reuse`,
docs/impl-protocol.md).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import chain
from operator import sub
from typing import Any

from shmspec.model.errors import GeometryMismatch, NotWriter, OutOfSpace, ReaderStalled

from . import layout, segment, yieldpoints
from .layout import bytes_to_int32, candidate_abs, int32_to_bytes
from .readers import FORK_GENERATION, ReaderTable, fence

_CHUNK_HEADER_PACK = layout.CHUNK_HEADER.pack_into
"""``[id][chunk_size]``, two signed 32-bit little-endian ints: the bytes of
``int32_to_bytes(id) + int32_to_bytes(chunk_size)``, written in one call."""

_OOM_MESSAGE = (
    "Not enough space in the data buffer, try calling free_buf() to free up space"
)

PIN_TIMEOUT = 10.0
"""Seconds the writer waits for a live reader to finish reading a chunk whose
memory it must reuse before it raises :class:`ReaderStalled` (the put commits
nothing; see that error).  A reader that died releases its slot, and the writer stops waiting
for it at once.  Module-level so tests and operators can change it; read at
every wait."""

DRAIN_SPINS = 10_000
"""Attempts a reader makes to read the drain window consistently (the writer
updates it in a few stores) before it treats a handle as not drainable."""


class SingleWriterShmRingBuffer:
    """Ring of variable-size chunks in shared memory; one writer, many readers.

    ``SingleWriterShmRingBuffer(data_buffer_size, name=None, create=False,
    max_chunks=None)``: ``create=True`` makes this process the writer (a new
    segment of ``160 + data_buffer_size`` bytes, all reserved; ``name=None``
    picks a random name); ``create=False`` attaches a reader view to the
    existing segment ``name`` and checks that ``data_buffer_size`` is the
    writer's (:class:`GeometryMismatch` otherwise).  ``max_chunks`` (impl
    only): at most that many chunks are live at once (default
    :func:`~shmspec.impl.layout.default_max_chunks`); readers take the
    writer's value.

    Addresses are *virtual* byte offsets into the data region (they may exceed
    ``data_buffer_size``; the physical offset is ``address % data_buffer_size``).
    Ids are modulo ``ID_MAX = 2**31``.

    Allocation (mirrors vLLM 0.11 - 0.33 exactly): a request of ``size`` bytes
    takes a chunk of ``n = size + MD_SIZE`` bytes.  If ``end % B + n > B`` the
    end jumps to the next multiple of ``B``; then if ``end + n - start > B``,
    or ``max_chunks`` chunks are live, :class:`~shmspec.model.errors.OutOfSpace`
    (a ``MemoryError``) is raised and nothing changes.  Freeing is FIFO (see
    :meth:`free_buf`); ``clear()`` keeps the ids increasing (vLLM >= 0.32).

    Raises at construction: ``ValueError`` (a size that is not a positive
    int), :class:`~shmspec.model.errors.SharedMemoryFull` (``/dev/shm`` cannot
    hold the segment), :class:`GeometryMismatch`, ``FileNotFoundError`` (no
    such segment).
    """

    ID_NBYTES = layout.ID_NBYTES
    SIZE_NBYTES = layout.SIZE_NBYTES
    MD_SIZE = layout.MD_SIZE
    ID_MAX = layout.ID_MAX
    AUTH_SECRET_BYTES = layout.SECRET_BYTES
    CONTROL_OFFSET = layout.CONTROL_OFFSET
    DATA_OFFSET = layout.DATA_OFFSET

    def __init__(self, data_buffer_size: int, name: str | None = None, create: bool = False,
                 max_chunks: int | None = None):
        if (
            not isinstance(data_buffer_size, int)
            or isinstance(data_buffer_size, bool)
            or data_buffer_size <= 0
        ):
            raise ValueError(f"data_buffer_size must be a positive int, got {data_buffer_size!r}")
        if max_chunks is not None and (not isinstance(max_chunks, int) or isinstance(max_chunks, bool)
                                       or max_chunks <= 0):
            raise ValueError(f"max_chunks must be a positive int, got {max_chunks!r}")
        self.data_buffer_size = data_buffer_size
        self.is_writer = bool(create)
        self.data_buffer_start = 0
        self.data_buffer_end = 0
        self._closed = False
        self._ctl = None
        self._data = None
        self.reader_table: ReaderTable | None = None
        self._generation = FORK_GENERATION[0]
        total = layout.segment_size(data_buffer_size)
        if self.is_writer:
            self.metadata: dict[int, int] = {}
            self._sizes: dict[int, int] = {}
            self._abs_start = 0
            self._abs_end = 0
            self._base: dict[int, tuple[int, ...]] = {}
            self._pending: tuple[int, int, int, int, tuple[int, ...]] | None = None
            self._drain: tuple[int, int, int] | None = (0, 0, 0)
            """The published drain window (see :meth:`_set_drain`)."""
            self.max_chunks = max_chunks or layout.default_max_chunks(data_buffer_size)
            self.shared_memory = segment.create_segment(total, name)
        else:
            if name is None:
                raise ValueError("A reader must be given the segment name to attach to.")
            self.shared_memory = segment.attach_segment(name)
        try:
            buf = self.shared_memory.buf
            self._ctl = buf[layout.CONTROL_OFFSET : layout.DATA_OFFSET].cast("Q")
            if self.is_writer:
                ctl = self._ctl
                ctl[layout.CTL_DATA_BYTES] = data_buffer_size
                ctl[layout.CTL_MAX_CHUNKS] = self.max_chunks
                buf[: layout.SECRET_BYTES] = secrets.token_bytes(layout.SECRET_BYTES)
                ctl[layout.CTL_MAGIC] = layout.SEGMENT_MAGIC
            else:
                self._check_geometry(name, total)
                self.max_chunks = self._ctl[layout.CTL_MAX_CHUNKS]
            self._data = buf[layout.DATA_OFFSET : total]
        except BaseException:
            self.close()
            raise

    def _check_geometry(self, name: str, total: int) -> None:
        if self.shared_memory.size < layout.DATA_OFFSET:
            raise GeometryMismatch("segment size", total, self.shared_memory.size, name)
        ctl = self._ctl
        if ctl[layout.CTL_MAGIC] != layout.SEGMENT_MAGIC:
            raise GeometryMismatch("segment version", 2, "another layout (not an impl v2 segment)", name)
        recorded = ctl[layout.CTL_DATA_BYTES]
        if recorded != self.data_buffer_size or self.shared_memory.size < total:
            raise GeometryMismatch("data_buffer_size", self.data_buffer_size, recorded, name)

    # ------------------------------------------------------------------ basics
    def handle(self) -> tuple[int, str]:
        """``(data_buffer_size, segment name)``: what a reader needs to attach."""
        return (self.data_buffer_size, self.shared_memory.name)

    def get_auth_secret(self) -> bytes:
        """The 32 secret bytes at the front of the segment (vLLM >= 0.32)."""
        if self._closed:
            raise ValueError("Buffer has been closed")
        return bytes(self.shared_memory.buf[: layout.SECRET_BYTES])

    def int2byte(self, integer: int) -> bytes:
        """Signed 32-bit little-endian bytes of ``integer``."""
        return int32_to_bytes(integer)

    def byte2int(self, byte_data) -> int:
        """Signed little-endian integer from ``byte_data``."""
        return bytes_to_int32(byte_data)

    def _require_writer(self, operation: str) -> None:
        if not self.is_writer:
            raise NotWriter(operation)

    @property
    def data_region(self) -> memoryview:
        """View of the ``data_buffer_size`` data bytes (raises once closed)."""
        view = self._data
        if view is None:
            raise ValueError("Buffer has been closed")
        return view

    @property
    def control(self) -> memoryview:
        """The control block as native 8-byte words (raises once closed)."""
        view = self._ctl
        if view is None:
            raise ValueError("Buffer has been closed")
        return view

    # -------------------------------------------------------- control block
    def published_abs_start(self) -> int:
        """``abs_start`` as readers see it (one aligned 8-byte load)."""
        return self.control[layout.CTL_ABS_START]

    def published_abs_end(self) -> int:
        """``abs_end`` as readers see it (one aligned 8-byte load)."""
        return self.control[layout.CTL_ABS_END]

    def drain_window(self) -> tuple[int, int, int] | None:
        """``(drain_lo, drain_hi, drain_hw)`` read consistently under the
        seqlock, or ``None`` when the writer is (or died) mid-update after
        :data:`DRAIN_SPINS` attempts (the caller then treats no handle as
        drainable)."""
        ctl = self.control
        for attempt in range(DRAIN_SPINS):
            s1 = ctl[layout.CTL_DRAIN_SEQ]
            if not s1 & 1:
                lo, hi, hw = ctl[layout.CTL_DRAIN_LO], ctl[layout.CTL_DRAIN_HI], ctl[layout.CTL_DRAIN_HW]
                if ctl[layout.CTL_DRAIN_SEQ] == s1:
                    return lo, hi, hw
            if attempt % 64 == 63:
                time.sleep(0)
        return None

    def _set_drain(self, lo: int, hi: int, hw: int) -> None:
        """Writer: publish the drain window under the seqlock (odd while the
        three words change; a sequence left odd by an interrupted update is
        reused, so the next update always ends even).  ``_drain`` mirrors the
        words; it is set only once they are published (``None`` while an
        update is under way: the writer's storage then repairs the window)."""
        self._drain = None
        ctl = self.control
        seq = ctl[layout.CTL_DRAIN_SEQ] | 1
        ctl[layout.CTL_DRAIN_SEQ] = seq
        ctl[layout.CTL_DRAIN_LO] = lo
        ctl[layout.CTL_DRAIN_HI] = hi
        ctl[layout.CTL_DRAIN_HW] = hw
        ctl[layout.CTL_DRAIN_SEQ] = seq + 1
        self._drain = (lo, hi, hw)

    def _publish_start(self) -> None:
        self.control[layout.CTL_ABS_START] = self._abs_start

    def publish(self) -> None:
        """Writer: make every allocation so far visible to readers (store ``abs_end``)."""
        self._require_writer("publish allocations")
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("publish")
        self.control[layout.CTL_ABS_END] = self._abs_end

    def abs_of(self, monotonic_id: int) -> int:
        """Writer: absolute counter of the live chunk ``monotonic_id``."""
        return candidate_abs(monotonic_id, self._abs_end)

    @property
    def monotonic_id_start(self) -> int:
        """Id of the oldest live chunk (== ``monotonic_id_end`` when empty)."""
        abs_start = self._abs_start if self.is_writer else self.published_abs_start()
        return abs_start % self.ID_MAX

    @monotonic_id_start.setter
    def monotonic_id_start(self, value: int) -> None:
        self._jump_ids(value)

    @property
    def monotonic_id_end(self) -> int:
        """Id the next allocation will receive (modulo ``2**31``)."""
        abs_end = self._abs_end if self.is_writer else self.published_abs_end()
        return abs_end % self.ID_MAX

    @monotonic_id_end.setter
    def monotonic_id_end(self, value: int) -> None:
        self._jump_ids(value)

    def _jump_ids(self, value: int) -> None:
        """Writer, empty ring only: make the next id ``value`` (for wrap tests).

        Both absolute counters advance to the next ``k >= abs_end`` with
        ``k % 2**31 == value``; they never move backwards.  The drain window
        of an earlier ``clear()`` is closed.
        """
        self._require_writer("set monotonic ids")
        if not isinstance(value, int) or not 0 <= value < self.ID_MAX:
            raise ValueError(f"monotonic id must be in [0, 2**31), got {value!r}")
        if (value - self._abs_end) % self.ID_MAX == 0:
            return
        if self._abs_start != self._abs_end:
            raise ValueError("monotonic ids can only be set while the ring is empty")
        target = self._abs_end + (value - self._abs_end) % self.ID_MAX
        self._set_drain(target, target, 0)
        self._abs_start = self._abs_end = target
        self._publish_start()
        self.control[layout.CTL_ABS_END] = target

    def warp(self, start: int, monotonic_id: int) -> None:
        """Writer, empty ring only: the warp hook for boundary tests.

        Puts the ring in the state it would reach after allocating and freeing
        chunks until ``data_buffer_start == data_buffer_end == start`` (bytes,
        ``0 <= start < data_buffer_size``) and the next id is ``monotonic_id``
        (``0 <= monotonic_id < 2**31``), so id wraparound and tail edges are
        reached without 2**31 allocations.  The absolute counters advance as in
        :meth:`_jump_ids` (never backwards) and are published; the drain window
        of an earlier ``clear()`` is closed.  Raises ``ValueError`` on a
        non-empty ring or an out-of-range argument; ``NotWriter`` on a reader.
        """
        self._require_writer("warp the ring")
        if self._abs_start != self._abs_end or self.metadata:
            raise ValueError("the ring can only be warped while it is empty")
        if not isinstance(start, int) or not 0 <= start < self.data_buffer_size:
            raise ValueError(f"start must be in [0, {self.data_buffer_size}), got {start!r}")
        self._jump_ids(monotonic_id)
        self._set_drain(self._abs_end, self._abs_end, 0)
        self.data_buffer_start = self.data_buffer_end = start

    # ------------------------------------------------------------ allocation
    def plan(self, size: int) -> tuple[int, int, int]:
        """Writer: ``(virtual address, chunk bytes, abs counter)`` of an
        allocation of ``size`` payload bytes, changing nothing.

        Raises:
            OutOfSpace: no contiguous room, or ``max_chunks`` chunks are live.
            ValueError: ``size`` is not a positive int.
        """
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"Size must be a positive int, got {size!r}")
        B = self.data_buffer_size
        n = size + self.MD_SIZE
        if n > layout.INT32_MAX:
            raise OutOfSpace(f"Chunk of {n} bytes does not fit the int32 size field")
        if self._abs_end - self._abs_start >= min(self.max_chunks, self.ID_MAX):
            raise OutOfSpace(f"{self._abs_end - self._abs_start} chunks are live, the most this ring holds "
                             f"(max_chunks={self.max_chunks})")
        end = self.data_buffer_end
        new_end = (end // B + 1) * B if end % B + n > B else end
        if new_end + n - self.data_buffer_start > B:
            raise OutOfSpace(_OOM_MESSAGE)
        return new_end, n, self._abs_end

    def prepare_reuse(self, abs_counter: int, phys_end: int) -> tuple[int, ...]:
        """Writer: make allocation ``abs_counter`` (ending at physical byte
        ``phys_end``) safe to write, and return the readers' ack words for it.

        Ends the drain of the pre-clear chunks the allocation reaches (bytes
        below ``phys_end``: ``drain_hw`` rises), fences, and waits until no
        reader still reads a chunk that is no longer live (a hazard pin below
        ``abs_start``): such a wait ends when the pin word changes or its
        reader's slot is released (the reader closed or died).

        Raises:
            ReaderStalled: a live reader held such a pin for :data:`PIN_TIMEOUT`
                seconds.  No chunk, index or counter changed; the pre-clear
                chunks the allocation would have reached no longer drain.
        """
        lo, hi, hw = self._drain or self._drain_words()
        if lo < hi and phys_end > hw:
            if phys_end >= self.data_buffer_size:  # every byte reached: the drain is over
                self._set_drain(hi, hi, 0)
            else:
                self._set_drain(lo, hi, phys_end)
        fence()
        table = self.reader_table
        if table is None:
            return ()
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("pin_scan")
        pins = table.pins()
        if any(pins):  # else no reader is reading anything: nothing to wait for
            abs_start = self._abs_start
            for reader, word in enumerate(pins):
                if word and layout.pinned_abs(word, self._abs_end) < abs_start:
                    self._wait_unpinned(table, reader, word)
        return table.acks(abs_counter)

    def live_leases(self) -> list[tuple[int, tuple[int, int, int, int]]]:
        """Writer: ``(slot, lease)`` of every zero-copy lease the writer must
        respect (:meth:`shmspec.impl.readers.ReaderTable.live_leases`: a dead
        reader's leases are void, and with a lease time so is a
        ``get(copy=False)`` still building its value past it)."""
        table = self.reader_table
        return [] if table is None else table.live_leases()

    def check_leases(self, phys_start: int, phys_end: int) -> None:
        """Writer: refuse to write bytes ``[phys_start, phys_end)`` of the data
        region while a live reader holds a zero-copy lease on any of them (a
        value of ``get(..., copy=False)`` still points there; SEMANTICS ALIAS).
        Called after :meth:`prepare_reuse`, whose fence and pin waits come first.

        Why a lease cannot be missed (x86-64 TSO: stores are seen in program
        order, loads are not moved before earlier loads): a reader writes its
        lease entry (offset, bytes and time, then the entry's word, then the
        ``leases`` count) while its hazard pin is up, and clears the pin only
        after.  The writer retired the chunk (published ``abs_start``, or
        ``drain_hw`` for a pre-clear one), fenced, read every pin, waited
        for those on chunks no longer live, and only then reads the leases
        here.  A reader whose pin the writer saw cleared had written its entry
        before (so the writer sees it); a reader whose pin the writer saw
        absent pinned after the writer's fence, so its validation saw the
        chunk retired and it took no lease.  On a store with a lease time the
        reader fences after its entry and checks that its epoch was not
        revoked (the writer revokes, fences, and only then reads leases):
        either the writer sees the entry or the reader sees the revocation
        and gives the lease back with ``StaleHandle``.

        Raises:
            OutOfSpace: naming the reader slot, its pid, the chunk and how long
                its lease has been held.  Nothing changed but the drain (see
                :meth:`prepare_reuse`).
        """
        table = self.reader_table
        if table is None:
            return
        for reader, (word, off, nbytes, since_us) in self.live_leases():
            if off < phys_end and phys_start < off + nbytes:
                held = max(0.0, time.monotonic_ns() / 1e3 - since_us) / 1e6
                abs_counter = layout.pinned_abs(word, self._abs_end)
                raise OutOfSpace(
                    f"{_OOM_MESSAGE}: reader slot {reader} (pid {table.owner_pid(reader)}) has held a zero-copy "
                    f"lease on chunk id {abs_counter % self.ID_MAX} (bytes {off}..{off + nbytes}) for "
                    f"{held:.1f} s; it ends when that reader's value of get(copy=False) is garbage-collected")

    def _drain_words(self) -> tuple[int, int, int]:
        ctl = self.control
        return ctl[layout.CTL_DRAIN_LO], ctl[layout.CTL_DRAIN_HI], ctl[layout.CTL_DRAIN_HW]

    @staticmethod
    def _wait_unpinned(table: ReaderTable, reader: int, word: int) -> None:
        """Wait until reader ``reader``'s pin is no longer ``word``, or its slot
        is released, or :data:`PIN_TIMEOUT` seconds (``ReaderStalled``).  A
        store with a lease time (``table.lease_us``) waits that long instead
        and then revokes the reader's lease (it never raises ``ReaderStalled``);
        a revoked lease ends the wait at once.  With
        a yield-point hook attached, every round is the ``pin_wait`` point (a
        scheduler lets the reader move in between)."""
        words, at = table.words, table.pin_index(reader)
        deadline = None
        spins = 0
        lease = table.lease_us / 1e6
        while words[at] == word:
            if lease and (table.revoked(reader) or table.revoked_pins.get(reader) == word):
                return  # revoked before: that read no longer holds memory
            spins += 1
            hooked = yieldpoints.HOOK is not None
            if hooked:
                yieldpoints.HOOK("pin_wait")
                if words[at] != word:
                    return
                hooked = not yieldpoints.OBSERVER  # an observer's hook: the wait paces itself
            if not hooked and spins < 200:
                continue
            if deadline is None:
                deadline = time.monotonic() + (lease or PIN_TIMEOUT)
            if (hooked or spins % 16 == 0) and not table.alive(reader):
                return
            if time.monotonic() > deadline:
                if lease:  # LEASE: one read lasted past the lease time: revoke it and go on
                    table.revoke(reader)
                    return
                raise ReaderStalled(PIN_TIMEOUT, reader, table.owner_pid(reader))
            if not hooked:
                time.sleep(0 if spins < 2000 else 0.0005)

    def write_header(self, address: int, monotonic_id: int, n: int) -> None:
        """Writer: the ``[id][chunk_size]`` header of a planned chunk."""
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("header_write")
        _CHUNK_HEADER_PACK(self.data_region, address % self.data_buffer_size, monotonic_id, n)

    def reserve_buf(self, size: int) -> tuple[int, int]:
        """Writer: plan, make safe and head a chunk of ``size`` payload bytes,
        without committing it: the ring's state is unchanged until
        :meth:`commit_buf` (a reserved chunk is dropped by the next
        reservation or :meth:`rollback_buf`).  Returns ``(address, id)``.

        Raises:
            OutOfSpace: see :meth:`plan` (nothing changed).
            ReaderStalled: see :meth:`prepare_reuse` (nothing committed).
        """
        self._require_writer("allocate buffers")
        address, n, abs_counter = self.plan(size)
        phys = address % self.data_buffer_size
        base = self.prepare_reuse(abs_counter, phys + n)
        self.check_leases(phys, phys + n)
        monotonic_id = abs_counter % self.ID_MAX
        self.write_header(address, monotonic_id, n)
        self._pending = (address, monotonic_id, n, abs_counter, base)
        return address, monotonic_id

    def commit_buf(self, pending: tuple[int, int, int, int, tuple[int, ...]]) -> None:
        """Writer: record a reserved chunk and publish it (``abs_end``).

        Idempotent (every field is assigned, never incremented), so an
        interrupted commit can simply be run again."""
        address, monotonic_id, n, abs_counter, base = pending
        self.metadata[monotonic_id] = address
        self._sizes[monotonic_id] = n
        self._base[abs_counter] = base
        self.data_buffer_end = address + n
        self._abs_end = abs_counter + 1
        self.publish()
        self._pending = None

    def rollback_buf(self, address: int, monotonic_id: int) -> None:
        """Writer: drop the latest uncommitted :meth:`reserve_buf`.

        The header bytes left behind lie in free space that no published
        counter covers."""
        self._require_writer("roll back allocations")
        pending = self._pending
        if pending is None or pending[0] != address or pending[1] != monotonic_id:
            raise ValueError(f"No unpublished allocation {address}:{monotonic_id} to roll back")
        self._pending = None

    def allocate_buf(self, size: int) -> tuple[int, int]:
        """Writer: allocate a chunk for ``size`` payload bytes and publish it.

        Returns ``(virtual address, monotonic_id)``.  Raises ``OutOfSpace``
        (``MemoryError``, vLLM's message) when there is no contiguous room,
        with nothing changed; ``NotWriter`` on a reader.
        """
        handle = self.reserve_buf(size)
        self.commit_buf(self._pending)
        return handle

    def chunk_size(self, monotonic_id: int) -> int:
        """Writer: the chunk size (header included, bytes) of a live chunk."""
        self._require_writer("inspect chunk sizes")
        return self._sizes[monotonic_id]

    def reads_since_alloc(self, monotonic_id: int) -> tuple[int, ...]:
        """Writer: per reader slot, the reads acknowledged for live chunk
        ``monotonic_id`` (``()`` without a reader table)."""
        table = self.reader_table
        if table is None:
            return ()
        abs_counter = self.abs_of(monotonic_id)
        base = self._base.get(abs_counter) or (0,) * table.n_readers
        return tuple(map(sub, table.acks(abs_counter), base))

    @contextmanager
    def access_buf(self, address: int) -> Iterator[tuple[memoryview, tuple[int, int]]]:
        """Yield ``(payload view, (id, chunk_size))`` of the chunk header at ``address % B``.

        Mirrors vLLM's unchecked accessor: the header bytes are trusted, but
        the view is clamped to the data region.  The view is released on exit.
        The object store itself never uses this on the read path.
        """
        data = self.data_region
        B = self.data_buffer_size
        offset = address % B
        header = bytes(data[offset : offset + self.MD_SIZE])
        if len(header) < self.MD_SIZE:
            header = header.ljust(self.MD_SIZE, b"\0")
        chunk_id = bytes_to_int32(header[: self.ID_NBYTES])
        size = bytes_to_int32(header[self.ID_NBYTES :])
        lo = min(offset + self.MD_SIZE, B)
        hi = min(max(offset + size, lo), B)
        with data[lo:hi] as view:
            yield view, (chunk_id, size)

    # --------------------------------------------------------------- freeing
    def reclaim_plan(
        self, is_free_fn: Callable[[int, memoryview], bool], nbytes: int | None = None
    ) -> tuple[list[tuple[int, int, int, int]], tuple[int, int] | None]:
        """Writer: what a FIFO reclaim of up to ``nbytes`` would change, changing
        nothing: ``(retires, shifted)``, one ``(abs, id, new start, new end)``
        per chunk to drop, oldest first, and the final ``(start, end)`` shifted
        down by ``B`` when ``start >= B`` (else None).

        The policy (vLLM 0.11 - 0.33): while a live chunk remains and fewer
        than ``nbytes`` (default: the whole buffer) are freed, ask
        ``is_free_fn(id, view)`` about the oldest (``view``: its bytes after
        the header); if true it goes and ``start`` moves forward (mod ``B``)
        to the next live chunk, or ``start = end = 0`` when none is left;
        if false, stop.  The ``free_step`` yield point comes before each
        chunk's retirement is planned (:meth:`free_buf`'s ``retire`` after
        the last check)."""
        data = self.data_region
        B = self.data_buffer_size
        if nbytes is None:
            nbytes = B
        start, end, abs_counter = self.data_buffer_start, self.data_buffer_end, self._abs_start
        retires: list[tuple[int, int, int, int]] = []
        freed = 0
        while abs_counter < self._abs_end and freed < nbytes:
            oldest = abs_counter % self.ID_MAX
            offset = self.metadata[oldest] % B
            size = self._sizes[oldest]
            with data[offset + self.MD_SIZE : offset + size] as view:
                if not is_free_fn(oldest, view):
                    break
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("free_step")
            if abs_counter + 1 < self._abs_end:
                start += (self.metadata[(abs_counter + 1) % self.ID_MAX] - start) % B
            else:
                start = end = 0
            retires.append((abs_counter, oldest, start, end))
            abs_counter += 1
            freed += size
        return retires, ((start - B, end - B) if start >= B else None)

    def retire(self, plan: tuple[int, int, int, int]) -> None:
        """Writer: drop the oldest chunk as planned (idempotent): ``abs_start``
        is published first, before the memory can be reused."""
        abs_counter, oldest, start, end = plan
        self.control[layout.CTL_ABS_START] = abs_counter + 1
        self.metadata.pop(oldest, None)
        self._sizes.pop(oldest, None)
        self._base.pop(abs_counter, None)
        self.data_buffer_start = start
        self.data_buffer_end = end
        self._abs_start = abs_counter + 1  # last: apply_reclaim re-applies until this is set

    def apply_reclaim(self, plan: tuple[list[tuple[int, int, int, int]], tuple[int, int] | None]) -> None:
        """Writer: apply a :meth:`reclaim_plan` (idempotent: a retirement
        already applied is applied again to the same values)."""
        retires, shifted = plan
        for retire in retires:
            if retire[0] >= self._abs_start:
                self.retire(retire)
        if shifted is not None and self.data_buffer_start >= self.data_buffer_size:
            self.data_buffer_start, self.data_buffer_end = shifted

    def apply(self, kind: str, plan: Any) -> None:
        """Apply one planned change: ``"reclaim"`` (:meth:`apply_reclaim`) or
        ``"clear"`` (:meth:`apply_clear`)."""
        if kind == "reclaim":
            self.apply_reclaim(plan)
        elif kind == "clear":
            self.apply_clear(plan)
        else:
            raise ValueError(f"unknown ring change {kind!r}")

    def free_buf(
        self,
        is_free_fn: Callable[[int, memoryview], bool],
        nbytes: int | None = None,
        journal: Any = None,
    ) -> Iterable[int]:
        """Writer: reclaim chunks oldest-first (FIFO, vLLM 0.11 - 0.33 policy;
        see :meth:`reclaim_plan`), all planned first and then applied in one
        step.  Returns the freed ids in order (may wrap past ``2**31``).

        ``journal`` (impl's storage): an object whose ``apply("reclaim",
        plan)`` performs the change, so that an interrupted one can be
        completed later; by default it is applied directly.
        """
        self._require_writer("free buffers")
        plan = self.reclaim_plan(is_free_fn, nbytes)
        first_id = self.monotonic_id_start
        if plan[0] and yieldpoints.HOOK is not None:
            yieldpoints.HOOK("retire")
        if plan[0] or plan[1] is not None:
            (journal or self).apply("reclaim", plan)
        last_id = self.monotonic_id_start
        if last_id >= first_id:
            return range(first_id, last_id)
        return chain(range(first_id, self.ID_MAX), range(0, last_id))

    def clear_plan(self) -> tuple[int, int]:
        """Writer: the drain window a clear opens: ``(abs_start, abs_end)``."""
        return self._abs_start, self._abs_end

    def apply_clear(self, plan: tuple[int, int]) -> None:
        """Writer: apply a :meth:`clear_plan` (idempotent)."""
        lo, hi = plan
        self._set_drain(lo, hi, 0)
        self._abs_start = hi
        self._publish_start()
        self.metadata.clear()
        self._sizes.clear()
        self._base.clear()
        self._pending = None
        self.data_buffer_start = 0
        self.data_buffer_end = 0

    def clear(self) -> None:
        """Writer: drop every chunk; ids keep increasing (vLLM >= 0.32).

        ``monotonic_id_start = monotonic_id_end`` and ``start = end = 0``.
        The dropped chunks form the drain window: a handle issued before the
        clear resolves to its own object until an allocation reaches its
        bytes (CLR, vLLM's drain contract; docs/impl-protocol.md).
        """
        self._require_writer("clear the buffer")
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("clear")
        self.apply_clear(self.clear_plan())

    # ---------------------------------------------------------------- close
    def close(self) -> None:
        """Close the mapping; the writer also unlinks the segment (and its
        reader table) -- not a forked copy of the writer, whose going away
        must leave the parent's store alone.

        Idempotent; ``FileNotFoundError`` on unlink is ignored (vLLM >= 0.15).
        """
        if self._closed or not hasattr(self, "shared_memory"):
            return
        self._closed = True
        table, self.reader_table = self.reader_table, None
        try:
            if table is not None:
                table.close()
        finally:
            for view in (self._ctl, self._data):
                if view is not None:
                    view.release()
            self._ctl = None
            self._data = None
            owner = self.is_writer and FORK_GENERATION[0] == self._generation
            segment.release_segment(self.shared_memory, unlink=owner)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
