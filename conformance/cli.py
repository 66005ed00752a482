"""``shmspec`` command line.

``shmspec check [--target T] [--profile ci|dev|deep] [--concurrency controlled|free|off]
[--seed N] [--report-dir DIR]``

``shmspec prove [--profile P] [--chunks K] [--report-dir DIR]``: z3 obligations
over the model's ring arithmetic; exit 0 iff every one is proven, 1 otherwise.

``shmspec mutants [--only NAME,...] [--profile P] [--seed N] [--report-dir DIR]``:
the gate on every seeded fault (conformance/mutants/); exit 0 iff each is
caught by the property it names, 1 otherwise.

``shmspec matrix [--releases all|newest|X.Y.Z,...] [--since V] [--profile P]
[--concurrency C] [--seed N] [--report-dir DIR] [--no-impl] [--index-url URL]
[--list]``: the gate on every vLLM release that ships the store (identical
store files run once) and on impl; exit 0 when every cell ran and impl
passes, 1 when impl fails, 2 when the matrix is incomplete or no release is
selected, 3 when impl's verdict is unknown; with ``--no-impl`` only 0 (every
cell ran) or 2 (incomplete).

Exit status (a public interface, see README.md):
  0  every property holds (verdict "pass");
  1  at least one violation (verdict "fail");
  2  usage or infrastructure error (unknown target, missing file, a file
     without the store classes, no registry reachable, a campaign that crashed);
  3  no violation, but a check ran out of its budget (verdict "unknown": the
     free-running linearizability search), so nothing may be called "pass";
  130 interrupted (Ctrl-C or SIGTERM); worker processes stopped, no report.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

import shmspec

from .commands.finish import prepare_report_dir as _prepare_report_dir  # the old private name, kept
from .commands.finish import report_and_judge
from .core import interrupt
from .core.constructions import MAX_READERS, START_METHODS
from .core.errors import ExitCode

EXIT_PASS, EXIT_FAIL, EXIT_ERROR, EXIT_UNKNOWN = ExitCode.PASS, ExitCode.FAIL, ExitCode.ERROR, ExitCode.UNKNOWN
EXIT_INTERRUPTED = ExitCode.INTERRUPTED


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(EXIT_ERROR, f"shmspec: error: {message}\n")


def _executor_args(p: argparse.ArgumentParser, work: str, local: str) -> None:
    """``--executor local|ray`` and ``--address ADDR`` (runner/executors.py)."""
    p.add_argument("--executor", default="local", choices=("local", "ray"),
                   help=f"where {work} run: local (this machine's processes, {local}; default) or ray (a Ray "
                        f"task each, in a fresh process on its node; the ray extra); same seeds, same findings; "
                        f"docs/gate.md#ray")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="with --executor ray: the cluster (host:port, or auto: $RAY_ADDRESS, else the one "
                        "running on this machine); default: start Ray on this machine for the run")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="shmspec", description="Conformance gate for single-writer / multi-reader shared-memory object stores.",
                epilog="<reports> in the defaults below: $SHMSPEC_REPORT_DIR, else the source checkout's reports/ "
                       "(shmspec run from its checkout), else ~/.cache/shmspec/reports; never the current "
                       "directory unless asked. Every command prints where it wrote.")
    p.add_argument("--version", action="version", version=f"shmspec {shmspec.__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    c = sub.add_parser("check", help="run the conformance gate on a target")
    c.add_argument("--target", default="impl",
                   help="the object store: impl (default), file:PATH, vllm==X.Y.Z; the slot stores: impl-queue, "
                        "queue:file:PATH, vllm-queue==X.Y.Z, sglang-queue==X.Y.Z, impl-arena, arena:file:PATH, "
                        "vllm-arena==X.Y.Z (docs/slots.md#targets)")
    c.add_argument("--profile", default="ci", choices=("smoke", "ci", "dev", "deep"), help="gate profile (default ci)")
    c.add_argument("--concurrency", default=None, choices=("controlled", "free", "off"),
                   help="after the lockstep campaigns, run writer and reader processes under a schedule Hypothesis "
                        "draws (controlled), freely under load with a linearizability check (free), or not at all "
                        "(off); default: the profile's (controlled)")
    c.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: 0 for ci, random otherwise)")
    c.add_argument("--seeds", type=int, default=None, metavar="K",
                   help="seed units: run the gate once per seed, K seeds derived from --seed (default: the "
                        "profile's: 1, deep 8); findings merged, docs/gate.md#seed-units")
    c.add_argument("--workers", type=int, default=1, metavar="N",
                   help="run the seed units in N parallel processes (default 1; the findings do not depend on N)")
    _executor_args(c, "the seed units", "--workers at a time")
    c.add_argument("--shard", default=None, metavar="I/N",
                   help="run only shard I of N of the seed units (CI jobs splitting a deep run; needs --seed "
                        "on dev and deep)")
    c.add_argument("--example-db", default=None, metavar="DB",
                   help="Hypothesis example database: a directory, github:OWNER/REPO (CI artifacts, read-only, "
                        "over the local cache) or none; default: none for ci, <cache>/examples for dev and deep")
    c.add_argument("--contract", type=Path, default=None, metavar="FILE",
                   help="judge by this contract (TOML or JSON: profile, clr, sw, not_claimed, relies_on); default: "
                        "SHMSPEC_CONTRACT in the target module, else its model profile's; docs/ci.md#contracts")
    c.add_argument("--writer-lock", action="store_true",
                   help="build the writer with the readers' lock too (default: without, as vLLM builds it)")
    c.add_argument("--start-method", default="fork", choices=START_METHODS,
                   help="how the concurrent campaigns start reader processes (default fork); with --writer-lock "
                        "and --readers this is the primary construction, and the constructions campaign runs "
                        "the others")
    c.add_argument("--validate-traces", action="store_true",
                   help="record every session of the controlled campaign (with --concurrency free, one more "
                        "free-running load) and check each recorded run against "
                        "tla/ShmStore.tla with TLC (a run the spec cannot take is a CONFORMANCE finding; the spec "
                        "actions the runs reached are printed); docs/trace-validation.md")
    c.add_argument("--readers", type=int, default=2, choices=range(1, MAX_READERS + 1), metavar="N",
                   help="number of readers of the store (default 2)")
    c.add_argument("--report-dir", type=Path, default=None,
                   help="directory for report.json / report.html / repro_test.py "
                        "(default <reports>/<time>-<target>, see shmspec --help)")
    c.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                   help="known findings: a report.json of an earlier run or a baseline file (--write-baseline); "
                        "a finding whose fingerprint it has is reported as known and does not fail the run "
                        "(exit 0 unless a finding is new); docs/ci.md")
    c.add_argument("--write-baseline", type=Path, default=None, metavar="FILE",
                   help="write this run's findings as a baseline file (shmspec.baseline/2)")
    c.add_argument("--junit", type=Path, default=None, metavar="FILE",
                   help="also write JUnit XML: one testcase per property (failed, known and skipped told apart)")
    mg = sub.add_parser("merge", help="merge the report.json of every shard of a run (--shard i/n) into one report")
    mg.add_argument("reports", nargs="+", type=Path, metavar="REPORT",
                    help="a shard's report.json, or the report directory holding it; every shard of the run, once")
    mg.add_argument("--report-dir", type=Path, default=None,
                    help="directory for the merged report.json / report.html / repro_test.py "
                         "(default <reports>/<time>-merge-<target>)")
    for flag, what in (("--baseline", "as check's: judge the merged run against these known findings"),
                       ("--write-baseline", "write the merged run's findings as a baseline file"),
                       ("--junit", "also write the merged run's JUnit XML")):
        mg.add_argument(flag, type=Path, default=None, metavar="FILE", help=what)
    m = sub.add_parser("model", help="run TLC on the TLA+ spec's configs (tla/MC*.cfg) and judge them")
    m.add_argument("--protocol", default="ringbuffer", choices=("ringbuffer", "arena", "queue"),
                   help="whose spec: the object store's (tla/ShmStore.tla, default) or the slot-flag protocol's "
                        "(arena or queue: tla/slots/Slots.tla, every MC_slots*.cfg, TLC's states beside the model's "
                        "BFS)")
    m.add_argument("--tla-dir", type=Path, default=None, help="folder with ShmStore.tla and MC*.cfg (default: the repository's tla/)")
    m.add_argument("--config", default="MC*.cfg", help="glob of configs to run (default MC*.cfg)")
    m.add_argument("--deep", action="store_true",
                   help="run the larger configs of tla/deep/ (TLC only unless --agreement)")
    m.add_argument("--agreement", action=argparse.BooleanOptionalAction, default=None,
                   help="enumerate the Python model beside TLC and compare the states (default: on, off with --deep)")
    m.add_argument("--report-dir", type=Path, default=None,
                   help="directory for model.json and model.html (default <reports>/<time>-model)")
    m.add_argument("--target", default=None,
                   help="also replay every counterexample on this store (impl, file:PATH, vllm==X.Y.Z)")
    m.add_argument("--jobs", default="auto", metavar="N",
                   help="configs checked at once, each in its own process (N or auto: one per core; default auto); "
                        "the results do not depend on it")
    m.add_argument("--workers", default="1", metavar="N",
                   help="TLC worker threads for the runs that must hold (N or auto: one per core; default 1); "
                        "runs that must fail keep one, so their counterexamples stay the same")
    pr = sub.add_parser("prove", help="prove the model's ring arithmetic with z3 (obligations by property id)")
    pr.add_argument("--profile", default="impl", choices=sorted(_profiles()),
                    help="model profile the obligations are stated for (the ring arithmetic is shared by all)")
    pr.add_argument("--chunks", type=int, default=None,
                    help="live chunks unrolled in the inductive steps (default 4)")
    pr.add_argument("--report-dir", type=Path, default=None,
                    help="directory for prove.json (default <reports>/<time>-prove)")
    mu = sub.add_parser("mutants", help="run the gate on every seeded fault of impl; score caught / total")
    mu.add_argument("--only", default=None, help="comma-separated fault names (default: all; see --list)")
    mu.add_argument("--list", action="store_true", help="list the faults and the property each must be caught by")
    mu.add_argument("--jobs", default="auto", metavar="N",
                    help="faults run at once, each gate in its own process (N or auto: one per core; default auto)")
    _executor_args(mu, "the faults' gates", "--jobs at a time")
    mu.add_argument("--full", action="store_true",
                    help="run every campaign on every fault (default: a fault's gate stops at the first finding "
                         "of the property it names)")
    mu.add_argument("--protocol", default="ringbuffer", choices=("ringbuffer", "arena", "queue"),
                    help="whose faults: the object store's (default), or the slot-flag arena's or queue's")
    mu.add_argument("--profile", default="ci", choices=("smoke", "ci", "dev", "deep"), help="gate profile (default ci)")
    mu.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: the profile's)")
    mu.add_argument("--report-dir", type=Path, default=None,
                    help="directory for mutants.json and one gate report per fault (default <reports>/<time>-mutants)")
    mx = sub.add_parser("matrix", help="run the gate on every vLLM release that ships the store, and on impl")
    mx.add_argument("--releases", default="all",
                    help="all (default: every X.Y.Z release from --since), newest, or a comma list X.Y.Z,...")
    _executor_args(mx, "the cells' gates", "one after the other")
    mx.add_argument("--protocol", default="ringbuffer", choices=("ringbuffer", "arena", "queue"),
                    help="whose store: the object store (default), the slot-flag arena (shm_tensor_arena.py) or "
                         "queue (shm_broadcast.py)")
    mx.add_argument("--project", default="vllm", choices=("vllm", "sglang"),
                    help="whose releases: vLLM's (default), or SGLang's fork of the queue (with --protocol queue)")
    mx.add_argument("--since", default=None,
                    help="first release with --releases all/newest (default: the first shipping the protocol's "
                         "file: 0.11.0, arena 0.32.0, queue 0.5.0)")
    mx.add_argument("--profile", default="ci", choices=("smoke", "ci", "dev", "deep"), help="gate profile (default ci)")
    mx.add_argument("--concurrency", default=None, choices=("controlled", "free", "off"),
                    help="each gate's concurrency mode (default: the profile's)")
    mx.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: the profile's)")
    mx.add_argument("--report-dir", type=Path, default=None,
                    help="directory for matrix.json, matrix.html and one gate report per group (default "
                         "<reports>/matrix); the previous run's matrix.json/html and the group folders it lists "
                         "are removed first, nothing else")
    mx.add_argument("--no-impl", action="store_true",
                    help="leave impl out of the matrix; the exit status is then 0 when every cell ran (vLLM "
                         "verdicts never count), 2 when the matrix is incomplete")
    mx.add_argument("--index-url", default=None,
                    help="the package index's JSON API (default $SHMSPEC_INDEX_URL or https://pypi.org/pypi)")
    mx.add_argument("--list", action="store_true",
                    help="only resolve the releases and group them (fetching the store files); run no gate")
    va = sub.add_parser("validate", help="check recorded runs of a store (trace JSON) against the TLA+ spec with TLC "
                                         "(docs/trace-validation.md)")
    va.add_argument("traces", nargs="+", type=Path, metavar="TRACE",
                    help="a recorded run (ScheduledSession(record=True), or a store's own test: the format of "
                         "docs/trace-validation.md)")
    va.add_argument("--report-dir", type=Path, default=None,
                    help="directory for validate.json and validate.html (default <reports>/<time>-validate)")
    va.add_argument("--timeout", type=float, default=600.0, metavar="S",
                    help="seconds TLC may take per trace (default 600); past it the exit code is 2")
    va.add_argument("--itf", action="store_true",
                    help="also write each trace as ITF JSON (the trace format Apalache and Quint read): "
                         "itf/<trace>.itf.json in the report folder")
    va.add_argument("--coverage", action="store_true",
                    help="also show which parts of ShmStore.tla's steps the traces reach against what TLC reaches "
                         "in the model (MC_impl_reread.cfg), naming each part no trace reaches")
    pp = sub.add_parser("properties", help="the properties checked: statement, severity, checkers and where each "
                                           "judges it")
    pp.add_argument("ids", nargs="*", metavar="ID", help="property ids (default: the table of all)")
    pp.add_argument("--json", action="store_true", help="print the registry entries as JSON")
    pp.add_argument("--protocol", default="ringbuffer", metavar="NAME",
                    help="the store protocol whose properties to show (default ringbuffer; docs/protocols.md)")
    return p


def _profiles() -> list[str]:
    from shmspec.model.profile import PROFILES

    return list(PROFILES)


def prove(args: argparse.Namespace) -> int:
    """``shmspec prove``: exit 0 iff every obligation is proven, 1 otherwise."""
    from .proofs.prove import DEFAULT_CHUNKS
    from .commands.prove_report import run
    from .reporting.report import default_report_dir

    chunks = args.chunks if args.chunks is not None else DEFAULT_CHUNKS
    if chunks < 1:
        Console(stderr=True).print("shmspec: error: --chunks must be at least 1", markup=False, highlight=False)
        return EXIT_ERROR
    return run(_stdout_console(), Console(stderr=True), args.report_dir or default_report_dir("prove"), chunks, args.profile)


def mutants(args: argparse.Namespace) -> int:
    """``shmspec mutants``: exit 0 iff every fault is caught by the property
    it names, 1 otherwise, 2 on a usage error (unknown fault, unusable report
    directory), 130 interrupted."""
    from .commands.mutation import main as run_mutants_command

    return _interruptible(lambda: run_mutants_command(args, Console(), Console(stderr=True)))


def matrix(args: argparse.Namespace) -> int:
    """``shmspec matrix``: exit 0 when every cell ran and impl passes (vLLM
    releases failing is expected), 1 when impl has a violation, 2 when the
    matrix is incomplete or on a usage error (no release selected: ``--since``
    after the newest, ``--releases ,``), 3 when impl's verdict is unknown,
    130 interrupted.  With ``--no-impl``: 0 when every cell ran, else 2."""
    from .commands.matrix import main as run_matrix_command

    # the table has a column per property: off a terminal (CI logs, pipes) it is printed 200 columns wide
    out = Console() if sys.stdout.isatty() else Console(width=max(Console().width, 200))
    return _interruptible(lambda: run_matrix_command(args, out, Console(stderr=True)))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "check":
        return check(args)
    if args.command == "model":
        return model(args)
    if args.command == "prove":
        return prove(args)
    if args.command == "mutants":
        return mutants(args)
    if args.command == "matrix":
        return matrix(args)
    if args.command == "merge":
        from .commands.merge import main as merge_command
        return merge_command(args, _stdout_console(), Console(stderr=True))
    if args.command == "validate":
        return validate(args)
    if args.command == "properties":
        from .commands.properties import main as properties_command
        return properties_command(args.ids, args.json, Console(), Console(stderr=True), args.protocol)
    return EXIT_ERROR  # pragma: no cover - argparse requires a command


def _canonical_target(spec: str) -> str:
    if spec.startswith("file:"):
        return "file:" + os.path.abspath(spec[5:])
    return spec


def _terminate_as_interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
    # recorded first (conformance/core/interrupt.py): if Python swallows the
    # KeyboardInterrupt, the gate's next step raises it again
    interrupt.record(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def check(args: argparse.Namespace) -> int:
    """``shmspec check``; SIGTERM (a CI job cancelled) and Ctrl-C stop the run
    with every worker process stopped and every segment unlinked (exit 130)."""
    return _interruptible(lambda: _check(args))


def _interruptible(run: Callable[[], int]) -> int:
    """``run()`` with SIGTERM (a CI job cancelled) treated as Ctrl-C: either
    stops it with every worker process stopped and every segment unlinked,
    and gives exit 130."""
    interrupt.reset()
    previous = {}
    try:  # handlers installed inside the try: a signal between the two installations is caught too
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, _terminate_as_interrupt)
        status = run()
        interrupt.check()  # the KeyboardInterrupt was swallowed somewhere: still no verdict
        return status
    except KeyboardInterrupt:
        Console(stderr=True).print("shmspec: interrupted; worker processes stopped, segments removed",
                                   markup=False, highlight=False)
        return EXIT_INTERRUPTED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _check(args: argparse.Namespace) -> int:
    from shmspec import api

    from . import protocols
    from .core.errors import TargetError, UsageError
    from .reporting import outcomes as judged
    from .reporting.report import default_report_dir

    console = _stdout_console()
    err = Console(stderr=True)
    spec = _canonical_target(args.target)
    try:  # a bad baseline or unit setting is found before minutes of work
        api.validate_units(args.profile, args.seed, args.seeds, args.workers, args.shard, args.example_db,
                           args.contract)
        from .runner import executors

        if executors.make(args.executor, args.address) is not None and args.workers != 1:  # before any fetch
            raise UsageError("--workers applies to --executor local; on Ray the cluster's CPUs decide how many "
                             "units run at once")
        baseline = judged.Baseline.load(args.baseline) if args.baseline is not None else None
    except UsageError as exc:
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    try:
        with err.status(f"loading target {spec}"):
            target = protocols.load(spec)  # the protocol the spec names (default: the ring buffer)
    except TargetError as exc:
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    from shmspec.model.profile import Profile

    if args.contract is not None and not isinstance(getattr(target, "profile", None), Profile):
        err.print(f"shmspec: error: --contract: {spec}'s protocol declares no contracts", markup=False,
                  highlight=False, soft_wrap=True)
        return EXIT_ERROR
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    report_dir = args.report_dir or default_report_dir(spec)
    problem = _prepare_report_dir(report_dir)
    if problem:
        err.print(f"shmspec: error: {problem}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    run = dict(profile=args.profile, seed=args.seed, concurrency=args.concurrency, writer_lock=args.writer_lock,
               start_method=args.start_method, readers=args.readers, seeds=args.seeds, workers=args.workers,
               shard=args.shard, example_db=args.example_db, contract=args.contract, executor=args.executor,
               address=args.address, validate_traces=args.validate_traces)
    if err.is_terminal:  # a bar that redraws itself
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=err,
                      transient=True) as progress:
            task = progress.add_task("campaigns", total=None)

            def on_progress(name: str, done: int, total: int) -> None:
                progress.update(task, total=total, completed=done,
                                description=name if name.startswith("seed") else f"campaign {name}")

            result = _run_check(api, target, on_progress, run, err)
    else:  # a CI log: one line per campaign as it starts, with the time so far
        result = _run_check(api, target, _progress_lines(err), run, err)
    if result is None:
        return EXIT_ERROR
    interrupt.check()  # a signal whose KeyboardInterrupt was swallowed: no report, no verdict
    source = str(target.source) if target.source else None
    return report_and_judge(console, err, result, report_dir, started, source, baseline,
                            junit=args.junit, write_baseline=args.write_baseline)


def _run_check(api: Any, target: Any, on_progress: Callable, run: dict, err: Console) -> Any:
    """``api.check``; None (after the one-line error) when the run's settings
    do not fit the loaded target (a contract for a protocol without one)."""
    from .core.errors import UsageError

    try:
        return api.check(target, on_progress=on_progress, **run)
    except UsageError as exc:
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return None


def _progress_lines(err: Console) -> Callable[[str, int, int], None]:
    """``on_progress`` for a console that is not a terminal: ``shmspec:
    [  12.3 s] campaign 2/15 stale`` when a campaign starts, then ``shmspec:
    [  85.0 s] campaigns done``."""
    import time

    t0 = time.monotonic()

    def on_progress(name: str, done: int, total: int) -> None:
        if name.startswith("seed"):  # a run of seed units: one line as it starts, one as each unit ends
            what = name
        else:
            what = "campaigns done" if name == "done" else f"campaign {done + 1}/{total} {name}"
        err.print(f"shmspec: [{time.monotonic() - t0:7.1f} s] {what}", markup=False, highlight=False, soft_wrap=True)

    return on_progress


def _stdout_console() -> Console:
    """The report's console: on a terminal, its width; in a log or a pipe,
    ``$COLUMNS`` if set, else 160 columns (the summary keeps its statement
    column, the lanes their width)."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=160)


