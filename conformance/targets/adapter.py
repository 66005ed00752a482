"""One small protocol over every target: calls, observations, snapshots.

:class:`StoreAdapter` builds a writer and reader views of a loaded target with
the harness's serde, performs operations, and maps whatever the target raises
onto the shared error taxonomy (:func:`classify`).  Everything the harness
knows about a target goes through here.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import multiprocess

from shmspec.model.errors import StoreError
from shmspec.model.properties import disj, fifo, wrap
from shmspec.model.ring import ID_MAX
from shmspec.model.store import per_reader_complete, reads_complete

from .loader import LoadedTarget
from ..core.serde import HarnessSerde

# vLLM's messages (SEMANTICS.md) -> taxonomy kinds, for targets that raise plain
# ValueError / MemoryError / KeyError.
_MESSAGE_KINDS = (
    ("already exists in the storage", "DuplicateKey"),
    ("exceeds max object size", "ObjectTooLarge"),
    ("has been modified or is invalid", "StaleHandle"),
    ("Lock must be provided for readers", "MissingReaderLock"),
    ("Missing SHM handle signature", "MissingSignature"),
    ("Invalid SHM handle signature", "BadSignature"),
    ("Invalid SHM handle fields", "BadHandleFields"),
)


def offers_zero_copy(target: LoadedTarget) -> bool:
    """Whether the target's ``get`` takes ``copy`` (impl's ``get(..., copy=False)``,
    issue 28 item 5)."""
    get = getattr(getattr(target, "storage_cls", None), "get", None)
    try:
        return get is not None and "copy" in inspect.signature(get).parameters
    except (TypeError, ValueError):
        return False


def classify(exc: BaseException) -> str:
    """The taxonomy kind of an exception raised by a target.

    Taxonomy classes give their ``kind``; vLLM's ValueErrors are matched by
    message; ``MemoryError`` is ``OutOfSpace``; ``KeyError`` is ``UnknownKey``;
    anything else is ``Crash:<ExceptionType>`` (a defect of the target).
    """
    if isinstance(exc, StoreError):
        return exc.kind
    if isinstance(exc, ValueError):
        msg = str(exc)
        for needle, kind in _MESSAGE_KINDS:
            if needle in msg:
                return kind
    if isinstance(exc, MemoryError):
        return "OutOfSpace"
    if isinstance(exc, KeyError):
        return "UnknownKey"
    return f"Crash:{type(exc).__name__}"


@dataclass(frozen=True)
class Observation:
    """What one call on a target did: ``value`` or ``error`` (a kind) + ``detail``."""

    value: Any = None
    error: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


def observe(fn: Callable[[], Any]) -> Observation:
    try:
        return Observation(value=fn())
    except Exception as exc:  # noqa: BLE001 - classifying is the point
        return Observation(error=classify(exc), detail=f"{type(exc).__name__}: {exc}")


@dataclass
class SnapChunk:
    """A live chunk as read from a target: ids, virtual address, bytes, counts.

    ``reads``: reads per reader slot, for stores that count them per reader
    (impl: ``storage.reads(id)``); then ``reader_count`` is their sum plus
    ``stand_in``, the gets of a writer built with the readers' lock (impl:
    ``storage.stand_in_reads(id)``), which make up any slot's shortfall.
    ``None`` for vLLM's in-band aggregate count."""

    id: int
    address: int
    size: int
    reader_count: int
    writer_count: int
    reads: tuple[int, ...] | None = None
    stand_in: int = 0

    def reads_done(self, n_readers: int) -> bool:
        """RC's reclaim threshold on this chunk: per reader when ``reads`` is
        known (every slot read it ``writer_count`` times), else vLLM's
        ``reader_count >= writer_count * n_readers``."""
        if self.reads is not None:
            return per_reader_complete(self.reads, self.writer_count, n_readers, self.stand_in)
        return reads_complete(self.reader_count, self.writer_count, n_readers)

    def counts_text(self, n_readers: int) -> str:
        """The counts RC judged, for messages."""
        if self.reads is not None:
            short = [f"slot {i + 1}: {n}" for i, n in enumerate(self.reads) if n < self.writer_count]
            why = ", ".join(short) + f" < writer_count {self.writer_count}" if short else \
                f"{len(self.reads)} slots for {n_readers} readers"
            given = f", {self.stand_in} by the writer" if self.stand_in else ""
            return f"reads per reader {list(self.reads)}{given} ({why})"
        return f"reader_count {self.reader_count} < writer_count {self.writer_count} x n_readers {n_readers}"

    @property
    def handle(self) -> tuple[int, int]:
        return (self.address, self.id)


