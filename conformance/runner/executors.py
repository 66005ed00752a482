"""Executors: where the independent pieces of a run execute.

Three kinds of work are independent, deterministic and small in their
results: a seed unit (:mod:`.units`), a seeded-fault gate (``shmspec
mutants``) and a release-matrix cell (``shmspec matrix``).  ``local`` (the
default) runs them in this machine's processes, as each command always has;
``ray`` runs each as a Ray task on a cluster (``--executor ray [--address
ADDR]``, the ``ray`` extra: ``pip install 'shmspec[ray]'``).

A :class:`Task` is a module-level function of shmspec and its arguments,
pickled in the parent (what does not pickle fails here, before any work).
On Ray each task runs in a **fresh Python process** on its node
(:func:`run_fresh`, ``python -m shmspec.conformance.runner.fresh``): no
state of an earlier task in the same Ray worker reaches it, as a forked unit
of the local executor inherits none from its siblings.  So a task's result
depends on its arguments only, never on the executor, the node or the number
of workers (findings of a free-running load excepted: their interleaving is
the OS's).

What ends "fine" is guarded:

- a task whose node dies (or whose Ray worker crashes) is retried by Ray,
  ``retries`` times (default 3); one that still cannot finish, or whose
  process ends without a result, is the error text in its place, which every
  caller turns into an ``error`` verdict, never a pass;
- a task still running after ``task_limit`` seconds is cancelled and is an
  error too;
- Ctrl-C or SIGTERM in the parent cancels every task (a cancelled task
  SIGTERMs its process group, which stops the gate's workers and removes its
  segments, then SIGKILLs what is left after 10 s) before the interrupt
  propagates.  A task's process also gets SIGTERM when its Ray worker dies
  (``PR_SET_PDEATHSIG``), so a lost node leaves no gate running.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..core.errors import ShmspecError, UsageError

EXECUTORS = ("local", "ray")
PARENT_ENV = "SHMSPEC_TASK_PARENT"
"""The pid of the process that started a fresh task process (:mod:`.fresh`
ends at once when its parent is already gone)."""


@dataclass(frozen=True)
class Task:
    """One independent piece of work: ``fn(*args)``, where ``fn`` is a
    module-level function of shmspec (pickled by reference) and ``args``
    pickle.  ``name`` labels it in progress lines and errors
    (``"seed 2654435769"``, ``"fault early_free"``)."""

    name: str
    fn: Callable[..., Any]
    args: tuple = ()

    def payload(self) -> bytes:
        """The pickled ``(fn, args)``.

        Raises:
            UsageError: the task does not pickle (named, with why).
        """
        try:
            return pickle.dumps((self.fn, self.args), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - pickle raises many kinds
            raise UsageError(f"{self.name}: cannot be sent to another process ({type(exc).__name__}: {exc})") \
                from None


class TaskError(ShmspecError):
    """A task that ended without a result (its message says why); the
    executors turn it into the task's error text, an ``error`` verdict."""


# -- a task in a fresh process -------------------------------------------------

def run_fresh(payload: bytes, grace: float = 10.0) -> Any:
    """:func:`run_raw`, its result unpickled.

    Raises:
        TaskError: as :func:`run_raw`, and when the task raised (its last
            traceback line).
    """
    kind, value = pickle.loads(run_raw(payload, grace))
    if kind == "ok":
        return value
    raise TaskError(value)


