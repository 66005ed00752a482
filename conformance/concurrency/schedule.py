"""Controlled interleavings: Hypothesis draws the schedule, processes obey it.

A :class:`ScheduledSession` runs operations in real writer and reader processes
(:class:`~.procs.ProcessPool`) one *scheduled step* at a time: a step either
starts an operation on an idle process or lets a paused process run to its next
yield point.  After every step it reads the writer's ring and checks:

* NRR: every object a reader deserialized, and every value it returned, is the
  object put under the handle it presented (else it must raise StaleHandle);
* CLR: a get that starts after a ``clear()`` has returned never resolves a
  handle issued before it (under the drain contract, ``Profile.clr ==
  "drain"``, vLLM's, it may resolve to its own object: NRR judges the value);
* RC: a chunk that disappears (outside ``clear``) had ``reader_count >=
  writer_count * n_readers``; and a live chunk's ``reader_count`` never exceeds
  the gets started against its handle (a count for a read that did not happen
  lets a chunk be reclaimed before its reads, e.g. an increment landing on a
  recycled slot);
* FIFO and DISJ on the live chunks;
* with ``promises`` (the controlled campaign, whose reads are drawn): PROM, a
  get that a reader was promised (one read per reader per put, until a
  ``clear()``) and has not made fails StaleHandle; and PROG when the session
  ends: every reader makes the promised reads it has not started, the writer
  runs ``free_unused``, and a put of ``max_object_size`` must then succeed
  (else the finding names the chunks left pinned and their counts).

On a store whose ``get`` takes ``copy=False`` (impl) readers may also keep
zero-copy values (``keep_get``) across later steps; each is checked (NRR:
it still reads as its object) when the reader releases it or the session
ends, and PROG's final put comes after every kept value was dropped, so a
lease that outlives its value is named there.

The machine (:func:`scheduled_machine`) only draws which step comes next, so a
counterexample shrinks in its operations and its schedule together, and the
recorded steps (``{"process", "kind", "action", "args"}``, handles named
symbolically) replay exactly (:func:`replay_schedule`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from shmspec.model.properties import by_severity, nrr_message
from shmspec.model.steps import LOCK_STEPS, READ_STEPS

from shmspec.model.profile import impl_max_chunks

from ..core import interrupt
from ..core.constructions import Construction
from ..targets.adapter import Snapshot, offers_zero_copy, target_state_checks
from ..targets.loader import LoadedTarget
from .procs import ProcessPool, StepOutcome
from .record import Recorder
from ..core.serde import Blob, Garbage, difference, object_nbytes
from ..lockstep.session import PropertyViolation, SessionConfig

KEYS = tuple(f"k{i}" for i in range(6))
_READ_POINTS = tuple(READ_STEPS) + tuple(LOCK_STEPS)
CHECKS = frozenset({"NRR", "CLR", "RC", "FIFO", "DISJ", "LEAK"})
"""What a completed preemption sweep establishes."""
CONTROLLED_CHECKS = CHECKS | {"PROM", "PROG"}
"""What a completed controlled campaign establishes (its sessions keep the
client's account of promised reads)."""


@dataclass
class LaneStep:
    """One scheduled step: ``process`` started (``kind="start"``) or resumed
    (``"advance"``) ``action`` and reached yield point ``point`` (None: the
    operation finished with ``observed``).  ``ring`` lists the live chunks
    after the step as ``"id@address:reader_count/writer_count"``."""

    index: int
    process: str
    kind: str
    action: str
    args: dict[str, Any]
    point: str | None
    observed: str | None = None
    ring: list[str] = field(default_factory=list)
    violations: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "process": self.process,
            "kind": self.kind,
            "action": self.action,
            "args": self.args,
            "yield_point": self.point,
            "observed": self.observed,
            "ring": self.ring,
            "violations": [{"property": p, "message": m} for p, m in self.violations],
        }


@dataclass
class Ref:
    """A handle the writer issued in this session."""

    ref: str
    key: str
    address: int
    id: int
    data: bytes
    signature: list[int] | None
    epoch: int
    """Number of clears completed before it was issued."""


