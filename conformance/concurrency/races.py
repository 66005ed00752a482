"""Preemption-bounded schedules: one operation preempted at each of its yield
points while an opposing operation runs whole (preemption bound 1).

The Hypothesis-drawn controlled campaign (:mod:`.schedule`) may or may not
draw a given TOCTOU window within its budget; this sweep visits every window
of a small set of situations, in a fixed order, so a race that one preemption
exposes is found on every run, whatever the seed.  It is the systematic
(CHESS-style) complement to the random schedules:

* **reader side** (:data:`READER_HISTORIES` x :data:`READER_OPS`): reader
  ``r1`` starts a ``get`` of handle ``h1`` and is paused before its ``k``-th
  yield point, for every ``k`` its get reaches; the writer then runs an
  opposing operation whole; ``r1`` resumes to the end.  The history decides
  how far ``h1`` is read already: by nobody (``first``), by the other reader
  (``after-peer``: r1's count is the last promised one) or by both readers
  (``reread``: the chunk is reclaimable during all of r1's get).  The writer
  ``churn``\\ s (largest puts until ``h1``'s memory holds another chunk),
  ``clear``\\ s then churns, or runs ``free_unused``.
* **writer side** (:data:`WRITER_OPS`): with ``h1`` read by every reader
  (reclaimable) and ``h2`` unread, the writer starts an operation and is
  paused before its ``k``-th yield point; ``r1`` gets ``h1`` and ``r2`` gets
  ``h2`` (each whole, or until it waits for the lock the writer holds); the
  writer resumes.

Every schedule runs on a fresh store in one :class:`~.procs.ProcessPool`
through :class:`~.schedule.ScheduledSession`, which checks NRR, CLR, RC,
FIFO, DISJ after every step and LEAK at the end; a violation's steps are the
exact schedule (concurrency ``controlled``), so its repro replays it with
:func:`~.schedule.replay_schedule`.  On impl: 84 schedules, 2,773 steps, about
1 s on 2 cores.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .procs import ProcessPool
from .schedule import ScheduledSession, churn, payload, run_whole
from ..lockstep.session import PropertyViolation, SessionConfig

READER_HISTORIES = ("first", "after-peer", "reread")
READER_OPS = ("churn", "clear-churn", "free_unused")
WRITER_OPS = ("put", "free_unused", "clear")
MAX_POINTS = 32
"""Yield points visited per operation at most (a get of impl has about 8)."""


@dataclass(frozen=True)
class Race:
    """One preemption-bounded schedule: ``side`` (``reader`` or ``writer``) is
    paused before its ``point``-th yield point (1-based) of its operation,
    while the other side runs ``op`` (reader side) or the readers read
    (writer side).  ``history`` is the reader side's situation (``""`` for the
    writer side)."""

    side: str
    history: str
    op: str
    point: int

    @property
    def name(self) -> str:
        if self.side == "reader":
            return f"r1 get ({self.history}) paused at yield {self.point}, writer {self.op}"
        return f"writer {self.op} paused at yield {self.point}, readers get"


class _Driver:
    """Builds one schedule on a session: fresh keys and unique payloads."""

    def __init__(self, s: ScheduledSession):
        self.s = s
        self.puts = 0
        self.at: str | None = None
        """The yield point the preempted process stopped at."""

    def step(self, proc: str, kind: str, action: str = "", args: dict | None = None) -> None:
        self.s.execute({"process": proc, "kind": kind, "action": action, "args": args or {}})

    def whole(self, proc: str, action: str, args: dict | None = None) -> None:
        self.step(proc, "start", action, args)
        run_whole(self.s, proc)

    def put_args(self, fill: int) -> dict[str, str]:
        """The next put's arguments: a fresh key and a unique payload."""
        self.puts += 1
        return {"key": f"p{self.puts}", "data": payload(self.s.config, self.puts, fill).hex()}

    def put(self, fill: int) -> None:
        """A whole put, unless the writer is still in an operation that waits
        for the lock."""
        if self.s.writer_idle():
            self.whole("writer", "put", self.put_args(fill))

    def pause_at(self, proc: str, action: str, args: dict, point: int) -> str | None:
        """Start ``action`` and stop before its ``point``-th yield point; the
        yield point's name, or None when the operation ended (or blocked) first."""
        self.step(proc, "start", action, args)
        for _ in range(point - 1):
            if proc not in self.s.runnable():
                return None
            self.step(proc, "advance")
        self.at = self.s.pool.procs[proc].point
        return self.at


