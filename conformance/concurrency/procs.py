"""One writer and N reader processes over one real segment, stopped at yield points.

:class:`ProcessPool` starts a writer process and reader processes with
``multiprocess`` (fork), all sharing one process-shared reader lock created
before the fork.  The controller (the harness's process) drives them over
pipes.  Inside a worker every yield point of the target sends
``("yield", point)`` to the controller and blocks until the controller answers
``go``, so the controller decides which process takes its next atomic step.

Yield points come from four places, so no target's code is edited:

* impl/ calls :data:`shmspec.impl.yieldpoints.HOOK` at its own points;
* a reader view's ``ring_buffer.access_buf`` (vLLM's readers read the chunk
  header through it) is wrapped to pause at ``reader_check``;
* :class:`TracedLock` wraps the reader lock: ``lock_acquire`` before it is
  taken, ``lock_release`` before it is given back;
* :class:`ScheduledSerde` (the harness serde) pauses at ``deserialize`` and
  records every object it deserializes, so a deserialized recycled slot is
  seen even when the store raises afterwards (property NRR).

Every wait is bounded (:data:`STEP_TIMEOUT` seconds; a step forced into a
lock held by another process waits ``STEP_TIMEOUT`` plus
:data:`FORCED_WAIT`) and fails with a :class:`ScheduleError` naming the process
and its last yield point.  :meth:`ProcessPool.shutdown` stops every process
and unlinks any segment a killed writer left behind.

Segments and the resource tracker: the controller starts the standard
library's ``multiprocessing`` resource tracker before it forks any worker, so
every writer process registers its segment with that one tracker (and not
with a private tracker of its own, which would unlink the segment as soon as
the writer died).  The behaviour on a writer kill is thus the same whatever
the controller did before: the dead writer's segment stays until
:meth:`ProcessPool.shutdown` unlinks it (and unregisters it, so the tracker
does not warn about it when the controller exits).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import os
import pickle
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from typing import Any

import multiprocess

from shmspec.impl import yieldpoints

from ..core.constructions import START_METHODS as _START_METHODS
from ..core.errors import ShmspecError
from ..core.serde import Blob, Garbage, HarnessSerde
from ..targets.adapter import (SnapChunk, Snapshot, StoreAdapter, observe, open_writer, segment_exists,
                              segment_names, warp, warp_counts)
from ..targets.loader import LoadedTarget

STEP_TIMEOUT = 5.0
"""Seconds the controller waits for a process to reach its next yield point."""

START_METHODS = _START_METHODS
"""How reader processes start (``core.constructions.START_METHODS``): forked from the controller (the writer's
copy), or spawned (a fresh interpreter that loads the target by its spec and
attaches by segment name).  The writer is always forked: it stands for the
process that built the store and its lock, as vLLM's API process does."""

SPAWN_STARTUP = 30.0
"""Seconds a spawned worker may take to start (a fresh interpreter imports
the harness and loads the target) before its first answer is due."""

FORCED_WAIT = 10.0
"""Extra seconds the controller waits for a step forced into a held lock."""

LOCK_POINTS = ("lock_acquire", "lock_release")
"""Yield points of :class:`TracedLock` (every target)."""


class ScheduleError(ShmspecError, RuntimeError):
    """A process did not reach a yield point in time, died, or broke the
    controller's protocol.  A harness-level failure, never a property verdict."""


# ----------------------------------------------------------------- worker side
_WORKER: "_Worker | None" = None


def _pause(point: str) -> None:
    if _WORKER is not None:
        _WORKER.pause(point)


class TracedLock:
    """A lock wrapper that pauses at ``lock_acquire`` and ``lock_release``.

    Accepts both ``acquire(block, timeout)`` (multiprocessing) and the
    context-manager protocol, as vLLM and impl/ use it.
    """

    def __init__(self, lock: Any):
        self._lock = lock

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        _pause("lock_acquire")
        if timeout is None or timeout < 0:
            return self._lock.acquire(block)
        return self._lock.acquire(block, timeout)

    def release(self) -> None:
        _pause("lock_release")
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class ScheduledSerde(HarnessSerde):
    """The harness serde with a ``deserialize`` yield point and a record of
    every object deserialized during the current operation."""

    def deserialize(self, data: memoryview) -> Any:
        """The harness serde's copy, or during the worker's ``alias_get`` a
        ``Blob`` over ``data`` itself (a serde that keeps the view it was
        handed: the ``reader_serde_keeps_view`` fault scenario, ALIAS)."""
        _pause("deserialize")
        obj = (self.decode_shared(data) if _WORKER is not None and _WORKER.aliasing
               else super().deserialize(data))
        if _WORKER is not None:
            _WORKER.deserialized.append(encode_value(obj))
        return obj

    def deserialize_shared(self, data: memoryview) -> Any:
        """impl's ``get(copy=False)``: a ``Blob`` whose ``data`` is the view of
        shared memory itself (no copy), so a kept value shows what the ring
        holds there now (the ``reader_keeps_zero_copy`` fault scenario)."""
        _pause("deserialize")
        obj = self.decode_shared(data)
        if _WORKER is not None:
            _WORKER.deserialized.append(encode_value(obj))
        return obj