@dataclass
class Snapshot:
    """The writer-side state of a target, read through its attributes and segment."""

    start: int
    end: int
    id_start: int
    id_end: int
    chunks: list[SnapChunk]
    key_index: dict[str, tuple[int, int]]
    ring_size: int

    def comparable(self) -> tuple:
        return (
            self.start, self.end, self.id_start, self.id_end,
            tuple((c.id, c.address, c.size, c.reader_count, c.writer_count) for c in self.chunks),
            tuple(sorted(self.key_index.items())),
        )


def target_state_checks(before: Snapshot | None, after: Snapshot, n_readers: int, *, reclaimed: bool = True,
                        protected: frozenset[int] | set[int] = frozenset(),
                        ids: bool = False) -> list[tuple[str, str]]:
    """The target's own state after one step, judged on its snapshots alone:
    DISJ of its live chunks (and WRAP of their ids when ``ids``); when
    ``reclaimed`` (not across a clear) FIFO and RC of the chunks it freed
    since ``before`` (RC: each had every read its ``writer_count`` promised,
    :meth:`SnapChunk.reads_done`, and none of them was in ``protected``, the
    ids a touch protects).  The one place both sessions judge these
    (lockstep: :class:`~shmspec.conformance.lockstep.session.Session`;
    scheduled: :class:`~shmspec.conformance.concurrency.schedule.ScheduledSession`).
    Returns ``(property, message)`` pairs, messages prefixed ``target:``."""
    v = [("DISJ", f"target: {m}") for m in disj(after.chunks, after.ring_size)]
    if ids:
        v += [("WRAP", f"target: {m}") for m in wrap(after.chunks)]
    if before is None or not reclaimed:
        return v
    after_ids = {c.id for c in after.chunks}
    freed = [c for c in before.chunks if c.id not in after_ids]
    if freed:
        v += [("FIFO", f"target: {m}") for m in fifo(before.chunks, {c.id for c in freed})]
        for c in freed:
            if not c.reads_done(n_readers) or c.id in protected:
                why = "while protected by touch" if c.reads_done(n_readers) else f"with {c.counts_text(n_readers)}"
                v.append(("RC", f"target: reclaimed id {c.id} {why}"))
    return v


def data_offset(ring: Any) -> int:
    """Bytes before a ring's data region in its segment: ``DATA_OFFSET`` (the
    control block impl and vLLM >= 0.32 keep there), 0 for older vLLM layouts."""
    return getattr(ring, "DATA_OFFSET", 0)


def open_writer(target: LoadedTarget, data_buffer_size: int, max_object_size: int,
                n_readers: int, lock: Any, serde_class: type = HarnessSerde,
                writer_lock: bool | None = None) -> Any:
    """Build a target's writer view on a new segment (sizes in bytes).

    ``writer_lock`` (the construction): True passes the readers' ``lock`` to
    the writer too; False builds it as vLLM builds its writer, without one;
    None (default) asks the storage class (``writer_uses_reader_lock``, a
    version-1 impl flag; False when absent).
    """
    ring = target.ring_cls(data_buffer_size, None, True)
    kwargs = {}
    if writer_lock is None:
        writer_lock = bool(getattr(target.storage_cls, "writer_uses_reader_lock", False))
    if writer_lock:
        kwargs["reader_lock"] = lock
    try:
        return target.storage_cls(max_object_size=max_object_size, n_readers=n_readers,
                                  ring_buffer=ring, serde_class=serde_class, **kwargs)
    except BaseException:
        closer = getattr(ring, "close", None)
        if closer is not None:
            closer()
        raise


