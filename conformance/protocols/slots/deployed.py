"""The queue as it is deployed (docs/slots.md#the-deployed-construction):
vLLM's own ``MessageQueue`` built by its own constructors, the writer in
one process and every reader in a process of its own, the zmq sockets live,
every message through ``enqueue``/``dequeue``.

The construction (:class:`Deployment`):

* the writer process builds ``MessageQueue(n_reader, n_local_reader,
  max_chunk_bytes=, max_chunks=, connect_ip="127.0.0.1")`` as vLLM's engine
  does and hands its ``export_handle()`` to the controller;
* each local reader (``r1``..) and remote reader (``remote1``..) is a
  forked or spawned process that attaches with
  ``MessageQueue.create_from_handle(handle, rank)`` as a worker does (local
  readers spin on the shared flags; remote ones subscribe over tcp);
* all of them run ``wait_until_ready()``, then the writer enqueues a plan of
  messages a user sends: small objects, pickles in band, messages larger
  than a chunk (the overflow path over the local socket), arrays of 1 MiB
  and more pickled out of band (:class:`OutOfBand`: numpy's protocol-5
  reduction, rebuilt zero-copy over the buffer the store hands back), and
  out-of-band arrays larger than a chunk.

What is judged, from the histories the processes report (the history
checker, :func:`judge`):

* FIFO: every reader receives exactly the sequence the writer enqueued
  (no loss, no duplicate, no reorder);
* NRR: every message's body has the digest the writer put in it, and every
  out-of-band array a reader keeps still has it after the run, when later
  writes have reused its chunk many times over; a dequeue that raises
  (a torn pickle) is NRR too;
* PROG: a wait that times out while every reader it waits on is alive;
* LIVE: every process reports within its deadline.

Faults (:data:`FAULTS`): a local reader SIGKILLed while it holds a chunk
(inside ``dequeue``, while its message is unpickled), one SIGKILLed between
two reads, and the writer SIGKILLed in the middle of a write (after its
claim, with half a message copied).  The survivors must receive exactly the
messages completed before the fault, in order, and no torn one; every wait
ends with the queue's timeout, and the writer's names (from the flags) the
dead reader and nobody else; the writer never rewrites a chunk the dead
reader had not released.

Three ways to run it (the campaigns of :mod:`.campaigns`):

* under a schedule (``Deployment.schedule``, :func:`_schedule`): every flag
  load and store of every process is a yield point, and the controller
  lets one process at a time run to its next one; the same schedule gives
  the same interleaving, so a finding replays exactly;
* free-running (the OS interleaves; readers take slow steps drawn from
  the seed, so the writer often waits on a full ring);
* with a fault (:data:`FAULTS`).

A free-running load may interleave differently when run again; the fault
scenarios end the same way each time.  The processes' clocks are
``time.monotonic`` (one clock for every process on the machine), so the
trace's steps are ordered by when they started.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import signal
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ...lockstep.session import Step

MiB = 1 << 20
FAULTS = ("reader-killed-holding", "reader-killed-between", "writer-killed-mid-write")
"""The process faults of the deployed construction (see the module docstring)."""
KINDS = ("small", "inband", "overflow", "oob", "oob-overflow")
"""Message kinds of a plan (see :func:`plan`)."""
REPORT_TIMEOUT_S = 60.0
"""How long the controller waits for any one process's report (seconds)."""
POLL_S = 0.25
"""A reader's dequeue timeout between checks of the controller's word (seconds)."""
SLOW_STEP_P = 0.3
SLOW_STEPS_S = (0.0005, 0.002, 0.005)
"""After a message, a reader takes a slow step (sleeps one of these, in
seconds) with this chance, drawn from the seed: as a worker runs a model
step between two ``dequeue`` calls, so the writer often finds the ring
full and waits on the slowest reader's flag."""
IDLE_POLLS = 4
"""Timeouts in a row, once the writer has stopped, after which a reader stops waiting."""


@dataclass(frozen=True)
class Deployment:
    """One deployed construction and load.  Sizes in bytes, times in seconds.

    ``local``/``remote``: reader processes over the ring / over tcp;
    ``start_method``: ``fork`` or ``spawn``; ``messages``: how many the
    writer enqueues; ``chunk_bytes``/``chunks``: the ring (the default
    chunk holds one out-of-band array of 1-2 MiB; vLLM's default is 24 MiB
    x 10); ``timeout``: each ``enqueue``/``dequeue`` wait of the writer and
    the readers; ``fault``: one of :data:`FAULTS` or ``""``, at message
    ``at`` by local reader ``victim`` (0-based)."""

    local: int = 2
    remote: int = 1
    start_method: str = "fork"
    messages: int = 24
    chunk_bytes: int = 2 * MiB + 256 * 1024
    chunks: int = 4
    seed: int = 0
    timeout: float = 10.0
    fault: str = ""
    at: int = 5
    victim: int = 0
    schedule: tuple[int, ...] | None = None
    """Controlled interleavings (:func:`controlled`): every flag load and
    store of every process is a yield point, and these choices (then round
    robin) pick which process takes the next one.  None: free-running."""

    @property
    def waits(self) -> float | None:
        """The timeout of each wait: none under a schedule (the schedule's
        step budget bounds a run), else :attr:`timeout`."""
        return None if self.schedule is not None else self.timeout

    @property
    def name(self) -> str:
        """The construction's name, as reports print it (:class:`Construction`'s)."""
        return self.as_construction().name

    def as_construction(self) -> Any:
        from ...core.constructions import Construction

        return Construction(False, self.start_method, self.local, self.remote, True, self.schedule is not None)

    def labels(self) -> list[str]:
        return [f"r{i + 1}" for i in range(self.local)] + [f"remote{i + 1}" for i in range(self.remote)]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["schedule"] = list(self.schedule) if self.schedule is not None else None
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Deployment":
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if kw.get("schedule") is not None:
            kw["schedule"] = tuple(kw["schedule"])
        return cls(**kw)

    def construction(self) -> dict[str, Any]:
        """``report.json``'s construction entry for it."""
        return self.as_construction().to_json()


