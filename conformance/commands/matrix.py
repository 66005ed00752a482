"""The release matrix (``shmspec matrix``): the gate on every vLLM release
that ships the store, and on impl, as one findings table.

Resolution (:func:`resolve`): the index's JSON API lists the releases
(plain ``X.Y.Z``, from ``--since``, never before 0.11.0); each release's store
file is fetched once into the user cache (:func:`.loader.fetch_store`: range
requests, pip as the fallback).  Releases are grouped by (sha256 of the store
file, model profile): byte-identical files judged by the same profile are one
group, run once under the group's first release and reported together.

Running (:func:`run_matrix`): one ``shmspec check`` per group, each in a fresh
process (:data:`GATE_COMMAND`), its report in ``<report dir>/<group dir>/``;
each cell (group x property) is read back from that ``report.json``.

Outputs: ``matrix.json`` (schema ``shmspec.matrix/1``, reports/README.md) and
``matrix.html`` in the report directory (default ``reports/matrix``), the same
table on the console.  Before a run, the previous run's output there is
removed (:func:`clear_previous`: its matrix.json/html and the group folders
its matrix.json lists), so no stale group folder is left beside the new
ones; nothing else in the directory is touched.  Exit status: :func:`exit_status`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.style import Style
from rich.table import Table
from rich.text import Text

from shmspec.model.profile import profile_for_vllm

from ..core import paths
from ..core.constructions import Construction
from ..core.documents import header
from ..core.errors import ExitCode
from ..core.results import ALL_PROPERTIES
from ..targets.loader import STORE_FILE, NoStoreFile, TargetError, fetch_store, index_releases, index_url

SCHEMA = "shmspec.matrix/1"
COLUMNS: tuple[str, ...] = ALL_PROPERTIES
FIRST_RELEASE = "0.11.0"
"""The first vLLM release with the store."""
DEFAULT_REPORT_DIR = Path("reports") / "matrix"
"""Where the matrix went before 2026-12-02 (relative to the current
directory); the default is now :func:`default_report_dir` (``matrix/`` under
:func:`..core.paths.report_root`)."""


def default_report_dir() -> Path:
    """``matrix/`` under the report root (the checkout's ``reports/``,
    ``$SHMSPEC_REPORT_DIR`` or the user cache)."""
    return paths.report_root() / "matrix"

GATE_COMMAND: list[str] = [sys.executable, "-m", "shmspec.conformance.cli", "check"]
"""How a cell's gate is started (``--target``, ``--profile`` ... are appended);
each cell is exactly a ``shmspec check`` run.  Tests substitute a smaller gate."""

CELL_STYLE = {"pass": ("pass", "green"), "fail": ("FAIL", "bold red"), "not-checked": ("n/c", "yellow"),
              "not-claimed": ("n/cl", "cyan"),
              "unknown": ("?", "bold yellow")}
VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "error": "bold magenta", "unknown": "bold yellow"}


@dataclass(frozen=True)
class MatrixProtocol:
    """What the matrix needs of one protocol: the wheel members a release's
    target is made of (the first names the release's store file), the first
    release that ships it, how a release's target is named, its property
    columns, its model profile per release, and impl's cells (label, target,
    folder, writer lock)."""

    name: str
    members: tuple[str, ...]
    first_release: str
    target_prefix: str
    columns: tuple[str, ...]
    impl_cells: tuple[tuple[str, str, str, bool], ...]
    project: str = "vllm"
    """Whose releases: ``vllm``, or ``sglang`` (its fork of the queue)."""

    def model_profile(self, version: str) -> str:
        return profile_for_vllm(version).name if self.name == "ringbuffer" else "slots-0.33"


def matrix_protocol(name: str = "ringbuffer", project: str = "vllm") -> MatrixProtocol:
    """The matrix's view of protocol ``name`` (``ringbuffer``, ``arena``,
    ``queue``) over ``project``'s releases (``vllm``; ``sglang``: the queue only).

    Raises:
        ValueError: another name, or a project that does not ship the protocol's store."""
    if project not in ("vllm", "sglang"):
        raise ValueError(f"the matrix knows the projects vllm and sglang, not {project!r}")
    if project == "sglang":
        if name != "queue":
            raise ValueError(f"SGLang ships only the queue (--protocol queue), not the {name}")
        from ..protocols import get
        from ..protocols.slots.targets import SGLANG_BROADCAST_FILE

        return MatrixProtocol(name, (SGLANG_BROADCAST_FILE,), "0.1.0", "sglang-queue==", get(name).property_ids,
                              (("impl-queue", "impl-queue", "impl-queue", False),), "sglang")
    if name == "ringbuffer":
        return MatrixProtocol(name, (STORE_FILE,), FIRST_RELEASE, "vllm==", ALL_PROPERTIES,
                              (("impl", "impl", "impl", False), ("impl +writer lock", "impl", "impl-writer-lock",
                                                                 True)))
    if name in ("arena", "queue"):
        from ..protocols import get
        from ..targets.slotfiles import ARENA_FILE, BROADCAST_FILE

        members = (ARENA_FILE, BROADCAST_FILE) if name == "arena" else (BROADCAST_FILE,)
        return MatrixProtocol(name, members, SLOT_FIRST_RELEASE[name], f"vllm-{name}==", get(name).property_ids,
                              ((f"impl-{name}", f"impl-{name}", f"impl-{name}", False),))
    raise ValueError(f"the matrix knows the protocols ringbuffer, arena and queue, not {name!r}")


