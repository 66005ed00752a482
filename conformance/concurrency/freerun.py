"""Free-running concurrency: one writer and N readers at full speed, then a
linearizability check of what they recorded.

:func:`run_free` starts a writer process and ``n_readers`` reader processes
with ``multiprocess`` (fork), sharing one process-shared reader lock created
before the fork, on one real segment of the target.  Nothing is scheduled:

* the writer ``put``\\s unique objects (random sizes up to the max object
  size) for ``seconds``, now and then ``free_unused`` and rarely ``clear``; an
  ``OutOfSpace`` put is recorded and retried later.  It learns which handles
  each op freed by diffing its live-chunk set before and after the op, and
  sends every issued handle ``(ref, address, id, signature, key, tag)`` to
  every reader through that reader's queue;
* each reader reads every handle once, in issue order (the read-once
  protocol), and with probability ``FreeLoad.p_reread`` re-reads an older one
  (a stale read: StaleHandle is a legal answer).

Every op is recorded with ``time.monotonic_ns()`` at invoke and return, and
every object the store deserialized during a reader's get is recorded too (the
harness serde notes it), so a store that deserializes a recycled slot is seen
even when it then raises.  The histories come back to the controller and are
checked per handle by :func:`shmspec.conformance.concurrency.history.check_history`.

Every wait is bounded; whatever happens, every process is stopped (SIGKILL if
it must) and the segment is unlinked.  Infrastructure failures raise
:class:`FreeRunError` (a :class:`~.procs.ScheduleError`).
"""

from __future__ import annotations

import dataclasses
import os
import queue
import random
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import multiprocess

from shmspec.impl import yieldpoints
from shmspec.model.profile import impl_max_chunks

from ..core.constructions import Construction
from .record import HEADER_BYTES, free_trace, op_events
from ..targets.adapter import StoreAdapter, data_offset, live_chunks, offers_zero_copy, open_writer, segment_exists
from .history import HistoryResult, Op, check_history
from ..targets.loader import LoadedTarget
from .procs import SPAWN_STARTUP, ScheduleError, start_process, worker_setup
from ..core.serde import Blob, Garbage, HarnessSerde, object_nbytes
from ..lockstep.session import SessionConfig

FINISH_TIMEOUT = 5.0
"""Seconds a process may take, past its load, to report (and to start up)."""


KEPT_WAIT = 0.002
"""Seconds a reader that keeps zero-copy values waits for the next handle
before it lets the oldest of them go (``FreeLoad.p_zero_copy``): a writer
whose oldest chunk a kept value leases can reclaim nothing until it goes."""


class FreeRunError(ScheduleError):
    """A process did not start, finish or report in time, or died.

    ``segment``: the run's segment name ("" if none was created); the harness
    has unlinked it by the time the error propagates."""

    segment: str = ""


@dataclass(frozen=True)
class FreeLoad:
    """What the processes do.  Probabilities are per writer op / per reader get.

    ``reread_window``: a re-read picks uniformly among the reader's last
    ``reread_window`` handles (older than the one just read).
    ``reread_delay``: seconds the harness serde waits, during a re-read, before
    it reads the bytes the store hands it: a slow deserializer (real ones take
    milliseconds for large tensors).  It widens the window in which a store
    that deserializes shared memory sees the writer reuse it; a store that
    hands over a private copy is unaffected.
    ``out_of_space_pause``: seconds the writer sleeps after an ``OutOfSpace``
    put before it retries (lets lagging readers catch up).
    ``p_zero_copy``: on a store whose ``get`` takes ``copy=False`` (impl,
    issue 28 item 5), the chance that a first read is a zero-copy read; its
    value (a view of shared memory) is kept while the reader makes its next
    ``zero_copy_span`` first reads (or until no handle comes for
    :data:`KEPT_WAIT` seconds), and every kept value is checked against its
    object before each first read and when it is dropped (NRR for leased
    values: history action ``kept``).  Elsewhere it does nothing.
    """

    p_free: float = 0.05
    p_clear: float = 0.002
    p_reread: float = 0.1
    reread_window: int = 64
    reread_delay: float = 0.0001
    out_of_space_pause: float = 0.0002
    p_zero_copy: float = 0.2
    zero_copy_span: int = 8
    max_ops: int | None = None