def validate(args: argparse.Namespace) -> int:
    """``shmspec validate``: exit 0 when TLC accepts every trace, 1 when one
    departs from the spec, 2 when a file is not a trace or TLC cannot run."""
    from .commands.validate import main as validate_command
    from .reporting.report import default_report_dir

    console, err = _stdout_console(), Console(stderr=True)
    report_dir = args.report_dir or default_report_dir("validate")
    problem = _prepare_report_dir(report_dir)
    if problem:
        err.print(f"shmspec: error: {problem}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    return validate_command(args, console, err, report_dir)


def model(args: argparse.Namespace) -> int:
    """``shmspec model``: exit 0 when every config does what its ``Expected:``
    line says (what should hold holds, what should fail fails), the model's
    states equal TLC's and the model follows every counterexample; 1
    otherwise; 2 when TLC cannot run or the ``--target`` cannot be loaded.
    Where a target departs from a counterexample is reported, not judged
    (a hardened store should depart from vLLM's counterexamples)."""
    from .commands import modelcheck
    from .targets.loader import TargetError
    from .reporting.report import default_report_dir
    from .spec.tlc import TlcError

    from .core.config import count_or_auto
    from .core.errors import UsageError

    console, err = _stdout_console(), Console(stderr=True)
    try:
        workers, jobs = count_or_auto(args.workers, "--workers"), count_or_auto(args.jobs, "--jobs")
    except UsageError as exc:
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    report_dir = args.report_dir or default_report_dir("model-deep" if args.deep else "model")
    problem = _prepare_report_dir(report_dir)
    if problem:
        err.print(f"shmspec: error: {problem}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    if getattr(args, "protocol", "ringbuffer") != "ringbuffer":
        return _model_slots(args, console, err, report_dir, workers)
    agree = not args.deep if args.agreement is None else args.agreement
    try:
        with err.status("running TLC") as status:
            outcomes = modelcheck.run(args.tla_dir, args.config, deep=args.deep, agree=agree,
                                      on_config=lambda name: status.update(f"TLC and the model on {name}"),
                                      target=_canonical_target(args.target) if args.target else None,
                                      workers=workers, jobs=jobs)
    except (TlcError, TargetError, ValueError) as exc:
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    modelcheck.write(outcomes, report_dir)
    modelcheck.render(console, outcomes, report_dir, panels=False)
    return EXIT_PASS if all(o.ok for o in outcomes) else EXIT_FAIL


def _model_slots(args, console, err, report_dir, workers: int) -> int:
    """``shmspec model --protocol arena|queue``: TLC and the model's BFS on
    every ``tla/slots/MC_slots*.cfg`` (``--config`` narrows; default
    ``MC_slots*.cfg``); exit 0 when each does what its ``Expected:`` line
    says and the state counts agree, else 1; 2 when TLC cannot run."""
    from .commands import modelcheck
    from .spec.tlc import TlcError

    pattern = args.config if args.config != "MC*.cfg" else "MC_slots*.cfg"
    if args.deep or args.target or args.tla_dir:
        err.print("shmspec: error: --deep, --target and --tla-dir are the object store's (not with --protocol "
                  f"{args.protocol})", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    try:
        with err.status("running TLC") as status:
            outcomes = modelcheck.run_slots(pattern, lambda name: status.update(f"TLC and the model on {name}"),
                                            workers)
    except (TlcError, ValueError, KeyError) as exc:
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    from .reporting.report import verdict_line

    path = modelcheck.write_slots(outcomes, report_dir)
    console.print(modelcheck.slots_table(outcomes))
    n_ok = sum(o.ok for o in outcomes)
    console.print(verdict_line(modelcheck.model_verdict(n_ok == len(outcomes)),
                               f"{n_ok}/{len(outcomes)} configs as their Expected: line states", path), soft_wrap=True)
    return EXIT_PASS if n_ok == len(outcomes) else EXIT_FAIL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