def run_raw(payload: bytes, grace: float = 10.0) -> bytes:
    """Run a pickled task (:meth:`Task.payload`) in a fresh Python process of
    its own session (process group) and return its result.

    Interrupted (KeyboardInterrupt: Ctrl-C, or Ray's cancel), the process
    group gets SIGTERM (the gate stops its workers and removes its segments),
    then SIGKILL after ``grace`` seconds, before this re-raises.

    Returns:
        The pickled ``("ok", value)`` or ``("error", text)`` the process
        wrote, as bytes (a Ray task hands them on unopened).

    Raises:
        TaskError: its process ended without a result (its exit status and
            output's last line).
    """
    with tempfile.TemporaryDirectory(prefix="shmspec-task-") as tmp:
        inp, out, log = Path(tmp, "task.pkl"), Path(tmp, "result.pkl"), Path(tmp, "output.txt")
        inp.write_bytes(payload)
        with open(log, "wb") as sink:
            # no preexec_fn (unsafe in a threaded parent, as a Ray worker is): the
            # process asks for SIGTERM at its parent's death itself (fresh.py)
            proc = subprocess.Popen([sys.executable, "-m", "shmspec.conformance.runner.fresh", str(inp), str(out)],
                                    stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                    start_new_session=True, env={**os.environ, PARENT_ENV: str(os.getpid())})
            try:
                code = proc.wait()
            except BaseException:
                _stop_group(proc, grace)
                raise
        if out.exists():
            return out.read_bytes()
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:] or ["no output"]
        raise TaskError(f"its process ended (exit {code}) without a result: {tail[0]}")


