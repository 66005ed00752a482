"""Two threads on one writer: the ``sw`` campaign (property SW) on any target.

SEMANTICS.md, SW: concurrent use of the writer from two threads is refused
with a clear error or serialized safely; it never corrupts the ring or the
indexes.  Each scenario is a pair of writer operations, ``A`` and ``B``, run
by two threads of one process on a fresh store (a 256-byte ring, objects of
at most 96 bytes, one reader view in the same process), from a fixed
pre-state.  The schedule is a *preemption sweep*, as for the reader's races:
for every ``k``, thread A runs to its ``k``-th writer yield point and stops
there, thread B runs its whole operation (or until it blocks), then A
finishes (then B, if it was blocked).  ``k = -1`` is the serial run, A then B,
which must pass the same checks (else the scenario says so and checks
nothing: the defect is not SW's).

Writer yield points, none of them in the target's code:

* ``serialize``: the harness serde, before it serializes (every target);
* ``allocate`` / ``reclaim`` / ``ring_clear``: before the writer's ring
  ``allocate_buf`` / ``free_buf`` / ``clear`` (targets other than impl, which
  has its own points);
* ``free_decided``: after the writer's ``default_is_free_check`` answered for
  one chunk, before the ring drops it (targets that have one);
* impl's own writer points (``shmspec.impl.yieldpoints``), hit inside its
  writer lock.

A thread's operation on a signed target includes taking the handle's
signature right after a put or ``get_cached`` (a second writer call, as a
client makes it), so the other thread may run between the two: the rows then
show the first thread blocked once, the verdict is the same.

A thread that reaches no yield point and does not return, and whose CPU clock
stands still for :data:`BLOCK_SAMPLES` samples :data:`BLOCK_SAMPLE` seconds
apart, is *blocked* (a store that serializes its writer: impl's private lock);
the other thread then runs on.  Every wait is bounded: a thread that neither
returns nor pauses within :data:`STEP_BOUND` seconds once nothing holds it is
reported (SW: the two threads deadlocked), and the whole campaign runs in a
forked child that is killed after :data:`CAMPAIGN_BOUND` seconds.

After each schedule (all SW findings):

* an operation raised an exception outside the store's taxonomy (``KeyError``
  from an index, ``IndexError``...: the adapter's ``Crash:`` kinds);
* both threads' puts of one key returned a handle;
* the writer's indexes and ring disagree: a key whose handle is no live
  chunk, a live chunk that no key (or two keys) own, two live chunks that
  share an id or overlap (DISJ's check);
* a handle either thread was given does not read back, through the reader,
  as the object put under it (a wrong object; or the stale-handle error in a
  scenario with no ``clear``: the other thread reclaimed a chunk just promised);
* after every handle was read once, a put of ``max_object_size`` fails.

Every scenario is a fixed program: a report's violation is reproduced by
:func:`replay_sw` from its ``config`` (scenario and ``k``).  A target whose
contract confines its writer to one thread (``Profile.sw == "one-thread"``,
vLLM: its ring's docstring says only one process/thread should write) is run
all the same; its findings are reported as not claimed by its contract and do
not fail the gate.
"""

from __future__ import annotations

import gc
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import multiprocess

from shmspec.impl import yieldpoints
from shmspec.model.properties import disj, wrap

from ..core import interrupt
from ..targets.adapter import StoreAdapter, observe, open_writer
from ..targets.loader import LoadedTarget
from ..core.serde import Blob, HarnessSerde, object_nbytes

DATA_BUFFER_SIZE, MAX_OBJECT_SIZE = 256, 96
PAYLOAD = 40
"""Payload bytes per put: a chunk of 60 bytes, four fill the ring."""
STEP_BOUND = 5.0
"""Seconds a thread may take to reach its next yield point or return once
nothing holds it."""
BLOCK_SAMPLE, BLOCK_SAMPLES = 0.005, 4
"""A thread whose CPU clock stands still over this many samples this many
seconds apart (and that is neither paused nor done) is blocked."""
DEADLOCK = "the two writer threads deadlocked"
"""How an SW finding of threads that never returned begins (a finding even
in the serial run: the second thread cannot run after the first)."""
CAMPAIGN_BOUND = 120.0
"""Seconds the forked child may take for every scenario together."""

Op = tuple
"""``("put", key, tag)``, ``("get_cached", key)``, ``("clear",)`` or ``("free_unused",)``."""


