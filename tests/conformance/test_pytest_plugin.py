"""The pytest plugin (conformance/pytest_plugin.py, entry point pytest11):
``pytest --shmspec-target=SPEC`` collects one item per property and per
campaign, fails the violated ones with the drawn trace, and works with
--junitxml, -k, -x, xdist and a baseline.  Run as a user runs it: pytest in
a subprocess, in an empty folder.  The mechanics on the toy register store
(tests/toy_protocol.py, registered by the folder's conftest.py: ``toy:stale``
violates READ, ``toy:dup`` ONCE).  impl as pytest items, from an installed
wheel: tests/test_package.py."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from helpers import TESTS

CONFTEST = f"""import sys
sys.path.insert(0, {str(TESTS)!r})
import toy_protocol
from shmspec.conformance import protocols
protocols.register(toy_protocol.PROTOCOL)
"""


@pytest.fixture
def folder(tmp_path):
    """The user's project: a conftest.py that registers the toy protocol."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "conftest.py").write_text(CONFTEST)
    return tmp_path / "proj"


def pytest_run(folder, *args, reports=None):
    env = {**os.environ, "SHMSPEC_REPORT_DIR": str(reports or folder.parent / f"{folder.name}-reports")}
    env.pop("PYTEST_XDIST_TESTRUNUID", None)  # this suite's own xdist run is not the child's
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
                          cwd=folder, capture_output=True, text=True, timeout=300, env=env)


def _junit(path):
    cases = {}
    for c in ET.parse(path).getroot().iter("testcase"):
        kind = next((k.tag for k in c if k.tag in ("failure", "error", "skipped")), "passed")
        cases[c.get("name")] = (kind, c)
    return cases


def test_inert_without_a_target(folder):
    (folder / "test_mine.py").write_text("def test_one():\n    assert True\n")
    p = pytest_run(folder)
    assert p.returncode == 0 and "1 passed" in p.stdout and "shmspec/" not in p.stdout, p.stdout


def test_one_item_per_property_and_campaign_junit_and_the_drawn_trace(folder):
    p = pytest_run(folder, "--shmspec-target=toy:stale", "--junitxml=j.xml", "-v")
    assert p.returncode == 1 and "collected 3 items" in p.stdout, p.stdout
    for line in ("shmspec/toy:stale::READ FAILED", "shmspec/toy:stale::ONCE PASSED",
                 "shmspec/toy:stale::campaign::registers PASSED"):
        assert line in p.stdout, p.stdout
    assert "READ violated on toy:stale: a get returns" in p.stdout and "put" in p.stdout
    assert "repro_test.py" in p.stdout and "Traceback" not in p.stdout
    cases = _junit(folder / "j.xml")
    assert {n: k for n, (k, _) in cases.items()} == {"READ": "failure", "ONCE": "passed", "registers": "passed"}
    assert cases["READ"][1].get("classname") == "shmspec.toy:stale"
    assert cases["registers"][1].get("classname") == "shmspec.toy:stale.campaign"
    assert "get" in cases["READ"][1].find("failure").text
    assert sorted(os.listdir(folder)) == ["conftest.py", "j.xml"]  # the report went to SHMSPEC_REPORT_DIR


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_collect_only_runs_nothing_and_k_and_x_select(folder, tmp_path):
    reports = tmp_path / "r"
    p = pytest_run(folder, "--shmspec-target=toy:stale", "--collect-only", "-q", reports=reports)
    assert p.returncode == 0 and "shmspec/toy:stale::READ" in p.stdout and not reports.exists(), p.stdout
    assert "3 tests collected" in p.stdout, p.stdout  # counted as collected, not only run
    p = pytest_run(folder, "--shmspec-target=toy:stale", "-k", "ONCE", reports=reports)
    assert p.returncode == 0 and "1 passed, 2 deselected" in p.stdout, p.stdout
    p = pytest_run(folder, "--shmspec-target=toy:stale", "-x", reports=reports)
    assert p.returncode == 1 and "1 failed" in p.stdout and "passed" not in p.stdout.splitlines()[-1], p.stdout


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_a_baseline_turns_known_findings_into_xfail_and_a_new_one_still_fails(folder, tmp_path):
    first = tmp_path / "first"
    p = pytest_run(folder, "--shmspec-target=toy:stale", f"--shmspec-report-dir={first}")
    assert p.returncode == 1
    base = first / "report.json"
    p = pytest_run(folder, "--shmspec-target=toy:stale", f"--shmspec-baseline={base}", "--junitxml=k.xml")
    assert p.returncode == 0 and "1 xfailed" in p.stdout and "known (not failing): READ" in p.stdout, p.stdout
    assert _junit(folder / "k.xml")["READ"][0] == "skipped"
    p = pytest_run(folder, "--shmspec-target=toy:dup", f"--shmspec-baseline={base}")
    assert p.returncode == 1 and "new: ONCE" in p.stdout and "FAILED shmspec/toy:dup::ONCE" in p.stdout, p.stdout
    assert "FAILED shmspec/toy:dup::READ" not in p.stdout
    p = pytest_run(folder, "--shmspec-target=toy:good", f"--shmspec-baseline={base}")
    assert p.returncode == 0 and "fixed: READ" in p.stdout, p.stdout


def test_bad_input_is_one_clear_line(folder, tmp_path):
    bad = tmp_path / "b.json"
    bad.write_text("[]")
    p = pytest_run(folder, "--shmspec-target=toy:stale", f"--shmspec-baseline={bad}")
    assert p.returncode == 4 and "--shmspec-baseline: the baseline" in p.stderr, p.stderr  # pytest's usage error
    p = pytest_run(folder, "--shmspec-target=toy:nosuch")
    assert p.returncode == 1 and "shmspec: unknown toy target 'toy:nosuch'" not in p.stdout
    assert "unknown toy target 'nosuch'" in p.stdout and "Traceback" not in p.stdout, p.stdout


def test_under_xdist_the_gate_runs_once(folder, tmp_path):
    pytest.importorskip("xdist")
    reports = tmp_path / "r"
    p = pytest_run(folder, "--shmspec-target=toy:stale", "-n", "2", reports=reports)
    assert p.returncode == 1 and "1 failed, 2 passed" in p.stdout, p.stdout
    assert len(list(reports.iterdir())) == 1  # one report folder: one gate run, not one per worker