# ---- the messages ------------------------------------------------------------------

class OutOfBand:
    """An array as numpy pickles one: with protocol 5 its bytes leave the
    pickle stream as a ``PickleBuffer``, and the rebuilt array is a view of
    whatever buffer the receiving side hands ``pickle.loads`` (zero copy,
    as ``numpy.frombuffer``).  So if a store hands back a view of its
    shared memory, the array a reader keeps aliases it."""

    def __init__(self, data: Any):
        self.mv = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")

    def __reduce_ex__(self, protocol: int):
        if protocol >= 5:
            return _rebuild_oob, (pickle.PickleBuffer(self.mv),)
        return _rebuild_oob, (bytes(self.mv),)

    def __len__(self) -> int:
        return self.mv.nbytes


def _rebuild_oob(buf: Any) -> OutOfBand:
    return OutOfBand(memoryview(buf))


_ME = ""
"""The label of the reader this process is (set in each reader process)."""


class Tripwire:
    """Part of a message: unpickling it SIGKILLs reader ``label``'s process,
    inside its ``dequeue`` (while it holds the chunk, when the message is in
    one), and is a no-op in every other process."""

    def __init__(self, label: str):
        self.label = label

    def __reduce__(self):
        return _trip, (self.label,)


def _trip(label: str) -> None:
    if _ME == label:
        os.kill(os.getpid(), signal.SIGKILL)
    return None


IN_CHUNK = ("small", "inband", "oob")
"""The kinds a controlled run sends: each lies in its chunk, so no process
blocks on a socket between two yield points."""


def plan(dep: Deployment) -> list[str]:
    """The kind of each message (one of :data:`KINDS`): every kind within
    the first five, then drawn from the seed; the fault's message is small
    (its tripwire then fires inside the chunk).  Under a schedule only the
    :data:`IN_CHUNK` kinds."""
    rnd = random.Random(dep.seed * 7919 + 17)
    pool = IN_CHUNK if dep.schedule is not None else KINDS
    kinds = [pool[i % len(pool)] if i < len(pool) else rnd.choice(pool) for i in range(dep.messages)]
    if dep.fault and dep.at < dep.messages:
        kinds[dep.at] = "small"
    return kinds


