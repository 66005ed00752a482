"""The public Python API (docs/api.md): ``shmspec.check``, ``shmspec.replay``,
the result and violation types, ``ShmspecError`` as the base of every harness
error, ``ExitCode``; and the repro files written before the layered packages."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import shmspec
import shmspec.conformance

# one worker runs this module: its module-scoped fixture is built once (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_api")

ROOT = Path(__file__).resolve().parents[1]
FAULT = ROOT / "conformance" / "mutants" / "size_off_by_one.py"  # a fault the lockstep gate finds in seconds
RC_FAULT = ROOT / "conformance" / "mutants" / "early_free.py"  # what the old repro's RC cases were found on
OLD_REPRO = ROOT / "tests" / "corpus" / "repro_0ca4a0f.py"

NOT_HARNESS_ERRORS = {
    "PropertyViolation": "a finding, raised inside Hypothesis's test as an AssertionError; never escapes the gate",
    "InjectedInterrupt": "a BaseException the exception campaign injects into a target at a yield point",
    "_CallerError": "the caller's failure a slot session raises inside a queue block; caught at the block's exit",
    "WouldWait": "raised inside an old vLLM queue's wait (no timeout) to stop it; the slot driver catches it",
    "SchedulerStop": "raised at a yield point of a deployed process the scheduler stops; the process reports and exits",
    "_Spent": "ends a controlled campaign's Hypothesis run when its shrink budget is spent; caught by the campaign",
}


def _harness_exceptions():
    for m in pkgutil.walk_packages(shmspec.conformance.__path__, "shmspec.conformance."):
        mod = importlib.import_module(m.name)
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == mod.__name__:
                yield name, obj


def test_every_harness_error_is_a_shmspec_error():
    found = dict(_harness_exceptions())
    assert {"TargetError", "ScheduleError", "TlcError", "TlaParseError", "FreeRunError"} <= found.keys()
    assert set(NOT_HARNESS_ERRORS) <= found.keys()
    bad = [n for n, c in found.items() if n not in NOT_HARNESS_ERRORS and not issubclass(c, shmspec.ShmspecError)]
    assert bad == []
    assert issubclass(shmspec.TargetError, shmspec.ShmspecError)


def test_exit_codes_are_the_documented_ones():
    assert {c.name: int(c) for c in shmspec.ExitCode} == {"PASS": 0, "FAIL": 1, "ERROR": 2, "UNKNOWN": 3,
                                                         "INTERRUPTED": 130}
    from shmspec.conformance import cli
    assert (cli.EXIT_PASS, cli.EXIT_FAIL, cli.EXIT_ERROR, cli.EXIT_UNKNOWN, cli.EXIT_INTERRUPTED) == tuple(
        shmspec.ExitCode)


def test_no_command_returns_a_bare_exit_integer():
    """Every command's exit status is an ExitCode member, not a literal."""
    bad = []
    for f in sorted((ROOT / "conformance" / "commands").glob("*.py")) + [ROOT / "conformance" / "cli.py"]:
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"\breturn (-?[0-9]+|130)\s*$|\breturn .* if .* else -?[0-9]+\s*$|return -?[0-9]+ if ", line):
                bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert bad == []


@pytest.mark.parametrize("kwargs, words", [
    ({"profile": "nightly"}, "gate profile"),
    ({"concurrency": "threads"}, "concurrency"),
    ({"start_method": "forkserver"}, "start method"),
    ({"readers": 0}, "readers"),
    ({"readers": 5}, "readers"),
])
def test_check_rejects_bad_arguments_in_one_line(kwargs, words):
    with pytest.raises(shmspec.UsageError) as e:
        shmspec.check("impl", **kwargs)
    assert isinstance(e.value, (ValueError, shmspec.ShmspecError))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_check_rejects_a_target_that_does_not_load():
    with pytest.raises(shmspec.TargetError):
        shmspec.check("file:/nonexistent/store.py", concurrency="off")