@dataclass(frozen=True)
class Scenario:
    name: str
    prefill: int
    """Objects ``k0 ..`` put (and read once by the reader) before the threads start."""
    a: Op
    b: Op
    what: str


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("put_put_same_key", 0, ("put", "k1", 1), ("put", "k1", 2),
             "both threads put one key"),
    Scenario("put_put_reclaim", 4, ("put", "k5", 5), ("put", "k6", 6),
             "both threads put into a full ring, so both reclaim"),
    Scenario("put_get_cached", 4, ("put", "k5", 5), ("get_cached", "k0"),
             "A's put reclaims k0 while B promises k0 again"),
    Scenario("put_clear", 2, ("put", "k5", 5), ("clear",), "B clears during A's put"),
    Scenario("clear_put", 2, ("clear",), ("put", "k5", 5), "B puts during A's clear"),
    Scenario("free_put", 4, ("free_unused",), ("put", "k5", 5), "B puts during A's reclaim"),
)}


@dataclass
class SwFinding:
    property: str
    message: str
    steps: list[dict[str, Any]]
    k: int


@dataclass
class SwResult:
    scenario: str
    schedules: int = 0
    findings: list[SwFinding] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""
    """Why the scenario checked nothing (its serial run already fails)."""
    seconds: float = 0.0


def _data(tag: int, n: int = PAYLOAD) -> bytes:
    return bytes([tag % 256, 0, 0, 0]) + bytes([0x41 + tag % 26]) * (n - 4)


# ------------------------------------------------------------------ lanes
class _Lane:
    """One writer thread: runs one operation, stopping at yield points."""

    def __init__(self, name: str):
        self.name = name
        self.go: queue.Queue = queue.Queue()
        self.events: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None
        self.point: str | None = None

    def run(self, fn: Callable[[], Any]) -> None:
        def body() -> None:
            _LANES[threading.get_ident()] = self
            try:
                out = observe(fn)
            finally:
                _LANES.pop(threading.get_ident(), None)
            self.events.put(("done", out))

        self.thread = threading.Thread(target=body, name=f"sw-lane-{self.name}", daemon=True)
        self.thread.start()

    def pause(self, point: str) -> None:
        self.point = point
        self.events.put(("paused", point))
        self.go.get()

    def wait(self) -> tuple:
        """The lane's next event: ``("paused", point)``, ``("done", Observation)``
        or ``("blocked",)``; raises TimeoutError after STEP_BOUND seconds of
        CPU progress without either."""
        assert self.thread is not None
        try:
            clock = time.pthread_getcpuclockid(self.thread.ident)
            last = time.clock_gettime(clock)
        except OSError:  # the thread has already ended: its event is queued
            return self.events.get(timeout=STEP_BOUND)
        t0 = time.monotonic()
        still = 0
        while True:
            try:
                return self.events.get(timeout=BLOCK_SAMPLE)
            except queue.Empty:
                pass
            try:
                now = time.clock_gettime(clock)
            except OSError:  # the thread ended between two samples
                continue
            still = still + 1 if now == last else 0
            last = now
            if still >= BLOCK_SAMPLES:
                return ("blocked",)
            if time.monotonic() - t0 > STEP_BOUND:
                raise TimeoutError(f"thread {self.name} ran {STEP_BOUND:g} s without a yield point or a return")

    def resume(self) -> tuple:
        self.point = None
        self.go.put(1)
        return self.wait()


_LANES: dict[int, _Lane] = {}


def _pause(point: str) -> None:
    lane = _LANES.get(threading.get_ident())
    if lane is not None:
        lane.pause(point)


class SwSerde(HarnessSerde):
    """The harness serde with a ``serialize`` yield point."""

    def serialize(self, value: Any) -> tuple:
        _pause("serialize")
        return super().serialize(value)


def _instrument(writer: Any) -> None:
    """Yield points around the writer's ring calls and its free check (targets
    other than impl, which pauses at its own points)."""
    ring = writer.ring_buffer
    if type(ring).__module__.startswith("shmspec.impl"):
        return
    for attr, point in (("allocate_buf", "allocate"), ("free_buf", "reclaim"), ("clear", "ring_clear")):
        original = getattr(ring, attr, None)
        if original is not None:
            setattr(ring, attr, _before(point, original))
    check = getattr(writer, "default_is_free_check", None)
    if check is not None:
        def decided(*args: Any, _check=check) -> Any:
            out = _check(*args)
            _pause("free_decided")
            return out

        writer.default_is_free_check = decided


def _before(point: str, fn: Callable) -> Callable:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        _pause(point)
        return fn(*args, **kwargs)

    return wrapped