def encode_value(v: Any) -> Any:
    """JSON-able form of an operation's result: Blob -> {"blob": hex}, ..."""
    if isinstance(v, Blob):
        return {"blob": bytes(v.data).hex()}
    if isinstance(v, Garbage):
        return {"garbage": v.raw.hex()}
    if isinstance(v, (tuple, list)):
        return [encode_value(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return repr(v)


class _Worker:
    """The loop a writer or reader process runs."""

    def __init__(self, name: str, conn: Any, target: LoadedTarget, lock: Any):
        self.name = name
        self.conn = conn
        self.target = target
        self.lock = TracedLock(lock)
        self.adapter: StoreAdapter | None = None
        self.active = False
        self.last_point: str | None = None
        self.deserialized: list[Any] = []
        self.kept: dict[str, Any] = {}
        """Values of ``get(copy=False)`` (``keep_get``) or of a plain get whose
        serde kept its view (``alias_get``) this reader keeps, by key."""
        self.aliasing = False
        """During ``alias_get``: the serde's ``deserialize`` returns a value over the view it is handed."""
        self.collect = False
        """A value over shared memory was made since the last ``gc.collect()``
        (``keep_get``, ``alias_get``): the next close collects first, so a
        value caught in a reference cycle ends its lease before the store
        closes.  Without one no collection runs (a full one costs 5-10 ms a
        process, and a store is closed and opened once per example)."""

    def pause(self, point: str) -> None:
        if not self.active:
            return
        if point == "deserialize" and self.last_point == "deserialize":
            return  # impl's own point and the serde's are one step
        self.last_point = point
        self.send(("yield", point, list(self.deserialized), self._snapshot()))
        while True:
            msg = self.recv()
            if msg[0] == "go":
                return
            self._service(msg)

    def send(self, msg: tuple) -> None:
        # stdlib pickle of plain data: several times faster than the dill default
        self.conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    def recv(self) -> tuple:
        return pickle.loads(self.conn.recv_bytes())

    def _service(self, msg: tuple) -> None:
        """Requests answered while paused or idle (never run an operation)."""
        if msg[0] == "snapshot":
            self.send(("snapshot", self._snapshot()))
        elif msg[0] == "side_close":
            self.send(("side_closed", self._side_close(float(msg[1]))))
        else:
            self.send(("error", f"{self.name}: unexpected {msg[0]!r} while paused"))

    def _side_close(self, bound: float) -> dict:
        """Close this reader's view from another thread of this process while
        its operation is paused (the ``reader_closed_mid_get`` fault scenario:
        issue 28 item 4).  Waits ``bound`` seconds for ``close()`` to return;
        returns ``{"returned", "seconds", "error"}``."""
        view = self.adapter.readers.get(self.name) if self.adapter is not None else None
        if view is None:
            return {"returned": False, "seconds": 0.0, "error": "no reader view to close"}
        closer = getattr(view, "close", None) or view.ring_buffer.shared_memory.close
        box: dict = {"error": None}

        def close() -> None:
            try:
                closer()
            except Exception as exc:  # noqa: BLE001 - reported to the controller
                box["error"] = f"{type(exc).__name__}: {exc}"

        t = threading.Thread(target=close, name=f"shmspec-{self.name}-close", daemon=True)
        t0 = time.perf_counter()
        t.start()
        t.join(bound)
        return {"returned": not t.is_alive(), "seconds": time.perf_counter() - t0, "error": box["error"]}

    def _snapshot(self) -> dict | None:
        if self.adapter is None or self.adapter.writer is None:
            return None
        try:
            return dataclasses.asdict(self.adapter.snapshot())
        except Exception as exc:  # noqa: BLE001 - a torn mid-operation read
            return {"error": f"{type(exc).__name__}: {exc}"}

    def run(self) -> None:
        while True:
            try:
                msg = self.recv()
            except EOFError:
                break
            cmd = msg[0]
            try:
                if cmd == "exit":
                    self._close()
                    self.send(("bye",))
                    break
                if cmd == "open":
                    self.send(("opened", *self._open(*msg[1:])))
                elif cmd == "attach":
                    self._attach(*msg[1:])
                    self.send(("attached",))
                elif cmd == "op":
                    self.send(("done", *self._op(msg[1], msg[2]), self._snapshot()))
                elif cmd == "close":
                    self.send(("closed", self._close()))
                else:
                    self._service(msg)
            except Exception as exc:  # noqa: BLE001 - reported to the controller
                self.send(("error", f"{self.name}: {cmd}: {type(exc).__name__}: {exc}"))

    def _open(self, data_buffer_size: int, max_object_size: int, n_readers: int,
              writer_lock: bool | None = None):
        self._close()
        a = StoreAdapter(self.target, data_buffer_size, max_object_size, n_readers,
                         lock=self.lock, serde_class=ScheduledSerde)
        a.writer = open_writer(self.target, data_buffer_size, max_object_size, n_readers,
                               self.lock, ScheduledSerde, writer_lock)
        a.segment = a.writer.ring_buffer.shared_memory.name
        self.adapter = a
        h = a.writer.handle()
        fields = {f.name: getattr(h, f.name) for f in dataclasses.fields(h)
                  if f.name not in ("serde_class", "reader_lock")}
        return fields, segment_names(a.writer)

    def _attach(self, fields: dict, data_buffer_size: int, max_object_size: int, n_readers: int) -> None:
        self._close()
        a = StoreAdapter(self.target, data_buffer_size, max_object_size, n_readers, lock=self.lock)
        handle_cls = getattr(self.target.module, "ShmObjectStorageHandle")
        handle = handle_cls(**fields, serde_class=ScheduledSerde, reader_lock=self.lock)
        view = self.target.storage_cls.create_from_handle(handle)
        _trace_ring_access(view.ring_buffer)
        a.readers[self.name] = view
        self.adapter = a

    def _op(self, action: str, args: dict) -> tuple[Any, Any, list]:
        """Run one operation with yield points live.  Returns
        ``(value, error kind or None, detail, deserialized)``."""
        a = self.adapter
        self.deserialized = []
        self.last_point = None
        self.active = True
        try:
            if action == "put":
                obs = a.put(args["key"], Blob(bytes.fromhex(args["data"])))
                sig = None
                if obs.ok and a.signed:
                    self.active = False
                    s = a.get_signature(args["key"])
                    sig = list(s.value) if s.ok else None
                result = {"handle": list(obs.value) if obs.ok else None, "signature": sig}
                obs_value = result
            elif action == "get":
                obs = a.reader_get(self.name, args["address"], args["id"], args.get("signature"), args.get("key"))
                obs_value = encode_value(obs.value)
            elif action == "keep_get":  # impl's get(copy=False); the value is kept until drop_kept
                self.collect = True
                view = a.readers[self.name]
                obs = observe(lambda: view.get(args["address"], args["id"], args.get("signature"), args.get("key"),
                                               copy=False))
                if obs.ok:
                    self.kept[args["key"]] = obs.value
                obs_value = encode_value(obs.value)
            elif action == "alias_get":  # a plain get whose serde keeps the view it is handed (ALIAS)
                self.aliasing = self.collect = True
                try:
                    obs = a.reader_get(self.name, args["address"], args["id"], args.get("signature"),
                                       args.get("key"))
                finally:
                    self.aliasing = False
                if obs.ok:
                    self.kept[args["key"]] = obs.value
                obs_value = encode_value(obs.value)
            elif action == "check_kept":  # what every kept value reads now
                obs = observe(lambda: None)
                obs_value = {k: encode_value(v) for k, v in self.kept.items()}
            elif action == "scribble":  # a misbehaving reader: garbage into its own pin and ack words (impl)
                view = a.readers[self.name]
                obs = observe(lambda: _scribble(view))
                obs_value = None
            elif action == "drop_kept":
                self.kept.clear()
                gc.collect()
                obs = observe(lambda: None)
                obs_value = None
            elif action == "clear":
                obs = a.clear()
                obs_value = None
            elif action == "free_unused":
                obs = a.free_unused()
                obs_value = None
            elif action == "get_cached":
                obs = a.get_cached(args["key"])
                obs_value = encode_value(obs.value)
            elif action == "warp":  # boundary programs: the warp hooks (adapter.warp)
                obs = observe(lambda: warp(a.writer, args["start"], args["id"]))
                obs_value = None
            elif action == "warp_counts":
                obs = observe(lambda: warp_counts(a.writer, args["id"], args["address"], args["writer_count"],
                                                  args["reader_count"]))
                obs_value = None
            else:
                raise ValueError(f"unknown action {action!r}")
        finally:
            self.active = False
        return {"value": obs_value, "error": obs.error, "detail": obs.detail}, self.deserialized

    def _close(self) -> bool:
        self.kept.clear()
        if self.collect:
            gc.collect()
            self.collect = False
        a, self.adapter = self.adapter, None
        if a is None:
            return True
        return a.close()


def _trace_ring_access(ring: Any) -> None:
    """Pause at ``reader_check`` before a reader view's ring reads a chunk
    header (``access_buf``: vLLM's readers check the id it returns), on this
    view only.  impl/ never reads through ``access_buf`` and has its own points."""
    original = getattr(ring, "access_buf", None)
    if original is None or getattr(type(ring), "__module__", "").startswith("shmspec.impl"):
        return

    @contextlib.contextmanager
    def access_buf(address, *args, **kwargs):
        _pause("reader_check")
        with original(address, *args, **kwargs) as out:
            yield out

    ring.access_buf = access_buf


def start_process(p: Any) -> None:
    """``p.start()``; a spawned process does not re-run the controller's main
    script (its ``__main__`` is hidden while the child's preparation data is
    taken): workers need only the harness's own modules, and a controller
    script without an ``if __name__ == "__main__"`` guard would otherwise
    start its gate again in every spawned child."""
    main = sys.modules.get("__main__")
    if main is None or getattr(p, "_start_method", None) != "spawn":
        p.start()
        return
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        p.start()
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def worker_setup(parent_pid: int) -> None:
    """First thing in every worker process: Ctrl-C is the controller's to
    handle, and the worker dies with the controller (Linux ``PR_SET_PDEATHSIG``),
    so a controller killed outright leaves no orphan; the shared resource
    tracker then unlinks the segment the dead writer registered."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: orphans are stopped by shutdown() only
        pass
    if os.getppid() != parent_pid:  # the controller died before prctl took effect
        os._exit(1)


def _worker_main(name: str, conn: Any, target: LoadedTarget, lock: Any, parent_pid: int) -> None:
    global _WORKER
    worker_setup(parent_pid)
    gc.freeze()  # the controller's heap, inherited by fork: a collection here need not walk it
    _WORKER = _Worker(name, conn, target, lock)
    yieldpoints.HOOK = _pause
    _WORKER.run()


# ------------------------------------------------------------- controller side
@dataclass
class ProcState:
    """The controller's view of one process."""

    name: str
    process: Any
    conn: Any
    action: str | None = None
    """The operation in progress, or None when idle."""
    args: dict = field(default_factory=dict)
    point: str | None = None
    """The yield point it is paused at (None: idle or finished)."""
    dead: bool = False
    blocked_at: int = -1
    """At ``pin_wait``: the pool's step count when it paused there."""
    starting: bool = False
    """A spawned worker that has not answered yet: its first answer may take
    :data:`SPAWN_STARTUP` seconds more."""

    @property
    def idle(self) -> bool:
        return self.action is None and not self.dead


@dataclass
class StepOutcome:
    """What one scheduled step did: the process ran to ``point`` (paused) or
    finished with ``result`` (``{"value", "error", "detail"}``) and the list of
    objects it deserialized during the whole operation."""

    process: str
    action: str
    args: dict
    point: str | None
    result: dict | None = None
    deserialized: list = field(default_factory=list)
    seconds: float = 0.0
    snapshot: Snapshot | None = None
    """The writer's ring right after the step (writer steps only)."""


class ProcessPool:
    """A writer process and reader processes for one target.

    ``readers``: reader names (``("r1", "r2")``).  Use as a context manager or
    call :meth:`shutdown`.  Raises :class:`ScheduleError` on any bounded wait
    that runs out, naming the process and its last yield point.
    """

    def __init__(self, target: LoadedTarget, readers: tuple[str, ...] = ("r1", "r2"),
                 step_timeout: float = STEP_TIMEOUT, start_method: str = "fork"):
        if start_method not in START_METHODS:
            raise ValueError(f"unknown start method {start_method!r} (choose from {', '.join(START_METHODS)})")
        self.target = target
        self.reader_names = tuple(readers)
        self.step_timeout = step_timeout
        self.start_method = start_method
        self.ctx = multiprocess.get_context("fork")
        self.reader_ctx = multiprocess.get_context(start_method)
        self.lock = self.reader_ctx.Lock()
        self.procs: dict[str, ProcState] = {}
        self.lock_holder: str | None = None
        self.steps_taken = 0
        """Scheduled steps answered so far (see :meth:`runnable`)."""
        self.started: collections.Counter[str] = collections.Counter()
        """Operations started on this pool, by action (``put``, ``get``, ``keep_get``...)."""
        self.segments: set[str] = set()
        self.geometry: tuple[int, int, int] | None = None
        self.handle_fields: dict | None = None
        for name in ("writer",) + self.reader_names:
            self._spawn(name)

    def _spawn(self, name: str) -> None:
        # Workers must share the controller's resource tracker (see the module
        # docstring); a worker forked before it runs would start its own.
        resource_tracker.ensure_running()
        ctx = self.ctx if name == "writer" else self.reader_ctx
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker_main, args=(name, child, self.target, self.lock, os.getpid()),
                        name=f"shmspec-{name}", daemon=True)
        start_process(p)
        child.close()
        self.procs[name] = ProcState(name, p, parent, starting=ctx is not self.ctx)

    def __enter__(self) -> "ProcessPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- messaging ------------------------------------------------------------
    def _recv(self, name: str, what: str, timeout: float | None = None) -> tuple:
        ps = self.procs[name]
        timeout = self.step_timeout if timeout is None else timeout
        if ps.starting:
            timeout += SPAWN_STARTUP
        try:
            ready = ps.conn.poll(timeout)
        except (EOFError, OSError):
            ready = True
        if not ready:
            where = f" (last at yield point {ps.point})" if ps.point else ""
            raise ScheduleError(f"{_label(name)} did not reach {what} within {timeout:g} s{where}")
        ps.starting = False
        try:
            msg = pickle.loads(ps.conn.recv_bytes())
        except (EOFError, OSError):
            ps.process.join(1)
            ps.dead = True
            raise ScheduleError(f"{_label(name)} died (exit code {ps.process.exitcode}) before {what}") from None
        if msg[0] == "error":
            raise ScheduleError(msg[1])
        return msg

    def _send(self, name: str, msg: tuple) -> None:
        try:
            self.procs[name].conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, OSError):
            self.procs[name].dead = True
            raise ScheduleError(f"{_label(name)} is gone (exit code {self.procs[name].process.exitcode})") from None

    # -- store lifecycle --------------------------------------------------------
    def open_store(self, data_buffer_size: int, max_object_size: int, n_readers: int,
                   writer_lock: bool | None = None) -> None:
        """A fresh store in the writer process; every reader attaches to it.
        ``writer_lock``: the construction (see :func:`~.adapter.open_writer`)."""
        if any(not ps.idle for ps in self.procs.values()):
            raise ScheduleError("open_store while operations are in flight")
        self.geometry = (data_buffer_size, max_object_size, n_readers)
        self._send("writer", ("open", data_buffer_size, max_object_size, n_readers, writer_lock))
        _, fields, segments = self._recv("writer", "the store's creation")
        self.segments.update(segments)
        self.handle_fields = fields
        for r in self.reader_names:
            self._send(r, ("attach", fields, data_buffer_size, max_object_size, n_readers))
            self._recv(r, "attachment")
        # lock_holder is left alone: the reader lock belongs to the pool, not
        # to the store, and a process killed while holding it keeps it held.

    def close_store(self) -> bool:
        """Close every view and the writer; True when no segment is left (LEAK)."""
        for r in self.reader_names:
            self._send(r, ("close",))
            self._recv(r, "closing its view")
        self._send("writer", ("close",))
        _, ok = self._recv("writer", "closing the store")
        if ok:
            self.segments.clear()
        return ok

    # -- scheduling ---------------------------------------------------------------
    def start(self, name: str, action: str, args: dict) -> StepOutcome:
        """Start ``action`` on idle process ``name``; it runs to its first yield
        point or to completion."""
        ps = self.procs[name]
        if not ps.idle:
            raise ScheduleError(f"{_label(name)} is busy with {ps.action}")
        ps.action, ps.args, ps.point = action, dict(args), None
        self.started[action] += 1
        self._send(name, ("op", action, args))
        return self._step_result(name)

    def advance(self, name: str, force: bool = False, timeout: float | None = None) -> StepOutcome:
        """Let paused process ``name`` run to its next yield point or to completion.

        A process paused at ``lock_acquire`` while another process holds the
        reader lock would block: that raises :class:`ScheduleError` unless
        ``force``.  With ``force`` it runs into the held lock (e.g. one held by
        a killed process), and the controller waits ``step_timeout`` plus
        :data:`FORCED_WAIT` for its next step; the lock is still recorded as
        the other holder's.  ``timeout`` (seconds) replaces either wait.
        """
        ps = self.procs[name]
        if ps.point is None:
            raise ScheduleError(f"{_label(name)} is not paused")
        was = ps.point
        blocked = was == "lock_acquire" and self.lock_holder not in (None, name)
        if blocked and not force:
            raise ScheduleError(f"{_label(name)} would block: {self.lock_holder} holds the reader lock")
        self._send(name, ("go",))
        if blocked and timeout is None:
            timeout = self.step_timeout + FORCED_WAIT
        elif was == "lock_acquire":
            self.lock_holder = name
        elif was == "lock_release" and self.lock_holder == name:
            self.lock_holder = None
        return self._step_result(name, timeout)

    def _step_result(self, name: str, timeout: float | None = None) -> StepOutcome:
        ps = self.procs[name]
        t0 = time.perf_counter()
        what = f"its next yield point in {ps.action}"
        msg = self._recv(name, what, timeout)
        out = StepOutcome(name, ps.action, ps.args, None, seconds=time.perf_counter() - t0)
        self.steps_taken += 1
        if msg[0] == "yield":
            ps.point = out.point = msg[1]
            ps.blocked_at = self.steps_taken if msg[1] == "pin_wait" else -1
            out.deserialized = msg[2]
            out.snapshot = _snapshot_from(msg[3])
        elif msg[0] == "done":
            out.result, out.deserialized = msg[1], msg[2]
            out.snapshot = _snapshot_from(msg[3])
            ps.action, ps.args, ps.point = None, {}, None
        else:
            raise ScheduleError(f"{_label(name)} sent {msg[0]!r} during {ps.action}")
        return out

    def runnable(self) -> list[str]:
        """Paused processes that can take a step without blocking: not at
        ``lock_acquire`` of a lock another process holds, and not at
        ``pin_wait`` (impl's writer waiting for a reader's hazard pin) unless
        another process took a step since it paused there."""
        return [n for n, ps in self.procs.items()
                if ps.point is not None and not ps.dead
                and not (ps.point == "lock_acquire" and self.lock_holder not in (None, n))
                and not (ps.point == "pin_wait" and ps.blocked_at == self.steps_taken)]

    def idle(self) -> list[str]:
        return [n for n, ps in self.procs.items() if ps.idle]

    def drain(self, on_step=None) -> list[StepOutcome]:
        """Run every operation in flight to completion, lowest runnable first."""
        outs = []
        for _ in range(10_000):
            run = self.runnable()
            if not run:
                break
            out = self.advance(run[0])
            outs.append(out)
            if on_step is not None:
                on_step(out)
        return outs

    def side_close(self, name: str, bound: float) -> dict:
        """Reader ``name``, paused inside an operation, closes its view from
        another thread of its process; waits up to ``bound`` seconds for that
        ``close()`` to return.  Returns ``{"returned": bool, "seconds": float,
        "error": str | None}``; the operation stays paused where it was.

        Raises:
            ScheduleError: ``name`` is not paused, or did not answer in time.
        """
        ps = self.procs[name]
        if ps.point is None:
            raise ScheduleError(f"{_label(name)} is not paused")
        self._send(name, ("side_close", bound))
        return self._recv(name, "closing its view from another thread", bound + self.step_timeout)[1]

    def snapshot(self) -> Snapshot | None:
        """The writer's ring state now (it may be paused mid-operation)."""
        if self.procs["writer"].dead:
            return None
        self._send("writer", ("snapshot",))
        return _snapshot_from(self._recv("writer", "a snapshot")[1])

    def clean(self) -> bool:
        """Every process alive and idle, the lock free."""
        return self.lock_holder is None and all(ps.idle and ps.process.is_alive() for ps in self.procs.values())

    def respawn(self) -> None:
        """Kill every process and start fresh ones with a fresh lock (a process
        killed while holding the old lock would leave it held for ever)."""
        self.shutdown()
        self.lock = self.reader_ctx.Lock()
        self.lock_holder = None
        names = list(self.procs)
        self.procs = {}
        for name in names:
            self._spawn(name)

    # -- faults -----------------------------------------------------------------
    def kill(self, name: str) -> None:
        """SIGKILL process ``name`` wherever it is (a lock it holds stays held).

        If it held the reader lock, :attr:`lock_holder` becomes
        ``"<name> (killed)"``, so that a process later restarted under the same
        name is not taken for the holder.
        """
        ps = self.procs[name]
        os.kill(ps.process.pid, signal.SIGKILL)
        ps.process.join(self.step_timeout)
        ps.dead = True
        ps.action, ps.point = None, None
        if self.lock_holder == name:
            self.lock_holder = f"{name} (killed)"

    def restart(self, name: str) -> None:
        """Replace a dead (or live) process with a fresh one sharing the same lock."""
        ps = self.procs[name]
        if ps.process.is_alive():
            self.kill(name)
        ps.conn.close()
        self._spawn(name)

    # -- teardown -----------------------------------------------------------------
    def shutdown(self) -> list[str]:
        """Stop every process (politely, then SIGKILL) and unlink any segment
        left behind.  Returns the names of segments that had to be unlinked."""
        for name, ps in self.procs.items():
            if not ps.process.is_alive():
                continue
            if ps.idle:
                try:
                    ps.conn.send_bytes(pickle.dumps(("exit",)))
                    continue
                except (BrokenPipeError, OSError):
                    pass
            os.kill(ps.process.pid, signal.SIGKILL)  # paused mid-operation: no clean way out
        deadline = time.monotonic() + 2.0
        for ps in self.procs.values():
            ps.process.join(max(0.0, deadline - time.monotonic()))
            if ps.process.is_alive():
                os.kill(ps.process.pid, signal.SIGKILL)
                ps.process.join(self.step_timeout)
            ps.conn.close()
        leaked = [s for s in self.segments if segment_exists(s)]
        for s in leaked:
            try:
                os.unlink(os.path.join("/dev/shm", s.lstrip("/")))
            except FileNotFoundError:
                continue
            # The dead writer registered it with our (shared) resource
            # tracker; without this the tracker warns about a "leaked"
            # segment, and fails to unlink it, when this process exits.
            resource_tracker.unregister("/" + s.lstrip("/"), "shared_memory")
        self.segments.clear()
        return leaked


