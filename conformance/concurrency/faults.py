"""Process faults on any target: the ``faults`` campaign (LIVE, and NRR for the survivors).

Each scenario runs on a fresh :class:`~.procs.ProcessPool` (one writer and
readers ``r1``, ``r2`` forked over one real segment, the construction of the
session config) and SIGKILLs one process at a chosen yield point:

``reader_killed_in_lock``
    ``r1`` is killed while it holds the reader lock inside a get (the first
    yield point its get reaches with the lock held).  A store whose readers
    take no lock on get (impl) cannot be faulted this way: the scenario
    reports ``not-reachable`` for it and checks nothing.
``reader_killed_mid_get``
    ``r1`` and ``r2`` read ``h1`` as promised, then ``r1`` reads it again
    and is killed at ``deserialize`` (it holds whatever a reader holds while
    reading: impl's hazard pin, nothing on vLLM).
``writer_killed_mid_put``
    the writer is killed at the first yield point of a put after ``h1`` was
    put (impl: inside the put; a target without writer yield points: after
    the put returned).
``reader_stopped_mid_get``
    (a store that declares reader leases *and* a lease time: the storage
    class's ``LEASE_SECONDS``, e.g. ``--target impl-leased``; elsewhere
    ``not-reachable``) as ``reader_killed_mid_get``, but ``r1`` is left
    paused at ``deserialize`` (a stopped process) instead of killed.  Each
    survivor's step is bounded by the lease time plus :data:`LIVE_BOUND`
    (LIVE); every put must succeed (LEASE), and ``r1``'s get, resumed at the
    end, must raise the stale-handle error or return its own object (NRR),
    never another.
``reader_stopped_mid_zero_copy_get``
    (a store with reader leases, a lease time and ``get(..., copy=False)``:
    ``--target impl-leased``; elsewhere ``not-reachable``) ``r1`` and ``r2``
    read ``h1``, then ``r1`` gets ``h1`` again with ``copy=False`` and is
    left paused at ``deserialize`` (its lease taken, its value not built
    yet: a stopped process).  The writer puts until the ring has wrapped
    onto ``h1``'s bytes, retrying a refused put: each must succeed within
    the lease time plus :data:`LIVE_BOUND` (LIVE: the lease time bounds a
    read until its value is built, issue 28); ``r2`` reads each object
    (NRR).  ``r1``'s get, resumed, must raise the stale-handle error or
    return ``h1``'s object, which must still read as put (NRR).
``reader_keeps_zero_copy``
    (a store whose ``get`` takes ``copy=False``: impl; elsewhere
    ``not-reachable``) ``r1`` gets ``h1`` with ``copy=False`` and keeps the
    value, a view of shared memory, while the writer puts until a put is
    refused or the ring has wrapped; every kept value must still read as
    put (NRR for leased values).  Then ``r1`` drops it, and every put after
    that must succeed (PROG: a finding quotes the refusal, which names the
    lease that leaked).  Then ``r1`` keeps the newest value again and is
    SIGKILLed holding it: the survivors go on as below (LEASE: a dead
    reader's leases are void).
``reader_writes_garbage``
    (a store with reader leases, a lease time and per-reader words in
    shared memory: ``--target impl-leased``; elsewhere ``not-reachable``)
    ``r1`` and ``r2`` read ``h1``, then ``r1`` writes garbage into its own
    words: a pin on ``h1`` that never ends and 1000 more acknowledgements
    of every chunk, and goes on living.  The writer puts until the ring has
    wrapped, retrying a refused put, and ``r2`` reads each object: the
    garbage may delay the writer by one lease time at most (LIVE: each put
    succeeds within the lease time plus :data:`LIVE_BOUND`), and never
    makes ``r2`` get another object (NRR).  Then ``r1`` gets the newest
    handle: its own object or the store's error, never another (NRR).

``reader_closed_mid_get``
    (a store that declares reader leases, so that a reader's hold on a chunk
    ends with its view's ``close()``: impl; elsewhere ``not-reachable``)
    ``r2`` reads ``h1``; ``r1``'s promised read of ``h1`` is left paused at
    ``deserialize`` while another thread of ``r1``'s process calls its
    view's ``close()``, which must return within :data:`LIVE_BOUND` (LIVE).
    The writer then puts until the ring has wrapped onto ``h1``'s bytes (a
    refused put is within the contract: ``r1``'s read is still in flight);
    ``r1``'s get, resumed, must deserialize and return ``h1``'s object or
    raise the store's error, never another (NRR: the close must not give up
    the pin or the slot under the read, issue 28 item 4).  Once that get has
    ended, the close has taken effect: the writer's refused put, retried,
    must succeed (LEASE) and ``r2`` must read it right.
``reader_serde_keeps_view``
    (every target) ``r1`` gets ``h1`` through a serde whose ``deserialize``
    returns a value over the view it is handed (no copy) and keeps that
    value; a store must either hand the serde a private copy or refuse
    the value (impl: ``BufferError``, the read not acknowledged, so ``r1``
    reads ``h1`` again with a copy).  ``r2`` reads ``h1``, then the writer
    puts until the ring has wrapped, both readers reading each object; the
    kept value must still read as put (NRR, by ALIAS: nothing reachable
    from a value points into memory the writer reuses).

After the kill, the survivors go on: the other reader reads ``h1`` (and
what the writer puts next), the writer puts until the ring has wrapped.
LEASE (a target whose profile declares reader leases, impl): after a
reader was killed, every put of the survivors succeeds: the dead reader's
promised reads end with its lease, so they never pin the ring.
LIVE: every operation of a live process returns within :data:`LIVE_BOUND`
seconds, whatever the killed process held; a step that does not is
reported with the yield point it waits at and what the dead process held.
NRR: every object a survivor gets is the one put under its handle.

Every scenario is a fixed program (no randomness): a report's violation is
reproduced by :func:`replay_fault` from its ``config`` (the scenario name
and the geometry).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from shmspec.model.properties import nrr_error_message, nrr_message

from ..core import interrupt
from ..core.serde import Blob
from ..targets.adapter import offers_zero_copy
from ..targets.loader import LoadedTarget
from .procs import ProcessPool, ScheduleError, StepOutcome, _label, encode_value

LIVE_BOUND = 5.0
"""Seconds an operation of a live process may take after another process was
killed (LIVE's stated bound in this campaign).  impl's longest wait, for a
live reader's hazard pin, is ``PIN_TIMEOUT`` (10 s); for a dead reader's pin
it does not wait."""

SCENARIOS = ("reader_killed_in_lock", "reader_killed_mid_get", "writer_killed_mid_put", "reader_stopped_mid_get",
             "reader_keeps_zero_copy", "reader_writes_garbage", "reader_closed_mid_get", "reader_serde_keeps_view",
             "reader_stopped_mid_zero_copy_get")

DATA_BUFFER_SIZE, MAX_OBJECT_SIZE, READERS = 256, 96, ("r1", "r2")
PAYLOAD = 40
"""Payload bytes per put: four chunks fill the ring, so six puts wrap it."""


@dataclass
class FaultFinding:
    property: str
    message: str
    steps: list[dict[str, Any]]


@dataclass
class ScenarioResult:
    scenario: str
    reachable: bool = True
    """False when the fault cannot happen on this target (see the module docstring)."""
    findings: list[FaultFinding] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    longest_step: float = 0.0
    """Seconds of the slowest operation of a live process after the kill."""


class _Run:
    """One scenario's program on one pool, recording steps as report rows."""

    def __init__(self, pool: ProcessPool, res: ScenarioResult):
        self.pool = pool
        self.res = res
        self.killed: str | None = None
        self.held = ""
        self.bound = LIVE_BOUND
        self.fate = "killed"
        """What happened to ``killed``: ``killed`` or ``stopped``."""
        """Seconds a survivor's step may take (the lease time more with a stopped reader)."""
        self.refusal = ""
        """The error of the writer's latest failed put, with its message."""
        self.leases = bool(getattr(pool.target.profile, "leases", False))
        """The target declares reader leases: a put the dead reader's reads block is a LEASE finding."""

    def row(self, process: str, action: str, args: dict, observed: str, violations=()) -> None:
        self.res.steps.append({"index": len(self.res.steps), "process": process, "action": action,
                               "args": args, "expected": "", "observed": observed, "changed": {},
                               "violations": [{"property": p, "message": m} for p, m in violations]})

    def finding(self, prop: str, message: str) -> None:
        self.row(self.res.steps[-1]["process"] if self.res.steps else "-", "finding", {}, message, [(prop, message)])
        self.res.findings.append(FaultFinding(prop, message, list(self.res.steps)))

    def run_op(self, name: str, action: str, args: dict, kill_at=None) -> StepOutcome | None:
        """Run ``action`` on ``name`` to completion, every step bounded by
        LIVE_BOUND once a process was killed; ``kill_at(out)`` -> True kills
        ``name`` there (returns None).  A step over the bound is a LIVE
        finding (returns None; the pool is then unusable)."""
        interrupt.check()  # a swallowed SIGTERM stops the scenario here
        pool = self.pool
        t0 = time.perf_counter()
        try:
            out = pool.start(name, action, args)
            while out.point is not None:
                if kill_at is not None and kill_at(out):
                    self.held = ("holding the reader lock" if pool.lock_holder == name
                                 else f"paused at {out.point}")
                    pool.kill(name)
                    self.killed = name
                    self.row(name, "SIGKILL", {"at": out.point}, f"killed during {action} ({self.held})")
                    return None
                if self.killed and time.perf_counter() - t0 > self.bound:
                    raise ScheduleError(f"still running after {self.bound:g} s, {out.point} its latest yield point")
                blocked = out.point == "lock_acquire" and pool.lock_holder not in (None, name)
                out = pool.advance(name, force=blocked, timeout=LIVE_BOUND if blocked else None)
        except ScheduleError as exc:
            waited = time.perf_counter() - t0
            where = pool.procs[name].point
            self.row(name, action, _short(args), f"no return after {waited:.1f} s (at {where})")
            self.finding("LIVE", f"{_label(name)}'s {action} did not return within {self.bound:g} s after "
                                 f"{_label(self.killed)} was {self.fate} {self.held}: it waits at {where} ({exc})")
            return None
        took = time.perf_counter() - t0
        if self.killed:
            self.res.longest_step = max(self.res.longest_step, took)
        r = out.result
        shown = (f"handle {tuple(r['value']['handle'])}"
                 if action == "put" and isinstance(r["value"], dict) and r["value"].get("handle")
                 else _render(r["value"]))
        self.row(name, action, _short(args), r["error"] or shown)
        if self.killed and took > self.bound:
            self.finding("LIVE", f"{_label(name)}'s {action} took {took:.1f} s (bound {self.bound:g} s) after "
                                 f"{_label(self.killed)} was {self.fate} {self.held}")
        return out

    def put(self, key: str, tag: int) -> tuple[dict | None, bytes]:
        data = bytes([tag, 0, 0, 0]) + bytes([0x41 + tag % 26]) * (PAYLOAD - 4)
        out = self.run_op("writer", "put", {"key": key, "data": data.hex()})
        if out is None or out.result["error"]:
            self.refusal = (out.result.get("detail") or out.result["error"]) if out is not None else ""
            return None, data
        v = out.result["value"]
        return {"address": v["handle"][0], "id": v["handle"][1], "signature": v["signature"], "key": key}, data

    def get(self, reader: str, h: dict, data: bytes, kill_at=None) -> bool:
        """A get that must return ``data`` or a stale-handle error (NRR);
        False when the scenario cannot go on."""
        out = self.run_op(reader, "get", h, kill_at)
        if out is None:
            return False
        r = out.result
        if r["error"] is None and r["value"] != encode_value(Blob(data)):
            self.finding("NRR", nrr_message(f"{_label(reader)}'s get", "returned", _render(r["value"]),
                                            f"{h['key']} {(h['address'], h['id'])}", _render(encode_value(Blob(data))),
                                            f", after {_label(self.killed)} was killed {self.held}"))
        return True


def _short(args: dict) -> dict:
    return {k: v for k, v in args.items() if k != "signature"}


def _render(v: Any) -> str:
    if isinstance(v, dict) and "blob" in v:
        return f"Blob({v['blob'][:16]}..., {len(v['blob']) // 2} B)"
    return repr(v)[:80]


def _survive(run: _Run, reader: str, start: int) -> None:
    """The survivors' part: the writer puts until the ring has wrapped and
    ``reader`` reads each object put."""
    for i in range(start, start + 6):
        if run.res.findings:
            return
        h, data = run.put(f"k{i}", i)
        if h is None:
            if run.res.findings:
                return
            if run.leases and run.killed not in (None, "writer"):
                run.finding("LEASE", f"the writer's put of k{i} failed ({run.res.steps[-1]['observed'][:160]}) "
                                     f"after {_label(run.killed)} was {run.fate} {run.held}: its promised reads "
                                     "still pin the ring (its lease did not end)")
                return
            continue  # out of space (a chunk the dead reader owed stays): no lease declared, not a LIVE matter
        if not run.get(reader, h, data):
            return


def _wrap_keeping(run: _Run, key: str, default: Any = None) -> tuple[int, Any] | None:
    """While r1 keeps its value of ``key``: the writer puts ``k1``..``k6``
    (until a put is refused or the ring has wrapped), both readers reading
    each; then what r1's kept value reads now (``default`` if none is kept).
    Returns ``(index of the last put, that value)``, or None when the
    scenario cannot go on (a finding, or a process that did not answer)."""
    last = 1
    for last in range(1, 7):
        h, data = run.put(f"k{last}", last)
        if h is None:
            if run.res.findings:
                return None
            break
        if not (run.get("r1", h, data) and run.get("r2", h, data)):
            return None
    out = run.run_op("r1", "check_kept", {})
    if out is None:
        return None
    return last, out.result["value"].get(key, default)


def _keeps_zero_copy(run: _Run, h1: dict, d1: bytes) -> None:
    """``reader_keeps_zero_copy`` after ``h1`` was put (module docstring)."""
    want = encode_value(Blob(d1))
    where = f"{h1['key']} {(h1['address'], h1['id'])}"
    out = run.run_op("r1", "keep_get", h1)
    if out is None:
        return
    r = out.result
    if r["error"] is None and r["value"] != want:
        run.finding("NRR", nrr_message("reader r1's get(copy=False)", "returned", _render(r["value"]), where,
                                       _render(want)))
        return
    if r["error"] is not None or not run.get("r2", h1, d1):
        return
    got = _wrap_keeping(run, h1["key"])
    if got is None:
        return
    last, now = got
    if now != want:
        run.finding("NRR", nrr_message("reader r1's kept value of get(copy=False)", "now reads", _render(now),
                                       where, _render(want), f", after the writer's puts k1..k{last}"))
        return
    if run.run_op("r1", "drop_kept", {}) is None:
        return
    h = None
    for i in range(last, last + 6):  # r1 let go: every put must succeed
        h, data = run.put(f"m{i}", i)
        if h is None:
            if not run.res.findings:
                run.finding("PROG", f"the writer's put of m{i} failed after reader r1 dropped its only value of "
                                    f"get(copy=False), so a lease leaked: {run.refusal[:300]}")
            return
        if not (run.get("r1", h, data) and run.get("r2", h, data)):
            return
    out = run.run_op("r1", "keep_get", h)
    if out is None or out.result["error"] is not None:
        return
    run.pool.kill("r1")
    run.killed, run.held = "r1", "holding a value of get(copy=False)"
    run.row("r1", "SIGKILL", {}, "killed while it kept a value of get(copy=False)")
    _survive(run, "r2", last + 6)


def _put_retrying(run: _Run, i: int, lease: float, after: str) -> tuple[dict | None, bytes]:
    """The writer's put of ``k{i}``, retried every 0.1 s while refused, for
    at most ``run.bound`` seconds (then a LIVE finding: ``(None, data)``)."""
    t0, tries = time.monotonic(), 0
    while True:
        h, data = run.put(f"k{i}", i)
        if h is not None or run.res.findings:
            return h, data
        tries += 1
        if time.monotonic() - t0 > run.bound:
            run.finding("LIVE", f"the writer's put of k{i} was refused for {time.monotonic() - t0:.1f} s "
                                f"({tries} tries; bound: the lease time {lease:g} s plus {LIVE_BOUND:g} s) "
                                f"{after}: {run.refusal[:240]}")
            return None, data
        time.sleep(0.1)


def _stopped_mid_zero_copy_get(run: _Run, h1: dict, d1: bytes, lease: float) -> None:
    """``reader_stopped_mid_zero_copy_get`` after ``h1`` was put (module docstring)."""
    pool, want = run.pool, encode_value(Blob(d1))
    where = f"{h1['key']} {(h1['address'], h1['id'])}"
    if not (run.get("r1", h1, d1) and run.get("r2", h1, d1)):
        return
    out = pool.start("r1", "keep_get", h1)
    while out.point is not None and out.point != "deserialize":
        out = pool.advance("r1")
    if out.point is None:
        run.res.reachable = False
        run.row("r1", "note", {}, "its get(copy=False) has no deserialize yield point")
        return
    run.killed, run.fate, run.bound = "r1", "stopped", lease + LIVE_BOUND
    run.held = "inside get(copy=False), building its value"
    run.row("r1", "SIGSTOP", {"at": "deserialize", "during": "get(copy=False)"},
            "stopped during get(copy=False) (paused at deserialize, its value not built yet)")
    for i in range(1, 7):  # until the ring has wrapped onto h1's bytes
        h, data = _put_retrying(run, i, lease, "while reader r1 was stopped inside get(copy=False)")
        if h is None or not run.get("r2", h, data):
            return
    while out.point is not None:  # resumed: the store's error, or h1's object (and it must stay h1's)
        out = pool.advance("r1")
    r = out.result
    run.row("r1", "keep_get", _short(h1), r["error"] or _render(r["value"]))
    run.killed = None
    after = f", after it stayed stopped inside get(copy=False) past its {lease:g} s lease"
    if r["error"] is None:
        kept = run.run_op("r1", "check_kept", {})
        now = kept.result["value"].get(h1["key"], want) if kept is not None else want
        if r["value"] != want or now != want:
            seen = r["value"] if r["value"] != want else now
            run.finding("NRR", nrr_message("reader r1's resumed get(copy=False)",
                                           "returned" if r["value"] != want else "returned a value that now reads",
                                           _render(seen), where, _render(want), after))
            return
        run.run_op("r1", "drop_kept", {})
    elif r["error"] != "StaleHandle":
        run.finding("NRR", nrr_error_message("reader r1's resumed get(copy=False)", where,
                                             f"{r['error']} ({(r.get('detail') or '')[:160]})", after))


def _writes_garbage(run: _Run, h1: dict, d1: bytes, lease: float) -> None:
    """``reader_writes_garbage`` after ``h1`` was put (module docstring)."""
    if not (run.get("r1", h1, d1) and run.get("r2", h1, d1)):
        return
    out = run.run_op("r1", "scribble", {})
    if out is None:
        return
    if out.result["error"]:
        run.res.reachable = False
        run.row("r1", "note", {}, f"no words of its own to write garbage into ({out.result['detail'][:120]})")
        return
    run.killed, run.fate, run.held = "r1", "writing garbage", "into its own pin and acknowledgement words"
    run.bound = lease + LIVE_BOUND
    h = None
    for i in range(1, 7):
        h, data = _put_retrying(run, i, lease, "after reader r1 wrote garbage into its own words")
        if h is None or not run.get("r2", h, data):
            return
    last = dict(h)
    run.killed = None  # r1 is not faulted any more: its get is judged like any reader's
    out = run.run_op("r1", "get", last)
    if out is not None:
        r = out.result
        if r["error"] is None and r["value"] != encode_value(Blob(data)):
            run.finding("NRR", nrr_message("reader r1's get", "returned", _render(r["value"]),
                                           f"{last['key']} {(last['address'], last['id'])}",
                                           _render(encode_value(Blob(data))),
                                           ", after it wrote garbage into its own words"))


def _closed_mid_get(run: _Run, h1: dict, d1: bytes) -> None:
    """``reader_closed_mid_get`` after ``h1`` was put (module docstring)."""
    pool, want = run.pool, encode_value(Blob(d1))
    where = f"{h1['key']} {(h1['address'], h1['id'])}"
    if not run.get("r2", h1, d1):
        return
    out = pool.start("r1", "get", h1)
    while out.point is not None and out.point != "deserialize":
        out = pool.advance("r1")
    if out.point is None:
        run.res.reachable = False
        run.row("r1", "note", {}, "its get has no deserialize yield point")
        return
    closed = pool.side_close("r1", LIVE_BOUND)
    run.row("r1", "close (another thread)", {"during": "get", "at": "deserialize"},
            (f"returned in {closed['seconds']:.2f} s" if closed["returned"] else
             f"no return after {closed['seconds']:.1f} s") + (f": {closed['error']}" if closed["error"] else ""))
    if not closed["returned"]:
        run.finding("LIVE", f"reader r1's close() from another thread did not return within {LIVE_BOUND:g} s "
                            "while its get was in flight")
        return
    refused: tuple[str, int] | None = None
    for i in range(1, 7):  # until the ring has wrapped onto h1's bytes, or a put is refused
        h, data = run.put(f"k{i}", i)
        if h is None:
            if run.res.findings:
                return
            refused = (f"k{i}", i)
            break
        if not run.get("r2", h, data):
            return
    while out.point is not None:  # r1's get resumes and ends
        out = pool.advance("r1")
    r = out.result
    run.row("r1", "get", _short(h1), r["error"] or _render(r["value"]))
    other = [v for v in out.deserialized if v != want]
    after = ", after another thread of its process closed its view during the read and the writer put again"
    if other or (r["error"] is None and r["value"] != want):
        seen = _render(other[0]) if other else _render(r["value"])
        run.finding("NRR", nrr_message("reader r1's get", "deserialized" if other else "returned", seen, where,
                                       _render(want), after))
        return
    if r["error"] not in (None, "StaleHandle") and not (r["error"] == "Crash:ValueError"
                                                        and "has been closed" in (r.get("detail") or "")):
        run.finding("NRR", nrr_error_message("reader r1's get", where,
                                             f"{r['error']} ({(r.get('detail') or '')[:160]})", after))
        return
    if refused is None:
        return
    key, tag = refused
    h, data = run.put(key, tag)  # the close has taken effect: r1's reads no longer hold the ring
    if h is None:
        if not run.res.findings and run.leases:
            run.finding("LEASE", f"the writer's put of {key} failed again after reader r1's get ended and its "
                                 f"deferred close took effect: {run.refusal[:240]}")
        return
    run.get("r2", h, data)


def _serde_keeps_view(run: _Run, h1: dict, d1: bytes) -> None:
    """``reader_serde_keeps_view`` after ``h1`` was put (module docstring)."""
    want = encode_value(Blob(d1))
    where = f"{h1['key']} {(h1['address'], h1['id'])}"
    out = run.run_op("r1", "alias_get", h1)
    if out is None:
        return
    r = out.result
    if r["error"] is None and r["value"] != want:
        run.finding("NRR", nrr_message("reader r1's view-keeping get", "returned",
                                       _render(r["value"]), where, _render(want)))
        return
    if r["error"] is not None:  # refused (impl: BufferError): not acknowledged, so r1 still owes its read
        if r["error"] not in ("Crash:BufferError", "StaleHandle"):
            run.finding("NRR", nrr_error_message("reader r1's view-keeping get", where,
                                                 f"{r['error']} ({(r.get('detail') or '')[:160]})", ""))
            return
        if not run.get("r1", h1, d1):
            return
    if not run.get("r2", h1, d1):
        return
    got = _wrap_keeping(run, h1["key"], want)  # nothing kept (the store refused the value): ``want``
    if got is None:
        return
    last, now = got
    if now != want:
        run.finding("NRR", nrr_message("reader r1's value of get, whose serde kept a view of its input,", "now reads", _render(now), where, _render(want),
                                       f", after the writer's puts k1..k{last} (ALIAS: the store neither copied "
                                       "them nor refused the value with BufferError)"))
        return
    run.run_op("r1", "drop_kept", {})


def run_scenario(target: LoadedTarget, scenario: str, writer_lock: bool = False,
                 start_method: str = "fork") -> ScenarioResult:
    """Run one scenario on a fresh pool (two readers, started by
    ``start_method``; the writer built with the readers' lock when
    ``writer_lock``).

    Raises:
        ValueError: unknown scenario.
        ScheduleError: the pool could not be set up (before any fault).
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown fault scenario {scenario!r} (choose from {', '.join(SCENARIOS)})")
    res = ScenarioResult(scenario)
    t0 = time.monotonic()
    with ProcessPool(target, READERS, step_timeout=LIVE_BOUND, start_method=start_method) as pool:
        pool.open_store(DATA_BUFFER_SIZE, MAX_OBJECT_SIZE, len(READERS), writer_lock)
        run = _Run(pool, res)
        h1, d1 = run.put("k0", 0)
        if h1 is None:
            raise ScheduleError(f"{scenario}: the first put failed")
        if scenario == "reader_killed_in_lock":
            run.get("r1", h1, d1, kill_at=lambda out: pool.lock_holder == "r1")
            if run.killed is None:
                res.reachable = False
                run.row("r1", "note", {}, "its get never held the reader lock: the fault cannot happen here")
            elif run.get("r2", h1, d1):
                _survive(run, "r2", 1)
        elif scenario == "reader_killed_mid_get":
            if run.get("r1", h1, d1) and run.get("r2", h1, d1):
                run.get("r1", h1, d1, kill_at=lambda out: out.point == "deserialize")
                if run.killed is None:
                    res.reachable = False
                    run.row("r1", "note", {}, "its get has no deserialize yield point")
                else:
                    _survive(run, "r2", 1)
        elif scenario == "reader_stopped_mid_get":
            lease = getattr(getattr(target.module, "SingleWriterShmObjectStorage", None), "LEASE_SECONDS", None)
            if not (run.leases and lease):
                res.reachable = False
                run.row("r1", "note", {}, ("the store declares reader leases but no lease time" if run.leases else
                                           "the store declares no reader leases")
                        + ": a stopped reader's pin holds the writer by design")
            elif run.get("r1", h1, d1) and run.get("r2", h1, d1):
                out = pool.start("r1", "get", h1)
                while out.point is not None and out.point != "deserialize":
                    out = pool.advance("r1")
                if out.point is None:
                    res.reachable = False
                    run.row("r1", "note", {}, "its get has no deserialize yield point")
                else:
                    run.killed, run.fate, run.bound = "r1", "stopped", lease + LIVE_BOUND
                    run.held = "paused at deserialize"
                    run.row("r1", "SIGSTOP", {"at": "deserialize"}, "stopped during get (paused at deserialize)")
                    _survive(run, "r2", 1)
                    if not res.findings:  # resumed: its own object or the stale-handle error, never another
                        while out.point is not None:
                            out = pool.advance("r1")
                        r = out.result
                        run.row("r1", "get", _short(h1), r["error"] or _render(r["value"]))
                        if r["error"] is None and r["value"] != encode_value(Blob(d1)):
                            run.finding("NRR", nrr_message("reader r1's resumed get", "returned", _render(r["value"]),
                                                           f"{h1['key']} {(h1['address'], h1['id'])}",
                                                           _render(encode_value(Blob(d1))),
                                                           f", after it stayed stopped past its {lease:g} s lease"))
        elif scenario == "reader_stopped_mid_zero_copy_get":
            lease = getattr(getattr(target.module, "SingleWriterShmObjectStorage", None), "LEASE_SECONDS", None)
            if not (run.leases and lease and offers_zero_copy(target)):
                res.reachable = False
                run.row("r1", "note", {}, "the store declares no reader leases with a lease time and zero-copy "
                                          "reads: a reader stopped inside get(copy=False) holds the writer by design")
            else:
                _stopped_mid_zero_copy_get(run, h1, d1, lease)
        elif scenario == "reader_writes_garbage":
            lease = getattr(getattr(target.module, "SingleWriterShmObjectStorage", None), "LEASE_SECONDS", None)
            if not (run.leases and lease):
                res.reachable = False
                run.row("r1", "note", {}, "the store declares no reader leases with a lease time: a reader's "
                                          "garbage pin holding the writer is not against its contract")
            else:
                _writes_garbage(run, h1, d1, lease)
        elif scenario == "reader_closed_mid_get":
            if not run.leases:
                res.reachable = False
                run.row("r1", "note", {}, "the store declares no reader leases: what a reader holds during a get "
                                          "is not promised to outlast its view's close()")
            else:
                _closed_mid_get(run, h1, d1)
        elif scenario == "reader_serde_keeps_view":
            _serde_keeps_view(run, h1, d1)
        elif scenario == "reader_keeps_zero_copy":
            if not offers_zero_copy(target):
                res.reachable = False
                run.row("r1", "note", {}, "the store's get takes no copy=False: no value keeps shared memory")
            else:
                _keeps_zero_copy(run, h1, d1)
        else:  # writer_killed_mid_put
            out = run.run_op("writer", "put", {"key": "k1", "data": (b"\x01\0\0\0" + b"B" * (PAYLOAD - 4)).hex()},
                             kill_at=lambda out: True)
            if run.killed is None and out is not None:  # no yield point in the writer's put: kill it after
                pool.kill("writer")
                run.killed, run.held = "writer", "after its put returned (no yield point inside put)"
                run.row("writer", "SIGKILL", {}, "killed after the put returned")
            for reader in READERS:
                if not run.get(reader, h1, d1):
                    break
    res.seconds = time.monotonic() - t0
    return res


def replay_fault(target_spec: str, config: dict[str, Any], prop: str) -> str | None:
    """Re-run the scenario a report's violation names (``config["scenario"]``,
    ``config["writer_lock"]``, ``config["start_method"]``, default ``fork``);
    ``"PROP: message"`` when ``prop`` is violated again, else None.

    Raises:
        TargetError: the target cannot be loaded.
    """
    from ..targets.loader import load_target

    res = run_scenario(load_target(target_spec), config["scenario"], bool(config.get("writer_lock")),
                       str(config.get("start_method", "fork")))
    found = [f for f in res.findings if f.property == prop]
    return f"{prop}: {found[0].message}" if found else None


__all__ = ["LIVE_BOUND", "SCENARIOS", "FaultFinding", "ScenarioResult", "replay_fault", "run_scenario"]
