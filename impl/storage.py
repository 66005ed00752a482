"""Key/value object store on top of :class:`SingleWriterShmRingBuffer`.

Drop-in for vLLM 0.32/0.33's ``SingleWriterShmObjectStorage`` (same
constructor, attributes, methods, error types and messages), hardened so that
property NRR holds whatever bytes payloads contain, whatever a reader does and
whether or not the writer has the readers' lock.  The protocol (hazard pins,
per-reader acks, drain after ``clear()``) is stated in docs/impl-protocol.md;
what each fault does is established by ``tests/conformance/concurrency/test_faults.py``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from shmspec.model.errors import (
    BadHandleFields,
    BadSignature,
    DuplicateKey,
    MissingReaderLock,
    NotWriter,
    ObjectTooLarge,
    OutOfSpace,
    StaleHandle,
    UnknownKey,
    WrongProcess,
)

from . import layout, signing, yieldpoints
from .layout import candidate_abs, generation, int32_to_bytes, pin_word
from .readers import FORK_GENERATION, ReaderTable, fence
from .ring import SingleWriterShmRingBuffer
from .serde import ObjectSerde, PickleSerde
from .zerocopy import ReaderLeases

logger = logging.getLogger(__name__)

CLOSE_WAIT = 2.0
"""Seconds a reader view's ``close()`` waits for a ``get`` running in another
thread before it leaves the close to that read (module-level, read at every
close)."""

LEASE_POLICIES = ("forfeit", "refuse")
"""What the writer does with the reads a *gone* reader still owed (its view
closed, or its process died: the kernel dropped its slot's OFD lock).
``forfeit`` (the default, :attr:`SingleWriterShmObjectStorage.LEASE_POLICY`):
they are forfeited at the writer's next reclaim, so a dead reader never
stops the writer (SEMANTICS LEASE); a reader that claims the slot later
finds those handles stale.  ``refuse``: they stay owed until a reader that
claims the slot makes them (vLLM's behaviour: until then a full ring raises
``OutOfSpace``, which names the slot)."""

_CHUNK_HEADER_UNPACK = layout.CHUNK_HEADER.unpack_from
_ZERO_COUNT = int32_to_bytes(0)
_OBJECT_HEADER, _MD_SIZE = layout.OBJECT_HEADER, layout.MD_SIZE
_CTL_ABS_START, _CTL_ABS_END = layout.CTL_ABS_START, layout.CTL_ABS_END


@dataclass
class ShmObjectStorageHandle:
    """Picklable description of a store, from which a reader view is rebuilt.

    ``ring_buffer_handle`` is ``(data_buffer_size, segment name)``;
    ``reader_lock`` must be a process-shared lock for readers (vLLM 0.11+ shape).
    """

    max_object_size: int
    n_readers: int
    ring_buffer_handle: tuple[int, str]
    serde_class: type[ObjectSerde]
    reader_lock: Any | None


_SERDE_BASES = frozenset({"object", "ABC", "ObjectSerde", "Generic", "Protocol"})


def _serde_name(serde_class: Any) -> str:
    """What the reader table records of a serde class: its *family*, the
    ``__qualname__`` of its most basic class below ``ObjectSerde`` (a
    subclass that records or pauses, as harnesses build for their readers,
    reads the same bytes as its base), or its ``wire_name`` attribute when
    it has one.  Not the module, which differs between a spawned child's
    ``__mp_main__`` and the parent's ``__main__``."""
    wire = getattr(serde_class, "wire_name", None)
    if isinstance(wire, str) and wire:
        return wire
    mro = getattr(serde_class, "__mro__", None) or type(serde_class).__mro__
    for cls in reversed(mro):
        if cls.__name__ not in _SERDE_BASES:
            return cls.__qualname__
    return mro[0].__qualname__


def _as_bytes_view(obj: Any) -> memoryview:
    if type(obj) is memoryview and obj.ndim == 1 and obj.format == "B":
        return obj  # already flat bytes: no second view
    view = memoryview(obj)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _check_serialized(
    data: Any, data_nbytes: Any, metadata: Any, md_nbytes: Any
) -> tuple[list[memoryview], memoryview]:
    """Validate a serde's output before anything is allocated.

    Returns the data pieces and the metadata as flat byte views.  Raises
    ``ValueError`` when types or declared sizes do not match the bytes.
    """
    if (type(data) is list and len(data) == 1 and type(data_nbytes) is int and type(md_nbytes) is int
            and type(metadata) is bytes and len(metadata) == md_nbytes):
        # The common case (one buffer, bytes metadata: vLLM's MsgpackSerde on a
        # tensor, BufferSerde): the checks below, without the generic loops.
        piece = data[0]
        if not (type(piece) is memoryview and piece.ndim == 1 and piece.format == "B"):
            try:
                piece = _as_bytes_view(piece)
            except TypeError as exc:
                raise ValueError(f"Unsupported data type for serialization: {exc}") from exc
        if piece.nbytes != data_nbytes:
            raise ValueError(f"Serializer declared {data_nbytes} data bytes but returned {piece.nbytes}")
        return [piece], memoryview(metadata)
    if not (type(data_nbytes) is int and type(md_nbytes) is int and data_nbytes >= 0 and md_nbytes >= 0):
        for name, value in (("data_nbytes", data_nbytes), ("md_nbytes", md_nbytes)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Serializer returned an invalid {name}: {value!r}")
    if type(data) is list:  # the common case (buffers): skip the isinstance chain
        try:
            pieces = [_as_bytes_view(item) for item in data]
        except TypeError as exc:
            raise ValueError(f"Unsupported data type for serialization: {exc}") from exc
    elif isinstance(data, (bytes, bytearray, memoryview)):
        pieces = [_as_bytes_view(data)]
    elif isinstance(data, list):
        try:
            pieces = [_as_bytes_view(item) for item in data]
        except TypeError as exc:
            raise ValueError(f"Unsupported data type for serialization: {exc}") from exc
    else:
        raise ValueError(f"Unsupported data type for serialization: {type(data)}")
    try:
        md_view = _as_bytes_view(metadata)
    except TypeError as exc:
        raise ValueError(f"Unsupported metadata type for serialization: {type(metadata)}") from exc
    total = sum(piece.nbytes for piece in pieces)
    if total != data_nbytes:
        raise ValueError(f"Serializer declared {data_nbytes} data bytes but returned {total}")
    if md_view.nbytes != md_nbytes:
        raise ValueError(
            f"Serializer declared {md_nbytes} metadata bytes but returned {md_view.nbytes}"
        )
    return pieces, md_view


class SingleWriterShmObjectStorage:
    """Single-writer, multi-reader object store in shared memory.

    ``SingleWriterShmObjectStorage(max_object_size, n_readers, ring_buffer,
    serde_class=PickleSerde, reader_lock=None, lease_policy=None,
    lease_seconds=None)`` (the last two impl's: :data:`LEASE_POLICIES`,
    default :attr:`LEASE_POLICY`; seconds or None, default
    :attr:`LEASE_SECONDS`; another value is a ``ValueError``).  The writer view is the one
    whose ``ring_buffer`` was created (``create=True``); building it creates
    the reader table (``n_readers`` slots; ``SharedMemoryFull`` if
    ``/dev/shm`` cannot hold it).  Reader views attach to both segments and
    must get a process-shared lock, else :class:`MissingReaderLock`
    (``ValueError("Lock must be provided for readers.")``, vLLM 0.11+); the
    lock is required but not taken on any path.  A reader view claims one of
    the ``n_readers`` slots (:class:`~shmspec.model.errors.TooManyReaders`
    when all are held) and checks ``n_readers``, ``max_object_size`` and
    the serde class's family (its most basic class below ``ObjectSerde``, or
    its ``wire_name``) against the writer's
    (:class:`~shmspec.model.errors.GeometryMismatch`; vLLM 0.33.0 checks
    none of them, and a reader with another serde misreads every object).

    Sizes are in bytes; ids are modulo ``2**31``.  Object bytes are
    ``4 + md_nbytes + data_nbytes`` (4 reserved bytes, vLLM's in-band count)
    and must not exceed ``max_object_size``.  Writer-side indexes (vLLM
    names): ``key_index: key -> (address, id)``, ``id_index: id -> key``,
    ``writer_flag: id -> promises``.  Writer-only operations on a reader raise
    :class:`NotWriter`.

    Reclaim (RC, per reader): a chunk is reclaimable when it is not protected
    by :meth:`touch` and *every* reader slot has acknowledged at least
    ``writer_flag[id]`` reads of it, so a reader that reads a handle twice
    never stands in for another (PROM).  A writer built with the readers'
    lock holds no slot; its gets are counted (vLLM 0.33.0) and make up any
    slot's shortfall (:meth:`stand_in_reads`), so ``n_readers`` of them
    free a chunk no reader read.  Reader leases (LEASE):
    with ``lease_policy="forfeit"`` the reads a gone reader (view closed,
    process dead) still owed are forfeited at the next reclaim, so a dead
    reader never stops the writer; ``OutOfSpace`` names the reader slots
    whose reads pin the oldest chunk.

    Reader ``get`` (the hazard-pin protocol, docs/impl-protocol.md): fields
    and signature are checked before any byte of the data region is read; the
    reader publishes a pin on the handle's allocation, fences, validates it
    against the control block (live, or a drain chunk of the latest
    ``clear()`` whose bytes no allocation reached), checks the header, lets
    the serde deserialize straight from shared memory, acknowledges the read
    and unpins.  The writer reuses memory only after every pin on a chunk that
    is no longer live is released, so a reader never deserializes or writes
    memory the writer reuses, with or without the lock, forked or spawned.
    Memory ordering: x86-64 (TSO) plus the fence's full barrier.

    ``clear()`` (CLR, vLLM's drain contract): a handle issued before the clear
    resolves to its own object until an allocation reaches its bytes, then
    raises :class:`StaleHandle`; never to another object.

    One writer (SW): writer operations are serialized by a private lock, and a
    forked copy of the writer raises ``WrongProcess``.  Exception safety (EXC):
    every change of the writer's state is planned first and applied in one
    idempotent step; one that an asynchronous exception interrupted is
    completed by the next writer operation (and by reading ``key_index``), so
    a failed put, reclaim or clear leaves the store as before or as after it
    (a put interrupted after its reclaim: as after that reclaim, a
    ``free_unused`` of chunks every reader had read; ``tests/impl/test_impl_resources.py``
    raises KeyboardInterrupt at every line of each operation).
    """

    LEASE_POLICY = "forfeit"
    """The writer's lease policy when the constructor is given none (one of
    :data:`LEASE_POLICIES`)."""
    LEASE_SECONDS: float | None = None
    """The writer's lease time when the constructor is given none: None, no
    lease time (a stopped reader's pin makes a put wait ``PIN_TIMEOUT``, then
    ``ReaderStalled``); seconds, a get copies its bytes out under its pin
    and the writer revokes the lease of a read that lasts longer."""

    writer_uses_reader_lock = False
    """impl's writer takes no lock on any path (harnesses built version-1
    writers with the readers' lock to fence reclaims; kept for old callers)."""

    def __init__(
        self,
        max_object_size: int,
        n_readers: int,
        ring_buffer: SingleWriterShmRingBuffer,
        serde_class: type[ObjectSerde] = PickleSerde,
        reader_lock: Any | None = None,
        lease_policy: str | None = None,
        lease_seconds: float | None = None,
    ):
        policy = self.LEASE_POLICY if lease_policy is None else lease_policy
        if policy not in LEASE_POLICIES:
            raise ValueError(f"lease_policy must be one of {', '.join(map(repr, LEASE_POLICIES))}, got {policy!r}")
        self.lease_policy = policy
        if lease_seconds is None:
            lease_seconds = self.LEASE_SECONDS
        if lease_seconds is not None and (isinstance(lease_seconds, bool) or not isinstance(lease_seconds, (int, float))
                                          or not 0 < lease_seconds < 1e6):
            raise ValueError(f"lease_seconds must be a number of seconds in (0, 1e6) or None, got {lease_seconds!r}")
        for name, value in (("max_object_size", max_object_size), ("n_readers", n_readers)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.max_object_size = max_object_size
        self.n_readers = n_readers
        self.serde_class = serde_class
        self.ring_buffer = ring_buffer
        self.is_writer = ring_buffer.is_writer
        self.flag_bytes = layout.COUNT_NBYTES
        if not self.is_writer and reader_lock is None:
            raise MissingReaderLock()
        self.ser_de = serde_class()
        self._keeps_buffer = bool(getattr(self.ser_de, "keeps_buffer", False))
        self._reader_lock = reader_lock
        self._pid = os.getpid()
        self._generation = FORK_GENERATION[0]
        self._slot: int | None = None
        self._signer_cache: signing.Signer | None = None
        name = ring_buffer.shared_memory.name
        if self.is_writer:
            if ring_buffer.reader_table is not None:
                raise ValueError("This ring buffer already belongs to a writer storage")
            self._key_index: dict[str, tuple[int, int]] = {}
            self._id_index: dict[int, str] = {}
            self._writer_flag: dict[int, int] = {}
            self._stand_in: dict[int, int] = {}
            self._touched: set[int] = set()
            self.forfeited = {}
            self._forfeit_seen: set[int] = set()
            self._forfeit_logged: set[tuple[int, int]] = set()
            self._intent: tuple | None = None
            self._wlock = threading.RLock()
            self._pins_seen: dict[int, tuple[int, float]] = {}
            ring_buffer.reader_table = ReaderTable.create(
                name, n_readers, ring_buffer.max_chunks, ring_buffer.data_buffer_size, max_object_size,
                lease_us=round(lease_seconds * 1e6) if lease_seconds else 0, serde_name=_serde_name(serde_class))
        else:
            table = ReaderTable.attach(name, n_readers, max_object_size, _serde_name(serde_class))
            try:
                self._slot = table.claim()
            except BaseException:
                table.close()
                raise
            ring_buffer.reader_table = table
            self._rlock = threading.Lock()
            self._closing = False
            self._seq = 0
            # per-view constants of the read path (released with the segments)
            self._words = table.words
            self._pin_at = table.pin_index(self._slot)
            self._ack_at = table.ack_index(self._slot, 0)
            self._max_chunks = table.max_chunks
            self._scratch: bytearray | None = None  # the lease time's private copy, reused (see _leased_get)
            self._epoch_at = table.slot_word(self._slot, layout.SLOT_EPOCH)
            self._revoked_at = table.slot_word(self._slot, layout.SLOT_REVOKED)
            self._shared_at = table.slot_word(self._slot, layout.SLOT_SHARED_READ)
            self._leases: ReaderLeases | None = None  # made at the first get(copy=False)
        self.lease_seconds = ring_buffer.reader_table.lease_us / 1e6 or None
        """The writer's lease time in seconds (readers read it from the table), or None."""

    # ------------------------------------------------------ writer indexes
    @property
    def key_index(self) -> dict[str, tuple[int, int]]:
        """Writer: ``key -> (address, id)`` of every cached object."""
        self._settled()
        return self._key_index

    @property
    def id_index(self) -> dict[int, str]:
        """Writer: ``id -> key`` of every cached object."""
        self._settled()
        return self._id_index

    @property
    def writer_flag(self) -> dict[int, int]:
        """Writer: ``id -> promises`` (puts and ``get_cached`` of the key)."""
        self._settled()
        return self._writer_flag

    def _settled(self) -> None:
        """Settle before the indexes are read, unless this thread is inside a
        writer operation (a harness reading them from a yield point sees that
        operation's state as it is)."""
        if not self.is_writer:
            raise AttributeError("reader views have no writer indexes")
        if (self._intent is not None or self.ring_buffer._pending is not None) and not self._wlock._is_owned():
            with self._wlock:
                self._settle()

    # One writer operation is ``nested = self._open_op(name)``, then ``with
    # self._wlock: self._begin(nested)`` and its body: the writer's private
    # lock is held by a ``with`` statement (so no asynchronous exception can
    # leave it held), threads are serialized (SW), a forked copy is refused,
    # and a change an exception interrupted is completed first (``_settle``),
    # unless the operation runs inside another one of this thread.
    def _open_op(self, operation: str) -> bool:
        """Raise :class:`NotWriter` on a reader; whether this thread already
        holds the writer's lock (a nested operation)."""
        if not self.is_writer:
            raise NotWriter(operation)
        return self._wlock._is_owned()

    def _begin(self, nested: bool) -> None:
        if FORK_GENERATION[0] != self._generation:
            raise WrongProcess("writer", self._pid, os.getpid())
        if not nested:
            self._settle()

    # ------------------------------------------- planned changes (EXC, SW)
    def _settle(self) -> None:
        """Complete the change an exception interrupted, drop an uncommitted
        reservation, and close a drain window left half-written."""
        intent = self._intent
        if intent is not None:
            self._apply_intent(intent)
            self._intent = None
        ring = self.ring_buffer
        ring._pending = None
        if ring._drain is None:  # an update of the drain window was interrupted
            hi = ring.control[layout.CTL_DRAIN_HI]
            ring._set_drain(hi, hi, 0)

    def _apply_intent(self, intent: tuple) -> None:
        kind = intent[0]
        if kind == "put":
            _, key, pending = intent
            address, monotonic_id = pending[0], pending[1]
            self._writer_flag[monotonic_id] = 1
            self._stand_in.pop(monotonic_id, None)
            self._key_index[key] = (address, monotonic_id)
            self._id_index[monotonic_id] = key
            self.ring_buffer.commit_buf(pending)
        elif kind == "reclaim":
            _, plan, keys = intent
            self.ring_buffer.apply_reclaim(plan)
            for (_, monotonic_id, _, _), key in zip(plan[0], keys):
                if key is not None and self._key_index.get(key, (None, None))[1] == monotonic_id:
                    del self._key_index[key]
                self._id_index.pop(monotonic_id, None)
                self._writer_flag.pop(monotonic_id, None)
                self._stand_in.pop(monotonic_id, None)
                self._touched.discard(monotonic_id)
                self._forfeit_seen.discard(monotonic_id)
        elif kind == "clear":
            self.ring_buffer.apply_clear(intent[1])
            self._key_index.clear()
            self._id_index.clear()
            self._writer_flag.clear()
            self._stand_in.clear()
            self._touched.clear()
            self._forfeit_seen.clear()
        elif kind == "promise":
            _, monotonic_id, count = intent
            self._writer_flag[monotonic_id] = count
            self._touched.discard(monotonic_id)
        else:  # pragma: no cover - a bug of ours
            raise AssertionError(f"unknown intent {kind!r}")

    def _do(self, intent: tuple) -> None:
        self._intent = intent
        self._apply_intent(intent)
        self._intent = None

    def apply(self, kind: str, plan: Any) -> None:
        """The ring's journal (``free_buf(..., journal=self)``): a whole
        reclaim is one intent, and the reclaimed chunks' keys go with it."""
        if kind == "reclaim":
            self._do(("reclaim", plan, [self._id_index.get(r[1]) for r in plan[0]]))
        else:
            self._do((kind, plan))

    # ---------------------------------------------------------------- helpers
    def _require_writer(self, operation: str) -> None:
        if not self.is_writer:
            raise NotWriter(operation)

    def _secret(self) -> bytes:
        return self.ring_buffer.get_auth_secret()

    def _signer(self) -> signing.Signer:
        """The HMAC state for the segment's secret, built at first use (the
        secret never changes while the segment exists); once the ring is
        closed this raises as :meth:`_secret` does."""
        signer = self._signer_cache
        if signer is None or self.ring_buffer._closed:
            signer = self._signer_cache = signing.Signer(self._secret())
        return signer

    def _signature_for(self, key: str, address: int, monotonic_id: int) -> bytes:
        gen = generation(self.ring_buffer.abs_of(monotonic_id))
        return self._signer().sign(key, address, monotonic_id, gen)

    # ------------------------------------------------------------- writer API
    def put(self, key: str, value: Any) -> tuple[int, int]:
        """Writer: store ``value`` under ``key``; return its handle ``(address, id)``.

        Order (vLLM 0.33): duplicate key -> :class:`DuplicateKey`; serialize;
        over ``max_object_size`` -> :class:`ObjectTooLarge`; allocate, and on
        ``MemoryError`` run :meth:`free_unused` and allocate once more (a second
        :class:`OutOfSpace` propagates).  Nothing is committed until every byte
        is written; the chunk becomes visible to readers only when ``abs_end``
        is published, after the indexes.  Raises
        :class:`~shmspec.model.errors.ReaderStalled` when a live reader keeps
        reading memory the put must reuse (no index, chunk or counter changed;
        pre-clear handles the put would have overwritten stop draining).
        """
        nested = self._open_op("put objects")
        with self._wlock:
            self._begin(nested)
            if not isinstance(key, str):
                raise BadHandleFields(f"key must be a str, got {type(key).__name__}")
            if key in self._key_index:
                raise DuplicateKey(key)
            data, data_nbytes, metadata, md_nbytes = self.ser_de.serialize(value)
            pieces, md_view = _check_serialized(data, data_nbytes, metadata, md_nbytes)
            object_nbytes = self.flag_bytes + md_nbytes + data_nbytes
            if object_nbytes > self.max_object_size:
                raise ObjectTooLarge(object_nbytes, self.max_object_size)
            ring = self.ring_buffer
            try:
                address, monotonic_id = ring.reserve_buf(object_nbytes)
            except MemoryError:
                self._free_unused()
                try:
                    address, monotonic_id = ring.reserve_buf(object_nbytes)
                except OutOfSpace as exc:
                    raise OutOfSpace(str(exc) + self._head_blockers()) from None
            pending = ring._pending
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("payload_write")
            region = ring.data_region
            pos = address % ring.data_buffer_size + layout.MD_SIZE
            head = self.flag_bytes + md_nbytes
            region[pos : pos + head] = _ZERO_COUNT + md_view  # [0][metadata] in one write
            pos += head
            for piece in pieces:
                region[pos : pos + piece.nbytes] = piece
                pos += piece.nbytes
            self._do(("put", key, pending))
            return address, monotonic_id

    def is_cached(self, key: str) -> bool:
        """Writer: whether ``key`` has a live object."""
        nested = self._open_op("look up keys")
        with self._wlock:
            self._begin(nested)
            return key in self._key_index

    def get_cached(self, key: str) -> tuple[int, int]:
        """Writer: handle of cached ``key``; promises one more read per reader.

        Increments ``writer_flag[id]`` and ends a :meth:`touch` protection
        (vLLM >= 0.32).  Unknown key -> :class:`UnknownKey` (a ``KeyError``).
        """
        nested = self._open_op("look up cached objects")
        with self._wlock:
            self._begin(nested)
            if key not in self._key_index:
                raise UnknownKey(key)
            address, monotonic_id = self._key_index[key]
            self._do(("promise", monotonic_id, self._writer_flag.get(monotonic_id, 0) + 1))
            return address, monotonic_id

    def get_signature(self, key: str) -> list[int]:
        """Writer: the signature of ``key``'s current handle, 32 ints in [0, 255].

        Unknown key -> :class:`UnknownKey`.
        """
        nested = self._open_op("sign handles")
        with self._wlock:
            self._begin(nested)
            if key not in self._key_index:
                raise UnknownKey(key)
            address, monotonic_id = self._key_index[key]
            return list(self._signature_for(key, address, monotonic_id))

    def release_touches(self) -> None:
        """Writer: end every :meth:`touch` protection (vLLM >= 0.32)."""
        nested = self._open_op("release touches")
        with self._wlock:
            self._begin(nested)
            self._touched.clear()

    def default_is_free_check(self, id: int, buf: memoryview) -> bool:
        """Writer: reclaimable iff untouched and every reader slot has
        acknowledged at least ``writer_flag[id]`` reads (RC per reader), or
        the slots that have not are *gone*: claimed by a reader view whose
        lease ended (its process died or it closed; the kernel dropped the
        slot's OFD lock).  A gone reader's promised reads are forfeited
        (LEASE), counted in :attr:`forfeited` and logged once per reader;
        a slot no reader has claimed yet keeps its reads owed, as in vLLM.

        ``buf`` (the chunk after its header) is part of vLLM's signature and
        not read: acknowledgements live in the reader table."""
        if id in self._touched:
            return False
        if self._leased_by(id):
            return False
        owed = self._owed(id)
        if not owed:
            return True
        table = self.ring_buffer.reader_table
        if self.lease_policy != "forfeit" or not all(self._gone(table, r) for r in owed):
            return False
        self._forfeit(id, owed, table)
        return True

    def _leased_by(self, id: int) -> list[tuple[int, tuple[int, int, int, int]]]:
        """Writer: ``(slot, lease)`` of every live reader's zero-copy lease on
        live chunk ``id`` (a value of ``get(copy=False)`` points into it; ALIAS)."""
        leases = self.ring_buffer.live_leases()
        if not leases:
            return []
        low = (self.ring_buffer.abs_of(id) + 1) & layout.PIN_ABS_MASK
        return [(r, lease) for r, lease in leases if lease[0] & layout.PIN_ABS_MASK == low]

    def _owed(self, id: int) -> list[int]:
        """Writer: the reader slots that have acknowledged fewer reads of live
        chunk ``id`` than the writer promised (``writer_flag[id]``; RC)."""
        promised = self._writer_flag.get(id, 0)
        reads = self.ring_buffer.reads_since_alloc(id)
        if not reads or min(reads) >= promised:  # every slot: reads >= promised
            return []
        short = [r for r, n in enumerate(reads) if n < promised]
        if self._stand_in.get(id, 0) >= sum(promised - reads[r] for r in short):
            return []  # the writer's gets (built with the readers' lock) made up the shortfall
        return short

    def _gone(self, table: ReaderTable, r: int) -> bool:
        """Writer: whether reader slot ``r``'s lease has ended: claimed and no
        longer held (dead or closed), or, with a lease time, revoked, or now
        revoked because one pin of it has stayed for the lease time (a read
        that lasted past it: a stopped or hung reader)."""
        if not table.owner_pid(r):
            return False
        if not table.alive(r):
            return True
        lease = self.lease_seconds
        if not lease:
            return False
        word, now = table.words[table.pin_index(r)], time.monotonic()
        if table.revoked(r) or (word and table.revoked_pins.get(r) == word):
            return True
        seen = self._pins_seen.get(r)
        if not word or seen is None or seen[0] != word:
            self._pins_seen[r] = (word, now)
            return False
        if now - seen[1] < lease:
            return False
        table.revoke(r)
        logger.info("reader slot %d (pid %d) has been inside one read for over %g s: its lease is revoked",
                    r, table.owner_pid(r), lease)
        return True

    forfeited: dict[int, int]
    """Writer: reader slot -> chunks reclaimed with reads that slot's gone
    reader still owed (LEASE; see :meth:`default_is_free_check`)."""

    def _forfeit(self, id: int, slots: list[int], table: ReaderTable) -> None:
        if id in self._forfeit_seen:  # planned again (a reclaim re-planned): counted once
            return
        self._forfeit_seen.add(id)
        for r in slots:
            pid = table.owner_pid(r)
            self.forfeited[r] = self.forfeited.get(r, 0) + 1
            if (r, pid) not in self._forfeit_logged:
                self._forfeit_logged.add((r, pid))
                why = ("is gone (its process died or it closed)" if not table.alive(r) else
                       f"lost its lease (revoked: it stayed inside one read for over {self.lease_seconds:g} s)")
                logger.info("reader slot %d (pid %d) %s: the writer reclaims the chunks it still owed reads of, "
                            "starting with id %d", r, pid, why, id)

    def _head_blockers(self) -> str:
        """Writer: why the oldest live chunk cannot be reclaimed, for an
        ``OutOfSpace`` message (``""`` when nothing is live)."""
        ring = self.ring_buffer
        if ring._abs_start >= ring._abs_end:
            return ""
        head = ring._abs_start % ring.ID_MAX
        key = self._id_index.get(head)
        if head in self._touched:
            return f"; the oldest chunk (id {head}, key {key!r}) is touched (release_touches() ends that)"
        leased = self._leased_by(head)
        if leased:
            now_us = time.monotonic_ns() / 1e3
            table = ring.reader_table

            def held(r: int, lease: tuple[int, int, int, int]) -> str:
                secs = max(0.0, now_us - lease[3]) / 1e6
                if lease != table.shared_read(r):
                    return f"{r} (pid {table.owner_pid(r)}, for {secs:.1f} s)"
                return (f"{r} (pid {table.owner_pid(r)}, inside a get(copy=False) for {secs:.1f} s: its lease "
                        f"is revoked in {max(0.0, (self.lease_seconds or 0) - secs):.1f} s)")

            who = ", ".join(held(r, lease) for r, lease in leased)
            return (f"; the oldest chunk (id {head}, key {key!r}) is held by a zero-copy lease of reader "
                    f"slot{'s' * (len(leased) > 1)} {who}: it ends when that reader's value of get(copy=False) "
                    "is garbage-collected")
        owed = self._owed(head)
        if not owed:
            return ""
        table = ring.reader_table
        promised = self._writer_flag.get(head, 0)
        def whose(r: int) -> str:
            pid = table.owner_pid(r)
            if not pid:
                return f"{r} (no reader attached yet)"
            if not table.alive(r):
                return f"{r} (pid {pid}, gone; lease_policy 'refuse' keeps its reads)"
            word, seen = table.words[table.pin_index(r)], self._pins_seen.get(r)
            if self.lease_seconds and word and seen is not None and seen[0] == word:
                left = max(0.0, self.lease_seconds - (time.monotonic() - seen[1]))
                return (f"{r} (pid {pid}, inside one read: its lease is revoked in {left:.1f} s, "
                        "and a put after that can reclaim the chunk)")
            return f"{r} (pid {pid})"

        who = ", ".join(whose(r) for r in owed)
        stand_in = self._stand_in.get(head, 0)
        given = (f" (the writer's {stand_in} get(s) with the readers' lock made up part of that)"
                 if stand_in else "")
        return (f"; the oldest chunk (id {head}, key {key!r}) waits for {promised} read(s) by reader "
                f"slot{'s' * (len(owed) > 1)} {who}{given}")

    def reads(self, monotonic_id: int) -> tuple[int, ...]:
        """Writer: reads acknowledged for live chunk ``monotonic_id``, per
        reader slot (slot ``i`` is the ``i``-th reader view that attached to a
        fresh store).  impl only; harnesses read it to check RC."""
        self._require_writer("inspect reads")
        return self.ring_buffer.reads_since_alloc(monotonic_id)

    def stand_in_reads(self, monotonic_id: int) -> int:
        """Writer: gets of live chunk ``monotonic_id`` this writer counted
        because it was built with the readers' lock (vLLM 0.33.0 counts such
        a writer's gets as readers' reads).  It holds no reader slot; these
        reads make up any slot's shortfall in the reclaim check (a chunk is
        reclaimable once they cover the sum of what the slots still owe:
        ``n_readers`` of them with no reader attached, as in vLLM).  0 for a
        writer built without the lock.  impl only; harnesses read it to check RC."""
        self._require_writer("inspect reads")
        return self._stand_in.get(monotonic_id, 0)

    def warp_reads(self, monotonic_id: int, reads: tuple[int, ...]) -> None:
        """Writer, test hook (boundary programs): make live chunk
        ``monotonic_id`` count ``reads[r]`` reads by reader slot ``r`` (its
        ack base is moved; nothing is written to a reader's slot).

        Raises:
            ValueError: not live, or ``reads`` not one count per slot.
        """
        nested = self._open_op("warp reads")
        with self._wlock:
            self._begin(nested)
            ring = self.ring_buffer
            if monotonic_id not in ring.metadata or len(reads) != self.n_readers:
                raise ValueError(f"id {monotonic_id} is not live, or {reads!r} is not one count per reader")
            abs_counter = ring.abs_of(monotonic_id)
            acks = ring.reader_table.acks(abs_counter)
            ring._base[abs_counter] = tuple(a - n for a, n in zip(acks, reads))

    def free_unused(self) -> None:
        """Writer: FIFO-reclaim up to ``2 * max_object_size`` bytes and drop their keys."""
        nested = self._open_op("free objects")
        with self._wlock:
            self._begin(nested)
            self._free_unused()

    def _free_unused(self) -> None:
        self.ring_buffer.free_buf(self.default_is_free_check, 2 * self.max_object_size, journal=self)

    def clear(self) -> None:
        """Drop every object; ids keep increasing (vLLM >= 0.32).  Pre-clear
        handles drain (see the class docstring).

        On a reader this is a no-op, as in vLLM (its receiver cache calls it).
        """
        if not self.is_writer:
            return
        nested = self._open_op("clear the buffer")
        with self._wlock:
            self._begin(nested)
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("clear")
            self._do(("clear", self.ring_buffer.clear_plan()))

    # --------------------------------------------------------- verification
    def verify_signature(
        self,
        key: str | None,
        address: int,
        monotonic_id: int,
        signature: list[int] | None,
    ) -> None:
        """Check that ``(address, monotonic_id, signature)`` was issued for ``key``.

        Writer: the handle must also be ``key``'s current entry (vLLM >= 0.32),
        else :class:`BadSignature`.  Reader: only fields and signature are
        checked; the data region is not read.  Raises :class:`BadHandleFields`,
        :class:`MissingSignature` or :class:`BadSignature` (all ``ValueError``
        with vLLM's messages).
        """
        if self.is_writer:
            nested = self._open_op("verify signatures")
            with self._wlock:
                self._begin(nested)
                if key is None or self._key_index.get(key) != (address, monotonic_id):
                    raise BadSignature()
                signing.require_signature(signature, key)
                signing.validate_handle_fields(address, monotonic_id, signature, key)
                gen = generation(self.ring_buffer.abs_of(monotonic_id))
        else:
            signing.require_signature(signature, key)
            signing.validate_handle_fields(address, monotonic_id, signature, key)
            gen = generation(candidate_abs(monotonic_id, self.ring_buffer.published_abs_end()))
        self._signer().check(key, address, monotonic_id, gen, signature)

    def _authenticate(self, address, monotonic_id, signature, key) -> int:
        """Signature present, fields, signature (vLLM 0.33.0's order); returns
        the candidate allocation."""
        signing.require_signature(signature, key)
        sig = signing.reader_handle_bytes(address, monotonic_id, signature, key)
        cand = candidate_abs(monotonic_id, self.ring_buffer.published_abs_end())
        self._signer().check(key, address, monotonic_id, generation(cand), sig)
        return cand

    def _validate(self, cand: int, address: int, monotonic_id: int) -> tuple[bool, int]:
        """Is allocation ``cand`` readable at ``address``: live, or a drain
        chunk whose bytes no allocation since the clear reached; and does its
        header carry ``monotonic_id`` and a sane size?  Returns ``(live,
        chunk size)``; raises :class:`StaleHandle`."""
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("reader_check")
        ring = self.ring_buffer
        ctl = ring.control
        live = ctl[_CTL_ABS_START] <= cand < ctl[_CTL_ABS_END]
        if not live:
            window = ring.drain_window()
            if window is None or not (window[0] <= cand < window[1]
                                      and address % ring.data_buffer_size >= window[2]):
                raise StaleHandle(address, monotonic_id)
        return live, self._check_header(address, monotonic_id)

    def _check_header(self, address: int, monotonic_id: int) -> int:
        """The chunk size at ``address`` after checking the header."""
        ring = self.ring_buffer
        B = ring.data_buffer_size
        offset = address % B
        if offset + _OBJECT_HEADER > B:
            raise StaleHandle(address, monotonic_id)
        chunk_id, size = _CHUNK_HEADER_UNPACK(ring.data_region, offset)
        if (
            chunk_id != monotonic_id
            or size < _OBJECT_HEADER
            or offset + size > B
            or size - _MD_SIZE > self.max_object_size
        ):
            raise StaleHandle(address, monotonic_id)
        return size

    # ------------------------------------------------------------------ reads
    def get(
        self,
        address: int,
        monotonic_id: int,
        signature: list[int] | None = None,
        key: str | None = None,
        *,
        copy: bool = True,
    ) -> Any:
        """Return the object stored under handle ``(address, monotonic_id)``.

        ``copy=False`` (impl only, issue 28): a zero-copy read.  The serde's
        :meth:`~shmspec.impl.serde.ObjectSerde.deserialize_shared` is given
        a read-only view of the chunk in shared memory and may keep it (numpy
        arrays, memoryviews: :class:`~shmspec.impl.serde.BufferPickleSerde`);
        the value holds a *zero-copy lease* on the chunk until the last
        object made over that view is garbage-collected.  While it is held
        the writer neither reclaims the chunk nor writes its bytes: a put
        that needs them raises :class:`OutOfSpace` at once, naming this
        reader slot, its pid and how long the lease has been held.  The lease
        ends with the reader's process too (a dead reader's leases are
        void); it is never revoked by a lease time (the writer cannot take
        the bytes from a live process), so with ``lease_seconds`` only the
        read itself is bounded.  A view holds at most
        :data:`~shmspec.impl.layout.MAX_LEASES` (16) leased chunks; a
        ``copy=False`` get of a further chunk copies its bytes (logged once).
        On a writer ``copy`` is ignored: its gets always copy.

        Reader: the hazard-pin protocol of the class docstring; the read is
        acknowledged in this reader's slot when the chunk was live.  Raises
        :class:`BadHandleFields`, :class:`MissingSignature`,
        :class:`BadSignature` or :class:`StaleHandle` (all ``ValueError``),
        ``WrongProcess`` in a forked copy of the view, ``BufferError`` when
        the value keeps any view of shared memory (ALIAS: the view, a slice,
        an array or buffer over it; the read is then not acknowledged; see
        :mod:`shmspec.impl.serde`).

        Writer: ``(address, id)`` must be a live chunk of its private metadata
        (else :class:`StaleHandle`); no signature is needed.  Counted only when
        the writer was given the readers' lock (vLLM 0.33.0).
        """
        if self.is_writer:
            return self._writer_get(address, monotonic_id)
        if self._closing:
            raise ValueError("Buffer has been closed")
        cand = self._authenticate(address, monotonic_id, signature, key)
        try:
            return self._pinned_get(cand, address, monotonic_id, copy)
        finally:
            if self._closing:  # a close() from another thread left the close to this read
                with self._rlock:
                    self._close_reader()

    def _pinned_get(self, cand: int, address: int, monotonic_id: int, copy: bool = True) -> Any:
        with self._rlock:
            if self._closing:
                raise ValueError("Buffer has been closed")
            if FORK_GENERATION[0] != self._generation:
                raise WrongProcess("reader", self._pid, os.getpid())
            if not copy:
                return self._shared_get(cand, address, monotonic_id)
            if self.lease_seconds:
                return self._leased_get(cand, address, monotonic_id)
            return self._plain_get(cand, address, monotonic_id)

    def _ack(self, cand: int, live: bool) -> None:
        """Acknowledge one read of allocation ``cand`` in this reader's slot
        (only a live chunk's read counts: a drain chunk's is not owed)."""
        if live:
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("counter_increment")
            self._words[self._ack_at + cand % self._max_chunks] += 1

    def _plain_get(self, cand: int, address: int, monotonic_id: int) -> Any:
        """A get without a lease time (under ``_rlock``): pin, fence,
        validate, let the serde deserialize straight from shared memory
        (:meth:`_deserialize`), acknowledge, unpin."""
        words, at = self._words, self._pin_at
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("pin")
        self._seq += 1
        try:
            words[at] = pin_word(self._seq, cand)
            fence()
            live, size = self._validate(cand, address, monotonic_id)
            value = self._deserialize(address, size)
            self._ack(cand, live)
            if live and yieldpoints.HOOK is not None:
                yieldpoints.HOOK("unpin")
        finally:
            words[at] = 0
        return value

    def _leased_get(self, cand: int, address: int, monotonic_id: int) -> Any:
        """A get on a store with a lease time (under ``_rlock``): the bytes are
        copied out under the pin, and kept only if the lease was not revoked
        once the copy was made (the writer revokes, fences, and only then
        reuses memory); then the read is acknowledged and the serde
        deserializes the private copy, the pin still up, so that a get stuck
        anywhere (a stopped process) is one the writer sees and revokes after
        the lease time.  A get whose lease was revoked raises
        :class:`StaleHandle`.  A revoked lease is renewed first (the reader's
        reads count again from here)."""
        words, at = self._words, self._pin_at
        if words[self._revoked_at] == words[self._epoch_at]:
            words[self._epoch_at] += 1
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("pin")
        self._seq += 1
        try:
            words[at] = pin_word(self._seq, cand)
            fence()
            live, size = self._validate(cand, address, monotonic_id)
            ring = self.ring_buffer
            lo = address % ring.data_buffer_size + _OBJECT_HEADER
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("payload_read")
            n = size - _OBJECT_HEADER
            scratch = self._scratch
            if scratch is None or len(scratch) < n:  # grows to the largest object read (one per reader view)
                scratch = self._scratch = bytearray(n)
            refs = sys.getrefcount(scratch)
            base = memoryview(scratch)  # a managed buffer of its own (see _deserialize)
            view = base[:n]
            view[:] = ring.data_region[lo : lo + n]
            fence()
            if words[self._revoked_at] == words[self._epoch_at]:  # revoked during the copy: it may be torn
                raise StaleHandle(address, monotonic_id)
            self._ack(cand, live)
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("deserialize")
            value = self.ser_de.deserialize(view)  # the private copy, the pin still up
            kept = value is view
            for v in (base,) if kept else (view, base):
                try:
                    v.release()
                except BufferError:
                    kept = True
            del view, base
            if kept or sys.getrefcount(scratch) != refs:  # the value keeps the scratch: it is the value's now
                self._scratch = None
            if words[self._revoked_at] == words[self._epoch_at]:  # a get that outlasted its lease fails
                del value
                raise StaleHandle(address, monotonic_id)
        finally:
            words[at] = 0
        return value

    def _shared_get(self, cand: int, address: int, monotonic_id: int) -> Any:
        """A zero-copy get (under ``_rlock``): pin, fence, validate, write the
        lease entry (with a lease time: fence and check the epoch was not
        revoked), acknowledge, unpin; then the serde builds the value over a
        view that holds the lease (:mod:`shmspec.impl.zerocopy`).  With every
        lease entry in use the bytes are copied under the pin instead.  With
        a lease time, a new entry is marked in flight (``SLOT_SHARED_READ``)
        until the serde has built the value: a read stopped there past the
        lease time is revoked by the writer (``ReaderTable.live_leases``),
        and the get then raises ``StaleHandle`` (never the value)."""
        leases = self._leases
        if leases is None:
            leases = self._leases = ReaderLeases(self.ring_buffer.reader_table, self._slot, self)
        room = leases.has_room(cand)
        words, at = self._words, self._pin_at
        if self.lease_seconds and words[self._revoked_at] == words[self._epoch_at]:
            words[self._epoch_at] += 1  # a revoked lease is renewed (as in _leased_get)
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("pin")
        self._seq += 1
        ring = self.ring_buffer
        held = marked = False
        payload = None
        try:
            pin = words[at] = pin_word(self._seq, cand)
            fence()
            live, size = self._validate(cand, address, monotonic_id)
            phys = address % ring.data_buffer_size
            lo, n = phys + _OBJECT_HEADER, size - _OBJECT_HEADER
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("payload_read")
            if room:
                entry = leases.acquire(cand, pin, phys, size)  # before the pin goes (see ring.check_leases)
                held = True
                if self.lease_seconds and entry is not None:  # in flight until the value is built
                    words[self._shared_at] = entry + 1
                    marked = True
            else:
                payload = bytes(ring.data_region[lo : lo + n])
            if self.lease_seconds:
                fence()
                if words[self._revoked_at] == words[self._epoch_at]:  # revoked: the writer may reuse the bytes
                    raise StaleHandle(address, monotonic_id)
            self._ack(cand, live)
        except BaseException:
            if marked:
                words[self._shared_at] = 0
            if held:
                leases.release(cand)
            raise
        finally:
            words[at] = 0
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("deserialize")
        if payload is not None:
            return self.ser_de.deserialize_shared(memoryview(payload))
        try:
            view = leases.export(cand, ring.shared_memory._mmap, layout.DATA_OFFSET, ring.data_buffer_size, lo, n)
        except BaseException:
            if marked:
                words[self._shared_at] = 0
            leases.release(cand)
            raise
        if not marked:
            return self.ser_de.deserialize_shared(view)
        revoked = False
        try:
            value = self.ser_de.deserialize_shared(view)
        except BaseException:
            if not self._end_shared_read():
                raise
            revoked = True  # the bytes it parsed may have been reused: the store's error, not the serde's
        del view
        if revoked:
            raise StaleHandle(address, monotonic_id)
        if self._end_shared_read():
            del value  # its lease goes with it
            raise StaleHandle(address, monotonic_id)
        return value

    def _end_shared_read(self) -> bool:
        """Reader: the value of a marked ``get(copy=False)`` is built (or its
        serde raised): clear ``SLOT_SHARED_READ``, fence, and return whether
        the writer revoked the lease meanwhile (then it may have reused the
        bytes: see ``ReaderTable.live_leases`` for the order)."""
        words = self._words
        words[self._shared_at] = 0
        fence()
        return words[self._revoked_at] == words[self._epoch_at]

    def _deserialize(self, address: int, size: int) -> Any:
        ring = self.ring_buffer
        lo = address % ring.data_buffer_size + _OBJECT_HEADER
        hi = lo - _OBJECT_HEADER + size
        region = ring.data_region
        if self._keeps_buffer:
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("payload_read")
            payload = bytes(region[lo:hi])
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("deserialize")
            return self.ser_de.deserialize(memoryview(payload))
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("deserialize")
        # ALIAS: the serde's view hangs on a managed buffer of its own, made from the segment's mapping for
        # this call.  Once the view and its base are released that buffer goes, and with it its reference to
        # the mapping, unless something the serde made still holds a view derived from it (a slice,
        # np.frombuffer, a PickleBuffer, a pickle-5 out-of-band buffer, ctypes from_buffer): then the
        # mapping's reference count stays up and the get raises BufferError.
        mm = ring.shared_memory._mmap
        refs = sys.getrefcount(mm)
        base = memoryview(mm)
        view = base[layout.DATA_OFFSET + lo : layout.DATA_OFFSET + hi]
        kept = False
        try:
            value = self.ser_de.deserialize(view)  # if it raises, its exception goes up (no value escapes)
            kept = value is view  # (released below: a dead view, but never what the caller wanted)
        finally:
            for v in (view, base):
                try:
                    v.release()
                except BufferError:
                    kept = True
            del view, base
        if kept or sys.getrefcount(mm) != refs:
            del value
            raise BufferError(
                f"{type(self.ser_de).__name__}.deserialize kept a view of shared memory in its value (the view, "
                "a slice of it, or an array or buffer made over it), which the writer reuses once the chunk is "
                "reclaimed; copy what the value keeps, or declare keeps_buffer = True on the serde class to be "
                "handed a private copy"
            )
        return value

    def _writer_get(self, address: Any, monotonic_id: Any) -> Any:
        nested = self._open_op("read objects")
        with self._wlock:
            self._begin(nested)
            signing.validate_handle_fields(address, monotonic_id)
            ring = self.ring_buffer
            abs_counter = ring.abs_of(monotonic_id)
            if ring.metadata.get(monotonic_id) != address or abs_counter >= ring.published_abs_end():
                raise StaleHandle(address, monotonic_id)
            value = self._deserialize(address, ring.chunk_size(monotonic_id))
            if self._reader_lock is not None:  # vLLM 0.33.0: a writer with the lock counts its gets
                self._stand_in[monotonic_id] = self._stand_in.get(monotonic_id, 0) + 1
            return value

    def touch(
        self,
        key: str,
        address: int = 0,
        monotonic_id: int = 0,
        signature: list[int] | None = None,
    ) -> None:
        """Writer: protect ``key``'s chunk from reclaim until the next
        :meth:`get_cached` of it or :meth:`release_touches` (unknown key: no-op).

        Reader: validate the handle only (fields, signature, then liveness or
        drain and the header, then liveness again); nothing is read beyond the
        header and nothing is counted.  Raises as :meth:`get`.  Both mirror
        vLLM >= 0.32.
        """
        if self.is_writer:
            nested = self._open_op("touch objects")
            with self._wlock:
                self._begin(nested)
                entry = self._key_index.get(key) if isinstance(key, str) else None
                if entry is not None:
                    self._touched.add(entry[1])
                return None
        cand = self._authenticate(address, monotonic_id, signature, key)
        self._validate(cand, address, monotonic_id)
        self._validate(cand, address, monotonic_id)
        return None

    # ------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the segments (the writer also unlinks them); a reader gives
        its slot back; idempotent.

        A reader view whose ``get`` is running in another thread waits for
        that read to end, up to :data:`CLOSE_WAIT` seconds; past that the
        close is left to the read, which makes it when it ends: the pin and
        the slot are never given up under a read in flight, so the writer
        never reuses memory it is reading (issue 28).  A ``get`` begun once
        ``close`` was called raises ``ValueError("Buffer has been closed")``.
        A view some of whose ``get(copy=False)`` values are still alive keeps
        its slot (the writer keeps honouring their leases) and closes when
        the last of them is garbage-collected."""
        if not self.is_writer:
            self._closing = True
            if not self._rlock.acquire(timeout=CLOSE_WAIT):
                return  # the read in flight closes the view when it ends (see get)
            try:
                self._close_reader()
            finally:
                self._rlock.release()
            return
        self._close_now()

    def _close_reader(self) -> None:
        """Close this reader view now, or, while values of ``get(copy=False)``
        still point into the ring, once the last of them is collected."""
        leases = self._leases
        if leases is not None and leases.held():
            leases.on_empty = self._close_later
            return
        self._close_now()

    def _close_later(self) -> None:
        """The deferred close of a reader view, once its last zero-copy value
        is collected (in a finalizer: errors are logged, not raised)."""
        try:
            self._close_now()
        except BufferError:  # the mapping is closed at a later segment release (segment.UNCLOSED)
            pass
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            logger.exception("closing a reader view after its last zero-copy value went")

    def _close_now(self) -> None:
        if getattr(self, "_closed_now", False):
            return
        self._closed_now = True
        table = self.ring_buffer.reader_table
        if not self.is_writer and table is not None and self._slot is not None and os.getpid() == self._pid:
            table.release(self._slot)
        self.ring_buffer.close()

    def handle(self) -> ShmObjectStorageHandle:
        """A picklable :class:`ShmObjectStorageHandle` describing this store."""
        return ShmObjectStorageHandle(
            max_object_size=self.max_object_size,
            n_readers=self.n_readers,
            ring_buffer_handle=self.ring_buffer.handle(),
            serde_class=self.serde_class,
            reader_lock=self._reader_lock,
        )

    @classmethod
    def create_from_handle(cls, handle: ShmObjectStorageHandle) -> "SingleWriterShmObjectStorage":
        """Build a reader view from ``handle`` (attaches to the named segments).

        Called on the class like vLLM's static method; a subclass gets reader
        views of its own class.  ``handle.reader_lock`` None ->
        :class:`MissingReaderLock`, with nothing left attached.
        """
        if handle.reader_lock is None:
            raise MissingReaderLock()
        ring = SingleWriterShmRingBuffer(*handle.ring_buffer_handle)
        try:
            return cls(
                max_object_size=handle.max_object_size,
                n_readers=handle.n_readers,
                ring_buffer=ring,
                serde_class=handle.serde_class,
                reader_lock=handle.reader_lock,
            )
        except BaseException:
            ring.close()
            raise
