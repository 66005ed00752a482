"""The object store as a pure transition function.

``step(state, action) -> (state, outcome)`` defines SEMANTICS.md's
``SingleWriterShmObjectStorage`` over the ring of :mod:`.ring`.  No I/O, no
shared memory, no randomness: the same state and action always give the same
result, which is what lockstep testing, state-space enumeration and trace replay
rely on.  Version differences come from :class:`~.profile.Profile`.

Action names (:data:`ACTIONS`) are the strings used in traces, reports and
(later) the TLA+ spec.  Processes are ``"writer"`` and reader names such as
``"r1"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from . import ring as _ring
from .errors import (
    TooManyReaders,
    BadHandleFields,
    BadSignature,
    DuplicateKey,
    MissingReaderLock,
    MissingSignature,
    NotWriter,
    ObjectTooLarge,
    OutOfSpace,
    StaleHandle,
    StoreError,
    UnknownKey,
)
from .profile import Profile, impl_max_chunks
from .ring import ID_MAX, Chunk, Ring

WRITER = "writer"

ACTIONS: tuple[str, ...] = (
    "put",
    "get_cached",
    "is_cached",
    "get_signature",
    "writer_get",
    "get",
    "touch",
    "release_touches",
    "clear",
    "free_unused",
    "attach_reader",
)
"""Every action name the model accepts (the store's public operations)."""


@dataclass(frozen=True)
class Sig:
    """The model's stand-in for a handle signature: what it was issued for.

    A real store returns 32 HMAC bytes; the harness keeps the pairing.  A
    forged signature is any ``Sig`` that differs from the one the writer would
    issue (for instance :data:`FORGED`).
    """

    key: str | None
    address: int
    id: int
    generation: int = 0


FORGED = Sig(None, -1, -1, -1)
"""A signature no writer ever issues."""


@dataclass(frozen=True)
class Action:
    """One operation: ``name`` (in :data:`ACTIONS`), the ``process`` taking it,
    and keyword ``args`` as sorted ``(name, value)`` pairs."""

    name: str
    process: str = WRITER
    args: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, name: str, process: str = WRITER, **args: Any) -> "Action":
        return cls(name, process, tuple(sorted(args.items())))

    def arg(self, name: str, default: Any = None) -> Any:
        for k, v in self.args:
            if k == name:
                return v
        return default

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.args)


@dataclass(frozen=True)
class Outcome:
    """What an action returns: a ``value``, or an ``error`` kind (see
    :mod:`.errors`).

    ``also``: further error kinds a conforming store may raise instead.
    ``stale_may_return``: the action hit a non-live handle and the profile lets
    the store return the object originally put under it instead of raising
    (``Profile.lenient_stale``; NRR allows it).
    """

    value: Any = None
    error: str | None = None
    also: frozenset[str] = field(default_factory=frozenset)
    stale_may_return: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def accepts_error(self, kind: str) -> bool:
        return kind == self.error or kind in self.also