def _body(dep: Deployment, seq: int, kind: str) -> Any:
    rnd = random.Random((dep.seed << 20) ^ (seq * 2654435761))
    if kind == "small":
        return {"seq": seq, "req": f"req-{seq}", "tokens": [rnd.randrange(50000) for _ in range(1 + seq % 7)]}
    size = {"inband": dep.chunk_bytes // 4, "overflow": dep.chunk_bytes + 4096,
            "oob": MiB + rnd.randrange(max(1, dep.chunk_bytes - MiB - 128 * 1024)),
            "oob-overflow": dep.chunk_bytes + 64 * 1024}[kind]
    block = rnd.randbytes(64 * 1024)  # a block of its own per message, tiled: fast, and any two messages differ
    data = (block * (size // len(block) + 1))[:size]
    return OutOfBand(bytearray(data)) if kind.startswith("oob") else data


def digest(body: Any) -> str:
    """The body's digest (blake2b, 16 bytes, hex)."""
    h = hashlib.blake2b(digest_size=16)
    if isinstance(body, OutOfBand):
        h.update(body.mv)
    elif isinstance(body, (bytes, bytearray, memoryview)):
        h.update(body)
    else:
        h.update(repr(body).encode())
    return h.hexdigest()


def message(dep: Deployment, seq: int, kind: str) -> tuple:
    """Message ``seq``: ``("shmspec", seq, kind, body, digest, tripwire)``."""
    body = _body(dep, seq, kind)
    trip = Tripwire(f"r{dep.victim + 1}") if dep.fault == "reader-killed-holding" and seq == dep.at else None
    return ("shmspec", seq, kind, body, digest(body), trip)


def _size(body: Any) -> int:
    return len(body) if isinstance(body, (bytes, bytearray, OutOfBand)) else len(repr(body))


# ---- the store's API, per target ---------------------------------------------------

def queue_api(target: Any) -> Any:
    """``(MessageQueue, Handle, row)`` of a queue target, loaded for the
    deployed construction: vLLM's file with real pyzmq (torch and vllm.*
    stand in as for the lockstep), or impl's :mod:`shmspec.impl.broadcast`
    (an ``impl-file:`` module: its ``MessageQueue``, else impl's over its
    ``SlotQueue``).  ``row(mq)``: the flags of the writer's current chunk."""
    cached = getattr(target, "_deployed_api", None)
    if cached is not None:
        return cached
    if target.origin == "impl":
        from shmspec.impl import broadcast

        mq = broadcast.MessageQueue
        module = target.files
        if module is not None and isinstance(getattr(module, "MessageQueue", None), type):
            mq = module.MessageQueue
        elif module is not None:
            mq = type("MessageQueue", (broadcast.MessageQueue,), {"ring_class": module.SlotQueue})
        def instrument():
            ring = mq.ring_class
            load, store = ring._flag, ring._set_flag

            def _flag(self, i, j):
                _point("load", i, _FLAG_NAMES(j))
                return load(self, i, j)

            def _set_flag(self, i, j, v):
                store(self, i, j, v)
                _point("store", i, _FLAG_NAMES(j), v)

            ring._flag, ring._set_flag = _flag, _set_flag

        api = SimpleNamespace(MessageQueue=mq, Handle=broadcast.Handle,
                              row=lambda q: q.buffer.row(q.current_idx), instrument=instrument)
    else:
        from ...targets import slotfiles

        files = target.files
        loaded = slotfiles.load_slot_files(files.broadcast_path, real=("zmq",))

        def row(q):
            with q.buffer.get_metadata(q.current_idx) as m:
                return bytes(m)

        def instrument():
            from contextlib import contextmanager

            ring, original = loaded.broadcast.ShmRingBuffer, loaded.broadcast.ShmRingBuffer.get_metadata

            @contextmanager
            def get_metadata(self, idx):
                with original(self, idx) as mv:
                    yield _Flags(mv, idx)

            ring.get_metadata = get_metadata
            # a reader's idle park on the notify socket is the one wait outside the flags: the scheduler
            # interleaves instead (its busy path, sched_yield, is what runs)
            if hasattr(loaded.broadcast, "SpinCondition"):
                loaded.broadcast.SpinCondition.wait = lambda self, timeout_ms=None: None

        api = SimpleNamespace(MessageQueue=loaded.broadcast.MessageQueue, Handle=loaded.broadcast.Handle, row=row,
                              instrument=instrument, ring=loaded.broadcast.ShmRingBuffer)
    import inspect

    api.timeouts = "timeout" in inspect.signature(api.MessageQueue.enqueue).parameters
    object.__setattr__(target, "_deployed_api", api)
    return api


# ---- yield points (controlled interleavings) ---------------------------------------

_GATE = None
"""This process's connection to the scheduler once armed (None: free-running)."""


def _FLAG_NAMES(j: Any) -> str:
    if isinstance(j, slice):
        return "done_*" if j.start == 1 else f"{j.start}:{j.stop}"
    return "written" if j == 0 else f"done_{j - 1}"


def _point(op: str, slot: int, flag: str, value: Any = None) -> None:
    """A yield point: report the flag access and wait for the scheduler's
    go.  Before a load (its value is read once the process goes on), after
    a store (the store is visible when the others run)."""
    gate = _GATE
    if gate is None:
        return
    gate.send((op, slot, flag, value))
    if not gate.recv():
        raise SchedulerStop(f"stopped by the scheduler at a {op} of {flag}[{slot}]")


class SchedulerStop(BaseException):
    """Raised at a yield point when the scheduler ends the run (its step
    budget is spent): the process reports what it did and exits."""


class _Flags:
    """A slot's metadata row whose every access is a yield point (vLLM's
    ``ShmRingBuffer.get_metadata`` yields it under a schedule)."""

    def __init__(self, mv: memoryview, slot: int):
        self.mv, self.slot = mv, slot

    def __getitem__(self, k):
        _point("load", self.slot, _FLAG_NAMES(k))
        return self.mv[k]

    def __setitem__(self, k, v):
        self.mv[k] = v
        _point("store", self.slot, _FLAG_NAMES(k), v)

    def __len__(self) -> int:
        return len(self.mv)


def _arm(api: Any, gate: Any) -> None:
    """Make every flag access a yield point (``gate``: the scheduler's
    pipe); ``_arm(None, None)`` disarms (a process about to close)."""
    global _GATE
    if gate is not None:
        api.instrument()
    _GATE = gate


def _handle_json(handle: Any) -> dict[str, Any]:
    """The writer's handle as plain data (the target's ``Handle`` class lives
    in a module loaded in isolation, so it does not pickle by reference): a
    field holding the ring itself (SGLang's ``buffer``) becomes
    ``{"ring": the arguments it pickles with}``; ``segment`` names the
    ring's segment."""
    out: dict[str, Any] = {}
    for f in fields(handle):
        v = getattr(handle, f.name)
        if hasattr(v, "shared_memory") and hasattr(v, "max_chunks"):  # the ring: rebuilt by name, as it pickles
            v = {"ring": list(v.__reduce__()[1])}
        out[f.name] = v
    ring = out.get("buffer")
    seg = out.get("buffer_handle") or (ring.get("ring") if isinstance(ring, dict) else None)
    out["segment"] = seg[-1] if seg else None
    return out


def _handle_of(api: Any, data: dict[str, Any]) -> Any:
    """The target's ``Handle`` rebuilt from :func:`_handle_json`'s data."""
    names = {f.name for f in fields(api.Handle)}
    kw = {k: v for k, v in data.items() if k in names}
    for k, v in kw.items():
        if isinstance(v, dict) and "ring" in v:
            kw[k] = api.ring(*v["ring"])
        elif isinstance(v, list) and k == "buffer_handle":
            kw[k] = tuple(v)
    return api.Handle(**kw)


# ---- the processes -----------------------------------------------------------------

def _writer(conn, target: Any, dep: Deployment, log: str | None = None, gate: Any = None) -> None:
    """The writer process: build, hand over the handle, enqueue the plan."""
    _to_log(log)
    _untracked()
    try:
        api = queue_api(target)
        holder = [api.MessageQueue(dep.local + dep.remote, dep.local, max_chunk_bytes=dep.chunk_bytes,
                                   max_chunks=dep.chunks, connect_ip="127.0.0.1")]
        mq = holder[0]
        conn.send(("handle", _handle_json(mq.export_handle())))
        mq.wait_until_ready()
        _arm(api, gate)
        conn.send(("ready", time.monotonic()))
        events = _Stream(conn)
        for seq, kind in enumerate(plan(dep)):
            msg = message(dep, seq, kind)
            if dep.fault == "writer-killed-mid-write" and seq == dep.at:
                with mq.acquire_write(**_kw(api, dep.timeout)) as buf:  # claimed; half a message copied; killed
                    half = os.urandom(min(4096, len(buf) // 2))
                    buf[0:len(half)] = half
                    conn.send(("dying", seq, time.monotonic()))
                    os.kill(os.getpid(), signal.SIGKILL)
            while True:
                t0 = time.monotonic()
                conn.send(("begin", seq, t0))
                try:
                    mq.enqueue(msg, **_kw(api, dep.waits))
                except TimeoutError as exc:
                    row = list(api.row(mq))
                    missing = [r for r in range(dep.local) if row[0] and not row[1 + r]]
                    conn.send(("waiting", seq, missing))
                    if conn.recv() == "retry":  # a live reader is only slow: wait again
                        continue
                    events.append(("timeout", seq, kind, t0, time.monotonic(), str(exc) or "TimeoutError", row))
                    break
                except Exception as exc:  # noqa: BLE001 - reported as the writer's error
                    events.append(("error", seq, kind, t0, time.monotonic(), f"{type(exc).__name__}: {exc}"))
                    break
                except SchedulerStop as exc:
                    events.append(("stopped", seq, kind, t0, time.monotonic(), str(exc)))
                    break
                events.append(("sent", seq, kind, t0, time.monotonic(), msg[4], _size(msg[3])))
                break
            if events[-1][0] != "sent":
                break
        _arm(None, None)
        conn.send(("done",))
        conn.recv()  # stay up (sockets open) until every reader has reported
        del mq
        _close(holder)
    except BaseException as exc:  # noqa: BLE001 - reported to the controller
        _failed(conn, exc)
    os._exit(0)


class _Stream(list):
    """A process's events, each sent to the controller as it happens (so a
    process that blocks for ever, or is killed, still leaves its history)."""

    def __init__(self, conn: Any):
        super().__init__()
        self.conn = conn

    def append(self, e: tuple) -> None:
        super().append(e)
        self.conn.send(("event", e))


def _kw(api: Any, timeout: float | None) -> dict[str, Any]:
    """The timeout argument, for a queue whose calls take one (vLLM >= 0.6.5,
    impl); a queue without (SGLang's, vLLM's before 0.6.5) waits for ever."""
    return {"timeout": timeout} if api.timeouts else {}


def _failed(conn: Any, exc: BaseException) -> None:
    """Tell the controller why this process could not go on (best effort:
    the pipe may be gone)."""
    try:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
    except Exception:  # noqa: BLE001
        pass


def _close(holder: list[Any]) -> None:
    """Close the queue in ``holder`` (its only reference) as its owner
    would: impl's ``close()``; vLLM's by collection (its finalizer closes
    the sockets, the ring's ``__del__`` the segment, which the writer
    unlinks)."""
    import gc

    mq = holder.pop()
    if hasattr(mq, "close"):
        mq.close()
    del mq
    gc.collect()


def _untracked() -> None:
    """No resource tracker learns of this process's segments: a tracker
    would unlink them when the process is killed and print warnings at the
    end of the run.  The writer unlinks its ring when it closes; after a
    kill the controller does (:func:`_clean_after_writer`)."""
    from multiprocessing import resource_tracker

    resource_tracker.register = resource_tracker.unregister = lambda name, rtype: None


def _to_log(log: str | None) -> None:
    """A child's stderr (and that of any helper it starts, such as a
    resource tracker) goes to the run's log, never to the console."""
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 2)
        os.close(fd)


def _reader(conn, target: Any, dep: Deployment, handle: dict[str, Any], rank: int, label: str,
            log: str | None = None, gate: Any = None) -> None:
    """A reader process: attach, dequeue until the controller's count, keep
    every out-of-band array and check it again at the end."""
    global _ME
    _ME = label
    _to_log(log)
    _untracked()
    try:
        api = queue_api(target)
        holder = [api.MessageQueue.create_from_handle(_handle_of(api, handle), rank)]
        mq = holder[0]
        mq.wait_until_ready()
        _arm(api, gate)
        events = _Stream(conn)
        kept: list[tuple[int, Any, str]] = []
        total = dep.messages if not dep.fault else None
        deadline = time.monotonic() + REPORT_TIMEOUT_S
        idle = 0  # timeouts in a row once the count is known
        pace = random.Random(f"{dep.seed}/{label}")
        victim = label == f"r{dep.victim + 1}" and dep.fault == "reader-killed-between"
        while total is None or len(events) < total:
            if victim and len(events) == dep.at:
                os.kill(os.getpid(), signal.SIGKILL)
            t0 = time.monotonic()
            try:
                obj = mq.dequeue(**_kw(api, POLL_S if dep.fault else dep.waits))
            except SchedulerStop as exc:
                events.append(("stopped", len(events), t0, time.monotonic(), str(exc)))
                break
            except TimeoutError:
                if total is None and conn.poll():
                    total = conn.recv()
                idle += total is not None
                # a message in flight on a socket when the writer died never comes: stop after a second
                if dep.fault and time.monotonic() < deadline and idle <= IDLE_POLLS:
                    continue
                events.append(("timeout", len(events), t0, time.monotonic()))
                break
            except Exception as exc:  # noqa: BLE001 - a torn message: judged by the controller; read on
                events.append(("error", len(events), t0, time.monotonic(), f"{type(exc).__name__}: {exc}"))
                continue
            try:
                _, seq, kind, body, want, _trip_ = obj
            except (TypeError, ValueError):
                events.append(("error", len(events), t0, time.monotonic(), f"not a message: {type(obj).__name__}"))
                continue
            events.append(("recv", seq, kind, t0, time.monotonic(), want, digest(body) == want, _size(body)))
            if isinstance(body, OutOfBand):
                kept.append((seq, body, want))
            if dep.schedule is None and pace.random() < SLOW_STEP_P:  # a worker's step: the ring fills up
                time.sleep(pace.choice(SLOW_STEPS_S))
        final = None
        if dep.fault and events and events[-1][0] == "recv":  # nothing more may come: the wait must end
            t0 = time.monotonic()
            try:
                obj = mq.dequeue(**_kw(api, POLL_S))
                final = ("extra", t0, time.monotonic(), repr(obj[:3]) if isinstance(obj, tuple) else repr(obj)[:80])
            except TimeoutError:
                final = ("timeout", t0, time.monotonic())
            except Exception as exc:  # noqa: BLE001
                final = ("error", t0, time.monotonic(), f"{type(exc).__name__}: {exc}")
        changed = [seq for seq, body, want in kept if digest(body) != want]
        _arm(None, None)
        conn.send(("done", final, changed))
        kept.clear()  # an array aliasing the ring would keep its mapping from closing
        obj = body = None
        del mq
        _close(holder)
    except BaseException as exc:  # noqa: BLE001 - reported to the controller
        _failed(conn, exc)
    os._exit(0)  # no finalizers: an array that aliases a closed segment must not print at exit


# ---- the controller ----------------------------------------------------------------

@dataclass
class Outcome:
    """What one deployed run did: the processes' reports, exit codes, and
    what the controller saw (``notes``: its own events, such as a kill)."""

    dep: Deployment
    writer: list[tuple] = field(default_factory=list)
    readers: dict[str, tuple] = field(default_factory=dict)
    exitcodes: dict[str, int | None] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    notes: list[tuple] = field(default_factory=list)
    writer_died_at: int | None = None
    seconds: float = 0.0
    log: str = ""
    """The processes' stderr while the run lasts (removed after it; see :attr:`stderr`)."""
    handle: dict[str, Any] | None = None
    """The writer's handle (its segment's and sockets' names)."""
    died: dict[str, float] = field(default_factory=dict)
    """When the controller first saw a process dead (``time.monotonic``)."""
    stderr: str = ""
    """The end of the processes' stderr when a process failed (the log itself is removed)."""


def _recv(conn, seconds: float) -> Any:
    if not conn.poll(seconds):
        return None
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


def run(target: Any, dep: Deployment) -> Outcome:
    """Run ``dep`` on a queue target once; the processes' histories.

    Raises:
        RuntimeError: the writer could not build the queue (the run could
            not take place: an error, never a pass)."""
    import multiprocess as mp

    import tempfile

    out = Outcome(dep)
    ctx = mp.get_context(dep.start_method)
    t_start = time.monotonic()
    fd, log = tempfile.mkstemp(prefix="shmspec-deployed-", suffix=".log")
    os.close(fd)
    out.log = log
    gates: dict[str, Any] = {}  # under a schedule: label -> the controller's end of its yield-point pipe
    gate_ends: dict[str, Any] = {}
    for label in (["writer", *dep.labels()] if dep.schedule is not None else []):
        gates[label], gate_ends[label] = ctx.Pipe()
    wconn, wchild = ctx.Pipe()
    writer = ctx.Process(target=_writer, args=(wchild, target, dep, log, gate_ends.get("writer")), daemon=True)
    writer.start()
    procs: dict[str, Any] = {"writer": writer}
    conns: dict[str, Any] = {}
    handle = None
    try:
        got = _recv(wconn, REPORT_TIMEOUT_S)
        if not got or got[0] != "handle":
            raise RuntimeError(f"the writer did not build the queue: {got[1] if got else 'no report'}")
        handle = out.handle = got[1]
        local_ranks = list(handle["local_reader_ranks"])
        for i, label in enumerate(dep.labels()):
            rank = local_ranks[i] if i < dep.local else dep.local + (i - dep.local)
            c, child = ctx.Pipe()
            p = ctx.Process(target=_reader, args=(child, target, dep, handle, rank, label, log,
                                                  gate_ends.get(label)), daemon=True)
            p.start()
            procs[label], conns[label] = p, c
        got = _recv(wconn, REPORT_TIMEOUT_S)
        if not got or got[0] != "ready":
            raise RuntimeError(f"the queue did not become ready: {got[1] if got else 'no report'}")
        dead: set[int] = set()
        victim = f"r{dep.victim + 1}"
        bounded = queue_api(target).timeouts
        streams: dict[str, list] = {label: [] for label in conns}
        if dep.schedule is not None:
            _schedule(out, dep, {"writer": wconn, **conns}, gates, streams)
        news = time.monotonic()  # the writer's last report
        while dep.schedule is None:  # the writer's reports: events, done, dying, or a wait to judge
            got = _recv(wconn, POLL_S)
            if got is None:
                now = time.monotonic()
                dead_at = out.died.setdefault(victim, now) if (
                    dep.fault.startswith("reader-killed") and not procs[victim].is_alive()) else None
                quiet = not bounded and dead_at is not None and now - max(news, dead_at) > QUIET_S
                if not quiet and now - news <= REPORT_TIMEOUT_S:
                    continue
                begun = [n for n in out.notes if n[0] == "begin"]
                seq = begun[-1][1] if begun else 0
                if quiet:  # blocked on the dead reader's chunk, and the call takes no timeout
                    out.notes.append(("blocked", "writer", seq, now))
                    writer.kill()
                else:
                    out.failures["writer"] = f"no report within {REPORT_TIMEOUT_S:g} s"
                break
            news = time.monotonic()
            if got[0] == "event":
                out.writer.append(got[1])
                continue
            if got[0] == "begin":
                out.notes.append(("begin", got[1], got[2]))
                continue
            if got[0] == "waiting":
                _, seq, missing = got
                if dep.fault.startswith("reader-killed") and not procs[victim].is_alive():
                    dead.add(dep.victim)
                retry = bool(dep.fault) and bool(missing) and not set(missing) <= dead
                out.notes.append(("waiting", seq, list(missing), sorted(dead), time.monotonic()))
                if retry and time.monotonic() - t_start > REPORT_TIMEOUT_S:
                    retry = False
                wconn.send("retry" if retry else "stop")
                continue
            if got[0] == "dying":
                _, seq, t = got
                out.writer_died_at = seq
                writer.join(REPORT_TIMEOUT_S)
                out.notes.append(("writer-killed", seq, t))
                break
            if got[0] == "failed":
                out.failures["writer"] = got[1]
            break
        sent = sum(1 for e in out.writer if e[0] == "sent")
        for label, c in conns.items():
            if dep.fault and bounded:
                try:
                    c.send(sent)
                except (BrokenPipeError, OSError):
                    pass
        quiet_until = time.monotonic() + QUIET_S  # one window for every reader at once
        for label, c in conns.items():
            if label in out.readers or label in out.failures:  # (reported under the schedule)
                continue
            while True:
                have = sum(1 for e in streams[label] if e[0] == "recv")
                # a reader whose dequeue takes no timeout, with nothing more to come, waits for ever
                quiet = not bounded and bool(dep.fault) and (have >= sent or not writer.is_alive())
                got = _recv(c, max(0.05, quiet_until - time.monotonic()) if quiet else REPORT_TIMEOUT_S)
                if got is None:
                    if quiet and procs[label].is_alive():
                        out.notes.append(("blocked", label, have, time.monotonic()))
                        out.readers[label] = (list(streams[label]), None, [])
                        procs[label].kill()
                    elif procs[label].is_alive():
                        out.failures[label] = f"no report within {REPORT_TIMEOUT_S:g} s"
                    elif streams[label] and label != victim:
                        out.readers[label] = (list(streams[label]), None, [])
                    break
                if got[0] == "event":
                    streams[label].append(got[1])
                    continue
                if got[0] == "failed":
                    out.failures[label] = got[1]
                else:
                    out.readers[label] = (list(streams[label]), *got[1:])
                break
        if writer.is_alive():
            try:
                wconn.send("exit")
            except (BrokenPipeError, OSError):
                pass
    finally:
        for p in procs.values():
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        out.exitcodes = {label: p.exitcode for label, p in procs.items()}
        if handle is not None:
            _clean_after_writer(handle, killed=out.exitcodes.get("writer") not in (0, None))
        out.seconds = time.monotonic() - t_start
        if out.failures:  # what the processes said goes into the finding; the file never stays behind
            try:
                out.stderr = Path(log).read_text(errors="replace")[-2000:]
            except OSError:
                pass
        os.unlink(log)
        out.log = ""
    return out


SPIN_LOADS = 6
"""Loads in a row after which a process (spinning on a flag) hands over."""
MAX_STEPS = 3000
"""Yield points a scheduled run may take before it is stopped."""
AFTER_WRITER_STEPS = 400
"""Yield points the readers may take once the writer is done: a reader
still waiting then waits for a message that never comes (it is stopped;
its history shows what it missed)."""
QUIET_S = 3.0
"""After a fault, how long a process whose queue calls take no timeout may
go without news before it counts as waiting for ever (LIVE) and is killed."""
STUCK_S = 30.0
"""How long the scheduler waits for a process to reach its next yield point (seconds)."""


def _schedule(out: Outcome, dep: Deployment, mains: dict[str, Any], gates: dict[str, Any],
              streams: dict[str, list]) -> None:
    """Run the processes one yield point at a time (see :class:`Deployment`'s
    ``schedule``): wait until every process is at a yield point or done,
    pick the next one, let it run to its next point.  The process that ran
    last goes on, except: right after one of its stores (a decision point)
    the next choice ``c`` says whether it goes on (0) or which other waiting
    process takes over (``c`` places further, by label; once the choices
    are used up, it goes on); after :data:`SPIN_LOADS` loads in a row (a
    spin on a flag) the next process takes over, round robin.  Every
    granted point is recorded in ``out.notes`` as ``("point", label, op,
    slot, flag, value, time)``."""
    from multiprocess.connection import wait

    order = list(gates)
    at: dict[str, tuple] = {}
    running = set(order)
    owner = {id(c): label for label, c in gates.items()} | {id(c): label for label, c in mains.items()}
    last, k, d, loads, writer_done = None, 0, 0, 0, None
    while True:
        deadline = time.monotonic() + STUCK_S
        while running:
            ready = wait([gates[x] for x in running] + [mains[x] for x in running],
                         timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                for x in sorted(running):
                    out.failures[x] = f"stuck outside a yield point for {STUCK_S:g} s"
                return
            for c in ready:
                label = owner[id(c)]
                if label not in running:
                    continue
                try:
                    msg = c.recv()
                except (EOFError, OSError):
                    running.discard(label)  # died (a reader killed by its tripwire: none under a schedule)
                    continue
                if c is not gates[label] and msg[0] in ("event", "begin"):  # still running
                    if msg[0] == "event":
                        (out.writer if label == "writer" else streams[label]).append(msg[1])
                    continue
                running.discard(label)
                if c is gates[label]:
                    at[label] = (*msg, time.monotonic())  # a store is visible from here on
                elif msg[0] == "done" and label != "writer":
                    out.readers[label] = (list(streams[label]), *msg[1:])
                elif msg[0] != "done":
                    out.failures[label] = msg[1]
        if not at:
            return
        if writer_done is None and "writer" not in at and "writer" not in running:
            writer_done = k
        if k >= MAX_STEPS or (writer_done is not None and k - writer_done >= AFTER_WRITER_STEPS):
            for x in list(at):  # stop them: each reports what it did
                at.pop(x)
                gates[x].send(0)
                running.add(x)
            k = MAX_STEPS + AFTER_WRITER_STEPS  # nothing more is granted
            continue
        waiting = [x for x in order if x in at]
        after = order.index(last) + 1 if last in order else 0
        nxt = next((x for x in order[after:] + order[:after] if x in at and x != last), waiting[0])
        if last in at and at[last][0] == "store":  # a decision point: go on, or switch right after the store
            c = dep.schedule[d] if d < len(dep.schedule) else 0
            d += 1
            pick = last if c == 0 else waiting[(waiting.index(last) + c) % len(waiting)]
        elif last in at and loads < SPIN_LOADS:
            pick = last
        else:  # a spinning process (or one that is done) hands over, round robin
            pick = nxt
        loads = loads + 1 if pick == last and at[pick][0] == "load" else (at[pick][0] == "load") * 1
        op, slot, flag, value, arrived = at.pop(pick)
        out.notes.append(("point", pick, op, slot, flag, value, arrived if op == "store" else time.monotonic()))
        gates[pick].send(1)
        running.add(pick)
        last, k = pick, k + 1


def _clean_after_writer(handle: dict[str, Any], killed: bool) -> None:
    """Remove what the writer leaves: its ipc socket files (libzmq 4.3
    leaves a bound ipc path's file on close, and vLLM names each one anew),
    and after a kill its segment, so nothing is left behind."""
    import _posixshmem

    seg = handle.get("segment")
    if seg and killed:
        try:  # by name, without attaching: no resource tracker of ours learns of it
            _posixshmem.shm_unlink(f"/{str(seg).lstrip('/')}")
        except FileNotFoundError:
            pass
    for key in ("local_subscribe_addr", "local_notify_addr"):
        addr = handle.get(key) or ""
        if addr.startswith("ipc://"):
            try:
                os.unlink(addr[6:])
            except OSError:
                pass


# ---- the history checker -----------------------------------------------------------

def judge(out: Outcome) -> list[Step]:
    """The run's trace, every step carrying the violations found there
    (``Step.violations``: ``(property, message)``), ordered by start time."""
    dep = out.dep
    raw: list[tuple[float, Step]] = []
    sent = [e for e in out.writer if e[0] == "sent"]
    order = [e[1] for e in sent]
    digests = {e[1]: e[5] for e in sent}
    kinds = {e[1]: e[2] for e in sent}
    victim = f"r{dep.victim + 1}" if dep.fault.startswith("reader-killed") else None

    def step(t: float, process: str, action: str, args: dict, expected: str, observed: str,
             violations: list[tuple[str, str]] | None = None) -> None:
        raw.append((t, Step(0, process, action, args, expected, observed, {}, list(violations or []),
                            cause=f"{action}/{args.get('kind', '')}".rstrip("/"))))

    # the writer
    # with a reader dead at message `at`, the writer can fill the chunks up to its unreleased one: it stops
    # at at + chunks, or one later where the store released the chunk before unpickling (impl's copy-out)
    expected_stop = max_sent = None
    if victim is not None:
        expected_stop = dep.at + dep.chunks
        max_sent = expected_stop - (dep.fault == "reader-killed-between")
    for e in out.writer:
        kind, seq = e[0], e[1]
        if kind == "sent":
            v = []
            if max_sent is not None and seq > max_sent:
                v.append(("NRR", f"the writer rewrote chunk {seq % dep.chunks} with message {seq}, "
                                 f"which {victim} (killed) never released"))
            step(e[4], "writer", "enqueue", {"seq": seq, "kind": e[2]}, f"message {seq} sent",
                 f"sent ({e[6]} bytes, {e[4] - e[3]:.3f} s)", v)
        elif kind == "timeout":
            row, waited = e[6], e[4] - e[3]
            missing = [f"r{r + 1}" for r in range(dep.local) if row[0] and not row[1 + r]]
            v = []
            if victim is None:
                v.append(("PROG", f"the writer's enqueue of message {seq} timed out although every reader is "
                                  f"alive (flags {row})"))
            elif seq < (expected_stop or 0):
                v.append(("PROG", f"the writer waited on chunk {seq % dep.chunks} at message {seq}: "
                                  f"{victim} had released it before it was killed (flags {row})"))
            elif missing != [victim]:
                v.append(("PROG", f"the writer's wait at message {seq} names {missing or 'nobody'} by the flags; "
                                  f"only {victim} is dead"))
            if waited > dep.timeout + 5:
                v.append(("LIVE", f"the writer's enqueue waited {waited:.1f} s, over its {dep.timeout:g} s timeout"))
            step(e[4], "writer", "enqueue", {"seq": seq, "kind": e[2]},
                 f"timeout naming {victim}" if victim else f"message {seq} sent",
                 f"TimeoutError after {waited:.2f} s: {e[5][:120]}; flags {row} (not released: "
                 f"{', '.join(missing) or 'none'})", v)
        elif kind == "stopped":
            step(e[4], "writer", "enqueue", {"seq": seq, "kind": e[2]}, f"message {seq} sent", e[5],
                 [("PROG", f"the writer's enqueue of message {seq} waited until the scheduler stopped the run "
                           f"({MAX_STEPS} yield points)")])
        elif kind == "error":
            step(e[4], "writer", "enqueue", {"seq": seq, "kind": e[2]}, f"message {seq} sent", e[5],
                 [("PROG", f"the writer's enqueue of message {seq} raised {e[5]}")])
    for n in out.notes:
        if n[0] == "blocked":
            who = n[1]
            what = (f"the writer's enqueue of message {n[2]}" if who == "writer" else
                    f"{who}'s dequeue after message {n[2] - 1}")
            step(n[3], who, "enqueue" if who == "writer" else "dequeue", {},
                 "the wait ends with the queue's timeout", f"still waiting after {QUIET_S:g} s (killed)",
                 [("LIVE", f"{what} waits for ever: the call takes no timeout"
                           + (f" and {victim} is dead" if victim else " and the writer is dead"))])
        if n[0] == "point":
            _, label, op, slot, flag, value, t = n
            step(t, label, op, {"slot": slot, "flag": flag, **({"value": value} if op == "store" else {})},
                 "", f"{flag}[{slot}]" + (f" := {value}" if op == "store" else ""))
        if n[0] == "writer-killed":
            step(n[2], "writer", "killed", {"seq": n[1]}, "SIGKILL after the claim, half of the message copied",
                 f"exit {out.exitcodes.get('writer')}")
    last_words = [ln for ln in out.stderr.splitlines() if ln.strip()][-1:]
    for label, why in out.failures.items():
        prop = "LIVE" if "no report" in why else "PROG"
        said = f" (the processes' stderr ended: {last_words[0][:160]})" if last_words else ""
        step(time.monotonic(), label, "report", {}, "the process reports its history", why + said,
             [(prop, f"{label}: {why}")])

    # the readers
    for label in dep.labels():
        code = out.exitcodes.get(label)
        if label not in out.readers:
            if label == victim and code == -signal.SIGKILL:
                where = "inside its dequeue" if dep.fault == "reader-killed-holding" else "between two reads"
                step(time.monotonic(), label, "killed", {"seq": dep.at}, f"SIGKILL at message {dep.at}, {where}",
                     f"exit {code}")
            elif label not in out.failures:
                step(time.monotonic(), label, "report", {}, "the process reports its history",
                     f"exited {code} without a report", [("LIVE", f"{label} exited {code} without a report")])
            continue
        events, final, changed = out.readers[label]
        seen: set[int] = set()
        for i, e in enumerate(events):
            want = order[i] if i < len(order) else None
            if e[0] == "recv":
                _, seq, kind, t0, t1, claimed, ok, size = e
                v = []
                if not ok or (seq in digests and digests[seq] != claimed):
                    v.append(("NRR", f"{label} received message {seq} ({kind}) with other bytes than written"))
                if want is None:
                    v.append(("FIFO", f"{label} received message {seq} after the last one the writer completed"
                                      + (f" ({order[-1]})" if order else "")))
                elif seq > want and (seq - want) % dep.chunks == 0 and label.startswith("r"):
                    v.append(("NRR", f"{label} read chunk {want % dep.chunks} expecting message {want} and got "
                                     f"message {seq}: the chunk was rewritten before it had read it (a recycled "
                                     "read)"))
                elif seq != want:
                    what = "again" if seq in seen else ("out of order" if seq > want else "late")
                    lost = " (lost)" if seq > want else ""
                    v.append(("FIFO", f"{label} received message {seq} {what} where message {want} was next{lost}"))
                seen.add(seq)
                step(t1, label, "dequeue", {"seq": seq, "kind": kind},
                     f"message {want}" if want is not None else "timeout (nothing more was written)",
                     f"message {seq} ({size} bytes{', digest ok' if ok else ', DIGEST WRONG'})", v)
            elif e[0] == "stopped":
                v = [] if want is None else [("FIFO", f"{label} never received message {want}: it waited for it "
                                                      f"until the scheduler stopped the run ({e[4]})")]
                step(e[3], label, "dequeue", {}, f"message {want}" if want is not None else "the run's end",
                     "stopped by the scheduler", v)
            elif e[0] == "timeout":
                v = []
                lost = order[i:]
                in_flight = dep.fault == "writer-killed-mid-write" and all(
                    kinds.get(q, "").endswith("overflow") for q in lost)
                if want is not None and not in_flight:
                    prop = "PROG" if not dep.fault else "FIFO"
                    v.append((prop, f"{label}'s dequeue timed out where message {want} was next"))
                elif want is not None:  # on the socket when the writer died: at most once, as any sender's
                    out.notes.append(("lost-in-flight", label, lost))
                step(e[3], label, "dequeue", {}, f"message {want}" if want is not None else "timeout",
                     f"TimeoutError after {e[3] - e[2]:.2f} s", v)
            else:
                step(e[3], label, "dequeue", {}, f"message {want}", e[4],
                     [("NRR", f"{label}'s dequeue raised {e[4]} where message {want} was next (a torn read)")])
        if final is not None:
            if final[0] == "extra":
                step(final[2], label, "dequeue", {}, "timeout (nothing more was written)", f"received {final[3]}",
                     [("NRR" if dep.fault == "writer-killed-mid-write" else "FIFO",
                       f"{label} received a message after the last one the writer completed: {final[3]}")])
            elif final[0] == "error":
                step(final[2], label, "dequeue", {}, "timeout (nothing more was written)", final[3],
                     [("NRR", f"{label}'s last dequeue raised {final[3]} (a torn read)")])
            else:
                step(final[2], label, "dequeue", {}, "timeout (nothing more was written)",
                     f"TimeoutError after {final[2] - final[1]:.2f} s")
        received = sum(1 for e in events if e[0] == "recv")
        if received < len(order) and not any(s.violations for t, s in raw if s.process == label) \
                and label != victim and not any(n[0] == "lost-in-flight" and n[1] == label for n in out.notes):
            step(time.monotonic(), label, "dequeue", {}, f"message {order[received]}", "the history ends",
                 [("FIFO", f"{label} received {received} of the {len(order)} messages written")])
        if changed:
            step(time.monotonic(), label, "recheck", {"seqs": changed},
                 "every kept out-of-band array unchanged",
                 f"changed: messages {changed}",
                 [("NRR", f"{label}'s out-of-band arrays of messages {changed} changed after later writes "
                          "reused their chunks (they alias the ring)")])
    raw.sort(key=lambda ts: ts[0])
    return [replace(s, index=i) for i, (_, s) in enumerate(raw)]


__all__ = ["Deployment", "FAULTS", "KINDS", "OutOfBand", "Outcome", "Tripwire", "digest", "judge", "message",
           "plan", "queue_api", "run"]