SLOT_FIRST_RELEASE = {"arena": "0.32.0", "queue": "0.5.0"}
"""The first release each slot store's matrix starts from by default: the
arena shipped in 0.32.0 (vllm#51207); ``shm_broadcast.py``'s MessageQueue
ring is older (releases without the file are listed as such)."""


def version_key(v: str) -> tuple[int, ...]:
    """``"0.11.2"`` -> ``(0, 11, 2, -1)``; a post release ``"0.4.3.post2"``
    -> ``(0, 4, 3, 2)`` (after its release).  Raises ValueError otherwise."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", v)
    if not m:
        raise ValueError(f"not a release number X.Y.Z: {v!r}")
    return (int(m[1]), int(m[2]), int(m[3]), int(m[4]) if m[4] is not None else -1)


@dataclass
class Group:
    """Releases whose store files are byte-identical and judged by one model profile."""

    versions: list[str]
    sha256: str
    model_profile: str
    source: Path
    label: str = ""
    target_prefix: str = "vllm=="

    @property
    def target(self) -> str:
        return f"{self.target_prefix}{self.versions[0]}"

    @property
    def dirname(self) -> str:
        return f"{self.target_prefix.rstrip('=')}-{self.versions[0]}"


@dataclass
class Resolution:
    """What :func:`resolve` found: ``versions`` (selected, ascending), the
    ``groups`` (by first release), ``without_store`` (``{"version", "reason"}``),
    ``fetches`` (one :func:`.loader.fetch_store` record per release with a
    store file, plus ``version``) and ``errors`` (releases that could not be
    fetched: the matrix is incomplete)."""

    versions: list[str]
    groups: list[Group] = field(default_factory=list)
    without_store: list[dict[str, str]] = field(default_factory=list)
    fetches: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    protocol: MatrixProtocol = field(default_factory=lambda: matrix_protocol())


def select_versions(releases: dict[str, list[dict]], which: str = "all", since: str = FIRST_RELEASE,
                    first: str = FIRST_RELEASE, posts: bool = False) -> list[str]:
    """The releases to run, ascending.  ``which``: ``all`` (every plain X.Y.Z
    release from ``since``, never before 0.11.0), ``newest`` (the newest of
    those) or a comma list of X.Y.Z (each must be on the index; ``since`` does
    not apply).

    Raises:
        ValueError: a malformed version, one not on the index or before
            0.11.0; or no release selected (``--since`` after the newest).
    """
    if which not in ("all", "newest"):
        chosen = sorted({v.strip() for v in which.split(",") if v.strip()}, key=version_key)
        if not chosen:
            raise ValueError("--releases names no release")
        for v in chosen:
            if first == FIRST_RELEASE:
                profile_for_vllm(v)  # ValueError: predates the store
            if v not in releases:
                raise ValueError(f"vllm {v} is not on the index")
        return chosen
    floor = max(version_key(since), version_key(first))
    pattern = r"\d+\.\d+\.\d+(\.post\d+)?" if posts else r"\d+\.\d+\.\d+"
    plain = sorted((v for v in releases if re.fullmatch(pattern, v) and version_key(v) >= floor),
                   key=version_key)
    if not plain:
        raise ValueError(f"no release selected: the index lists no release X.Y.Z from "
                         f"{'.'.join(map(str, floor[:3]))} (--since {since})")
    return plain[-1:] if which == "newest" else plain


def label_runs(versions: list[str], ordered: list[str]) -> str:
    """``versions`` as runs of consecutive entries of ``ordered``: ``"0.11.0–0.11.2, 0.13.0"``."""
    pos = sorted(ordered.index(v) for v in versions)
    runs: list[list[int]] = []
    for i in pos:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(ordered[r[0]] if len(r) == 1 else f"{ordered[r[0]]}–{ordered[r[-1]]}" for r in runs)


def resolve(which: str = "all", since: str | None = FIRST_RELEASE, index: str | None = None,
            on_release: Callable[[int, int, str], None] | None = None, protocol: str = "ringbuffer",
            project: str = "vllm") -> Resolution:
    """List the releases on the index, fetch (or reuse) each store file and
    group them.  ``on_release(i, total, version)`` before each fetch.

    Raises:
        TargetError: the index cannot be listed.
        ValueError: a bad ``which`` or ``since``.
    """
    mp = matrix_protocol(protocol, project)
    releases = index_releases(index, mp.project)
    res = Resolution(select_versions(releases, which, since or mp.first_release, mp.first_release,
                                     posts=mp.project != "vllm"), protocol=mp)
    by_key: dict[tuple[str, str], Group] = {}
    for i, v in enumerate(res.versions):
        if on_release:
            on_release(i, len(res.versions), v)
        if not releases[v]:
            res.without_store.append({"version": v, "reason": "no files on the index"})
            continue
        try:
            fetched = [fetch_store(v, releases[v], index, member, mp.project) for member in mp.members]
        except NoStoreFile as exc:
            res.without_store.append({"version": v, "reason": str(exc)})
            continue
        except TargetError as exc:
            res.errors.append(f"{mp.project} {v}: {exc}")
            continue
        path, record = fetched[0]
        res.fetches.append({"version": v, **record})
        digest = hashlib.sha256(b"".join(p.read_bytes() for p, _ in fetched)).hexdigest()
        key = (digest, mp.model_profile(v))
        if key in by_key:
            by_key[key].versions.append(v)
        else:
            by_key[key] = Group([v], key[0], key[1], path, target_prefix=mp.target_prefix)
    with_store = [f["version"] for f in res.fetches]
    res.groups = sorted(by_key.values(), key=lambda g: version_key(g.versions[0]))
    for g in res.groups:
        g.label = label_runs(g.versions, with_store)
    return res


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


GROUP_DIR = re.compile(r"impl|impl-writer-lock|vllm-\d+\.\d+\.\d+")
"""The names of the group folders matrix writes (:attr:`Group.dirname`, ``impl``,
``impl-writer-lock``)."""
GATE_FILES = ("check.log", "report.json", "report.html", "repro_test.py")
"""What a cell's folder holds: the gate's log and its report files."""


def clear_previous(report_dir: Path) -> list[str]:
    """Remove the previous run's output from ``report_dir``: ``matrix.json``,
    ``matrix.html`` and the group folders that run's ``matrix.json`` lists
    (only the files a cell writes, :data:`GATE_FILES`; a folder is removed
    when that leaves it empty).  Nothing else is touched: a folder that
    matrix.json does not name, or a file a cell did not write, stays.
    Returns the folders removed (names).

    Raises:
        OSError: a file could not be removed.
    """
    try:
        rows = json.loads((report_dir / "matrix.json").read_text()).get("rows", [])
    except (OSError, ValueError, AttributeError):
        rows = []
    names = set()
    for row in rows if isinstance(rows, list) else []:
        first = str((row or {}).get("log") or "").split("/")[0] if isinstance(row, dict) else ""
        if GROUP_DIR.fullmatch(first):
            names.add(first)
    removed = []
    for name in sorted(names):
        folder = report_dir / name
        if not folder.is_dir() or folder.is_symlink():
            continue
        for f in GATE_FILES:
            (folder / f).unlink(missing_ok=True)
        if not any(folder.iterdir()):
            folder.rmdir()
            removed.append(name)
    for name in ("matrix.json", "matrix.html"):
        (report_dir / name).unlink(missing_ok=True)
    return removed


def _start_deferring_signals(cmd: list[str], out: Any, env: dict[str, str]) -> tuple[Any, list[int]]:
    """``Popen`` the gate with SIGINT and SIGTERM held back until it returns
    (in the main thread; elsewhere as is): an interrupt that arrived while
    the process was being started would otherwise leave it running with no
    handle to stop it (seen under load, 2026-12-04).  Returns the process
    and the signals that arrived meanwhile, for the caller to act on."""
    import threading  # noqa: PLC0415

    if threading.current_thread() is not threading.main_thread():
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env), []
    got: list[int] = []
    saved = {sig: signal.signal(sig, lambda signum, frame: got.append(signum))
             for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    return proc, got


def run_cell(target: str, cell_dir: Path, profile: str, seed: int | None, concurrency: str | None,
             env: dict[str, str] | None = None, writer_lock: bool = False,
             columns: tuple[str, ...] = COLUMNS) -> dict[str, Any]:
    """One ``shmspec check`` of ``target`` in a fresh process, writing its
    report into ``cell_dir`` and its console output to ``cell_dir/check.log``.
    ``writer_lock`` runs the gate's ``--writer-lock`` construction.
    Returns the row's gate part: ``verdict``, ``properties``, ``seconds``
    (the gate's), ``wall_seconds``, ``exit_code``, ``error`` (the last log line
    when there is no report, else null).

    Raises:
        KeyboardInterrupt: interrupted (the gate is stopped with SIGTERM, so it
            stops its workers and removes its segments), or the gate exited 130.
    """
    cell_dir.mkdir(parents=True, exist_ok=True)
    for name in ("report.json", "report.html", "repro_test.py"):  # a failed load must not leave old ones
        (cell_dir / name).unlink(missing_ok=True)
    cmd = [*GATE_COMMAND, "--target", target, "--profile", profile, "--report-dir", str(cell_dir)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if concurrency:
        cmd += ["--concurrency", concurrency]
    if writer_lock:
        cmd += ["--writer-lock"]
    log = cell_dir / "check.log"
    t0 = time.monotonic()
    with open(log, "w") as out:
        proc, deferred = _start_deferring_signals(cmd, out, {**os.environ, "COLUMNS": "140", **(env or {})})
        try:
            if deferred:  # Ctrl-C or SIGTERM while the gate was being started: now it can be stopped
                handler = signal.getsignal(deferred[0])
                if callable(handler):
                    handler(deferred[0], None)  # Python's SIGINT handler, or the CLI's: KeyboardInterrupt
                elif handler != signal.SIG_IGN:
                    raise KeyboardInterrupt(f"signal {deferred[0]}")
            code = proc.wait()
        except BaseException:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            raise
    wall = time.monotonic() - t0
    if code == 130:
        raise KeyboardInterrupt(f"the gate of {target} was interrupted")
    try:
        data = json.loads((cell_dir / "report.json").read_text())
    except (OSError, ValueError):
        return {"verdict": "error", "properties": {p: "not-checked" for p in columns}, "seconds": None,
                "wall_seconds": round(wall, 2), "exit_code": code,
                "error": _last_line(log) or f"the gate exited {code} without a report"}
    props = data.get("properties", {})
    return {"verdict": data.get("verdict", "error"),
            "properties": {p: props.get(p, "not-checked") for p in columns},
            "seconds": data.get("seconds"), "wall_seconds": round(wall, 2), "exit_code": code,
            "error": "; ".join(data.get("errors") or []) or None}


@dataclass
class MatrixResult:
    """A matrix run: ``rows`` (one per group, impl last; see reports/README.md)."""

    profile: str
    seed: int | None
    concurrency: str | None
    started: str
    resolution: Resolution
    index_url: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    executor: str = "local"
    """Where the cells ran: ``local`` (one after the other) or ``ray (ADDRESS)``."""

    def to_json(self) -> dict[str, Any]:
        r = self.resolution
        return {
            **header(SCHEMA, "matrix"),
            "started": self.started,
            "seconds": round(self.seconds, 2),
            "executor": self.executor,
            "profile": self.profile,
            "concurrency": self.concurrency,
            "seed": self.seed,
            "index_url": self.index_url,
            "protocol": r.protocol.name,
            "properties": list(r.protocol.columns),
            "releases": r.versions,
            "rows": self.rows,
            "releases_without_store": r.without_store,
            "fetches": r.fetches,
            "errors": r.errors,
            "exit_status": exit_status(self.rows, r.errors),
        }


MATRIX_VERDICT = {ExitCode.PASS: "pass", ExitCode.FAIL: "fail", ExitCode.ERROR: "error", ExitCode.UNKNOWN: "unknown"}
"""The matrix's verdict line per :func:`exit_status`."""