def _ring(snap: Snapshot | None) -> list[str]:
    if snap is None:
        return ["?"]
    return [f"{c.id}@{c.address}:{c.reader_count}/{c.writer_count}" for c in snap.chunks]


class ScheduledSession:
    """Operations on a :class:`ProcessPool` with every check after every step.

    Raises :class:`~.session.PropertyViolation` (steps are :class:`LaneStep`)
    on the first violation of a property not in ``config.excused``; raises
    :class:`~.procs.ScheduleError` when a process does not respond in time.
    """

    def __init__(self, pool: ProcessPool, target: LoadedTarget, config: SessionConfig, promises: bool = False,
                 record: bool = False):
        self.pool = pool
        self.target = target
        self.config = config
        self.promises = promises
        """Check PROM on every get and PROG when the session ends (see the module docstring)."""
        self.made: dict[str, dict[str, int]] = {}
        """ref -> reader -> gets of it that returned its object."""
        self.refs: list[Ref] = []
        self.trace: list[LaneStep] = []
        self.excused_hits: list[tuple[str, str]] = []
        self.epoch = 0
        self.clear_running = False
        self.gets_started: dict[tuple[int, int], int] = {}
        self.seen_deserialized: dict[str, int] = {}
        self.started_by: dict[str, set[str]] = {}
        self.current: dict[str, tuple[str, dict]] = {}
        """process -> (action, symbolic args) of the operation in flight."""
        self.get_epoch: dict[str, int] = {}
        """reader -> clears completed when its current get started."""
        self.failed = False
        """Set once a violation was raised: later steps are recorded, not raised."""
        self.last_detail = ""
        """The message of the latest operation that raised (its ``detail``)."""
        self.kept: dict[str, dict[str, str]] = {}
        """reader -> key -> ref of each value of ``get(copy=False)`` it keeps (``keep_get``)."""
        self.recorder: Recorder | None = None
        """With ``record``: the run as a trace of the spec's steps (:mod:`.record`; off by default)."""
        if record:
            construction = Construction(config.writer_lock, config.start_method, config.n_readers).name
            self.recorder = Recorder(target.spec, construction, tuple(config.readers), config.data_buffer_size,
                                     not target.profile.lenient_stale, impl_max_chunks(config.data_buffer_size),
                                     2 * config.max_object_size)
        if not pool.clean():
            pool.respawn()
        pool.open_store(config.data_buffer_size, config.max_object_size, config.n_readers, config.writer_lock)
        self.snap = pool.snapshot()
        self.closed = False

    # -- what the generator may choose ---------------------------------------------
    def idle_readers(self) -> list[str]:
        return [r for r in self.config.readers if r in self.pool.idle()]

    def writer_idle(self) -> bool:
        return "writer" in self.pool.idle()

    def runnable(self) -> list[str]:
        return self.pool.runnable()

    def unread(self, reader: str | None = None) -> list[Ref]:
        """Handles ``reader`` (any reader: None) has not started a get of."""
        readers = [reader] if reader else list(self.config.readers)
        return [r for r in self.refs if any(r.ref not in self.started_by.get(x, set()) for x in readers)]

    def ref(self, name: str) -> Ref:
        for r in self.refs:
            if r.ref == name:
                return r
        raise KeyError(f"unknown handle ref {name!r}")

    # -- steps ----------------------------------------------------------------------
    def execute(self, step: dict[str, Any]) -> LaneStep:
        """Run one recorded step ``{"process", "kind", "action", "args"}``."""
        proc, kind, action, args = step["process"], step["kind"], step.get("action", ""), dict(step.get("args", {}))
        at = self.pool.procs[proc].point if kind == "advance" and proc in self.pool.procs else None
        if kind == "start":
            real = self._real_args(proc, action, args)
            if action == "clear":
                self.clear_running = True
            self.current[proc] = (action, args)
            out = self.pool.start(proc, action, real)
        elif kind == "advance":
            if proc not in self.current:
                raise ValueError(f"{proc} has no operation in flight to advance")
            action, args = self.current[proc]
            out = self.pool.advance(proc)
        else:
            raise ValueError(f"unknown step kind {kind!r}")
        if out.result is not None:
            del self.current[proc]
        return self._after(proc, kind, action, args, out, at)

    def _real_args(self, proc: str, action: str, args: dict) -> dict:
        if action in ("get", "keep_get"):
            r = self.ref(args["ref"])
            self.gets_started[(r.address, r.id)] = self.gets_started.get((r.address, r.id), 0) + 1
            self.started_by.setdefault(proc, set()).add(r.ref)
            self.get_epoch[proc] = self.epoch
            real = {"address": r.address, "id": r.id}
            if self.target.profile.signed:
                real.update(signature=r.signature, key=r.key)
            if action == "keep_get":
                real["key"] = r.key  # the worker keeps the value under its key
            return real
        if action == "warp_counts":  # boundary programs: the chunk of handle ``ref``
            r = self.ref(args["ref"])
            return {"address": r.address, "id": r.id, "writer_count": args["writer_count"],
                    "reader_count": args["reader_count"]}
        return args

    def _after(self, proc: str, kind: str, action: str, args: dict, out: StepOutcome, at: str | None = None) -> LaneStep:
        before = self.snap
        self.snap = out.snapshot if proc == "writer" and out.snapshot is not None else self.pool.snapshot()
        if self.recorder is not None:
            self._record(proc, kind, action, args, out, at)
        step = LaneStep(len(self.trace), proc, kind, action, args if kind == "start" else {}, out.point,
                        ring=_ring(self.snap))
        v: list[tuple[str, str]] = []
        if action in ("get", "keep_get"):
            v += self._deserialized(proc, args, out)
        if out.result is not None:
            step.observed = _render_result(out.result)
            v += self._finished(proc, action, args, out)
        v += self._state_checks(before, self.snap, action if proc == "writer" else "")
        if out.result is not None and action == "clear":
            self.epoch += 1
            self.clear_running = False
        step.violations = by_severity(v)
        self.trace.append(step)
        raised = [pv for pv in step.violations if not self._excused(pv[0], action)]
        self.excused_hits += [pv for pv in step.violations if self._excused(pv[0], action)]
        if raised and not self.failed:
            self.failed = True
            prop, msg = raised[0]
            raise PropertyViolation(prop, msg, self.trace, action)
        return step

    def _record(self, proc: str, kind: str, action: str, args: dict, out: StepOutcome, at: str | None) -> None:
        got = None
        if action in ("get", "keep_get"):
            new = out.deserialized[self.seen_deserialized.get(proc, 0):]
            if new:
                got = "own" if new[-1] == {"blob": self.ref(args["ref"]).data.hex()} else "other"
        B = self.config.data_buffer_size
        ring = ([[c.address % B, c.size, c.id] for c in self.snap.chunks]
                if proc == "writer" and self.snap is not None else None)
        self.recorder.step(proc, kind, action, args, at, out.point, out.result, got, ring)

    def _excused(self, prop: str, action: str) -> bool:
        return self.config.excuses(prop, action)

    def _deserialized(self, proc: str, args: dict, out: StepOutcome) -> list[tuple[str, str]]:
        """NRR at the step a reader deserialized something (seen before it returns)."""
        seen = self.seen_deserialized.get(proc, 0)
        new = out.deserialized[seen:]
        self.seen_deserialized[proc] = 0 if out.result is not None else len(out.deserialized)
        r = self.ref(args["ref"])
        want = {"blob": r.data.hex()}
        return [("NRR", nrr_message(f"reader {proc}", "deserialized", _render_value(d), f"{r.ref} ({r.address}, {r.id})",
                                    repr(Blob(r.data)), difference(_decode(d), r.data)))
                for d in new if d != want]

    def _finished(self, proc: str, action: str, args: dict, out: StepOutcome) -> list[tuple[str, str]]:
        res = out.result
        self.last_detail = (res.get("detail") or "") if res["error"] is not None else ""
        v: list[tuple[str, str]] = []
        if action == "put" and res["error"] is None:
            address, id_ = res["value"]["handle"]
            data = bytes.fromhex(args["data"])
            self.refs.append(Ref(f"h{len(self.refs) + 1}", args["key"], address, id_, data,
                                 res["value"]["signature"], self.epoch))
        elif action in ("get", "keep_get"):
            r = self.ref(args["ref"])
            want = {"blob": r.data.hex()}
            if action == "keep_get" and res["error"] is None:
                self.kept.setdefault(proc, {})[r.key] = r.ref
            if res["error"] is None:
                if res["value"] != want:
                    v.append(("NRR", nrr_message(f"reader {proc}", "returned", _render_value(res["value"]),
                                                 f"{r.ref} ({r.address}, {r.id})", repr(Blob(r.data)),
                                                 difference(_decode(res["value"]), r.data))))
                elif r.epoch < self.get_epoch.get(proc, 0) and self.target.profile.clr != "drain":
                    v.append(("CLR", f"handle {r.ref} issued before a clear() resolved in a get started after it"))
                else:
                    made = self.made.setdefault(r.ref, {})
                    made[proc] = made.get(proc, 0) + 1
            elif res["error"] == "StaleHandle":
                v += self._promise_broken(proc, r)
            else:
                v.append(("CONFORMANCE", f"reader {proc} get of {r.ref} raised {res['detail']}"))
        elif action == "check_kept":
            for key, now in (res["value"] or {}).items():
                r = self.ref(self.kept.get(proc, {}).get(key, ""))
                if now != {"blob": r.data.hex()}:
                    v.append(("NRR", nrr_message(f"reader {proc}'s kept value of get(copy=False)", "now reads",
                                                 _render_value(now), f"{r.ref} ({r.address}, {r.id})",
                                                 repr(Blob(r.data)), ", after the writer's later steps")))
        elif action == "drop_kept":
            self.kept.pop(proc, None)
        elif res["error"] is not None and res["error"] not in ("OutOfSpace", "DuplicateKey", "UnknownKey"):
            v.append(("CONFORMANCE", f"writer {action} raised {res['detail']}"))
        return v

    def _promise_broken(self, proc: str, r: Ref) -> list[tuple[str, str]]:
        """PROM: ``proc``'s get of ``r`` raised StaleHandle although ``proc`` was
        promised a read of it (``r`` put since the last clear, which had not
        started when the get did) and has not made it."""
        if (not self.promises or proc not in self.config.readers or r.epoch != self.epoch
                or self.get_epoch.get(proc) != self.epoch or self.clear_running
                or self.made.get(r.ref, {}).get(proc, 0) > 0):
            return []
        over = [f"{x} read it {n} times" for x, n in sorted(self.made.get(r.ref, {}).items()) if n > 1]
        return [("PROM", f"{proc}'s promised read of {r.ref} ({r.address}, {r.id}) failed with StaleHandle: its "
                         f"chunk was evicted before {proc} read it"
                 + (f" ({', '.join(over)}: the client broke the read-once rule; PROM still holds the store to "
                    f"the other readers' promised reads)" if over else ""))]

    def release_kept(self, reader: str) -> None:
        """``reader`` checks every value of ``get(copy=False)`` it keeps (NRR:
        each still reads as its object) and lets them all go (their leases end)."""
        for action in ("check_kept", "drop_kept"):
            self.execute({"process": reader, "kind": "start", "action": action, "args": {}})
            run_whole(self, reader)

    def drain_and_put(self) -> None:
        """PROG at the end of a session (``promises``): each reader reads, to
        the end, every handle put since the last clear that it has not
        started a get of; the writer runs ``free_unused``; then a put of the
        largest object must return a handle.

        Raises:
            PropertyViolation: PROG (the put found no room: the chunks still
                live are named with their counts), or a property a drain step
                broke.
        """
        for reader in self.config.readers:
            if self.kept.get(reader):  # zero-copy values: checked, then dropped (a lease that outlives them: PROG)
                self.release_kept(reader)
            for r in [r for r in self.refs if r.epoch == self.epoch and r.ref not in self.started_by.get(reader, ())]:
                self.execute({"process": reader, "kind": "start", "action": "get", "args": {"ref": r.ref}})
                run_whole(self, reader)
        self.execute({"process": "writer", "kind": "start", "action": "free_unused", "args": {}})
        run_whole(self, "writer")
        data = payload(self.config, len(self.refs) + 1, 100)
        self.execute({"process": "writer", "kind": "start", "action": "put",
                      "args": {"key": "prog", "data": data.hex()}})
        run_whole(self, "writer")
        last = self.trace[-1]
        if last.process == "writer" and last.point is None and (last.observed or "").startswith("OutOfSpace"):
            n = self.config.n_readers
            pinned = "; ".join(f"id {c.id} at {c.address} ({c.counts_text(n)})" for c in (self.snap.chunks if
                                                                                          self.snap else []))
            msg = (f"every promised read made and free_unused run, a put of the largest object ({len(data)} "
                   f"payload bytes) raised OutOfSpace: still live: {pinned or 'nothing'}"
                   + (f"; the store says: {self.last_detail[:300]}" if self.last_detail else ""))
            last.violations.append(("PROG", msg))
            if not self._excused("PROG", "put") and not self.failed:
                self.failed = True
                raise PropertyViolation("PROG", msg, self.trace, "put")

    def _state_checks(self, before: Snapshot | None, after: Snapshot | None, writer_action: str) -> list[tuple[str, str]]:
        if after is None:
            return []
        v = target_state_checks(before, after, self.config.n_readers,
                                reclaimed=writer_action != "clear" and not self.clear_running)
        issued = {(r.address, r.id) for r in self.refs}
        in_put = self.pool.procs["writer"].action == "put"
        for i, c in enumerate(after.chunks):
            if (c.address, c.id) not in issued or (in_put and i == len(after.chunks) - 1):
                continue
            started = self.gets_started.get((c.address, c.id), 0)
            if c.reader_count > started:
                v.append(("RC", f"id {c.id} at {c.address} has reader_count {c.reader_count} but only "
                                f"{started} get(s) of its handle started: a read was counted on the wrong chunk"))
        return v

    def finish_quietly(self) -> None:
        """:meth:`finish` after a violation was raised: later ones are dropped."""
        try:
            self.finish()
        except PropertyViolation:
            pass

    def finish(self) -> None:
        """Run every operation in flight to completion, then close the store
        (LEAK: the segment must be gone)."""
        if self.closed:
            return
        self.closed = True
        pending: PropertyViolation | None = None
        try:
            for _ in range(10_000):
                run = self.runnable()
                if not run:
                    break
                try:
                    self.execute({"process": run[0], "kind": "advance"})
                except PropertyViolation as exc:  # found while draining: still drain the rest
                    pending = exc
            if self.promises and pending is None and not self.failed and not self.runnable():
                try:
                    self.drain_and_put()
                except PropertyViolation as exc:
                    pending = exc
            closed_clean = self.pool.close_store()
        except Exception:
            self.pool.respawn()  # leave the pool usable for the next example
            if pending is not None:
                raise pending from None
            if self.failed:
                return
            raise
        if not self.pool.clean():
            self.pool.respawn()
        if pending is not None:
            raise pending
        if not closed_clean and not self.failed and "LEAK" not in self.config.excused:
            raise PropertyViolation("LEAK", "the segment is still there after close", self.trace, "close")