# -------------------------------------------------------------- one schedule
class _Schedule:
    """One run of a scenario with A preempted at its ``k``-th yield point."""

    def __init__(self, target: LoadedTarget, sc: Scenario, k: int, writer_lock: bool):
        self.target, self.sc, self.k = target, sc, k
        self.rows: list[dict[str, Any]] = []
        self.a = StoreAdapter(target, DATA_BUFFER_SIZE, MAX_OBJECT_SIZE, 1, lock=multiprocess.Lock(),
                              serde_class=SwSerde, writer_lock=writer_lock)
        self.a.writer = open_writer(target, DATA_BUFFER_SIZE, MAX_OBJECT_SIZE, 1, self.a.lock, SwSerde,
                                    writer_lock)
        self.a.segment = self.a.writer.ring_buffer.shared_memory.name
        self.issued: list[tuple[str, str, tuple, Any, bytes]] = []
        """(lane, key, handle, signature, data) of every handle a thread was given."""
        self.results: dict[str, Any] = {}
        self.reached = True

    def row(self, process: str, action: str, args: dict, observed: str, violations=()) -> None:
        self.rows.append({"index": len(self.rows), "process": process, "action": action, "args": args,
                          "expected": "", "observed": observed, "changed": {},
                          "violations": [{"property": p, "message": m} for p, m in violations]})

    def prefill(self) -> None:
        a = self.a
        obs = a.attach_reader("r1")
        if not obs.ok:
            raise RuntimeError(f"the reader view could not be built: {obs.detail}")
        for i in range(self.sc.prefill):
            data = _data(i)
            put = a.put(f"k{i}", Blob(data))
            if not put.ok:
                raise RuntimeError(f"prefill put k{i} failed: {put.detail}")
            got = a.reader_get("r1", *put.value, *self._sig(f"k{i}"))
            self.row("writer", "put", {"key": f"k{i}"}, f"handle {put.value}; r1 read it: "
                     + ("ok" if got.ok and got.value == Blob(data) else got.error or "a wrong object"))
        _instrument(a.writer)
        yieldpoints.HOOK = _pause

    def _sig(self, key: str) -> tuple:
        if not self.a.signed:
            return ()
        s = self.a.get_signature(key)
        return (s.value if s.ok else None, key)

    def _call(self, op: Op) -> Callable[[], Any]:
        """The lane's operation; a put or get_cached also takes the handle's
        signature at once (signed targets), as a client does."""
        w = self.a.writer
        if op[0] in ("put", "get_cached"):
            def issue() -> tuple:
                h = tuple(w.put(op[1], Blob(_data(op[2])))) if op[0] == "put" else tuple(w.get_cached(op[1]))
                sig = None
                if self.a.signed:
                    got = observe(lambda: w.get_signature(op[1]))
                    sig = got.value if got.ok else None
                return h, sig
            return issue
        if op[0] == "clear":
            return w.clear
        return w.free_unused

    def _show(self, lane: str, op: Op, ev: tuple) -> None:
        args = {"key": op[1]} if len(op) > 1 else {}
        if ev[0] == "paused":
            self.row(f"thread {lane}", op[0], args, f"▸ {ev[1]}")
        elif ev[0] == "blocked":
            self.row(f"thread {lane}", op[0], args, "blocked (no yield point, CPU clock still)")
        else:
            out = ev[1]
            shown = out.value[0] if out.ok and op[0] in ("put", "get_cached") else out.value
            self.row(f"thread {lane}", op[0], args, f"⇒ {shown!r}" if out.ok else f"⇒ {out.error}: {out.detail}")
            self.results[lane] = out
            if out.ok and op[0] in ("put", "get_cached"):
                data = _data(op[2]) if op[0] == "put" else _data(int(op[1][1:]))
                self.issued.append((lane, op[1], *out.value, data))

    def run(self) -> None:
        sc = self.sc
        la, lb = _Lane("A"), _Lane("B")
        if self.k < 0:  # the serial run
            for lane, op in ((la, sc.a), (lb, sc.b)):
                lane.run(self._call(op))
                ev = lane.wait()
                self._show(lane.name, op, ev)
                self._interleave({lane: (op, ev)})
            return
        la.run(self._call(sc.a))
        ev = la.wait()
        self._show("A", sc.a, ev)
        for _ in range(self.k):
            if ev[0] != "paused":
                break
            ev = la.resume()
            self._show("A", sc.a, ev)
        if ev[0] != "paused":  # A has fewer than k + 1 yield points: the sweep is over
            self.reached = False
            self._interleave({la: (sc.a, ev)})
            return
        lb.run(self._call(sc.b))
        evb = lb.wait()
        self._show("B", sc.b, evb)
        self._interleave({lb: (sc.b, evb), la: (sc.a, ev)})

    def _interleave(self, lanes: dict) -> None:
        """Run every lane to its return, the first listed first: it runs
        whenever it can; while it is blocked the next one takes one step.
        Raises TimeoutError when every lane left is blocked for STEP_BOUND
        seconds (a deadlock)."""
        cur = {lane: ev for lane, (_, ev) in lanes.items()}
        stuck_since = None
        while any(ev[0] != "done" for ev in cur.values()):
            moved = False
            for lane, (op, _) in lanes.items():
                ev = cur[lane]
                if ev[0] == "done":
                    continue
                nxt = lane.resume() if ev[0] == "paused" else lane.wait()
                if nxt[0] == "blocked" and ev[0] == "blocked":
                    continue
                self._show(lane.name, op, nxt)
                cur[lane] = nxt
                moved = True
                break
            if moved:
                stuck_since = None
            elif stuck_since is None:
                stuck_since = time.monotonic()
            elif time.monotonic() - stuck_since > STEP_BOUND:
                raise TimeoutError("threads " + " and ".join(lane.name for lane, ev in cur.items()
                                                              if ev[0] != "done")
                                   + f" blocked for {STEP_BOUND:g} s with no other thread running")

    def check(self) -> list[tuple[str, str]]:
        """The SW findings of this schedule (``[(property, message)]``)."""
        yieldpoints.HOOK = None
        out: list[tuple[str, str]] = []
        sc = self.sc
        for lane, op in (("A", sc.a), ("B", sc.b)):
            r = self.results.get(lane)
            if r is not None and r.error and r.error.startswith("Crash:"):
                out.append(("SW", f"thread {lane}'s {op[0]} raised {r.detail}"))
        if sc.a[0] == sc.b[0] == "put" and sc.a[1] == sc.b[1] and all(
                self.results.get(x) is not None and self.results[x].ok for x in "AB"):
            out.append(("SW", f"both threads' puts of {sc.a[1]} returned a handle "
                              f"({self.results['A'].value[0]} and {self.results['B'].value[0]}): one key, two objects"))
        out += self._state("after both operations")
        cleared = "clear" in (sc.a[0], sc.b[0])
        for lane, key, handle, sig, data in self.issued:
            if self.a.signed and sig is None:
                if cleared:  # the key was cleared before its signature was taken: nothing to read with
                    continue
                out.append(("SW", f"thread {lane} was given {handle} for {key}, but {key} had no signature "
                                  f"right after: the other thread dropped it"))
                continue
            got = self.a.reader_get("r1", *handle, *((sig, key) if self.a.signed else ()))
            if got.ok and got.value != Blob(data):
                out.append(("SW", f"the reader's get of {key} {handle}, given to thread {lane}, returned "
                                  f"{got.value!r}, not the object put under it"))
            elif got.error == "StaleHandle" and not cleared:
                out.append(("SW", f"the handle {handle} of {key} thread {lane} was given is stale before any "
                                  f"read: the other thread reclaimed the chunk it had just promised"))
            elif not got.ok and got.error != "StaleHandle":
                out.append(("SW", f"the reader's get of {key} {handle} raised {got.detail}"))
        if out:
            return out
        big = b"\x07" * (MAX_OBJECT_SIZE - object_nbytes(b""))
        put = self.a.put("kmax", Blob(big))
        self.row("writer", "put", {"key": "kmax", "size": MAX_OBJECT_SIZE},
                 f"⇒ {put.value!r}" if put.ok else f"⇒ {put.error}: {put.detail}")
        if not put.ok:
            out.append(("SW", f"after every handle was read once, a put of max_object_size "
                              f"({MAX_OBJECT_SIZE} B) fails: {put.detail}"))
        else:
            out += self._state("after a put of max_object_size")
        return out

    def _state(self, when: str) -> list[tuple[str, str]]:
        snap = observe(self.a.snapshot)
        if not snap.ok:
            return [("SW", f"{when}, the writer's state cannot be read: {snap.detail}")]
        s = snap.value
        live = {c.handle: c for c in s.chunks}
        out = []
        owners: dict[tuple, list[str]] = {}
        for key, h in sorted(s.key_index.items()):
            owners.setdefault(tuple(h), []).append(key)
            if tuple(h) not in live:
                out.append(f"key {key} maps to {tuple(h)}, which is not a live chunk")
        for h, c in sorted(live.items()):
            keys = owners.get(h, [])
            if len(keys) != 1:
                out.append(f"live chunk id {c.id} at {c.address} is owned by "
                           + ("no key" if not keys else f"{len(keys)} keys ({', '.join(keys)})"))
        out += disj(s.chunks, s.ring_size) + wrap(s.chunks)
        return [("SW", f"{when}: {m}") for m in out]

    def close(self) -> None:
        yieldpoints.HOOK = None
        self.a.close()