def _stop_group(proc: subprocess.Popen, grace: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # the group's other members (the gate's readers) after its leader
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# -- executors -------------------------------------------------------------------

@dataclass
class RayExecutor:
    """Run tasks as Ray tasks, each in a fresh process on its node.

    ``address``: a running cluster (``ray start --head`` prints it;
    ``"auto"``: ``$RAY_ADDRESS``, else the one running on this machine);
    None starts a new Ray instance on this machine for the run (even when
    one is running) and stops it after.  Each task asks for
    ``cpus`` CPUs (a gate's writer and readers share them); ``retries``:
    how many times Ray reruns a task whose node or worker died;
    ``task_limit``: seconds after which a running task is cancelled (an
    error)."""

    address: str | None = None
    cpus: float = 1.0
    retries: int = 3
    task_limit: float = 6 * 3600.0

    def describe(self) -> str:
        return f"ray ({self.address or 'a local instance'})"

    def map(self, tasks: list[Task], on_done: Callable[[int, Any], None] | None = None,
            on_notice: Callable[[str], None] | None = None) -> list[Any]:
        """Run every task; the results in ``tasks``' order, a task that ended
        without one being its error text (``str``) instead.  ``on_done(i,
        result)`` is called as each ends; ``on_notice(text)`` with what Ray
        tells the driver meanwhile (a task retried after its node died), in
        one line, instead of Ray printing it.

        Raises:
            UsageError: ray is not installed, the cluster cannot be reached,
                or a task does not pickle.
        """
        payloads = [t.payload() for t in tasks]  # what does not pickle fails before any work
        ray = _import_ray()
        started_here = not ray.is_initialized()
        if started_here:
            _probe(self.address)
            try:
                ray.init(address=self.address or "local", log_to_driver=False, logging_level="ERROR",
                         include_dashboard=False, configure_logging=True)
            except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError
                where = f"a Ray cluster at {self.address}" if self.address else "a new local Ray instance"
                raise UsageError(f"--executor ray: cannot reach {where} ({type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
        remote = ray.remote(num_cpus=self.cpus, max_retries=self.retries, retry_exceptions=False)(_ray_task)
        results: dict[int, Any] = {}
        refs: dict[Any, tuple[int, float]] = {}
        restore = _route_ray_notices(on_notice or (lambda text: None))
        try:
            for i, p in enumerate(payloads):
                refs[remote.options(name=f"shmspec {tasks[i].name}").remote(p)] = (i, time.monotonic())
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1, timeout=1.0)
                for ref in ready:
                    i, _ = refs.pop(ref)
                    results[i] = self._get(ray, ref, tasks[i])
                    if on_done:
                        on_done(i, results[i])
                now = time.monotonic()
                for ref, (i, t0) in list(refs.items()):
                    if now - t0 > self.task_limit:
                        refs.pop(ref)
                        ray.cancel(ref, force=True)
                        results[i] = f"{tasks[i].name}: still running after {self.task_limit:.0f} s; cancelled"
                        if on_done:
                            on_done(i, results[i])
        except BaseException:
            _cancel_all(ray, list(refs))
            raise
        finally:
            if started_here:
                ray.shutdown()
            restore()
        return [results[i] for i in range(len(tasks))]

    @staticmethod
    def _get(ray: Any, ref: Any, task: Task) -> Any:
        try:
            kind, value = pickle.loads(ray.get(ref))
        except Exception as exc:  # noqa: BLE001 - a task lost after its retries, cancelled, or unpicklable
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return f"{task.name}: the Ray task ended without a result ({type(exc).__name__}: {first})"
        return value if kind == "ok" else f"{task.name}: {value}"


def _ray_task(payload: bytes) -> bytes:
    """The Ray task: the pickled task in a fresh process on this node, its
    pickled result handed back unopened.  A cancel (KeyboardInterrupt here)
    stops that process's group first."""
    try:
        return run_raw(payload)
    except TaskError as exc:
        return pickle.dumps(("error", str(exc)))


def _probe(address: str | None, timeout: float = 5.0) -> None:
    """A ``host:port`` address must accept a TCP connection within
    ``timeout`` seconds: Ray's own connect retries for minutes on a wrong
    one.  ``None`` and ``auto`` are left to Ray.

    Raises:
        UsageError: nothing listens there (one line).
    """
    import socket

    if not address or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except (OSError, ValueError) as exc:
        raise UsageError(f"--executor ray: nothing answers at {address} ({type(exc).__name__}: {exc}); "
                         f"`ray start --head` prints the address") from None


def _route_ray_notices(sink: Callable[[str], None]) -> Callable[[], None]:
    """Send what Ray's driver would print of the cluster's error messages
    (``(raylet) Task ... failed. There are 3 retries remaining ...``, on
    stdout, after or amid our lines) to ``sink`` as one line each; returns
    the undo.  Ray has no setting for this: its module function is
    replaced (where this Ray has none, nothing changes)."""
    try:
        from ray._private import worker as ray_worker
    except ImportError:
        return lambda: None
    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None:
        return lambda: None

    def route(data: dict, ignore_prefix: bool = False) -> None:  # noqa: ARG001 - Ray's signature
        if data.get("pid") != "raylet":  # a task's own output (log_to_driver is off): as Ray would
            return original(data, ignore_prefix)
        for line in data.get("lines") or ():
            text = " ".join(str(line).split())
            if "retries remaining" in text:
                text = text.split(" Node IP:")[0]
            sink(f"Ray: {text[:200]}")

    ray_worker.print_to_stdstream = route
    return lambda: setattr(ray_worker, "print_to_stdstream", original)


def _cancel_all(ray: Any, refs: list[Any], grace: float = 15.0) -> None:
    """Cancel every task: a KeyboardInterrupt in each (its process group gets
    SIGTERM, then SIGKILL), then, after ``grace`` seconds, force."""
    for ref in refs:
        try:
            ray.cancel(ref, force=False)
        except Exception:  # noqa: BLE001 - already finished
            pass
    if refs:
        try:
            ray.wait(refs, num_returns=len(refs), timeout=grace)
        except Exception:  # noqa: BLE001
            pass
    for ref in refs:
        try:
            ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001
            pass


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray: pip install 'shmspec[ray]'") from None
    return ray


def make(executor: "str | RayExecutor | None", address: str | None = None) -> "RayExecutor | None":
    """The executor an ``--executor``/``--address`` pair names: None for
    ``local`` (each command's own processes), a :class:`RayExecutor` for
    ``ray``; an executor object is returned as it is.

    Raises:
        UsageError: an unknown executor, ``--address`` without ray, ray
            not installed, or nothing listening at ``address``.
    """
    if executor is None or executor == "local":
        if address is not None:
            raise UsageError("--address applies to --executor ray only")
        return None
    if isinstance(executor, RayExecutor):
        return executor
    if executor != "ray":
        raise UsageError(f"unknown executor {executor!r} (choose from {', '.join(EXECUTORS)})")
    _import_ray()
    _probe(address)  # a wrong address is said before any work (the target is not fetched yet)
    return RayExecutor(address=address)


__all__ = ["EXECUTORS", "RayExecutor", "Task", "TaskError", "make", "run_fresh", "run_raw"]