def exit_status(rows: list[dict[str, Any]], errors: list[str]) -> int:
    """1 when an impl row fails (either construction); else 2 when the matrix
    is incomplete (a release not fetched, a cell whose verdict is ``error``);
    else 3 when an impl row's verdict is ``unknown``; else 0.  vLLM rows failing do not count:
    the releases have known defects."""
    impls = [r for r in rows if r["releases"] == ["impl"]]
    if any(r["verdict"] == "fail" for r in impls):
        return ExitCode.FAIL
    if errors or any(r["verdict"] == "error" for r in rows):
        return ExitCode.ERROR
    if any(r["verdict"] == "unknown" for r in impls):
        return ExitCode.UNKNOWN
    return ExitCode.PASS


_CELL_FILES = ("report.json", "report.html", "repro_test.py", "check.log")


def _cell_task(target: str, profile: str, seed: int | None, concurrency: str | None, env: dict[str, str],
               writer_lock: bool, columns: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """One cell as an executor's task: :func:`run_cell` in a temporary folder
    of the node it runs on; the row's gate part and the cell's files."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="shmspec-cell-") as tmp:
        cell = Path(tmp) / "cell"
        gate = run_cell(target, cell, profile, seed, concurrency, env, writer_lock, columns)
        files = {n: (cell / n).read_bytes() for n in _CELL_FILES if (cell / n).is_file()}
    return gate, files


def _on_executor(executor, cells: list[tuple], row_of, report_dir: Path, profile: str, seed: int | None,
                 concurrency: str | None, env: dict[str, str], columns: tuple[str, ...], on_cell, on_done
                 ) -> list[dict[str, Any]]:
    """Every cell as a task of ``executor``; the rows in cell order.  A task
    that ended without a result is an ``error`` cell (the matrix exits 2)."""
    from ..runner.executors import Task

    tasks = [Task(f"cell {c[0]}", _cell_task, (c[2], profile, seed, concurrency, env, c[6], columns)) for c in cells]
    for i, c in enumerate(cells):
        if on_cell:
            on_cell(i, len(cells), c[0], c[2])
    rows: dict[int, dict[str, Any]] = {}

    def done(i: int, result: Any) -> None:
        folder = report_dir / cells[i][5]
        folder.mkdir(parents=True, exist_ok=True)
        for name in _CELL_FILES:
            (folder / name).unlink(missing_ok=True)
        if isinstance(result, str):
            (folder / "check.log").write_text(result + "\n")
            gate = {"verdict": "error", "properties": {p: "not-checked" for p in columns}, "seconds": None,
                    "wall_seconds": None, "exit_code": None, "error": result}
        else:
            gate, files = result
            for name, data in files.items():
                (folder / name).write_bytes(data)
        rows[i] = row_of(cells[i], gate)
        if on_done:
            on_done(rows[i])

    executor.map(tasks, done)
    return [rows[i] for i in range(len(cells))]


def run_matrix(res: Resolution, report_dir: Path, profile: str = "ci", seed: int | None = None,
               concurrency: str | None = None, impl: bool = True, index: str | None = None, started: str = "",
               on_cell: Callable[[int, int, str, str], None] | None = None,
               on_done: Callable[[dict[str, Any]], None] | None = None, executor=None) -> MatrixResult:
    """Run each group's gate (and impl's, unless ``impl`` is false) one after
    the other.  ``on_cell(i, total, label, target)`` before each gate,
    ``on_done(row)`` after it.  Report paths in rows are relative to ``report_dir``.
    ``executor`` (:class:`~shmspec.conformance.runner.executors.RayExecutor`):
    every cell is a task on that cluster at once (each node fetches its
    releases into its own cache), its report files sent back into the cell's
    folder; ``on_cell`` is called for every cell as the tasks are submitted,
    ``on_done`` as each ends; the rows stay in cell order."""
    out = MatrixResult(profile, seed, concurrency, started, res, (index or index_url()).rstrip("/"))
    env = {"SHMSPEC_INDEX_URL": index} if index else {}
    cells: list[tuple[str, list[str], str, str | None, str, str, bool]] = [
        (g.label, g.versions, g.target, g.sha256, g.model_profile, g.dirname, False) for g in res.groups]
    mp = res.protocol
    if impl:  # ring buffer: impl in both constructions (as vLLM builds its writer, and given the readers' lock)
        for label, target, dirname, lock in mp.impl_cells:
            cells.append((label, ["impl"], target, None, "impl" if mp.name == "ringbuffer" else "slots-0.33",
                          dirname, lock))
    t0 = time.monotonic()
    ring = mp.name == "ringbuffer"

    def row_of(cell: tuple, gate: dict[str, Any]) -> dict[str, Any]:
        label, versions, target, sha, model_profile, dirname, writer_lock = cell
        has_report = (report_dir / dirname / "report.json").is_file()
        row = {"label": label, "releases": list(versions), "target": target, "store_sha256": sha,
               "model_profile": model_profile,
               "construction": (Construction(writer_lock=writer_lock) if ring else
                                Construction(False, "one-process")).to_json(), **gate,
               "report": f"{dirname}/report.html" if has_report else None,
               "report_json": f"{dirname}/report.json" if has_report else None,
               "log": f"{dirname}/check.log"}
        if not ring:  # the fences read from the file, and the model's verdict per store order
            from ..protocols.slots import fences

            source = next((g.source for g in res.groups if g.dirname == dirname), None)
            row["memory_order"] = (fences.memory_order(source, mp.name) if source is not None else
                                   fences.memory_order(None, mp.name, fences.IMPL_FENCES))
        return row

    if executor is not None:
        out.executor = executor.describe()
        out.rows = _on_executor(executor, cells, row_of, report_dir, profile, seed,
                                concurrency if ring else None, env, mp.columns, on_cell, on_done)
    for i, cell in enumerate(cells if executor is None else ()):
        label, _, target, _, _, dirname, writer_lock = cell
        if on_cell:
            on_cell(i, len(cells), label, target)
        gate = run_cell(target, report_dir / dirname, profile, seed, concurrency if ring else None,
                        env, writer_lock, mp.columns)
        row = row_of(cell, gate)
        out.rows.append(row)
        if on_done:
            on_done(row)
    out.seconds = time.monotonic() - t0
    return out


def failing(row: dict[str, Any], columns: tuple[str, ...] | None = None) -> list[str]:
    """The row's failing property ids, in column order (``columns``: the
    protocol's; default the row's own)."""
    return [p for p in (columns or tuple(row["properties"])) if row["properties"].get(p) == "fail"]


def matrix_table(res: MatrixResult, link_root: Path | str | None = None) -> Table:
    """Rows = groups (impl last), columns = properties; each cell links to
    its report: ``link_root`` is prefixed to the row's relative path (a
    ``file://`` URI for the console, ``""`` for the HTML beside the reports,
    None: no links)."""
    seed = "the profile's" if res.seed is None else res.seed
    concurrency = res.concurrency or "the profile's"
    columns = res.resolution.protocol.columns
    what = "" if res.resolution.protocol.name == "ringbuffer" else f" ({res.resolution.protocol.name})"
    who = "SGLang" if res.resolution.protocol.project == "sglang" else "vLLM"
    t = Table(title=f"shmspec matrix{what}: {who} releases x properties (gate profile {res.profile}, concurrency "
                    f"{concurrency}, seed {seed})", title_justify="left")
    t.add_column("releases", overflow="fold", min_width=13)
    t.add_column("model", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    for p in columns:
        t.add_column(p, no_wrap=True, justify="center")
    orders = res.resolution.protocol.name != "ringbuffer"
    if orders:  # the memory-order column: fences read from the file, the model's verdict under TSO and PSO
        from ..protocols.slots import fences as _fences

        t.add_column("fences", no_wrap=True)
        t.add_column("TSO", no_wrap=True)
        t.add_column("PSO", no_wrap=True)
    t.add_column("gate s", justify="right", no_wrap=True)
    for i, row in enumerate(res.rows):
        link = f"{link_root}{row['report']}" if link_root is not None and row["report"] else None

        def styled(word: str, style: str) -> Text:
            return Text(word, style=Style.parse(style) + Style(link=link) if link else style)

        verdict = styled(row["verdict"], VERDICT_STYLE.get(row["verdict"], ""))
        cells = [styled(*CELL_STYLE.get(row["properties"].get(p, "not-checked"), ("?", ""))) for p in columns]
        secs = "-" if row["seconds"] is None else f"{row['seconds']:.0f}"
        if orders:
            mo = row.get("memory_order") or {}
            cells += [", ".join(mo.get("fences") or []) or "none", _fences.cell(mo, "tso"), _fences.cell(mo, "pso")]
        t.add_row(styled(row["label"], ""), row["model_profile"], verdict, *cells, secs,
                  end_section=(i + 1 < len(res.rows) and res.rows[i + 1]["releases"] == ["impl"]))
    return t


LEGEND = ("pass: holds   FAIL: violated   n/c: not checked (no campaign checking it could run on that store)   "
          "?: unknown (out of budget)   n/cl: not claimed by the store's contract (SW: its writer is one thread's)   "
          "each cell links to its gate report")


def summary_lines(res: MatrixResult) -> list[str]:
    n_rel = sum(len(r["releases"]) for r in res.rows if r["releases"] != ["impl"])
    n_groups = sum(1 for r in res.rows if r["releases"] != ["impl"])
    lines = [f"{n_rel} release(s) in {n_groups} group(s) of identical store files; wall time {res.seconds:.0f} s",
             fetches_line(res.resolution)]
    for w in res.resolution.without_store:
        lines.append(f"without the store: {res.resolution.protocol.project} {w['version']}: {w['reason']}")
    for e in res.resolution.errors:
        lines.append(f"not fetched: {e}")
    for r in res.rows:
        if r["error"] and r["verdict"] == "error":
            lines.append(f"{r['label']}: gate error: {r['error']}")
        elif r["error"]:  # a fail also had campaigns that could not run: say so, the verdict alone hides it
            lines.append(f"{r['label']}: {r['verdict']}, and campaigns that did not run: {r['error']}")
    for impl in (r for r in res.rows if r["releases"] == ["impl"]):
        lines.append(f"{impl['label']}: {impl['verdict'].upper()}"
                     + (f" ({', '.join(failing(impl))})" if failing(impl) else ""))
    return lines


def write_json(res: MatrixResult, report_dir: Path) -> Path:
    """Write ``matrix.json`` (schema ``shmspec.matrix/1``); return its path."""
    path = report_dir / "matrix.json"
    path.write_text(json.dumps(res.to_json(), indent=2) + "\n")
    return path


def write_html(res: MatrixResult, report_dir: Path, width: int = 150) -> Path:
    """Write ``matrix.html`` (the table, cells linking to ``<group>/report.html``)."""
    from ..reporting.report import save_console_html  # not at import: --list needs none of the gate

    lines = [Text(line) for line in [LEGEND, *summary_lines(res)]]  # plain text: no markup, no highlighting
    return save_console_html(report_dir / "matrix.html", [matrix_table(res, ""), *lines], width)


def groups_table(res: Resolution) -> Table:
    """``--list``: each group's releases, model profile, sha256 prefix and report directory."""
    t = Table(title=f"{len(res.versions)} release(s) selected, {sum(len(g.versions) for g in res.groups)} with "
                    f"the store, {len(res.groups)} group(s)", title_justify="left")
    for col in ("releases", "n", "model", "store sha256", "target", "report dir"):
        t.add_column(col, overflow="fold", no_wrap=col != "releases")
    for g in res.groups:
        t.add_row(g.label, str(len(g.versions)), g.model_profile, g.sha256[:16], g.target, g.dirname)
    return t