def run_schedule(target: LoadedTarget, scenario: str, k: int, writer_lock: bool = False) -> tuple[bool, list, list]:
    """One schedule of one scenario: ``(reached, findings, rows)``; ``reached``
    is False when A has no ``k``-th yield point.

    Raises:
        ValueError: unknown scenario.
        TimeoutError: a thread neither paused nor returned (a deadlock).
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown SW scenario {scenario!r} (choose from {', '.join(SCENARIOS)})")
    s = _Schedule(target, SCENARIOS[scenario], k, writer_lock)
    try:
        s.prefill()
        try:
            s.run()
        except TimeoutError as exc:
            s.row("-", "timeout", {}, str(exc))
            return True, [("SW", f"{DEADLOCK}: {exc}")], s.rows
        if not s.reached:
            return False, [], s.rows
        found = s.check()
        if found:
            s.rows[-1]["violations"] = [{"property": p, "message": m} for p, m in found]
        return True, found, s.rows
    finally:
        s.close()


def run_scenario(target: LoadedTarget, scenario: str, writer_lock: bool = False, max_k: int = 64) -> SwResult:
    """The serial run, then the sweep ``k = 0, 1, ...`` until A has no ``k``-th
    yield point; stops at the first finding (one per scenario)."""
    res = SwResult(scenario)
    t0 = time.monotonic()
    for k in range(-1, max_k):
        interrupt.check()
        reached, found, rows = run_schedule(target, scenario, k, writer_lock)
        if not reached:
            break
        res.schedules += 1
        if found and k < 0 and not found[0][1].startswith(DEADLOCK):
            res.note = f"the serial run (A then B) already fails: {found[0][1]}"
            res.steps = rows
            break
        if found:
            res.findings = [SwFinding(p, m, rows, k) for p, m in found[:1]]
            break
    res.seconds = time.monotonic() - t0
    return res


def _child(target: LoadedTarget, writer_lock: bool, conn: Any, parent: int) -> None:
    from .procs import worker_setup

    worker_setup(parent)
    gc.freeze()  # the gate's heap, inherited: the adapter's gc.collect() per schedule need not walk it
    for name in SCENARIOS:
        try:
            conn.send(("result", run_scenario(target, name, writer_lock)))
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            conn.send(("error", name, f"{type(exc).__name__}: {exc}"))
            return
    conn.send(("end",))


def run_all(target: LoadedTarget, writer_lock: bool = False, bound: float = CAMPAIGN_BOUND) -> tuple[list, str | None]:
    """Every scenario in a forked child (a deadlocked thread cannot hang the
    gate): ``(results, error)``; a child that exceeds ``bound`` seconds is
    killed and the scenario it was on becomes an SW finding."""
    ctx = multiprocess.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(target, writer_lock, child, os.getpid()), daemon=True)
    proc.start()
    child.close()
    results: list[SwResult] = []
    deadline = time.monotonic() + bound
    try:
        for name in SCENARIOS:
            interrupt.check()
            while not parent.poll(0.2):
                interrupt.check()
                if time.monotonic() > deadline or not proc.is_alive():
                    why = (f"the sw child ran past {bound:g} s" if proc.is_alive()
                           else f"the sw child died (exit {proc.exitcode})")
                    res = SwResult(name, findings=[SwFinding("SW", f"{why} in scenario {name}: a writer thread "
                                                                   f"never returned", [], -1)])
                    results.append(res)
                    return results, None
            msg = parent.recv()
            if msg[0] == "error":
                return results, f"{msg[1]}: {msg[2]}"
            if msg[0] == "end":
                break
            results.append(msg[1])
        return results, None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()


def replay_sw(target_spec: str, config: dict[str, Any], prop: str = "SW") -> str | None:
    """Re-run the schedule a report's violation names (``config["scenario"]``,
    ``config["k"]``, ``config["writer_lock"]``); ``"PROP: message"`` when
    ``prop`` is violated again, else None.

    Raises:
        TargetError: the target cannot be loaded.
    """
    from ..targets.loader import load_target

    _, found, _ = run_schedule(load_target(target_spec), config["scenario"], int(config["k"]),
                               bool(config.get("writer_lock")))
    hits = [m for p, m in found if p == prop]
    return f"{prop}: {hits[0]}" if hits else None


__all__ = ["CAMPAIGN_BOUND", "SCENARIOS", "STEP_BOUND", "SwFinding", "SwResult", "replay_sw", "run_all",
           "run_schedule", "run_scenario"]
