"""Mutation score: the gate run on every seeded fault (``shmspec mutants``).

Each fault of the library (:mod:`.mutants`: impl with one realistic bug, its
docstring naming the property that must detect it) is loaded as a ``file:``
target and judged by one gate run (:func:`.gate.run_gate`, profile ``ci`` by
default).  A fault is **caught** when the property it names is among the
properties the gate found violated; other violations are reported beside it.
The **detection** of a fault is its first violation in time: which property,
which campaign, the seconds from the gate's start until the failing step
first ran (before shrinking) and the steps the gate had run until then.

Determinism: Hypothesis (>= 6.131) mixes literal constants from every
*local* module loaded so far into its draws, so under one seed a campaign
explores differently depending on what was imported before and when (seen:
touch_ignored, unlocked_increment and writer_unfenced caught in one ci run
and missed in another).  :func:`run_fault` switches that pool off
(:func:`~.gate.seed_only`), so a fault's gate run is a function of the seed; each
fault also runs in a fresh process (:data:`ISOLATE`).

Results: :class:`MutantsResult`; :func:`write_json` writes ``mutants.json``
(schema ``shmspec.mutants/1``, documented in reports/README.md), each fault's
own gate report going to ``<report dir>/<fault name>/``.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.table import Table

from ..core.documents import header
from ..core.errors import ExitCode
from ..mutants import Fault
from ..reporting.report import save_console_html, write_report
from ..runner.gate import GATE_PROFILES, GateResult, run_gate, seed_only

SCHEMA = "shmspec.mutants/1"


@dataclass
class FaultOutcome:
    """One fault's gate run, reduced to its detection."""

    fault: Fault
    result: GateResult | None
    seconds: float
    report_dir: str | None = None
    error: str | None = None
    """Why the fault could not be run (load failure), else None."""

    @property
    def violated(self) -> list[str]:
        """Property ids with a violation, in order of detection."""
        out: list[str] = []
        for v in self._by_detection():
            if v.property not in out:
                out.append(v.property)
        return out

    @property
    def caught(self) -> bool:
        return self.fault.expected in self.violated

    def _by_detection(self) -> list:
        if self.result is None:
            return []
        vs = self.result.violations
        return sorted(vs, key=lambda v: (v.detected_seconds if v.detected_seconds is not None else float("inf")))

    def first(self, prop: str | None = None):
        """The first violation detected (of ``prop``, if given), or None."""
        return next((v for v in self._by_detection() if prop is None or v.property == prop), None)

    def to_json(self) -> dict[str, Any]:
        first = self.first()
        exp = self.first(self.fault.expected)
        return {
            "name": self.fault.name,
            "summary": self.fault.summary,
            "expected": self.fault.expected,
            "caught": self.caught,
            "caught_by": first.property if first else None,
            "campaign": first.campaign if first else None,
            "concurrency": first.concurrency if first else None,
            "construction": first.construction.name if first else None,
            "seconds_to_detection": first.detected_seconds if first else None,
            "steps_to_detection": first.detected_steps if first else None,
            "expected_detection": None if exp is None else {
                "campaign": exp.campaign, "concurrency": exp.concurrency,
                "seconds": exp.detected_seconds, "steps": exp.detected_steps, "shrunk_steps": len(exp.steps),
            },
            "violated": self.violated,
            "verdict": self.result.verdict if self.result else "error",
            "gate_seconds": round(self.seconds, 2),
            "errors": ([self.error] if self.error else []) + (
                [f"{c.name}: {c.error}" for c in self.result.campaigns if c.error] if self.result else []),
            "report": self.report_dir,
        }


@dataclass
class MutantsResult:
    """The run: one row per fault (:meth:`FaultOutcome.to_json`), in run order."""

    profile: str
    seed: int | None
    started: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    jobs: int = 1
    full: bool = False
    executor: str = "local"
    """Where the faults' gates ran: ``local`` or ``ray (ADDRESS)``."""

    @property
    def caught(self) -> int:
        return sum(bool(r["caught"]) for r in self.rows)

    @property
    def total(self) -> int:
        return len(self.rows)

    def detection_seconds(self) -> list[float]:
        """Seconds to detection of every caught fault."""
        return [r["seconds_to_detection"] for r in self.rows
                if r["caught"] and r["seconds_to_detection"] is not None]

    def to_json(self) -> dict[str, Any]:
        times = self.detection_seconds()
        return {
            **header(SCHEMA, "mutants"),
            "profile": self.profile,
            "seed": self.seed,
            "started": self.started,
            "seconds": round(self.seconds, 2),
            "jobs": self.jobs,
            "executor": self.executor,
            "stops_at_first_finding": not self.full,
            "caught": self.caught,
            "total": self.total,
            "score": round(self.caught / self.total, 4) if self.total else None,
            "median_seconds_to_detection": round(statistics.median(times), 3) if times else None,
            "worst_seconds_to_detection": max(times) if times else None,
            "faults": list(self.rows),
        }