def _reader_race(d: _Driver, race: Race) -> str | None:
    d.put(100)
    readers = list(d.s.config.readers)
    r1, peers = readers[0], readers[1:]
    if race.history in ("after-peer", "reread"):
        for r in peers:
            d.whole(r, "get", {"ref": "h1"})
    if race.history == "reread":
        d.whole(r1, "get", {"ref": "h1"})
    at = d.pause_at(r1, "get", {"ref": "h1"}, race.point)
    if at is None:
        return None
    if race.op == "clear-churn":
        d.whole("writer", "clear")  # may wait for the lock r1 holds: then no churn
    if race.op in ("churn", "clear-churn"):
        churn(d.s, d.s.ref("h1"), lambda: d.put(100))
    else:
        d.whole("writer", race.op)
    run_whole(d.s, r1)
    return at


def _writer_race(d: _Driver, race: Race) -> str | None:
    d.put(100)
    for r in d.s.config.readers:
        d.whole(r, "get", {"ref": "h1"})
    d.put(50)
    args = d.put_args(100) if race.op == "put" else {}
    at = d.pause_at("writer", race.op, args, race.point)
    if at is None:
        return None
    for r, ref in zip(d.s.config.readers, ("h1", "h2")):
        d.whole(r, "get", {"ref": ref})
    run_whole(d.s, "writer")
    return at


def races() -> Iterator[Race]:
    """Every schedule of the sweep, reader side first; for each situation the
    points go 1, 2, ... until the operation ends before reaching the point
    (the caller stops that situation on ``None`` from :func:`run_race`)."""
    for history in READER_HISTORIES:
        for op in READER_OPS:
            for k in range(1, MAX_POINTS + 1):
                yield Race("reader", history, op, k)
    for op in WRITER_OPS:
        for k in range(1, MAX_POINTS + 1):
            yield Race("writer", "", op, k)


def run_race(target: Any, race: Race, config: SessionConfig, pool: ProcessPool) -> tuple[ScheduledSession, str | None,
                                                                                          PropertyViolation | None]:
    """Run one schedule on a fresh store.  Returns ``(session, point, violation)``:
    ``point`` is the name of the yield point the preempted process stopped
    at (None: its operation has fewer yield points, nothing was preempted;
    or a violation came before the preemption).

    Raises:
        ScheduleError: a process did not follow the schedule (harness failure).
    """
    s = ScheduledSession(pool, target, config)
    d = _Driver(s)
    try:
        at = (_reader_race if race.side == "reader" else _writer_race)(d, race)
        s.finish()
    except PropertyViolation as exc:
        s.finish_quietly()
        return s, d.at, exc
    return s, at, None


def sweep(target: Any, config: SessionConfig, pool: ProcessPool,
          on_violation: Callable[[Race, str | None, PropertyViolation, int], SessionConfig]) -> tuple[int, int]:
    """Run every schedule of :func:`races`; ``on_violation(race, point, exc,
    steps)`` records a finding (``steps``: scheduled steps of the sweep so
    far, the failing schedule's included) and returns the config for the rest
    (e.g. with the property excused).  Returns ``(schedules run, steps)``."""
    runs = steps = 0
    done: set[tuple[str, str, str]] = set()
    for race in races():
        situation = (race.side, race.history, race.op)
        if situation in done:
            continue
        session, at, exc = run_race(target, race, config, pool)
        steps += len(session.trace)
        if exc is not None:
            config = on_violation(race, at, exc, steps)
        elif at is None:
            done.add(situation)
            continue
        runs += 1
    return runs, steps


__all__ = ["MAX_POINTS", "READER_HISTORIES", "READER_OPS", "Race", "WRITER_OPS", "races", "run_race", "sweep"]
