"""The properties of SEMANTICS.md as predicates, named by their ids.

Three shapes, so that every checker (lockstep machine, state enumeration, TLC
trace replay) calls the same code:

* state invariants ``inv(state) -> list[str]`` (messages; empty when it holds),
* transition properties ``trans(before, action, after, outcome) -> list[str]``,
* the observation properties NRR, DUP, LOCK, SIZE, AUTH, CLR need what a real
  target returned and are checked by the harness against these definitions.

:data:`PROPERTIES` is the registry: one :class:`Property` per id (its
statement, severity, kind, contract variants, the checkers that claim it and
its TLA+ name); ``PROPERTY_IDS``, ``DESCRIPTIONS`` and ``SEVERITY`` are derived
from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .ring import ID_MAX, Chunk
from .store import Action, Outcome, State, is_free

@dataclass(frozen=True)
class Property:
    """One property of the contract (docs/semantics.md), in one place.

    Every list, order, table and report column of properties is derived from
    :data:`PROPERTIES` (``PROPERTY_IDS``, ``DESCRIPTIONS``, :data:`SEVERITY`,
    the gate's ``ALL_PROPERTIES``, the matrix's columns); ``tests/model/test_properties.py``
    checks that each checker claims exactly the properties listed here.
    """

    id: str
    statement: str
    """The one-line statement shown in reports."""
    severity: int
    """1 = most severe: the order in which the violations of one step are reported."""
    kind: str
    """``safety`` (an invariant or a transition property: a finite
    counterexample), ``liveness`` (something must eventually happen: PROG
    under fairness, LIVE within a stated bound) or ``refinement`` (CONFORMANCE:
    the target's behaviour is one of the model's)."""
    checkers: frozenset[str]
    """The checkers that claim it (:data:`CHECKERS`)."""
    contracts: tuple[str, ...] = ()
    """Its contract variants, when a store may declare one (CLR: ``drain``,
    vLLM >= 0.32, or ``strict``; SW: ``threads`` or ``one-thread``); the
    model profile (``shmspec.model.profile``) names the one a store keeps."""
    tla: str | None = None
    """Its name in tla/ShmStore.tla (an INVARIANT, or PROGLive, a temporal PROPERTY)."""


CHECKERS: dict[str, str] = {
    "lockstep": "shmspec.conformance.lockstep.session:Session.execute",
    "boundary": "shmspec.conformance.proofs.boundary:run_program",
    "controlled": "shmspec.conformance.concurrency.schedule:ScheduledSession.execute",
    "free": "shmspec.conformance.concurrency.history:check_history",
    "faults": "shmspec.conformance.concurrency.faults:run_scenario",
    "threads": "shmspec.conformance.concurrency.sw:run_scenario",
    "tla": "tla/ShmStore.tla",
    "z3": "shmspec.conformance.proofs.prove:OBLIGATIONS",
}
"""Checker -> its entry point (``module:qualname``, or a file of the
repository; each property it claims is judged in what that calls, e.g. NRR
of a lockstep get in ``Session._read_checks``): the lockstep session (model and target step by step, the
Hypothesis campaigns and replays), the z3 boundary programs (planned by
``boundary.programs``, run in lockstep by ``run_program`` and on real
processes by ``run_program_scheduled``, both through the sessions' checks),
the controlled schedules and the preemption sweep of real processes (both
``ScheduledSession``: the preemption campaign counts as "controlled"), the
free-running load's linearizability check, the process-fault scenarios,
the two-thread writer schedules, TLC on the TLA+ spec, and the z3
obligations over the model's ring arithmetic.  Findings of every checker are
rendered by ``shmspec.conformance.reporting.report:violation_panel``."""

PROPERTIES: tuple[Property, ...] = (
    Property('NRR', "a reader's get returns exactly the object put under that handle, or the stale-handle error",
             severity=1, kind='safety', checkers=frozenset(['boundary', 'controlled', 'faults', 'free', 'lockstep', 'tla']), tla='NRR'),
    Property('DUP', 'a put of a cached key is rejected and changes nothing',
             severity=9, kind='safety', checkers=frozenset(['lockstep', 'tla']), tla='DUP'),
    Property('LOCK', 'a reader without a lock cannot be built',
             severity=11, kind='safety', checkers=frozenset(['lockstep'])),
    Property('SIZE', 'an object over max_object_size is rejected and changes nothing',
             severity=10, kind='safety', checkers=frozenset(['lockstep', 'z3'])),
    Property('OOM', 'put raises MemoryError exactly when, after FIFO reclaim, no contiguous room exists',
             severity=16, kind='safety', checkers=frozenset(['boundary', 'lockstep'])),
    Property('FIFO', 'chunks are reclaimed oldest first; a busy chunk blocks younger ones',
             severity=5, kind='safety', checkers=frozenset(['boundary', 'controlled', 'lockstep', 'tla']), tla='FIFO'),
    Property('RC', 'a chunk is never reclaimed before its promised reads (vLLM: reader_count >= writer_count * n_readers; per reader: every reader read it writer_count times)',
             severity=3, kind='safety', checkers=frozenset(['boundary', 'controlled', 'free', 'lockstep', 'tla', 'z3']), tla='RC'),
    Property('DISJ', 'live chunks never overlap and lie inside the segment',
             severity=2, kind='safety', checkers=frozenset(['boundary', 'controlled', 'lockstep', 'tla', 'z3']), tla='DISJ'),
    Property('WRAP', 'ids wrap at 2**31 without two live chunks sharing an id',
             severity=6, kind='safety', checkers=frozenset(['boundary', 'tla', 'z3']), tla='WRAP'),
    Property('CLR', 'a handle issued before clear() resolves after it only to its own, intact object (drain), or never (strict)',
             severity=7, kind='safety', checkers=frozenset(['boundary', 'controlled', 'free', 'lockstep', 'tla', 'z3']), contracts=("drain", "strict"), tla='CLR'),
    Property('AUTH', 'a forged or altered signed handle is rejected before any shared byte is read',
             severity=8, kind='safety', checkers=frozenset(['lockstep'])),
    Property('LEAK', 'closing the writer leaves no shared-memory segment behind',
             severity=17, kind='safety', checkers=frozenset(['boundary', 'controlled', 'free', 'lockstep'])),
    Property('EXC', 'a put, reclaim or clear that raises (a serializer result that cannot be copied, an asynchronous exception at a yield point) leaves the store as before it or as after it',
             severity=4, kind='safety', checkers=frozenset(['lockstep'])),
    Property('PROM', "a reader's promised read of a handle succeeds until that reader has made it, whatever other readers did (read it twice, or never)",
             severity=12, kind='safety', checkers=frozenset(['controlled', 'lockstep', 'tla']), tla='PROM'),
    Property('PROG', 'once every promised read is made and every touch released, a put of max_object_size succeeds: no chunk stays pinned by a count that never reaches its threshold',
             severity=13, kind='liveness', checkers=frozenset(['controlled', 'faults', 'lockstep', 'tla']), tla='PROGLive'),
    Property('LIVE', 'no operation of a live process blocks longer than a stated bound, whatever another process did (killed mid-get, in the reader lock, mid-put); the survivors get no wrong object',
             severity=14, kind='liveness', checkers=frozenset(['faults'])),
    Property('SW', 'two threads using one writer at once are serialized or refused: no exception outside the taxonomy, no key without its live chunk or chunk without its key, no handle that reads back wrong',
             severity=15, kind='safety', checkers=frozenset(['threads']), contracts=("threads", "one-thread")),
    Property('LEASE', "(a store that declares reader leases) a reader's pins and promised reads end with its lease: once a reader is gone, the survivors' puts succeed and read back right; a MemoryError names the readers whose reads pin the head",
             severity=18, kind='liveness', checkers=frozenset(['faults'])),
    Property('CONFORMANCE', "the target's outcomes and state agree with the reference model",
             severity=19, kind='refinement', checkers=frozenset(['boundary', 'free', 'lockstep'])),
)
"""Every property, in report order (SEMANTICS.md's order, then CONFORMANCE)."""

BY_ID: dict[str, Property] = {p.id: p for p in PROPERTIES}

PROPERTY_IDS: tuple[str, ...] = tuple(p.id for p in PROPERTIES if p.id != "CONFORMANCE")
"""The contract's properties (without CONFORMANCE, which is the harness's own)."""

DESCRIPTIONS: dict[str, str] = {p.id: p.statement for p in PROPERTIES}

SEVERITY: tuple[str, ...] = tuple(p.id for p in sorted(PROPERTIES, key=lambda p: p.severity))
"""Property ids, most severe first."""


def nrr_message(who: str, verb: str, got: str, handle: str, holds: str, detail: str = "") -> str:
    """NRR's one wording, used by every checker that finds it (lockstep and
    scheduled sessions, the history check, the fault scenarios, TLC trace
    replay): ``"{who} {verb} {got} for handle {handle}, which holds
    {holds}{detail}"``; ``verb`` is ``returned`` (what a get gave back) or
    ``deserialized`` (what a reader's serde was handed, seen before the get
    returned)."""
    return f"{who} {verb} {got} for handle {handle}, which holds {holds}{detail}"


def nrr_error_message(who: str, handle: str, error: str, detail: str = "") -> str:
    """NRR's wording for a get that neither returned its object nor raised
    the stale-handle error (SEMANTICS.md NRR allows only those two):
    ``"{who} of {handle} raised {error}, neither its object nor the store's
    stale-handle error{detail}"``."""
    return f"{who} of {handle} raised {error}, neither its object nor the store's stale-handle error{detail}"


def by_severity(violations: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(property, message)`` pairs, most severe property first (an unknown
    id last), each pair once, in a stable order."""
    rank = {pid: i for i, pid in enumerate(SEVERITY)}
    return sorted(dict.fromkeys(violations), key=lambda pm: rank.get(pm[0], len(rank)))


def extent(chunk: Chunk, ring_size: int) -> tuple[int, int]:
    """Physical ``[begin, end)`` of a chunk in the data region, bytes."""
    begin = chunk.address % ring_size
    return begin, begin + chunk.size


def disj(chunks: list[Chunk] | tuple[Chunk, ...], ring_size: int) -> list[str]:
    """DISJ over any list of live chunks (model or target snapshot)."""
    out: list[str] = []
    spans = sorted((extent(c, ring_size), c.id) for c in chunks)
    for (b, e), cid in spans:
        if e > ring_size or b < 0:
            out.append(f"chunk id {cid} at [{b}, {e}) lies outside the {ring_size}-byte ring")
    for ((b1, e1), i1), ((b2, e2), i2) in zip(spans, spans[1:]):
        if b2 < e1:
            out.append(f"chunks id {i1} [{b1}, {e1}) and id {i2} [{b2}, {e2}) overlap")
    return out


def wrap(chunks: list[Chunk] | tuple[Chunk, ...]) -> list[str]:
    """WRAP: live ids are distinct and in ``[0, 2**31)``."""
    out = []
    ids = [c.id for c in chunks]
    if len(set(ids)) != len(ids):
        out.append(f"two live chunks share an id: {sorted(ids)}")
    out += [f"id {i} outside [0, 2**31)" for i in ids if not 0 <= i < ID_MAX]
    return out


def ring_bounds(state: State) -> list[str]:
    """``start <= end <= start + B`` and ``0 <= start < B`` (the ring's own invariant)."""
    r = state.ring
    if not (0 <= r.start < r.size and r.start <= r.end <= r.start + r.size):
        return [f"ring bounds broken: start={r.start} end={r.end} B={r.size}"]
    return []


STATE_INVARIANTS: dict[str, Callable[[State], list[str]]] = {
    "DISJ": lambda s: disj(s.ring.chunks, s.ring.size) + ring_bounds(s),
    "WRAP": lambda s: wrap(s.ring.chunks),
}


def freed_chunks(before: State, after: State) -> list[Chunk]:
    """Chunks live before and gone after a step (not counting a clear)."""
    live_after = {c.abs_id for c in after.ring.chunks}
    return [c for c in before.ring.chunks if c.abs_id not in live_after]


def fifo(before_chunks: tuple[Chunk, ...] | list[Chunk], freed_ids: set[int]) -> list[str]:
    """FIFO: the freed chunks are a prefix of the live chunks, oldest first."""
    k = len(freed_ids)
    prefix = {c.id for c in list(before_chunks)[:k]}
    if freed_ids != prefix:
        return [f"freed ids {sorted(freed_ids)} are not the oldest {k} live ids {sorted(prefix)}"]
    return []


def rc(before: State, freed: list[Chunk]) -> list[str]:
    """RC: every freed chunk was free by the reclaim predicate before the step."""
    def counts(c: Chunk) -> str:
        if before.profile.per_reader:
            short = [f"{r} {n}" for r, n in sorted(dict(c.reads).items()) if n < c.writer_count]
            return f"reads per reader {dict(c.reads)} ({', '.join(short) or 'none'} < writer_count {c.writer_count})"
        return f"reader_count {c.reader_count} < writer_count {c.writer_count} x n_readers {before.n_readers}"

    return [
        f"chunk id {c.id} reclaimed with {counts(c)}" + (" (protected by touch)" if c.protected else "")
        for c in freed
        if not is_free(before, c)
    ]


def check_transition(before: State, action: Action, after: State, outcome: Outcome) -> dict[str, list[str]]:
    """FIFO and RC for one model step (a clear drops everything by design)."""
    if action.name == "clear":
        return {}
    freed = freed_chunks(before, after)
    return {"FIFO": fifo(before.ring.chunks, {c.id for c in freed}), "RC": rc(before, freed)}


def check_state(state: State) -> dict[str, list[str]]:
    return {pid: inv(state) for pid, inv in STATE_INVARIANTS.items()}


def protocol_kept(state: State) -> bool:
    """The read-once client protocol: no reader has read a chunk more often
    than the writer promised (``writer_count``).  NRR's guarantee against
    recycled reads under concurrency assumes it; impl/ keeps NRR without it."""
    return all(n <= c.writer_count for c in state.ring.chunks for _, n in c.reads)