_seed_only = seed_only  # the gate switches the pool off itself now; kept for callers of the old name


def run_fault(fault: Fault, profile: str = "ci", seed: int | None = None, report_dir: Path | None = None,
              on_progress: Callable[[str, int, int], None] | None = None, campaigns=None,
              concurrency: str | None = None, started: str | None = None, full: bool = False) -> FaultOutcome:
    """Run the gate on one fault in this process and, when ``report_dir`` is
    given, write its gate report there (``report.json``, ``report.html``,
    ``repro_test.py``).  The fault is loaded by its target string
    (:attr:`Fault.target`, through its protocol); ``campaigns`` None runs
    that protocol's own (the ring buffer's: ``DEFAULT_CAMPAIGNS``).  The gate
    stops at the first finding of the property the fault names (the
    campaigns after it are skipped; ``full``: every campaign runs, and the
    row's ``violated`` is then every property the fault breaks).  A fault
    that cannot be loaded is an outcome with ``error`` set (not caught)."""
    from .. import protocols
    from ..targets.loader import TargetError

    from ..core.config import SessionConfig
    from ..core.constructions import Construction
    from ..mutants import RING_CONSTRUCTIONS

    t0 = time.monotonic()
    config = None
    if not fault.kind and fault.construction:  # a ring fault that shows in one construction: the gate's primary
        fields = RING_CONSTRUCTIONS.get(fault.construction)
        if fields is None:
            return FaultOutcome(fault, None, 0.0, error=f"unknown construction {fault.construction!r} (choose from "
                                                        f"{', '.join(RING_CONSTRUCTIONS)})")
        config = Construction(**fields).config(SessionConfig())
    try:
        target = protocols.load(fault.target)
    except TargetError as exc:
        return FaultOutcome(fault, None, time.monotonic() - t0, error=f"TargetError: {exc}")
    with _seed_only():
        extra = {} if config is None else {"config": config}  # vLLM's construction: the gate's default
        result = run_gate(target, profile, seed, on_progress=on_progress, campaigns=campaigns,
                          concurrency=concurrency, stop_at=None if full else frozenset({fault.expected}), **extra)
    out = FaultOutcome(fault, result, time.monotonic() - t0)
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        for name in ("report.json", "report.html", "repro_test.py"):
            (report_dir / name).unlink(missing_ok=True)
        write_report(result, report_dir, started, str(fault.path))
        out.report_dir = report_dir.name
    return out


def _interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt(f"signal {signum}")


def _child(queue, fault: Fault, gate_profile, seed: int | None, report_dir: Path | None, started: str,
           campaigns, concurrency: str | None, full: bool = False) -> None:
    """Spawned per fault: run its gate, stream progress, send back its row.
    SIGTERM unwinds like Ctrl-C, so the gate stops its workers on the way out."""
    import signal

    signal.signal(signal.SIGTERM, _interrupt)
    GATE_PROFILES.setdefault(gate_profile.name, gate_profile)  # a profile registered by the caller only
    try:
        out = run_fault(fault, gate_profile.name, seed, report_dir, lambda *a: queue.put(("progress", a)),
                        campaigns, concurrency, started, full)
        queue.put(("row", out.to_json()))
    except KeyboardInterrupt:
        pass
    except BaseException as exc:  # noqa: BLE001 - reported as the fault's error
        queue.put(("row", FaultOutcome(fault, None, 0.0, error=f"{type(exc).__name__}: {exc}").to_json()))