@dataclass(frozen=True)
class State:
    """The whole observable state of one store and its reader views.

    Attributes:
        profile: version behaviour.
        max_object_size: bytes (4 count bytes + metadata + data).
        n_readers: readers that must each read a handle once per promise.
        ring: the writer's ring, live chunks oldest first.
        abs_end: allocations ever made (never wraps or resets).
        readers: names of attached reader views (in attach order: impl's
            reader slots).
        max_chunks: the live-chunk bound (``Profile.chunk_cap``), else None.
        drain: chunks dropped by the latest ``clear()`` that a reader's handle
            still resolves to (``Profile.drain``): none of their bytes was
            allocated since.
        writer_lock: the construction: the writer was given the readers' lock,
            so its gets are counted (vLLM 0.33.0) as those of a reader named
            :data:`WRITER` (per reader: it holds no slot; its reads stand in
            for any slot's, :func:`per_reader_complete`).
    """

    profile: Profile
    max_object_size: int
    n_readers: int
    ring: Ring
    abs_end: int = 0
    readers: tuple[str, ...] = ()
    max_chunks: int | None = None
    drain: tuple[Chunk, ...] = ()
    writer_lock: bool = False

    @property
    def key_index(self) -> dict[str, tuple[int, int]]:
        return {c.key: c.handle for c in self.ring.chunks if c.key is not None}

    def chunk_for_key(self, key: str) -> Chunk | None:
        for c in self.ring.chunks:
            if c.key == key:
                return c
        return None

    def resolve(self, address: int, id_: int) -> Chunk | None:
        """The live chunk a handle resolves to: same id, same physical offset."""
        c = self.ring.by_id(id_)
        if c is not None and c.address % self.ring.size == address % self.ring.size:
            return c
        return None

    def generation_of(self, id_: int) -> int:
        """Generation (``abs_id // 2**31``) of the latest allocation with this id."""
        if not self.profile.bind_generation or self.abs_end == 0:
            return 0
        last = self.abs_end - 1
        if last < id_:
            return 0
        return (id_ + ID_MAX * ((last - id_) // ID_MAX)) // ID_MAX

    def signature_for(self, chunk: Chunk) -> Sig:
        gen = chunk.abs_id // ID_MAX if self.profile.bind_generation else 0
        return Sig(chunk.key, chunk.address, chunk.id, gen)


def initial(
    profile: Profile, data_buffer_size: int, max_object_size: int, n_readers: int, writer_lock: bool = False
) -> State:
    """A fresh writer: empty ring of ``data_buffer_size`` bytes, no readers;
    ``writer_lock``: the construction (see :attr:`State.writer_lock`).

    Raises:
        ValueError: a size or count is not positive.
    """
    if data_buffer_size <= 0 or max_object_size <= 0 or n_readers <= 0:
        raise ValueError("data_buffer_size, max_object_size and n_readers must be positive")
    cap = impl_max_chunks(data_buffer_size) if profile.chunk_cap else None
    return State(profile, max_object_size, n_readers, Ring(size=data_buffer_size), max_chunks=cap,
                 writer_lock=writer_lock)


def reads_complete(reader_count: Any, writer_count: Any, n_readers: Any) -> Any:
    """The free threshold (RC): ``reader_count >= writer_count * n_readers``.
    ``reader_count`` is an int32 in the segment; ``writer_count`` counts the
    writer's promises (put / get_cached).  Plain operators, so it also builds
    z3 terms (conformance/proofs/prove.py)."""
    return reader_count >= writer_count * n_readers


def reader_slots(state: State) -> tuple[str, ...]:
    """The readers whose reads count, one per slot (``Profile.per_reader``): the
    first ``n_readers`` attached; a slot no reader holds yet reads nothing."""
    return state.readers[: state.n_readers]


def per_reader_complete(reads: Any, writer_count: int, n_readers: int, stand_in: int = 0) -> bool:
    """RC's per-reader form: ``n_readers`` slots each with at least
    ``writer_count`` reads (``reads``: the per-slot counts, missing slots 0),
    where ``stand_in`` reads (the gets of a writer built with the readers'
    lock, vLLM 0.33.0's construction) make up any slot's shortfall: the chunk
    is complete when they cover the sum of the slots' shortfalls.  With no
    reader attached that is vLLM's ``reader_count >= writer_count *
    n_readers``."""
    counts = list(reads)[:n_readers]
    counts += [0] * (n_readers - len(counts))
    return stand_in >= sum(max(0, writer_count - c) for c in counts)


def is_free(state: State, chunk: Chunk) -> bool:
    """The reclaim predicate (RC): all promised reads counted and not protected.

    Aggregate (vLLM): ``reader_count >= writer_count * n_readers``; per reader
    (``Profile.per_reader``): every reader slot read it ``writer_count`` times.
    """
    if chunk.protected:
        return False
    if state.profile.per_reader:
        reads = dict(chunk.reads)
        return per_reader_complete([reads.get(r, 0) for r in reader_slots(state)], chunk.writer_count,
                                   state.n_readers, reads.get(WRITER, 0))
    return reads_complete(chunk.reader_count, chunk.writer_count, state.n_readers)


def _err(exc: StoreError, **kw: Any) -> Outcome:
    return Outcome(error=exc.kind, **kw)


def _update(state: State, chunk: Chunk, **changes: Any) -> State:
    new = replace(chunk, **changes)
    chunks = tuple(new if c.abs_id == chunk.abs_id else c for c in state.ring.chunks)
    return replace(state, ring=replace(state.ring, chunks=chunks))


def _free_unused(state: State) -> State:
    ring, _ = _ring.free(state.ring, lambda c: is_free(state, c), 2 * state.max_object_size)
    return replace(state, ring=ring)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_handle(state: State, a: Action) -> tuple[Chunk | None, Outcome | None]:
    """Validate a handle.  Returns the chunk it resolves to (live, or a drain
    chunk for a reader: see :func:`resolve_drain`), or an error outcome.

    Order (vLLM 0.33.0): a signed reader call without signature or key is
    ``MissingSignature``; then malformed fields ``BadHandleFields``; then the
    signature ``BadSignature``; then liveness ``StaleHandle``."""
    p = state.profile
    address, id_ = a.arg("address"), a.arg("id")
    fields_also = frozenset() if not p.lenient_stale else frozenset({"BadSignature", "StaleHandle"})
    signed_reader = p.signed and a.process != WRITER
    if signed_reader and (a.arg("signature") is None or a.arg("key") is None):
        return None, _err(MissingSignature())
    if not (_is_int(address) and 0 <= address < 2**64 and _is_int(id_) and 0 <= id_ < ID_MAX):
        return None, _err(BadHandleFields("address/id"), also=fields_also)
    if signed_reader:
        sig, key = a.arg("signature"), a.arg("key")
        if not isinstance(sig, Sig) or not isinstance(key, str):
            return None, _err(BadHandleFields("signature/key"), also=fields_also)
        if sig != Sig(key, address, id_, state.generation_of(id_)):
            return None, _err(BadSignature())
    chunk = state.resolve(address, id_)
    if chunk is None and a.process != WRITER:
        chunk = resolve_drain(state, address, id_)
    if chunk is None:
        return None, _err(StaleHandle(address, id_), stale_may_return=p.lenient_stale)
    return chunk, None


def resolve_drain(state: State, address: int, id_: int) -> Chunk | None:
    """The drain chunk (``State.drain``) a reader's handle resolves to: same id
    and physical offset; None when there is none (CLR, ``Profile.drain``)."""
    B = state.ring.size
    for c in state.drain:
        if c.id == id_ and c.address % B == address % B:
            return c
    return None


def _overlaps(a: Chunk, b: Chunk, ring_size: int) -> bool:
    a0, b0 = a.address % ring_size, b.address % ring_size
    return a0 < b0 + b.size and b0 < a0 + a.size


def _after_allocation(s: State, new: Chunk) -> State:
    """Drop the drain chunks allocation ``new`` overlaps (their bytes are reused)."""
    if not s.drain:
        return s
    return replace(s, drain=tuple(c for c in s.drain if not _overlaps(c, new, s.ring.size)))


def step(state: State, action: Action) -> tuple[State, Outcome]:
    """Apply one action.  Never raises for store-level errors: they come back
    as ``Outcome(error=kind)`` and leave the state as SEMANTICS.md says.

    Raises:
        ValueError: the action is not one of :data:`ACTIONS`, names an
            unattached reader, or is not offered by the profile.
    """
    handler = _HANDLERS.get(action.name)
    if handler is None:
        raise ValueError(f"unknown action {action.name!r}; expected one of {ACTIONS}")
    if action.process != WRITER and action.name != "attach_reader" and action.process not in state.readers:
        raise ValueError(f"process {action.process!r} is neither the writer nor an attached reader")
    return handler(state, action)


def _writer_only(a: Action) -> Outcome | None:
    if a.process != WRITER:
        return _err(NotWriter(a.name))
    return None


def _put(s: State, a: Action) -> tuple[State, Outcome]:
    if (o := _writer_only(a)) is not None:
        return s, o
    key, nbytes = a.arg("key"), a.arg("nbytes")
    if s.chunk_for_key(key) is not None:
        return s, _err(DuplicateKey(key))
    if nbytes > s.max_object_size:
        return s, _err(ObjectTooLarge(nbytes, s.max_object_size))
    fields = dict(key=key, value=a.arg("value"), writer_count=1)
    try:
        ring, chunk = _allocate(s, nbytes, fields)
    except OutOfSpace:
        s = _free_unused(s)
        try:
            ring, chunk = _allocate(s, nbytes, fields)
        except OutOfSpace as exc:
            return s, _err(exc)
    s = _after_allocation(replace(s, ring=ring, abs_end=s.abs_end + 1), chunk)
    return s, Outcome(value=chunk.handle)


def _allocate(s: State, nbytes: int, fields: dict[str, Any]) -> tuple[Ring, Chunk]:
    """The ring's allocation, with the live-chunk bound (``Profile.chunk_cap``).

    Raises:
        OutOfSpace: no contiguous room, or ``max_chunks`` chunks are live.
    """
    if s.max_chunks is not None and len(s.ring.chunks) >= s.max_chunks:
        raise OutOfSpace(f"{len(s.ring.chunks)} chunks are live (max_chunks={s.max_chunks})")
    return _ring.allocate(s.ring, nbytes, s.abs_end, **fields)


def _get_cached(s: State, a: Action) -> tuple[State, Outcome]:
    if (o := _writer_only(a)) is not None:
        return s, o
    key = a.arg("key")
    c = s.chunk_for_key(key)
    if c is None:
        return s, _err(UnknownKey(key))
    s = _update(s, c, writer_count=c.writer_count + 1, protected=False)
    return s, Outcome(value=c.handle)


def _is_cached(s: State, a: Action) -> tuple[State, Outcome]:
    if (o := _writer_only(a)) is not None:
        return s, o
    return s, Outcome(value=s.chunk_for_key(a.arg("key")) is not None)


def _get_signature(s: State, a: Action) -> tuple[State, Outcome]:
    if (o := _writer_only(a)) is not None:
        return s, o
    if not s.profile.signed:
        raise ValueError(f"profile {s.profile.name} has no signed handles")
    c = s.chunk_for_key(a.arg("key"))
    if c is None:
        return s, _err(UnknownKey(a.arg("key")))
    return s, Outcome(value=s.signature_for(c))


def _writer_get(s: State, a: Action) -> tuple[State, Outcome]:
    if (o := _writer_only(a)) is not None:
        return s, o
    chunk, err = _check_handle(s, a)
    if err is not None:
        return s, err
    if not s.writer_lock:
        return s, Outcome(value=chunk.value)
    # per reader: the writer holds no slot; its reads make up the slots' shortfall (is_free)
    return _count_read(s, chunk, WRITER), Outcome(value=chunk.value)


def _count_read(s: State, chunk: Chunk, reader: str) -> State:
    reads = dict(chunk.reads)
    reads[reader] = reads.get(reader, 0) + 1
    return _update(s, chunk, reader_count=chunk.reader_count + 1, reads=tuple(sorted(reads.items())))


def _get(s: State, a: Action) -> tuple[State, Outcome]:
    if a.process == WRITER:
        return _writer_get(s, a)
    chunk, err = _check_handle(s, a)
    if err is not None:
        return s, err
    if chunk in s.drain:  # a pre-clear handle draining: read, not counted
        return s, Outcome(value=chunk.value)
    return _count_read(s, chunk, a.process), Outcome(value=chunk.value)


def _touch(s: State, a: Action) -> tuple[State, Outcome]:
    mode = s.profile.touch
    if mode == "none":
        raise ValueError(f"profile {s.profile.name} has no touch")
    if a.process == WRITER:
        c = s.chunk_for_key(a.arg("key"))
        if c is None:
            return s, Outcome()
        if mode == "protecting":
            return _update(s, c, protected=True), Outcome()
        return _update(s, c, writer_count=c.writer_count + 1), Outcome()
    if mode == "protecting":
        _, err = _check_handle(s, a)
        return s, (err if err is not None else Outcome())
    # counting (vLLM 0.12 - 0.31): no id check; bump the count at that address
    # only once every reader has read it.
    address = a.arg("address")
    for c in s.ring.chunks:
        if c.address % s.ring.size == address % s.ring.size:
            if c.reader_count >= s.n_readers:
                return _update(s, c, reader_count=c.reader_count + 1), Outcome()
            break
    return s, Outcome()


def _release_touches(s: State, a: Action) -> tuple[State, Outcome]:
    if (o := _writer_only(a)) is not None:
        return s, o
    if s.profile.touch != "protecting":
        raise ValueError(f"profile {s.profile.name} has no release_touches")
    chunks = tuple(replace(c, protected=False) for c in s.ring.chunks)
    return replace(s, ring=replace(s.ring, chunks=chunks)), Outcome()


def _clear(s: State, a: Action) -> tuple[State, Outcome]:
    if a.process != WRITER:
        return s, Outcome()  # vLLM: clear() on a reader view does nothing
    drain = s.ring.chunks if s.profile.drain else ()
    return replace(s, ring=_ring.clear(s.ring, s.profile.clear_keeps_ids), drain=drain), Outcome()


def _free_unused_action(s: State, a: Action) -> tuple[State, Outcome]:
    if (o := _writer_only(a)) is not None:
        return s, o
    return _free_unused(s), Outcome()


def _attach_reader(s: State, a: Action) -> tuple[State, Outcome]:
    if not a.arg("lock", True):
        return s, _err(MissingReaderLock())
    if a.process in s.readers or a.process == WRITER:
        raise ValueError(f"reader {a.process!r} is already attached")
    if s.profile.per_reader and len(s.readers) >= s.n_readers:
        return s, _err(TooManyReaders(s.n_readers))
    return replace(s, readers=s.readers + (a.process,)), Outcome()


_HANDLERS = {
    "put": _put,
    "get_cached": _get_cached,
    "is_cached": _is_cached,
    "get_signature": _get_signature,
    "writer_get": _writer_get,
    "get": _get,
    "touch": _touch,
    "release_touches": _release_touches,
    "clear": _clear,
    "free_unused": _free_unused_action,
    "attach_reader": _attach_reader,
}
assert set(_HANDLERS) == set(ACTIONS)