@dataclass
class StoreAdapter:
    """A writer and named reader views of one target, built with the harness serde.

    Sizes in bytes.  ``readers`` maps reader names (``"r1"``...) to storage views.
    """

    target: LoadedTarget
    data_buffer_size: int
    max_object_size: int
    n_readers: int
    writer: Any = None
    readers: dict[str, Any] = field(default_factory=dict)
    lock: Any = None
    segment: str = ""
    serde_class: type = HarnessSerde
    writer_lock: bool | None = False
    """The construction (:func:`open_writer`): False, vLLM's writer without the lock."""

    def open(self) -> None:
        if self.lock is None:
            self.lock = multiprocess.Lock()
        self.writer = open_writer(self.target, self.data_buffer_size, self.max_object_size,
                                  self.n_readers, self.lock, self.serde_class, self.writer_lock)
        self.segment = self.writer.ring_buffer.shared_memory.name

    # -- reader views -------------------------------------------------------
    def attach_reader(self, name: str, with_lock: bool = True) -> Observation:
        handle = reader_handle(self.writer, self.lock if with_lock else None)
        obs = observe(lambda: self.target.storage_cls.create_from_handle(handle))
        if obs.ok:
            self.readers[name] = obs.value
            return Observation()
        return obs

    # -- operations -----------------------------------------------------------
    @property
    def signed(self) -> bool:
        return self.target.profile.signed

    def put(self, key: str, value: Any) -> Observation:
        return observe(lambda: tuple(self.writer.put(key, value)))

    def get_cached(self, key: str) -> Observation:
        return observe(lambda: tuple(self.writer.get_cached(key)))

    def is_cached(self, key: str) -> Observation:
        return observe(lambda: self.writer.is_cached(key))

    def get_signature(self, key: str) -> Observation:
        return observe(lambda: self.writer.get_signature(key))

    def writer_get(self, address: Any, id_: Any) -> Observation:
        return observe(lambda: self.writer.get(address, id_))

    def reader_get(self, reader: str, address: Any, id_: Any, signature: Any = None, key: Any = None,
                   copy: bool = True) -> Observation:
        """``reader``'s get; ``copy=False``: impl's zero-copy read (only on a
        target that :func:`offers_zero_copy`)."""
        view = self.readers[reader]
        extra = {} if copy else {"copy": False}
        if self.signed:
            return observe(lambda: view.get(address, id_, signature, key, **extra))
        return observe(lambda: view.get(address, id_, **extra))

    def writer_touch(self, key: str) -> Observation:
        return observe(lambda: self.writer.touch(key))

    def reader_touch(self, reader: str, key: Any, address: Any, id_: Any, signature: Any = None) -> Observation:
        view = self.readers[reader]
        if self.signed:
            return observe(lambda: view.touch(key, address=address, monotonic_id=id_, signature=signature))
        return observe(lambda: view.touch(key, address=address, monotonic_id=id_))

    def release_touches(self) -> Observation:
        return observe(self.writer.release_touches)

    def clear(self) -> Observation:
        return observe(self.writer.clear)

    def free_unused(self) -> Observation:
        return observe(self.writer.free_unused)

    # -- state --------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Read the writer's ring and indexes, and each live chunk's header and
        reader count from the segment (physical offset ``DATA_OFFSET + address % B``)."""
        w = self.writer
        rb = w.ring_buffer
        buf = rb.shared_memory.buf
        B = rb.data_buffer_size
        base = data_offset(rb)
        chunks = []
        per_reader = getattr(w, "reads", None)
        stand_ins = getattr(w, "stand_in_reads", None)
        for id_, address in live_chunks(w):
            p = base + address % B
            size = int.from_bytes(buf[p + 4 : p + 8], "little", signed=True)
            stand_in = 0
            if per_reader is not None:
                reads = tuple(per_reader(id_))
                stand_in = stand_ins(id_) if stand_ins is not None else 0
                count = sum(reads) + stand_in
            else:
                reads = None
                count = int.from_bytes(buf[p + 8 : p + 12], "little", signed=True)
            chunks.append(SnapChunk(id_, address, size, count, w.writer_flag.get(id_, 0), reads, stand_in))
        return Snapshot(
            rb.data_buffer_start, rb.data_buffer_end, rb.monotonic_id_start, rb.monotonic_id_end,
            chunks, dict(w.key_index), B,
        )

    def stored_object(self, address: int) -> Any:
        """The object in the segment at ``address`` as the harness serde reads
        it (``Blob``, or ``Garbage`` for bytes that are not one), straight from
        the chunk's bytes: nothing counted, nothing validated."""
        rb = self.writer.ring_buffer
        buf = rb.shared_memory.buf
        p = data_offset(rb) + address % rb.data_buffer_size
        size = int.from_bytes(buf[p + 4 : p + 8], "little", signed=True)
        end = min(p + max(size, 12), data_offset(rb) + rb.data_buffer_size)
        return HarnessSerde.decode(bytes(buf[p + 12 : end]))

    def close(self) -> bool:
        """Close every view, then the writer.  Returns True when the segment is
        gone afterwards (property LEAK)."""
        for view in self.readers.values():
            try:
                view.ring_buffer.shared_memory.close()
            except Exception:  # noqa: BLE001 - best effort on teardown
                pass
        self.readers.clear()
        w, self.writer = self.writer, None
        names = segment_names(w) if w is not None else [self.segment]
        if w is not None:
            closer = getattr(w, "close", None) or getattr(w.ring_buffer, "close", None)
            if closer is not None:
                try:
                    closer()
                except Exception:  # noqa: BLE001
                    pass
            del w
        if any(segment_exists(n) for n in names):
            gc.collect()  # stores without close() unlink in __del__ (vLLM < 0.15)
        return not any(segment_exists(n) for n in names)


_RING_COUNTERS = ("data_buffer_start", "data_buffer_end", "monotonic_id_start", "monotonic_id_end", "metadata")


def can_warp(writer: Any) -> bool:
    """Whether :func:`warp` can start this writer at a chosen counter state:
    its ring has a ``warp`` method (impl/) or vLLM's writer-private counters."""
    rb = writer.ring_buffer
    return callable(getattr(rb, "warp", None)) or all(hasattr(rb, a) for a in _RING_COUNTERS)