def _run_isolated(fault: Fault, profile: str, seed: int | None, report_dir: Path | None, started: str,
                  on_progress: Callable[[str, int, int], None] | None, campaigns=None,
                  concurrency: str | None = None, full: bool = False) -> dict[str, Any]:
    """:func:`run_fault` in a fresh (spawned) process, so no fault's gate run
    shares interpreter state with another's: each row is what ``shmspec check
    --target file:<fault>`` would find.  Interrupted (KeyboardInterrupt, or
    SIGTERM turned into one), the child is terminated before this re-raises."""
    import multiprocessing as mp
    import queue as _queue

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(q, fault, GATE_PROFILES[profile], seed, report_dir, started,
                                            None if campaigns is None else tuple(campaigns), concurrency, full),
                       daemon=True)
    proc.start()
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        while True:
            try:
                kind, payload = q.get(timeout=1.0)
            except _queue.Empty:
                if not proc.is_alive():
                    return FaultOutcome(fault, None, 0.0,
                                        error=f"the gate process died (exit {proc.exitcode})").to_json()
                continue
            if kind == "progress" and on_progress:
                on_progress(*payload)
            elif kind == "row":
                return payload
    except BaseException:
        if proc.is_alive():
            proc.terminate()
        raise
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join()
        with _LIVE_LOCK:
            _LIVE.discard(proc)


_LIVE: set = set()
"""The faults' gate processes running now (:func:`_run_isolated`): an
interrupt of a parallel run terminates them all."""
_LIVE_LOCK = threading.Lock()


def _terminate_live() -> None:
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for p in procs:
        if p.is_alive():
            p.terminate()


def _fault_task(fault: Fault, gate_profile, seed: int | None, campaigns, concurrency: str | None, started: str,
                full: bool, reports: bool) -> tuple[dict[str, Any], dict[str, bytes]]:
    """One fault's gate as an executor's task, in a fresh process: its row
    and, with ``reports``, its report files (name -> bytes), written here
    in a temporary directory and sent back to the caller's machine."""
    import tempfile

    GATE_PROFILES.setdefault(gate_profile.name, gate_profile)  # a profile registered by the caller only
    with tempfile.TemporaryDirectory(prefix="shmspec-fault-") as tmp:
        sub = Path(tmp) / fault.name if reports else None
        out = run_fault(fault, gate_profile.name, seed, sub, None, campaigns, concurrency, started, full)
        files = {f.name: f.read_bytes() for f in sub.iterdir() if f.is_file()} if sub and sub.exists() else {}
    return out.to_json(), files


def _on_executor(executor, faults: list[Fault], profile: str, seed: int | None, report_dir: Path | None, campaigns,
                 concurrency: str | None, started: str, full: bool, on_fault, on_progress, on_done
                 ) -> dict[int, dict[str, Any]]:
    """Every fault's gate as a task of ``executor``; the rows by index.  A
    task that ended without a result is that fault's row with ``error`` set
    (not caught: the run fails)."""
    from ..runner.executors import Task

    tasks = [Task(f"fault {f.name}", _fault_task, (f, GATE_PROFILES[profile], seed,
                                                   None if campaigns is None else tuple(campaigns), concurrency,
                                                   started, full, report_dir is not None)) for f in faults]
    for i, f in enumerate(faults):
        if on_fault:
            on_fault(i, f)
    rows: dict[int, dict[str, Any]] = {}

    def done(i: int, result: Any) -> None:
        if isinstance(result, str):
            row = FaultOutcome(faults[i], None, 0.0, error=result).to_json()
        else:
            row, files = result
            if report_dir is not None and files:
                sub = report_dir / faults[i].name
                sub.mkdir(parents=True, exist_ok=True)
                for name in ("report.json", "report.html", "repro_test.py"):
                    (sub / name).unlink(missing_ok=True)
                for name, data in files.items():
                    (sub / name).write_bytes(data)
        rows[i] = row
        if on_done:
            on_done(row)

    def notice(text: str) -> None:
        if on_progress:
            on_progress(text, len(rows), len(faults))

    executor.map(tasks, done, notice)
    return rows