def payload(config: SessionConfig, n: int, fill: int) -> bytes:
    """The ``n``-th put's payload: ``n`` as a 4-byte tag (so no two objects are
    equal), then ``fill`` percent of the largest body ``config`` accepts."""
    room = config.max_object_size - object_nbytes(b"") - 4
    return n.to_bytes(4, "little") + bytes([n % 251]) * (room * fill // 100)


def reused(session: ScheduledSession, r: Ref) -> bool:
    """``r``'s chunk is gone from the writer's ring and another live chunk
    covers its address (a lagging reader of ``r`` meets that chunk)."""
    snap, B = session.snap, session.config.data_buffer_size
    return snap is not None and not any((c.address, c.id) == (r.address, r.id) for c in snap.chunks) and any(
        c.address % B <= r.address % B < c.address % B + c.size for c in snap.chunks)


def churn(session: ScheduledSession, r: Ref, put: Callable[[], Any], max_puts: int = 4) -> None:
    """``put()`` (one whole largest put under a fresh key) until ``r``'s chunk
    is gone and another chunk covers its address (:func:`reused`), a put
    returns no handle, or ``max_puts`` were made: the writer's side of a
    reader lagging on ``r``."""
    for _ in range(max_puts):
        if reused(session, r) or not session.writer_idle():
            return  # done, or the writer waits for a reader (impl's pin_wait)
        before = len(session.refs)
        put()
        if len(session.refs) == before:
            return


def run_whole(session: ScheduledSession, proc: str) -> None:
    """Advance ``proc`` until its operation ends or it cannot move (blocked on
    the reader lock another paused process holds)."""
    while proc in session.runnable():
        session.execute({"process": proc, "kind": "advance"})


def _decode(v: Any) -> Any:
    """Blob / Garbage from the JSON form a worker sends (else the value itself)."""
    if isinstance(v, dict) and "blob" in v:
        return Blob(bytes.fromhex(v["blob"]))
    if isinstance(v, dict) and "garbage" in v:
        return Garbage(bytes.fromhex(v["garbage"]))
    return v


def _render_value(v: Any) -> str:
    if isinstance(v, dict) and "blob" in v:
        return repr(Blob(bytes.fromhex(v["blob"])))
    if isinstance(v, dict) and "garbage" in v:
        raw = bytes.fromhex(v["garbage"])
        return f"Garbage({raw[:16].hex()}, {len(raw)} B)"
    return repr(v)


def _render_result(res: dict) -> str:
    if res["error"] is not None:
        return res["error"]
    v = res["value"]
    if isinstance(v, dict) and "handle" in v:
        return f"handle ({v['handle'][0]}, {v['handle'][1]})"
    return "ok" if v is None else _render_value(v)


# ------------------------------------------------------------------- machine
class _Scheduled(RuleBasedStateMachine):
    target: LoadedTarget
    config: SessionConfig
    pool: ProcessPool

    traces: list | None = None
    """With ``config.record``: ``(trace document, its lane steps as JSON)`` of
    every session, appended when it ends."""

    def __init__(self) -> None:
        super().__init__()
        self.session: ScheduledSession | None = None
        self.puts = 0
        self.churned = 0

    @initialize()
    def open_store(self) -> None:
        self.session = ScheduledSession(self.pool, self.target, self.config, promises=True,
                                        record=self.config.record)

    def _run(self, step: dict) -> None:
        interrupt.check()  # a swallowed SIGTERM stops the run here (conformance/core/interrupt.py)
        self.session.execute(step)

    def teardown(self) -> None:
        if self.session is not None:
            try:
                self.session.finish()
            finally:
                if self.session.recorder is not None and self.traces is not None:
                    self.traces.append((self.session.recorder.doc, [st.to_json() for st in self.session.trace]))

    def _start(self, proc: str, action: str, args: dict, interleave: bool) -> None:
        """Start an operation; unless ``interleave``, run it to completion at once
        (``interleave`` shrinks to False, so shrunk schedules pause only where needed)."""
        self._run({"process": proc, "kind": "start", "action": action, "args": args})
        if not interleave:
            run_whole(self.session, proc)

    @precondition(lambda self: self.session is not None and self.session.writer_idle())
    @rule(key=st.sampled_from(KEYS), fill=st.sampled_from((0, 100, 50, 25, 75)), interleave=st.booleans())
    def put(self, key, fill, interleave):
        """A put of a unique payload; ``fill`` is the percentage of the largest
        payload the store accepts (large ones fill the ring in a few puts)."""
        self.puts += 1
        self._start("writer", "put", {"key": key, "data": payload(self.config, self.puts, fill).hex()}, interleave)

    @precondition(lambda self: self.session is not None and self.session.unread() and self.session.idle_readers())
    @rule()
    def consume(self):
        """Every idle reader reads the oldest handle it has not read yet, to the
        end (the read-once protocol), so chunks become reclaimable."""
        s = self.session
        for reader in s.idle_readers():
            todo = s.unread(reader)
            if todo:
                self._start(reader, "get", {"ref": todo[0].ref}, False)

    @precondition(lambda self: self.session is not None and self.session.writer_idle())
    @rule(op=st.sampled_from(("free_unused", "clear")), interleave=st.booleans())
    def reclaim(self, op, interleave):
        """``free_unused`` or ``clear`` (one rule: a clear undoes everything a
        schedule set up, so it should not be drawn as often as a put)."""
        self._start("writer", op, {}, interleave)

    @precondition(lambda self: self.session is not None and self.session.refs and self.session.idle_readers())
    @rule(data=st.data(), interleave=st.booleans())
    def get(self, data, interleave):
        s = self.session
        reader = data.draw(st.sampled_from(s.idle_readers()), label="reader")
        ref = data.draw(st.sampled_from([r.ref for r in reversed(s.refs)]), label="handle")
        self._start(reader, "get", {"ref": ref}, interleave)

    @precondition(lambda self: self.session is not None and self.session.refs
                  and self.session.idle_readers() and self.session.writer_idle())
    @rule(data=st.data(), at=st.sampled_from(_READ_POINTS), op=st.sampled_from(("churn", "put", "clear", "free_unused")),
          key=st.sampled_from(KEYS), fill=st.sampled_from((100, 50)))
    def writer_during_read(self, data, at, op, key, fill):
        """A TOCTOU template, in primitive steps: a reader's get runs until it
        stops before ``at``; the writer then runs whole operations (``churn``:
        largest puts until the handle's memory is reused, as a lagging reader
        meets it); the reader resumes to the end."""
        s = self.session
        reader = data.draw(st.sampled_from(s.idle_readers()), label="reader")
        # a re-read of a live handle this reader already read: the case where
        # every reader may have counted the chunk, so the writer can reclaim it
        # mid-read
        live = {(c.address, c.id) for c in s.snap.chunks} if s.snap is not None else set()
        reread = [r.ref for r in s.refs if r.ref in s.started_by.get(reader, ()) and (r.address, r.id) in live]
        pool = reread if reread and data.draw(st.booleans(), label="reread") else [r.ref for r in s.refs]
        ref = data.draw(st.sampled_from(pool), label="handle")  # oldest first
        self._run({"process": reader, "kind": "start", "action": "get", "args": {"ref": ref}})
        while s.pool.procs[reader].point not in (None, at) and reader in s.runnable():
            self._run({"process": reader, "kind": "advance"})
        if op == "put":
            self.put(key, fill, False)
        elif op == "churn":
            self._churn(s.ref(ref))
        else:
            self._start("writer", op, {}, False)
        run_whole(s, reader)

    def _churn(self, r: Ref) -> None:
        def largest_put() -> None:
            self.churned += 1
            self.put(f"c{self.churned}", 100, False)

        churn(self.session, r, largest_put)

    @precondition(lambda self: self.session is not None and self.session.runnable())
    @rule(data=st.data())
    def advance(self, data):
        proc = data.draw(st.sampled_from(self.session.runnable()), label="process")
        self._run({"process": proc, "kind": "advance"})

    @precondition(lambda self: self.session is not None and self.session.runnable())
    @rule(data=st.data())
    def run_to_end(self, data):
        """One process finishes its operation (a coarse schedule step)."""
        s = self.session
        proc = data.draw(st.sampled_from(s.runnable()), label="process")
        run_whole(s, proc)


class _ZeroCopyScheduled(_Scheduled):
    """The machine for a store whose ``get`` takes ``copy=False`` (impl): its
    readers may also keep zero-copy values across later steps (issue 28
    item 5)."""

    @precondition(lambda self: self.session is not None and self.session.refs and self.session.idle_readers())
    @rule(data=st.data(), interleave=st.booleans())
    def keep_get(self, data, interleave):
        """A reader's ``get(copy=False)`` of a handle; the value (a view of
        shared memory) is kept until :meth:`release_kept` or the session's end."""
        s = self.session
        reader = data.draw(st.sampled_from(s.idle_readers()), label="reader")
        ref = data.draw(st.sampled_from([r.ref for r in reversed(s.refs)]), label="handle")
        self._start(reader, "keep_get", {"ref": ref}, interleave)

    @precondition(lambda self: self.session is not None
                  and any(self.session.kept.get(r) for r in self.session.idle_readers()))
    @rule(data=st.data())
    def release_kept(self, data):
        """A reader checks its kept zero-copy values (NRR) and drops them."""
        s = self.session
        reader = data.draw(st.sampled_from([r for r in s.idle_readers() if s.kept.get(r)]), label="reader")
        s.release_kept(reader)


def scheduled_machine(target: LoadedTarget, config: SessionConfig, pool: ProcessPool,
                      traces: list | None = None) -> type[RuleBasedStateMachine]:
    """A machine class bound to ``target``, ``config`` and a running ``pool``
    (with the zero-copy rules on a target that :func:`offers_zero_copy`);
    with ``config.record``, each session's ``(trace document, lane steps)``
    is appended to ``traces``."""
    base = _ZeroCopyScheduled if offers_zero_copy(target) else _Scheduled
    return type("Scheduled", (base,), {"target": target, "config": config, "pool": pool, "traces": traces})


def replay_schedule(target_spec: str, steps: list[dict[str, Any]], config: dict[str, Any],
                    judge_trace: Callable[[dict[str, Any]], str | None] | None = None) -> str | None:
    """Replay recorded scheduled steps (exactly, on the target that produced
    them; as closely as possible on another, skipping steps that do not apply).  Returns ``"PROP: message"`` for
    the first violation not excused in ``config``, or None; with ``config``'s
    ``record``, then ``judge_trace(trace document)`` (trace validation: its
    finding, or None).

    Raises:
        TargetError: the target cannot be loaded.
        ScheduleError: a process did not follow the schedule.
    """
    from ..core.config import config_from_json
    from ..targets.loader import load_target

    cfg = config_from_json(config)
    target = load_target(target_spec)
    with ProcessPool(target, cfg.readers, start_method=cfg.start_method) as pool:
        # a controlled campaign's finding keeps the client's account (PROM, PROG) on replay
        session = ScheduledSession(pool, target, cfg, promises=bool(config.get("promises", False)),
                                   record=cfg.record)
        try:
            for s in steps:
                # A schedule is replayed as closely as the target allows: a step
                # for a process that is not where the recording had it (a fixed
                # store pauses at other points) is skipped.
                if s["kind"] == "advance" and s["process"] not in session.runnable():
                    continue
                if s["kind"] == "start" and s["process"] not in pool.idle():
                    continue
                if s["kind"] == "start" and s["action"] in ("get", "keep_get") and not any(
                        r.ref == s["args"]["ref"] for r in session.refs):
                    continue
                session.execute(s)
            session.finish()
        except PropertyViolation as exc:
            return f"{exc.prop}: {exc.message}"
    if session.recorder is not None and judge_trace is not None:  # recorded (--validate-traces)
        return judge_trace(session.recorder.doc)
    return None


DEPARTS = "the recorded run departs from tla/ShmStore.tla: "
"""How a CONFORMANCE finding of trace validation begins (the gate's and a replay's)."""


__all__ = ["CHECKS", "CONTROLLED_CHECKS", "DEPARTS", "LaneStep", "Ref", "ScheduledSession", "churn", "payload", "replay_schedule", "reused", "run_whole",
           "scheduled_machine"]