def test_a_bad_argument_is_refused_before_the_target_is_loaded():
    with pytest.raises(shmspec.UsageError, match="unknown concurrency 'sideways'"):
        shmspec.check("file:/nonexistent/store.py", concurrency="sideways")


@pytest.mark.slow
def test_check_passes_impl_and_writes_the_report(tmp_path):
    seen = []
    result = shmspec.check("impl", concurrency="off", report_dir=tmp_path,
                           on_progress=lambda name, done, total: seen.append((name, done, total)))
    assert isinstance(result, shmspec.GateResult)
    assert seen and {n for n, _, _ in seen} >= {"core", "boundary"} and seen[-1][1] == seen[-1][2]
    assert result.verdict == "pass" and result.violations == []
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["verdict"] == "pass" and data["target"] == "impl"
    assert not (tmp_path / "repro_test.py").exists()


@pytest.fixture(scope="session")  # built once by the worker its xdist_group runs on
def fault_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("fault")
    return shmspec.check(f"file:{FAULT}", concurrency="off", report_dir=d), d


@pytest.mark.slow
def test_check_finds_a_seeded_fault_and_replay_reproduces_it(fault_run):
    result, d = fault_run
    assert result.verdict == "fail"
    target = f"file:{FAULT}"
    first = result.violations[0]
    assert isinstance(first, shmspec.Violation)
    again = shmspec.replay(target, first)
    assert again is not None and again.startswith(first.property + ":")
    as_json = json.loads((d / "report.json").read_text())["violations"][0]
    assert shmspec.replay(target, as_json) == again  # a report.json entry replays the same
    assert shmspec.replay("impl", first) is None  # the fixed store: no violation


def test_replay_rejects_a_case_without_config():
    with pytest.raises(shmspec.UsageError):
        shmspec.replay("impl", {"property": "NRR", "steps": []})
    with pytest.raises(shmspec.UsageError):
        shmspec.replay("impl", {"property": "NRR", "config": {}, "concurrency": "sideways"})


def _pytest(path: Path, target: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SHMSPEC_TARGET"}
    if target is not None:
        env["SHMSPEC_TARGET"] = target
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
                          capture_output=True, text=True, timeout=600, cwd=path.parent, env=env)


@pytest.mark.slow
def test_a_new_repro_imports_only_the_public_api_and_fails_on_the_fault(fault_run, tmp_path):
    _, d = fault_run
    src = (d / "repro_test.py").read_text()
    assert [ln for ln in src.splitlines() if ln.startswith(("from shmspec", "import shmspec"))] == ["import shmspec"]
    p = _pytest(d / "repro_test.py")
    assert p.returncode == 1, p.stdout[-2000:]
    assert "still violated" in p.stdout
    # portable (issue 15): copied elsewhere and pointed at another target by
    # SHMSPEC_TARGET, the same cases replay there: the fixed store passes them
    moved = tmp_path / "elsewhere" / "repro_test.py"
    moved.parent.mkdir()
    moved.write_text(src)
    p = _pytest(moved, target="impl")
    assert p.returncode == 0 and "passed" in p.stdout, p.stdout[-2000:]
    p = _pytest(moved, target=f"file:{d / 'missing.py'}")
    assert p.returncode == 1 and "missing.py" in p.stdout, p.stdout[-2000:]


@pytest.mark.slow
def test_a_repro_written_before_the_layered_packages_still_runs(tmp_path):
    """tests/corpus/repro_0ca4a0f.py is what the landed main (0ca4a0f) wrote:
    it imports the flat paths.  Its target (impl) no longer violates anything:
    it passes; pointed at the seeded fault, its cases fail again."""
    src = OLD_REPRO.read_text()
    assert "from shmspec.conformance.schedule import replay_schedule" in src
    p = _pytest(OLD_REPRO)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "4 passed" in p.stdout
    bad = tmp_path / "repro_test.py"
    bad.write_text(src.replace("TARGET = 'impl'", f"TARGET = {f'file:{RC_FAULT}'!r}"))
    p = _pytest(bad)
    assert p.returncode == 1 and "still violated" in p.stdout, p.stdout[-2000:]
