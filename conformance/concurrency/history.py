"""Linearizability of a concurrent history of store operations, per handle.

A *history* is what the processes of a free-running test recorded: one
:class:`Op` per operation, with its invoke and return times
(``time.monotonic_ns()``, one clock for every process on Linux).  It is
checked against the store's model semantics, *partitioned per handle*: every
handle the writer issued is an independent object with the states

    unborn --put (returns it)--> live --a writer op that freed it--> dead

* a reader ``get`` of a live handle returns exactly the object put under it;
* a ``get`` of an unborn or dead handle raises ``StaleHandle``; where the
  profile is ``lenient_stale`` a dead handle may instead return its own
  original object (never another one);
* where the profile drains (``Profile.drain``, CLR as vLLM's drain
  contract), a handle dropped by ``clear()`` is *draining*: a get returns its
  own object or raises ``StaleHandle``, and after one StaleHandle it is dead.

Each partition is searched in the Wing & Gong / WGL way (Lowe, "Testing for
linearizability", 2017): try every *minimal* pending operation (one that no
other pending operation precedes in real time) as the next linearization
point, backtrack on an illegal outcome, and memoize ``(set of linearized ops,
state)``.  The search has a budget (nodes per partition, seconds overall); a
partition that runs out of budget is ``unknown``, never ``pass``.

Properties (ids of SEMANTICS.md) and how each is decided:

* ``NRR``: a ``get`` returned, or deserialized, a value that is not the object
  put under its handle (no order of operations can explain that);
* ``CONFORMANCE``: a partition with no linearization for another reason (a
  ``StaleHandle`` from a handle live throughout the ``get``, the original
  object from a handle freed before the ``get`` began on a strict profile, an
  error kind the model never gives, two gets that disagree on the order);
* ``RC``: under the read-once protocol (each reader reads each handle once,
  in issue order: ``args["mode"] == "once"``) a read returned ``StaleHandle``
  and a writer operation other than ``clear`` that freed the handle began
  before that read returned: the chunk was reclaimed before every reader had
  read it.  Not judged for a handle some *re-read* (``mode == "reread"``) read
  successfully before it was freed: that read was counted, so the protocol was
  broken for it (counted in :attr:`HistoryResult.rc_unjudged`);
* ``CLR``: a ``get`` invoked after a ``clear`` returned resolved (returned a
  value for) a handle issued before that clear; under the drain contract
  (``Profile.clr == "drain"``, vLLM's) only a resolution to another object
  breaks it.
  ``lenient_stale`` excuses the value for NRR, not the resolution for CLR.

Pure Python; no process code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from shmspec.model.profile import Profile
from shmspec.model.properties import nrr_message

WRITER_ACTIONS = ("put", "clear", "free_unused")
READ_MODES = ("once", "reread")
LIN_PROPERTIES = ("NRR", "RC", "CLR", "CONFORMANCE")
"""The properties a history check gives a verdict for."""

UNBORN, LIVE, DEAD, DRAIN = 0, 1, 2, 3
_STATE_NAMES = ("unborn", "live", "dead", "draining")


@dataclass(slots=True)
class Op:
    """One completed operation of a history.

    Attributes:
        process: ``"writer"`` or a reader name (``"r1"``...).
        action: ``"put"``, ``"clear"``, ``"free_unused"`` (writer) or ``"get"`` (reader);
            ``"kept"`` (reader): what a value of a zero-copy get (impl's
            ``get(copy=False)``) still held read at ``invoke_ns`` (``result``),
            judged by NRR only: a leased value must read as its object for as
            long as it is kept, whatever the writer did since.
        args: ``put``: ``{"key": str, "value": object}`` (the value put, any
            hashable; the free run uses the payload's tag); ``get``:
            ``{"ref": handle ref, "mode": "once" | "reread"}``.
        result: ``put``: the ref (a string naming the issued handle);
            ``get``: the value returned (compared with ``==``); None on error.
        error: the error kind (``"StaleHandle"``, ``"OutOfSpace"``...) or None.
        invoke_ns, return_ns: ``time.monotonic_ns()`` just before the call and
            just after it returned (``invoke_ns <= return_ns``).
        freed: writer ops: refs of the handles whose chunks the op freed.
        deserialized: ``get``: every value the store deserialized during the op.
    """

    process: str
    action: str
    args: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    error: str | None = None
    invoke_ns: int = 0
    return_ns: int = 0
    freed: frozenset[str] = frozenset()
    deserialized: tuple[Any, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        """One line: ``[invoke, return] process action(args) -> outcome``."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        out = self.error if self.error is not None else repr(self.result)
        freed = f" freed {sorted(self.freed)}" if self.freed else ""
        return f"[{self.invoke_ns}, {self.return_ns}] {self.process} {self.action}({args}) -> {out}{freed}"


@dataclass
class Finding:
    """A property violation with the sub-history that shows it.

    ``ref`` names the partition (handle), or ``""`` for a writer-only finding;
    ``ops`` are that partition's operations (plus the clear, for CLR) in
    invoke order: the minimal history a report needs to show.
    """

    property: str
    message: str
    ref: str
    ops: list[Op]
    culprit: Op | None = None
    """The operation that broke the property (None: the history as a whole)."""


@dataclass
class HistoryResult:
    """Outcome of :func:`check_history`.

    Attributes:
        verdict: ``"pass"``, ``"fail"`` (some finding) or ``"unknown"`` (no
            finding, but some partition's search ran out of budget).
        properties: verdict per id of :data:`LIN_PROPERTIES`.
        findings: every violation found.
        partitions: partitions (handles) checked.
        unknown: refs of the partitions whose search ran out of budget.
        nodes: search nodes explored, all partitions together.
        rc_unjudged: partitions where RC was not judged (read-once broken by a re-read).
        seconds: wall time of the check.
    """

    verdict: str
    properties: dict[str, str]
    findings: list[Finding]
    partitions: int
    unknown: list[str]
    nodes: int
    rc_unjudged: int
    seconds: float

    def by_property(self) -> dict[str, list[Finding]]:
        out: dict[str, list[Finding]] = {}
        for f in self.findings:
            out.setdefault(f.property, []).append(f)
        return out


@dataclass
class Partition:
    """The operations of one handle: the put that issued it (None if no put
    did), the writer ops that freed it, the gets that presented it."""

    ref: str
    put: Op | None = None
    frees: list[Op] = field(default_factory=list)
    gets: list[Op] = field(default_factory=list)

    @property
    def original(self) -> Any:
        return None if self.put is None else self.put.args.get("value")

    def ops(self, extra: Iterable[Op] = ()) -> list[Op]:
        ops = ([self.put] if self.put is not None else []) + self.frees + self.gets
        ops += [o for o in extra if all(o is not x for x in ops)]
        return sorted(ops, key=lambda o: (o.invoke_ns, o.return_ns))


def partition(history: Sequence[Op]) -> dict[str, Partition]:
    """Group a history per handle ref: the put that issued it, the writer ops
    that freed it, the gets that presented it."""
    parts: dict[str, Partition] = {}

    def part(ref: str) -> Partition:
        if ref not in parts:
            parts[ref] = Partition(ref)
        return parts[ref]

    for op in history:
        if op.action == "get":
            part(op.args["ref"]).gets.append(op)
            continue
        if op.action == "put" and op.ok:
            part(op.result).put = op
        for ref in op.freed:
            part(ref).frees.append(op)
    return parts


# ------------------------------------------------------------------ the search
def _apply(op: Op, state: int, part: Partition, lenient: bool, drain: bool = False) -> int | None:
    """The model's step for one op on one handle: the new state, or None when
    the op's recorded outcome is impossible in ``state``.

    ``drain`` (``Profile.drain``, CLR as vLLM's drain contract): a handle
    dropped by ``clear()`` is *draining*: a get may still return its own object
    until its bytes are reused, a moment the history does not record, so a
    get there returns the original (still draining) or raises StaleHandle
    (the drain ended: dead from then on)."""
    if op.action == "get":
        if op.ok:
            if op.result == part.original and part.put is not None:
                if state in (LIVE, DRAIN) or (state == DEAD and lenient):
                    return state
            return None
        if op.error != "StaleHandle":
            return None
        return DEAD if state == DRAIN else state if state in (UNBORN, DEAD) else None
    if op is part.put:
        return LIVE if state == UNBORN else None
    if state != LIVE:
        return None
    return DRAIN if drain and op.action == "clear" else DEAD  # a writer op that freed the handle


def linearizable(ops: Sequence[Op], part: Partition, lenient: bool, max_nodes: int,
                 deadline: float | None = None, drain: bool = False) -> tuple[bool | None, int]:
    """WGL search over one partition's ``ops``.

    Returns ``(True | False | None, nodes explored)``; None when ``max_nodes``
    or the ``deadline`` (``time.monotonic()`` seconds) ran out first.
    """
    n = len(ops)
    inv = [o.invoke_ns for o in ops]
    ret = [o.return_ns for o in ops]
    full = (1 << n) - 1
    seen: set[tuple[int, int]] = set()
    stack = [(0, UNBORN)]
    nodes = 0
    while stack:
        mask, state = stack.pop()
        if mask == full:
            return True, nodes
        if (mask, state) in seen:
            continue
        seen.add((mask, state))
        nodes += 1
        if nodes > max_nodes or (deadline is not None and nodes % 256 == 0 and time.monotonic() > deadline):
            return None, nodes
        pending = [i for i in range(n) if not mask >> i & 1]
        horizon = min(ret[i] for i in pending)
        for i in pending:
            if inv[i] <= horizon:  # minimal: no pending op returned before it was invoked
                nxt = _apply(ops[i], state, part, lenient, drain)
                if nxt is not None:
                    stack.append((mask | 1 << i, nxt))
    return False, nodes


# ------------------------------------------------------------------ the checks
def _value_findings(part: Partition) -> tuple[list[Finding], set[int]]:
    """NRR and unexpected errors: decided by one get alone, no search needed."""
    out: list[Finding] = []
    blamed: set[int] = set()
    for g in part.gets:
        where = f"{g.process} get({part.ref})"
        foreign = [d for d in g.deserialized if part.put is None or d != part.original]
        if g.ok and (part.put is None or g.result != part.original):
            out.append(Finding("NRR", nrr_message(f"{g.process}'s get", "returned", repr(g.result), part.ref,
                                                  repr(part.original)), part.ref, part.ops(), g))
            blamed.add(id(g))
        elif foreign:
            out.append(Finding("NRR", nrr_message(f"{g.process}'s get", "deserialized", repr(foreign[0]), part.ref,
                                                  repr(part.original)), part.ref, part.ops(), g))
        if not g.ok and g.error != "StaleHandle":
            out.append(Finding("CONFORMANCE", f"{where} raised {g.error}, which the model never "
                                              "gives for a well-formed handle", part.ref, part.ops(), g))
            blamed.add(id(g))
    return out, blamed


def _order_findings(part: Partition, gets: list[Op], lenient: bool, max_nodes: int,
                    drain: bool = False) -> list[Finding]:
    """Blame for a partition with no linearization: each get that cannot be
    placed even alone, else the partition as a whole."""
    writer_ops = [o for o in part.ops() if o.action != "get"]
    out = []
    for g in gets:
        alone, _ = linearizable(sorted(writer_ops + [g], key=lambda o: o.invoke_ns), part, lenient, max_nodes,
                                drain=drain)
        if alone is False:
            if g.ok:
                why = ("returned the object put under it, but the handle was freed before the get "
                       "was invoked (profile not lenient_stale)")
            else:
                why = "raised StaleHandle although the handle was live throughout the get"
            out.append(Finding("CONFORMANCE", f"{g.process} get({part.ref}) {why}", part.ref, part.ops(), g))
    if not out:
        out.append(Finding("CONFORMANCE", f"the gets of {part.ref} admit no single order: one saw the "
                                          "handle live after another had seen it dead", part.ref, part.ops()))
    return out


def _clr_findings(part: Partition, clears: list[Op], drain: bool = False) -> list[Finding]:
    """CLR: a get invoked after a clear() returned resolved a handle issued
    before it; under the drain contract (``drain``) only a resolution to
    another object than the handle's own breaks it."""
    if part.put is None:
        return []
    out = []
    for g in part.gets:
        if not g.ok or (drain and g.result == part.original):
            continue
        for c in clears:
            if c.invoke_ns >= part.put.return_ns and c.return_ns < g.invoke_ns:
                out.append(Finding("CLR", f"{g.process} get({part.ref}) invoked after a clear() returned "
                                          f"resolved to {g.result!r}; the handle was issued before that clear",
                                   part.ref, part.ops([c]), g))
                break
    return out


def _rc_findings(part: Partition, clears: list[Op]) -> tuple[list[Finding], bool]:
    """RC under the read-once protocol.  Returns (findings, judged)."""
    if part.put is None:
        return [], True
    out = []
    judged = True
    for g in part.gets:
        if g.args.get("mode") != "once" or g.error != "StaleHandle":
            continue
        if any(c.invoke_ns < g.return_ns and c.return_ns > part.put.invoke_ns for c in clears):
            continue  # a clear may have dropped it: a legitimate StaleHandle
        early = [f for f in part.frees if f.action != "clear" and f.invoke_ns < g.return_ns]
        if not early:
            continue  # not freed in time: the linearizability search judges it
        free = early[0]
        if any(r.ok and r.args.get("mode") == "reread" and r.invoke_ns < free.return_ns for r in part.gets):
            judged = False  # a counted re-read broke read-once for this handle
            continue
        out.append(Finding("RC", f"{g.process}'s first read of {part.ref} raised StaleHandle: the writer's "
                                 f"{free.action} freed the chunk before every reader had read it",
                           part.ref, part.ops(), g))
    return out, judged


def check_history(history: Sequence[Op], profile: Profile, *, max_nodes: int = 20_000,
                  max_seconds: float | None = 60.0) -> HistoryResult:
    """Check ``history`` per handle against the model of ``profile``.

    ``max_nodes``: search nodes per partition; ``max_seconds``: wall-time budget
    for all searches (None: unbounded).  Partitions past a budget are
    ``unknown``.  Never raises for a bad history: impossible records are findings.
    """
    t0 = time.monotonic()
    deadline = None if max_seconds is None else t0 + max_seconds
    lenient = profile.lenient_stale
    drain = profile.drain
    clr_drain = profile.clr == "drain"
    clears = [o for o in history if o.action == "clear" and o.ok]
    findings: list[Finding] = []
    for o in history:
        if o.action in WRITER_ACTIONS and not o.ok and o.error not in ("OutOfSpace", "DuplicateKey"):
            findings.append(Finding("CONFORMANCE", f"writer {o.action} raised {o.error}", "", [o]))
    unknown: list[str] = []
    nodes = 0
    rc_unjudged = 0
    parts = partition(history)
    for o in history:  # NRR for leased values: a kept zero-copy value reads as its object
        part = parts.get(o.args.get("ref", "")) if o.action == "kept" else None
        if part is not None and part.put is not None and o.result != part.original:
            findings.append(Finding("NRR", nrr_message(f"{o.process}'s kept value of get(copy=False)", "now reads",
                                                       repr(o.result), part.ref, repr(part.original),
                                                       ", after the writer's later operations"),
                                    part.ref, part.ops([o]), o))
    for ref, part in parts.items():
        local, blamed = _value_findings(part)
        findings += local
        findings += _clr_findings(part, clears, clr_drain)
        rc, judged = _rc_findings(part, clears)
        findings += rc
        rc_unjudged += not judged
        gets = [g for g in part.gets if id(g) not in blamed]
        ops = part.ops()
        ops = [o for o in ops if o.action != "get" or id(o) not in blamed]
        if deadline is not None and time.monotonic() > deadline:
            unknown.append(ref)
            continue
        verdict, k = linearizable(ops, part, lenient, max_nodes, deadline, drain)
        nodes += k
        if verdict is None:
            unknown.append(ref)
        elif verdict is False:
            findings += _order_findings(part, gets, lenient, max_nodes, drain)
    failed = {f.property for f in findings}
    props = {p: "fail" if p in failed else "pass" for p in LIN_PROPERTIES}
    if unknown and props["CONFORMANCE"] == "pass":
        props["CONFORMANCE"] = "unknown"
    verdict = "fail" if failed else ("unknown" if unknown else "pass")
    return HistoryResult(verdict, props, findings, len(parts), unknown, nodes, rc_unjudged,
                         time.monotonic() - t0)


def render(finding: Finding) -> str:
    """A finding with its sub-history, one op per line."""
    lines = [f"[{finding.property}] {finding.message}"]
    lines += [f"    {o.describe()}" for o in finding.ops]
    return "\n".join(lines)


__all__ = ["Finding", "HistoryResult", "LIN_PROPERTIES", "Op", "Partition", "check_history", "linearizable",
           "partition", "render"]