def free_config(n_readers: int = 2, data_buffer_size: int = 64 * 1024,
                max_object_size: int = 4 * 1024, writer_lock: bool = False,
                start_method: str = "fork") -> SessionConfig:
    """Geometry for a free run (bytes): a larger ring than the lockstep
    default; ``writer_lock`` and ``start_method``: the construction (default
    vLLM's: the writer without the lock, readers forked)."""
    return SessionConfig(data_buffer_size=data_buffer_size, max_object_size=max_object_size,
                         n_readers=n_readers, readers=tuple(f"r{i + 1}" for i in range(n_readers)),
                         compare_state=False, writer_lock=writer_lock, start_method=start_method)


# ------------------------------------------------------------------- payloads
def make_payload(tag: int, size: int) -> bytes:
    """``size`` bytes (>= 8) unique to ``tag``: the tag (8 bytes LE) repeated."""
    unit = tag.to_bytes(8, "little")
    return (unit * (size // 8 + 1))[:size]


def value_of(obj: Any) -> Any:
    """What a history records for a returned or deserialized object: the tag
    of a well-formed payload (int), else a short description (str)."""
    if isinstance(obj, Blob):
        data = obj.data
        if len(data) >= 8:
            tag = int.from_bytes(data[:8], "little")
            if data == make_payload(tag, len(data)):
                return tag
        return repr(obj)
    if isinstance(obj, Garbage):
        return repr(obj)
    return f"{type(obj).__name__}: {obj!r}"[:80]


_DESERIALIZED: list[Any] = []
_SERDE_DELAY = [0.0]


class RecordingSerde(HarnessSerde):
    """The harness serde; notes every object it deserializes (per process),
    after waiting ``_SERDE_DELAY[0]`` seconds (see ``FreeLoad.reread_delay``)."""

    def deserialize(self, data: memoryview) -> Any:
        if _SERDE_DELAY[0]:
            time.sleep(_SERDE_DELAY[0])
        obj = super().deserialize(data)
        _DESERIALIZED.append(value_of(obj))
        return obj

    def deserialize_shared(self, data: memoryview) -> Any:
        """impl's ``get(copy=False)``: a ``Blob`` over the view itself (see
        :meth:`HarnessSerde.decode_shared`), noted as :meth:`deserialize` does."""
        obj = self.decode_shared(data)
        _DESERIALIZED.append(value_of(obj))
        return obj


# --------------------------------------------------------------------- results
@dataclass
class FreeRunResult:
    """What a free run did and whether its history is linearizable.

    Attributes:
        target: the target's spec.
        n_readers: reader processes.
        ops: operations recorded, all processes.
        seconds: from the first invoke to the last return, any process.
        ops_per_second: ``ops / seconds``.
        per_process: name -> ``{"ops": int, "seconds": float, "ops_per_second": float}``
            (each over its own first invoke to last return).
        puts: successful puts; ``out_of_space``: puts that raised OutOfSpace.
        check: the history check (verdict pass / fail / unknown, findings).
        leak: ``"pass"`` when closing the writer removed the segment, else
            ``"fail"`` (the segment was then unlinked by the harness).
        history: every op, writer's first.
    """

    target: str
    n_readers: int
    ops: int
    seconds: float
    ops_per_second: float
    per_process: dict[str, dict[str, float]]
    puts: int
    out_of_space: int
    check: HistoryResult
    leak: str
    history: list[Op] = field(repr=False, default_factory=list)
    trace: dict[str, Any] | None = field(repr=False, default=None)
    """With ``run_free(record=True)``: the run as a trace document
    (:func:`.record.free_trace`), for ``shmspec validate``."""

    @property
    def properties(self) -> dict[str, str]:
        return {**self.check.properties, "LEAK": self.leak}

    @property
    def verdict(self) -> str:
        if self.leak == "fail" or self.check.verdict == "fail":
            return "fail"
        return self.check.verdict


# ----------------------------------------------------------------- the writer
class _Marks:
    """With recording on, impl's yield-point hook notes ``(ns, name)`` of each
    point an operation reaches (:func:`.record.op_events`)."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.marks: list[tuple[int, str]] = []
        self.ops: list[tuple] = []
        """``op_events``' arguments per operation; the events are built after the load."""

    def __enter__(self) -> "_Marks":
        if self.on:
            yieldpoints.HOOK, yieldpoints.OBSERVER = self.mark, True
        return self

    def mark(self, name: str) -> None:
        m = self.marks
        if name == "pin_wait" and len(m) >= 2 and m[-1][1] == m[-2][1] == "pin_wait":
            m[-1] = (time.monotonic_ns(), name)  # rounds of one wait: the first and the latest (one wait_more)
        else:
            m.append((time.monotonic_ns(), name))

    def __exit__(self, *exc: Any) -> None:
        if self.on:
            yieldpoints.HOOK, yieldpoints.OBSERVER = None, False

    def op(self, *args: Any, **kw: Any) -> None:
        """Keep one operation (``op_events``' arguments, the marks so far)."""
        self.ops.append((args, tuple(self.marks), kw))

    @property
    def events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for (process, op, args, t0, t1, result), marks, kw in self.ops:
            out += op_events(process, op, args, t0, list(marks), t1, result, **kw)
        return out


def _ring(a: StoreAdapter, chunks: list[tuple[int, int]]) -> list[list[int]]:
    """The writer's live ``chunks`` (``live_chunks``) as a trace's ``ring``
    (:mod:`.record`): each one's address mod ``B``, its header's chunk size
    and its id."""
    rb = a.writer.ring_buffer
    buf, B, base = rb.shared_memory.buf, rb.data_buffer_size, data_offset(rb)
    return [[addr % B, int.from_bytes(buf[base + addr % B + 4 : base + addr % B + 8], "little", signed=True), id_]
            for id_, addr in chunks]


def _result(obs: Any, abs_: int | None = None) -> dict[str, Any]:
    if obs.error is not None:
        return {"error": obs.error}
    if abs_ is not None:
        return {"handle": list(obs.value), "abs": abs_}
    return {"value": "ok"}


def _writer_main(conn: Any, target: LoadedTarget, config: SessionConfig, n_readers: int, lock: Any,
                 queues: list[Any], seconds: float, seed: int, load: FreeLoad, patience: float,
                 record: bool, parent_pid: int) -> None:
    """The writer process.  ``patience``: seconds it waits for each controller
    message; ``record``: its steps are recorded (:func:`run_free`)."""
    worker_setup(parent_pid)
    a = StoreAdapter(target, config.data_buffer_size, config.max_object_size, n_readers, lock=lock)
    try:
        a.writer = open_writer(target, config.data_buffer_size, config.max_object_size, n_readers, lock,
                               writer_lock=config.writer_lock)
        a.segment = a.writer.ring_buffer.shared_memory.name
        h = a.writer.handle()
        fields = {f.name: getattr(h, f.name) for f in dataclasses.fields(h)
                  if f.name not in ("serde_class", "reader_lock")}
        conn.send(("ready", fields, a.segment))
        if not conn.poll(patience * (len(queues) + 1)) or conn.recv()[0] != "go":
            return
        with _Marks(record) as rec:
            ops = _write_load(a, queues, seconds, seed, load, rec)
        for q in queues:
            q.put(None)  # end of handles
        conn.send(("history", ops, rec.events))
        if conn.poll(patience * (len(queues) + 1)):
            conn.recv()  # "close": every reader is done (or the controller gave up)
    except Exception as exc:  # noqa: BLE001 - reported to the controller
        conn.send(("error", f"the writer: {type(exc).__name__}: {exc}"))
    finally:
        gone = a.close() if a.writer is not None else True
        try:
            conn.send(("closed", gone))
        except (BrokenPipeError, OSError):
            pass


def _write_load(a: StoreAdapter, queues: list[Any], seconds: float, seed: int, load: FreeLoad,
                rec: _Marks | None = None) -> list[tuple]:
    """The writer's loop.  Records ``(action, key, tag, ref, error, invoke_ns,
    return_ns, freed refs)`` per op; with ``rec`` on, each op's trace events too."""
    rec = rec or _Marks(False)
    rng = random.Random(seed)
    max_data = a.max_object_size - object_nbytes(b"")
    issued: dict[tuple[int, int], str] = {}
    ops: list[tuple] = []
    tag = 0
    pending: tuple[str, int, int] | None = None
    deadline = time.monotonic() + seconds
    chunks = live_chunks(a.writer)  # (id, address), oldest first: before the next op, after the last
    while time.monotonic() < deadline and (load.max_ops is None or len(ops) < load.max_ops):
        r = rng.random()
        action = "clear" if r < load.p_clear else "free_unused" if r < load.p_clear + load.p_free else "put"
        before = {(ad, i) for i, ad in chunks}
        key = ref = None
        if action == "put":
            if pending is None:
                tag += 1
                pending = (f"k{tag}", tag, rng.randint(8, max_data))
            key, t, size = pending
            payload = Blob(make_payload(t, size))
            rec.marks.clear()
            t0 = time.monotonic_ns()
            obs = a.put(key, payload)
            t1 = time.monotonic_ns()
        else:
            t, fn = None, a.clear if action == "clear" else a.free_unused
            rec.marks.clear()
            t0 = time.monotonic_ns()
            obs = fn()
            t1 = time.monotonic_ns()
        chunks = live_chunks(a.writer)
        if rec.on:
            ring = _ring(a, chunks)
            args = {}
            if action == "put":
                nbytes = HEADER_BYTES + object_nbytes(payload.data)
                if obs.ok:  # the store's own chunk size, should it differ from the harness's
                    nbytes = next((sz for _, sz, i in ring if i == obs.value[1]), nbytes)
                args = {"key": key, "size": nbytes}
            rec.op("writer", action, args, t0, t1, _result(obs, t - 1 if action == "put" else None), ring=ring)
        after = {(ad, i) for i, ad in chunks}
        freed = tuple(issued.pop(c) for c in before - after if c in issued)
        if action == "put" and obs.ok:
            pending = None
            ref = f"h{t}"
            issued[tuple(obs.value)] = ref
            sig = None
            if a.signed:
                s = a.get_signature(key)
                sig = list(s.value) if s.ok else None
            msg = (ref, obs.value[0], obs.value[1], sig, key, t)
            for q in queues:
                q.put(msg)
        ops.append((action, key, t, ref, obs.error, t0, t1, freed))
        if obs.error == "OutOfSpace":
            time.sleep(load.out_of_space_pause)
    return ops


# ----------------------------------------------------------------- a reader
def _reader_main(conn: Any, name: str, target: LoadedTarget, lock: Any, handles: Any,
                 seconds: float, seed: int, load: FreeLoad, patience: float, record: bool,
                 parent_pid: int) -> None:
    """A reader process.  ``patience``: seconds it waits for the controller
    and, past ``seconds``, for the next handle."""
    worker_setup(parent_pid)
    a: StoreAdapter | None = None
    try:
        if not conn.poll(patience * 2):
            return
        _, fields, B, M, n = conn.recv()
        a = StoreAdapter(target, B, M, n, lock=lock)
        handle_cls = getattr(target.module, "ShmObjectStorageHandle")
        handle = handle_cls(**fields, serde_class=RecordingSerde, reader_lock=lock)
        a.readers[name] = target.storage_cls.create_from_handle(handle)
        conn.send(("attached",))
        with _Marks(record) as rec:
            ops = _read_load(a, name, handles, seconds + patience, seed, load, rec)
        conn.send(("history", ops, rec.events))
    except Exception as exc:  # noqa: BLE001 - reported to the controller
        conn.send(("error", f"reader {name}: {type(exc).__name__}: {exc}"))
    finally:
        if a is not None:
            for view in a.readers.values():
                closer = getattr(view, "close", None)
                try:
                    closer() if closer is not None else view.ring_buffer.shared_memory.close()
                except Exception:  # noqa: BLE001 - best effort on teardown
                    pass


def _read_load(a: StoreAdapter, name: str, handles: Any, wait: float, seed: int,
               load: FreeLoad, rec: _Marks | None = None) -> list[tuple]:
    """The reader's loop until the writer's end marker (``wait``: seconds to
    wait for a handle).  Records ``(ref, mode, value, error, invoke_ns,
    return_ns, deserialized values)`` per get; with ``rec`` on, each get's
    trace events too (and no zero-copy reads: ShmStore.tla has no lease)."""
    rec = rec or _Marks(False)
    rng = random.Random(seed)
    recent: deque = deque(maxlen=load.reread_window + 1)
    ops: list[tuple] = []
    zero_copy = load.p_zero_copy > 0 and offers_zero_copy(a.target) and not rec.on
    kept: deque = deque()
    """``(ref, tag, value, first reads made when it was taken)`` of the
    zero-copy values this reader keeps, oldest first."""
    firsts = 0

    def get(h: tuple, mode: str, copy: bool = True) -> Any:
        ref, address, id_, sig, key, _ = h
        _DESERIALIZED.clear()
        _SERDE_DELAY[0] = load.reread_delay if mode == "reread" else 0.0
        rec.marks.clear()
        t0 = time.monotonic_ns()
        obs = a.reader_get(name, address, id_, sig, key, copy=copy)
        t1 = time.monotonic_ns()
        if rec.on:
            got = None if not _DESERIALIZED else "own" if _DESERIALIZED[-1] == h[5] else "other"
            rec.op(name, "get", {"ref": ref, "abs": h[5] - 1}, t0, t1, _result(obs), got=got)
        ops.append((ref, mode, value_of(obs.value) if obs.ok else None, obs.error, t0, t1,
                    tuple(_DESERIALIZED)))
        return obs

    def check_kept(drop: bool) -> None:
        """Record what each kept value reads now (``drop``: the oldest one
        only, then let it go); a kept value that changed is recorded and let go."""
        for entry in list(kept)[:1] if drop else list(kept):
            ref, tag, value, at = entry
            now = value_of(value)
            if drop or now != tag or firsts - at >= load.zero_copy_span:
                t = time.monotonic_ns()
                ops.append((ref, "kept", now, None, t, t, ()))
                kept.remove(entry)
                del entry, value  # the lease ends with the value's last reference (no cycle holds it)

    try:
        while True:
            try:
                h = handles.get(timeout=KEPT_WAIT if kept else wait)
            except queue.Empty:
                if kept:  # no handle yet: let the oldest kept value go (the writer may be waiting for its lease)
                    check_kept(drop=True)
                    continue
                raise FreeRunError(f"reader {name} received no handle within {wait:g} s") from None
            if h is None:
                return ops
            keep = zero_copy and rng.random() < load.p_zero_copy
            if kept:
                check_kept(drop=False)
            obs = get(h, "once", copy=not keep)
            firsts += 1
            if keep and obs.ok:
                kept.append((h[0], h[5], obs.value, firsts))
            del obs
            recent.append(h)
            if len(recent) > 1 and rng.random() < load.p_reread:
                get(recent[rng.randrange(len(recent) - 1)], "reread")
    finally:
        while kept:
            check_kept(drop=True)


# ------------------------------------------------------------- the controller
def _recv(proc: Any, conn: Any, label: str, what: str, timeout: float) -> tuple:
    if not conn.poll(timeout):
        state = "is still running" if proc.is_alive() else f"exited with code {proc.exitcode}"
        raise FreeRunError(f"{label} did not {what} within {timeout:g} s ({state})")
    try:
        msg = conn.recv()
    except (EOFError, OSError):
        proc.join(1)
        raise FreeRunError(f"{label} died (exit code {proc.exitcode}) before it could {what}") from None
    if msg[0] == "error":
        raise FreeRunError(msg[1])
    return msg


def _history(writer_ops: list[tuple], reader_ops: dict[str, list[tuple]]) -> list[Op]:
    out = []
    for action, key, tag, ref, error, t0, t1, freed in writer_ops:
        args = {"key": key, "value": tag} if action == "put" else {}
        out.append(Op("writer", action, args, ref, error, t0, t1, frozenset(freed)))
    for name, ops in reader_ops.items():
        for ref, mode, value, error, t0, t1, deser in ops:
            action = "kept" if mode == "kept" else "get"  # what a kept zero-copy value read then
            out.append(Op(name, action, {"ref": ref, "mode": mode}, value, error, t0, t1, frozenset(), deser))
    return out


def _rates(history: list[Op]) -> tuple[float, dict[str, dict[str, float]]]:
    spans: dict[str, list[int]] = {}
    for o in history:
        s = spans.setdefault(o.process, [o.invoke_ns, o.return_ns, 0])
        s[0], s[1], s[2] = min(s[0], o.invoke_ns), max(s[1], o.return_ns), s[2] + 1
    per = {}
    for name, (lo, hi, n) in spans.items():
        sec = max(hi - lo, 1) / 1e9
        per[name] = {"ops": n, "seconds": round(sec, 3), "ops_per_second": round(n / sec, 1)}
    if not spans:
        return 0.0, per
    total = (max(s[1] for s in spans.values()) - min(s[0] for s in spans.values())) / 1e9
    return total, per


def run_free(target: LoadedTarget, config: SessionConfig, seconds: float, n_readers: int, seed: int,
             *, load: FreeLoad = FreeLoad(), finish_timeout: float = FINISH_TIMEOUT,
             max_nodes: int = 20_000, check_seconds: float | None = 60.0, record: bool = False) -> FreeRunResult:
    """Run the target free for ``seconds`` with one writer and ``n_readers`` readers.

    Geometry (bytes) comes from ``config`` (``data_buffer_size``,
    ``max_object_size``; see :func:`free_config`); its ``n_readers`` and
    ``readers`` are ignored (``n_readers`` wins; readers are ``r1``...).
    ``seed`` seeds every process's choices (not the OS's interleaving).
    ``max_nodes`` / ``check_seconds``: the history check's budget.
    ``record``: every process records its steps (impl's yield points, each
    with its time), and the result's ``trace`` is the run as a trace
    document (:func:`.record.free_trace`); readers then make no zero-copy
    reads (ShmStore.tla has no lease).  Off by default.

    Raises:
        ValueError: ``n_readers < 1`` or objects too small for a payload tag.
        FreeRunError: a process did not start or finish within
            ``finish_timeout`` seconds past its load, or died, or failed.
    """
    if n_readers < 1:
        raise ValueError("n_readers must be at least 1")
    if config.max_object_size - object_nbytes(b"") < 8:
        raise ValueError(f"max_object_size {config.max_object_size} leaves no room for an 8-byte payload tag")
    readers = tuple(f"r{i + 1}" for i in range(n_readers))
    ctx = multiprocess.get_context("fork")
    rctx = multiprocess.get_context(config.start_method)  # the readers' (see procs.START_METHODS)
    lock = rctx.Lock()
    queues = {r: rctx.Queue() for r in readers}
    startup = SPAWN_STARTUP if config.start_method == "spawn" else 0.0
    conns: dict[str, Any] = {}
    procs: dict[str, Any] = {}
    segment = ""
    leak = "fail"

    def spawn(name: str, fn: Any, *args: Any) -> None:
        c = ctx if name == "writer" else rctx
        parent, child = c.Pipe()
        p = c.Process(target=fn, args=(child, *args, os.getpid()), name=f"shmspec-free-{name}", daemon=True)
        start_process(p)
        child.close()
        conns[name], procs[name] = parent, p

    try:
        spawn("writer", _writer_main, target, config, n_readers, lock, list(queues.values()),
              seconds, seed, load, finish_timeout + startup, record)
        for i, r in enumerate(readers):
            spawn(r, _reader_main, r, target, lock, queues[r], seconds, seed * 1000 + i + 1, load,
                  finish_timeout + startup, record)
        _, fields, segment = _recv(procs["writer"], conns["writer"], "the writer", "create the store",
                                   finish_timeout)
        for r in readers:
            conns[r].send(("attach", fields, config.data_buffer_size, config.max_object_size, n_readers))
        for r in readers:
            _recv(procs[r], conns[r], f"reader {r}", "attach", finish_timeout + startup)
        conns["writer"].send(("go",))
        _, writer_ops, events = _recv(procs["writer"], conns["writer"], "the writer", "finish",
                                      seconds + finish_timeout)
        reader_ops = {}
        for r in readers:
            _, reader_ops[r], more = _recv(procs[r], conns[r], f"reader {r}", "finish", finish_timeout)
            events += more
        conns["writer"].send(("close",))
        _, gone = _recv(procs["writer"], conns["writer"], "the writer", "close the store", finish_timeout)
        leak = "pass" if gone and not segment_exists(segment) else "fail"
    except FreeRunError as exc:
        exc.segment = segment
        raise
    finally:
        _stop(procs, conns, queues, segment)
    history = _history(writer_ops, reader_ops)
    check = check_history(history, target.profile, max_nodes=max_nodes, max_seconds=check_seconds)
    total, per = _rates(history)
    puts = sum(1 for o in history if o.action == "put" and o.ok)
    oos = sum(1 for o in history if o.action == "put" and o.error == "OutOfSpace")
    trace = None
    if record:
        construction = Construction(config.writer_lock, config.start_method, n_readers).name
        trace = free_trace(target.spec, construction, readers, config.data_buffer_size,
                           not target.profile.lenient_stale, impl_max_chunks(config.data_buffer_size),
                           2 * config.max_object_size, events)
    return FreeRunResult(target.spec, n_readers, len(history), round(total, 3),
                         round(len(history) / total, 1) if total else 0.0, per, puts, oos, check, leak,
                         history, trace)


def _stop(procs: dict[str, Any], conns: dict[str, Any], queues: dict[str, Any], segment: str) -> None:
    """Ask the writer to close its store (harmless if it already did), join
    every process (SIGKILL past a short grace), close pipes and queues, and
    unlink the segment if it is still there."""
    if "writer" in procs and procs["writer"].is_alive():
        try:
            conns["writer"].send(("close",))
        except (BrokenPipeError, OSError):
            pass
    deadline = time.monotonic() + 2.0
    for p in procs.values():
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs.values():
        if p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
            p.join(FINISH_TIMEOUT)
    for c in conns.values():
        c.close()
    for q in queues.values():
        q.close()
        q.cancel_join_thread()
    if segment and segment_exists(segment):
        try:
            os.unlink(os.path.join("/dev/shm", segment.lstrip("/")))
        except FileNotFoundError:
            pass


def free_rates(target: LoadedTarget, readers_list: tuple[int, ...] = (2, 4), seconds: float = 2.0,
               seed: int = 0, config: SessionConfig | None = None) -> dict[int, float]:
    """Total ops/s of a free run for each reader count in ``readers_list``.

    Raises :class:`FreeRunError` as :func:`run_free`.
    """
    out = {}
    for n in readers_list:
        cfg = config or free_config(n)
        out[n] = run_free(target, cfg, seconds, n, seed).ops_per_second
    return out


__all__ = ["FreeLoad", "FreeRunError", "FreeRunResult", "RecordingSerde", "free_config", "free_rates",
           "make_payload", "run_free", "value_of"]