def _scribble(view: Any) -> None:
    """Write garbage into reader ``view``'s own words of impl's reader table:
    a fixed pin on allocation 0 with a high tag (a read that never ends) and
    1000 more acknowledgements of every ack word (reads never made).

    Raises:
        NotImplementedError: the view has no reader-table slot (a store
            without per-reader words: nothing of its own to scribble on).
    """
    table = getattr(getattr(view, "ring_buffer", None), "reader_table", None)
    pin_at, ack_at = getattr(view, "_pin_at", None), getattr(view, "_ack_at", None)
    if table is None or pin_at is None or ack_at is None:
        raise NotImplementedError("this reader has no words of its own in shared memory")
    words = table.words
    words[pin_at] = (0xBEEF << 48) | 1
    for k in range(table.max_chunks):
        words[ack_at + k] = (words[ack_at + k] + 1000) & (2**64 - 1)


def _snapshot_from(d: dict | None) -> Snapshot | None:
    if not d or "error" in d:
        return None
    d = dict(d)
    d["chunks"] = [SnapChunk(**{**c, "reads": None if c.get("reads") is None else tuple(c["reads"])})
                   for c in d["chunks"]]
    return Snapshot(**d)


def _label(name: str) -> str:
    return "the writer" if name == "writer" else f"reader {name}"


__all__ = ["worker_setup", "LOCK_POINTS", "ProcessPool", "ScheduleError", "ScheduledSerde", "StepOutcome", "TracedLock"]