def fetches_line(res: Resolution) -> str:
    now = [f for f in res.fetches if not f["cached"]]
    line = f"store files: {len(res.fetches) - len(now)} cached, {len(now)} fetched now"
    if now:
        fetched = sum(f["bytes_fetched"] or 0 for f in now)
        wheels = sum(f["wheel_bytes"] or 0 for f in now)
        line += f" ({fetched / 1e6:.1f} MB transferred, of {wheels / 1e6:.0f} MB of wheels)"
    return line


def main(args, console, err) -> int:
    """The ``shmspec matrix`` command (``args`` from cli.py's parser).
    Returns the exit status (:func:`exit_status`; 2 on usage errors)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    def fail(msg: str) -> int:
        err.print(f"shmspec: error: {msg}", markup=False, highlight=False, soft_wrap=True)
        return ExitCode.ERROR

    from ..core.errors import UsageError
    from ..runner import executors

    try:
        executor = executors.make(getattr(args, "executor", "local"), getattr(args, "address", None))
    except UsageError as exc:
        return fail(str(exc))
    index = args.index_url.rstrip("/") if args.index_url else None
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # a bar only on a terminal: a log gets no blank line from it
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    try:
        with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as progress:
            task = progress.add_task("listing vLLM releases", total=None)

            def on_release(i: int, total: int, version: str) -> None:
                progress.update(task, total=total, completed=i, description=f"store file of vllm {version}")

            res = resolve(args.releases, args.since, index, on_release, getattr(args, "protocol", None) or "ringbuffer",
                          getattr(args, "project", None) or "vllm")
    except (TargetError, ValueError) as exc:
        return fail(str(exc))
    width = 150
    if not console.is_terminal and console.width < width:  # keep the columns in a log
        from rich.console import Console

        console = Console(width=width)
    if args.list:
        console.print(groups_table(res))
        console.print(fetches_line(res), markup=False, highlight=False)
        for w in res.without_store:
            console.print(f"without the store: {res.protocol.project} {w['version']}: {w['reason']}", markup=False, highlight=False)
        for e in res.errors:
            err.print(f"shmspec: error: {e}", markup=False, highlight=False, soft_wrap=True)
        return ExitCode.ERROR if res.errors else ExitCode.PASS
    report_dir: Path = args.report_dir or default_report_dir()
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
        clear_previous(report_dir)
    except OSError as exc:
        return fail(f"cannot write the report to {report_dir}: {exc.strerror or exc}")
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as progress:
        n_cells = len(res.groups) + (0 if args.no_impl else len(res.protocol.impl_cells))
        bar = progress.add_task("gates", total=n_cells)

        def on_cell(i: int, total: int, label: str, target: str) -> None:
            progress.update(bar, completed=i, description=f"gate {i + 1}/{total}: {label} ({target})")

        def on_done(row: dict[str, Any]) -> None:
            bad = failing(row)
            style = VERDICT_STYLE.get(row["verdict"], "")
            not_run = (f"; campaigns that did not run: {row['error'][:160]}"
                       if row.get("error") and row["verdict"] != "error" else "")
            progress.console.print(Text.assemble(f"{row['label']}: ", (row["verdict"], style),
                                                 f" ({', '.join(bad)})" if bad else "",
                                                 f" {row['wall_seconds']:.0f} s" if row.get("wall_seconds") is not None
                                                 else "", (not_run, "magenta")))
            progress.advance(bar)

        from ..runner.gate import GATE_PROFILES

        concurrency = args.concurrency or GATE_PROFILES[args.profile].concurrency
        if res.protocol.name != "ringbuffer":
            concurrency = None  # the slot protocols' own (the queue's: its deployed construction too)
        out = run_matrix(res, report_dir, args.profile, args.seed, concurrency, not args.no_impl, index,
                         started, on_cell, on_done, executor)
    out.seconds = time.monotonic() - t0  # the whole run, fetching included
    path = write_json(out, report_dir)
    write_html(out, report_dir)
    console.print(matrix_table(out, report_dir.resolve().as_uri() + "/"))
    console.print(LEGEND, markup=False, highlight=False)
    from ..reporting.report import verdict_line

    for line in summary_lines(out):
        console.print(line, markup=False, highlight=False)
    status = exit_status(out.rows, res.errors)
    console.print(verdict_line(MATRIX_VERDICT[status], "of the impl rows; vLLM rows failing do not count", path), soft_wrap=True)
    return status


__all__ = ["COLUMNS", "GATE_COMMAND", "clear_previous", "Group", "MatrixResult", "Resolution", "SCHEMA", "exit_status", "label_runs",
           "main", "matrix_table", "resolve", "run_cell", "run_matrix", "select_versions", "write_html", "write_json"]