def warp(writer: Any, start: int, monotonic_id: int) -> None:
    """The warp hook: put an empty writer in the state it would reach after
    allocating and freeing until ``start == end == start`` (bytes, ``0 <= start
    < B``) with next id ``monotonic_id`` (modulo 2**31), without 2**31 puts.

    impl/: ``SingleWriterShmRingBuffer.warp``.  vLLM (0.11 - 0.33): sets the
    ring buffer's ``data_buffer_start/end`` and ``monotonic_id_start/end``;
    vLLM 0.11's phantom ``metadata`` entry ``{0: 0}`` of a fresh ring is dropped,
    as allocating and freeing chunk 0 would have dropped it.

    Raises:
        ValueError: the store holds objects, or an argument is out of range.
        TypeError: the target exposes neither hook.
    """
    rb = writer.ring_buffer
    if callable(getattr(rb, "warp", None)):
        rb.warp(start, monotonic_id)
        return
    if not all(hasattr(rb, a) for a in _RING_COUNTERS):
        raise TypeError(f"{type(rb).__name__} exposes no warp hook and not vLLM's ring counters")
    if getattr(writer, "key_index", None) or any(rb.metadata.get(i) != 0 or i != 0 for i in rb.metadata):
        raise ValueError("the ring can only be warped while it is empty")
    if not 0 <= start < rb.data_buffer_size or not 0 <= monotonic_id < ID_MAX:
        raise ValueError(f"warp out of range: start {start}, id {monotonic_id}")
    rb.metadata.clear()
    rb.data_buffer_start = rb.data_buffer_end = start
    rb.monotonic_id_start = rb.monotonic_id_end = monotonic_id


def split_reads(reader_count: int, n_readers: int) -> tuple[int, ...]:
    """``reader_count`` reads spread over ``n_readers`` readers as evenly as
    possible (the first ``reader_count % n_readers`` one more): how a warped
    aggregate count is given to a store that counts per reader."""
    q, r = divmod(reader_count, n_readers)
    return tuple(q + (1 if i < r else 0) for i in range(n_readers))


def warp_counts(writer: Any, monotonic_id: int, address: int, writer_count: int, reader_count: int) -> None:
    """Set a live chunk's counts (the warp hook for counter limits): the
    writer's ``writer_flag[id]`` and the reads: for a store that counts per
    reader (its ``warp_reads(id, reads)``, impl), ``reader_count`` spread by
    :func:`split_reads`; else vLLM's int32 ``reader_count`` at the front of the
    chunk's payload (segment offset ``DATA_OFFSET + address % B + 8``).

    Raises:
        ValueError: ``reader_count`` outside int32, or ``monotonic_id`` not live.
    """
    rb = writer.ring_buffer
    if monotonic_id not in rb.metadata:
        raise ValueError(f"id {monotonic_id} is not live")
    if not -(2**31) <= reader_count < 2**31:
        raise ValueError(f"reader_count {reader_count} does not fit int32")
    writer.writer_flag[monotonic_id] = writer_count
    if callable(getattr(writer, "warp_reads", None)):
        writer.warp_reads(monotonic_id, split_reads(reader_count, writer.n_readers))
        return
    p = data_offset(rb) + address % rb.data_buffer_size + 8
    rb.shared_memory.buf[p : p + 4] = reader_count.to_bytes(4, "little", signed=True)


def live_chunks(writer: Any) -> list[tuple[int, int]]:
    """The writer's live chunks as ``(id, virtual address)``, oldest first: the
    ids of its ``metadata`` inside the window ``[id_start, id_end)`` (mod 2**31)."""
    rb = writer.ring_buffer
    start = rb.monotonic_id_start
    window = (rb.monotonic_id_end - start) % ID_MAX
    live = [(i, a) for i, a in rb.metadata.items() if (i - start) % ID_MAX < window]
    return sorted(live, key=lambda kv: (kv[0] - start) % ID_MAX)


def reader_handle(writer: Any, lock: Any) -> Any:
    """The writer's handle with ``reader_lock`` set to ``lock`` (the harness's
    process-shared lock, or None to build a lockless reader)."""
    return dataclasses.replace(writer.handle(), reader_lock=lock)


def segment_names(writer: Any) -> list[str]:
    """Every shared-memory segment a writer made: its ring's, and impl's
    reader table (``<name>_r``) when it has one."""
    rb = writer.ring_buffer
    names = [rb.shared_memory.name]
    table = getattr(rb, "reader_table", None)
    if table is not None:
        names.append(table.shm.name)
    return names


def segment_exists(name: str) -> bool:
    return bool(name) and os.path.exists(os.path.join("/dev/shm", name.lstrip("/")))