def run_mutants(faults: list[Fault], profile: str = "ci", seed: int | None = None, report_dir: Path | None = None,
                on_fault: Callable[[int, Fault], None] | None = None,
                on_progress: Callable[[str, int, int], None] | None = None,
                on_done: Callable[[dict[str, Any]], None] | None = None,
                campaigns=None, concurrency: str | None = None, started: str = "",
                isolate: bool = False, jobs: int = 1, full: bool = False, executor=None) -> MutantsResult:
    """Run the gate on each fault; the rows are in ``faults``' order.
    ``on_fault(i, fault)`` before each, ``on_progress`` is the gate's (of the
    fault started last), ``on_done(row)`` after each, as they end.
    ``isolate``: each fault's gate in a fresh spawned process (what the CLI
    does); with ``isolate``, ``jobs`` faults run at once (each gate's
    campaigns are deterministic or bounded by counts, so a row does not
    depend on ``jobs``; a free-running campaign's interleavings are the
    OS's).  ``full``: no fault's gate stops at its first finding of the
    expected property (:func:`run_fault`).  ``campaigns`` and ``concurrency``
    narrow the gate (tests).  ``executor``
    (:class:`~shmspec.conformance.runner.executors.RayExecutor`): each
    fault's gate is a task on that cluster, in a fresh process (as
    ``isolate``), its report files sent back and written under
    ``report_dir``; ``jobs`` then does not apply, and ``on_fault`` is called
    for every fault as the tasks are submitted.

    Raises:
        KeyError: unknown gate profile.
        ValueError: ``jobs`` < 1.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, not {jobs}")
    res = MutantsResult(profile, seed, started, jobs=jobs if isolate else 1, full=full)
    t0 = time.monotonic()

    def one(i: int, fault: Fault) -> dict[str, Any]:
        if on_fault:
            on_fault(i, fault)
        sub = report_dir / fault.name if report_dir is not None else None
        if isolate:
            return _run_isolated(fault, profile, seed, sub, started, on_progress, campaigns, concurrency, full)
        return run_fault(fault, profile, seed, sub, on_progress, campaigns, concurrency, started, full).to_json()

    rows: dict[int, dict[str, Any]] = {}
    if executor is not None:
        rows = _on_executor(executor, faults, profile, seed, report_dir, campaigns, concurrency, started, full,
                            on_fault, on_progress, on_done)
        res.executor = executor.describe()
    elif jobs == 1 or not isolate or len(faults) < 2:
        for i, fault in enumerate(faults):
            rows[i] = one(i, fault)
            if on_done:
                on_done(rows[i])
    else:
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait  # noqa: PLC0415

        pool = ThreadPoolExecutor(max_workers=min(jobs, len(faults)))
        try:  # each thread waits on its fault's spawned process; the work is in those processes
            pending = {pool.submit(one, i, f): i for i, f in enumerate(faults)}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = pending.pop(fut)
                    rows[i] = fut.result()
                    if on_done:
                        on_done(rows[i])
        except BaseException:
            for fut in pending:
                fut.cancel()
            _terminate_live()  # SIGTERM each running fault's gate: it stops its workers and exits
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    res.rows = [rows[i] for i in range(len(faults))]
    res.seconds = time.monotonic() - t0
    return res


def write_json(res: MutantsResult, report_dir: Path) -> Path:
    """Write ``mutants.json`` (schema ``shmspec.mutants/1``); return its path."""
    import json

    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / "mutants.json"
    path.write_text(json.dumps(res.to_json(), indent=2) + "\n")
    return path


def write_html(res: MutantsResult, report_dir: Path, width: int = 132) -> Path:
    """Write ``mutants.html`` (the summary table and line, rich's HTML export)."""
    return save_console_html(report_dir / "mutants.html", [summary_table(res), summary_line(res)], width)


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def summary_table(res: MutantsResult) -> Table:
    """Fault, expected property, verdict, what detected it first (property,
    campaign, seconds and steps to detection), other properties violated."""
    t = Table(title=f"seeded faults: {res.caught}/{res.total} caught (gate profile {res.profile})",
              title_justify="left")
    for col, kw in (("fault", {}), ("expected", {}), ("caught", {}), ("first found", {}), ("campaign", {}),
                    ("s to detect", {"justify": "right"}), ("steps", {"justify": "right"}),
                    ("also violated", {}), ("gate s", {"justify": "right"})):
        t.add_column(col, **kw)
    for row in res.rows:
        others = [p for p in row["violated"] if p not in (row["caught_by"], row["expected"])]
        if row["errors"]:
            others.append("[yellow]error[/]")
        t.add_row(
            row["name"], row["expected"],
            "[green]yes[/]" if row["caught"] else "[bold red]NO[/]",
            row["caught_by"] or "-", row["campaign"] or "-",
            _fmt_s(row["seconds_to_detection"]),
            "-" if row["steps_to_detection"] is None else str(row["steps_to_detection"]),
            ", ".join(others) or "-",
            _fmt_s(row["gate_seconds"]),
        )
    return t


def summary_line(res: MutantsResult) -> str:
    times = res.detection_seconds()
    med = f"{statistics.median(times):.1f}" if times else "-"
    worst = f"{max(times):.1f}" if times else "-"
    return (f"score {res.caught}/{res.total}; time to detection median {med} s, worst {worst} s; "
            f"wall time {res.seconds:.0f} s")


ISOLATE = True
"""``shmspec mutants`` runs each fault's gate in a fresh process (tests that
narrow the gate in-process turn this off)."""


def main(args, console, err) -> int:
    """The ``shmspec mutants`` command (``args`` from cli.py's parser):
    a rich progress bar over faults (and the current fault's campaign), then
    the summary table and line; ``mutants.json`` and per-fault reports under
    the report directory.  Returns the exit status."""
    import datetime as _dt

    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    import importlib

    from .. import protocols
    from ..reporting.report import default_report_dir

    name = getattr(args, "protocol", None) or protocols.DEFAULT
    try:
        protocol = protocols.get(name)
    except Exception as exc:  # noqa: BLE001 - UsageError: one line
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return ExitCode.ERROR
    if protocol.mutants is None:
        err.print(f"shmspec: error: the {name} protocol has no seeded faults", markup=False, highlight=False)
        return ExitCode.ERROR
    library = importlib.import_module(protocol.mutants).faults
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    try:
        chosen = library(only) if protocol.name == protocols.DEFAULT else library(only, protocol.name)
    except (KeyError, ValueError) as exc:
        err.print(f"shmspec: error: {exc.args[0] if exc.args else exc}", markup=False, highlight=False,
                  soft_wrap=True)
        return ExitCode.ERROR
    if args.list:
        t = Table("fault", "must be caught by", "bug", title=f"{len(chosen)} seeded faults", title_justify="left")
        for f in chosen:
            t.add_row(f.name, f.expected, f.summary + (f" (caught in the {f.construction} construction)" if f.construction else ""))
        console.print(t)
        return ExitCode.PASS
    from ..core.config import count_or_auto
    from ..core.errors import UsageError

    from ..runner import executors

    try:
        jobs = count_or_auto(getattr(args, "jobs", "1"), "--jobs")
        executor = executors.make(getattr(args, "executor", "local"), getattr(args, "address", None))
    except UsageError as exc:
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return ExitCode.ERROR
    report_dir = args.report_dir or default_report_dir("mutants")
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
        (report_dir / "mutants.json").unlink(missing_ok=True)
    except OSError as exc:
        err.print(f"shmspec: error: cannot write the report to {report_dir}: {exc.strerror or exc}",
                  markup=False, highlight=False, soft_wrap=True)
        return ExitCode.ERROR
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=err,
                  transient=True) as progress:
        bar = progress.add_task("faults", total=len(chosen))
        current = {"name": ""}

        def on_fault(i: int, fault) -> None:
            current["name"] = fault.name
            progress.update(bar, completed=i, description=f"fault {fault.name}")

        def on_progress(name: str, done: int, total: int) -> None:
            progress.update(bar, description=f"fault {current['name']}: campaign {name} ({done}/{total})")

        def on_done(row: dict) -> None:
            mark = "[green]caught[/]" if row["caught"] else "[bold red]NOT caught[/]"
            where = row["campaign"] if row.get("campaign") != "constructions" else \
                f"constructions: {row.get('construction')}"
            how = (f" first by {row['caught_by']} ({where}) after {row['seconds_to_detection']:.1f} s"
                   if row["seconds_to_detection"] is not None else "")
            progress.console.print(f"{row['name']}: {mark} ({row['expected']}){how}")
            progress.advance(bar)

        res = run_mutants(chosen, args.profile, args.seed, report_dir, on_fault, on_progress, on_done,
                          started=started, isolate=ISOLATE, jobs=jobs, full=getattr(args, "full", False),
                          executor=executor)
    path = write_json(res, report_dir)
    width = max(console.width, 132)  # the table's nine columns stay readable in a log
    if not console.is_terminal and console.width < width:  # rich caps print(width=) at the console's
        from rich.console import Console

        console = Console(width=width)
    from ..reporting.report import verdict_line

    console.print(summary_table(res))
    write_html(res, report_dir, width)
    console.print(verdict_line("pass" if res.caught == res.total else "fail", summary_line(res), path), soft_wrap=True)
    return ExitCode.PASS if res.caught == res.total else ExitCode.FAIL


__all__ = ["SCHEMA", "FaultOutcome", "MutantsResult", "main", "run_fault", "run_mutants", "summary_line", "summary_table",
           "write_html", "write_json"]
