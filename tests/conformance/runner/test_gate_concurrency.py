"""The controlled campaign: real writer and reader processes under a schedule
Hypothesis draws.  impl must pass; variants with a read-path race must be
caught on the right property, reported in lanes, and replayable from the
report's ``repro_test.py``."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from dataclasses import replace

import multiprocess
import pytest
from rich.console import Console

from shmspec.conformance.runner.gate import CONTROLLED, run_gate
from shmspec.conformance.targets.loader import load_file, load_target
from shmspec.conformance.mutants import MUTANTS_DIR
from shmspec.conformance.reporting.report import render_console, write_report
from shmspec.conformance.core.config import SessionConfig
from shmspec.conformance.concurrency.schedule import replay_schedule
from helpers import smoke_shrink

VARIANTS_DIR = MUTANTS_DIR  # the seeded faults ship in the package


def _controlled(target):
    """The Hypothesis-drawn schedules alone (without the preemption sweep that
    runs before them in the gate; tests/conformance/concurrency/test_races.py covers that one)."""
    return run_gate(target, "ci", campaigns=(CONTROLLED,), concurrency="off", first_finding_only=True)


@pytest.mark.slow
def test_impl_passes_controlled_campaign():
    result = _controlled(load_target("impl"))
    (c,) = result.campaigns
    assert c.error is None and c.completed, c.error
    assert result.verdict == "pass"
    assert c.steps > 1000  # scheduled steps really ran
    for pid in ("NRR", "CLR", "RC", "FIFO", "DISJ", "LEAK"):
        assert result.properties[pid] == "pass"
    assert multiprocess.active_children() == []  # no orphan process


@pytest.mark.parametrize("variant,prop,needle", [
    ("count_before_validate.py", "RC", "counted on the wrong chunk"),
    pytest.param("deserialize_in_place.py", "NRR", "deserialized", marks=pytest.mark.slow),
])
@pytest.mark.slow
def test_controlled_campaign_catches_read_path_race(variant, prop, needle, tmp_path, monkeypatch):
    smoke_shrink(monkeypatch)  # the finding, its lanes, its page and its repro: not how short it got
    target = load_file(VARIANTS_DIR / variant)
    result = _controlled(target)
    found = [v for v in result.violations if v.property == prop]
    assert found, f"{variant}: {result.properties}"
    v = found[0]
    assert v.concurrency == "controlled" and needle in v.message
    # lanes: every step names its process and yield point; the last one carries the violation
    assert all("process" in s and "yield_point" in s and "ring" in s for s in v.steps)
    assert {s["process"] for s in v.steps} >= {"writer", "r1"} or {s["process"] for s in v.steps} >= {"writer", "r2"}
    assert v.steps[-1]["violations"][0]["property"] == prop
    rep = write_report(result, tmp_path / "report", target_source=str(target.source))
    data = json.loads((rep / "report.json").read_text())
    assert data["violations"][0]["concurrency"] == "controlled"
    html = (rep / "report.html").read_text()
    assert "id@address:reads/promised" in html and "writer" in html  # the lanes and their legend
    # the breaking step is marked and named without colour too: "✗ 5" and the atomic step that broke it
    from shmspec.conformance.reporting.report import violation_text

    text = violation_text(1, v, width=240)  # wide: the lane cell does not wrap
    last = v.steps[-1]
    assert f"✗ {last['index']}" in text and f"✗ breaks {prop} in its " in text, text
    assert f"✗ {last['index']}" in html and "✗ breaks" in html
    from helpers import Dom

    dom = Dom(html)  # the page: the list links to the violation's section, which marks and names the step
    assert "#V1" in dom.links and f"Broken at step {last['index']}" in dom.by_id["V1"]
    assert "✗ breaks" in dom.by_id["V1"]  # (its lane cell wraps at 140 columns: named in full above)
    assert "repro_test.py" in dom.by_id["V1"]
    # the repro replays the exact schedule and fails while the race stands
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(rep / "repro_test.py")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "1 failed" in p.stdout, p.stdout + p.stderr
    assert prop in p.stdout
    # the same schedule on the unmodified store finds nothing (the repro would then pass)
    assert replay_schedule("impl", v.calls(), v.config) is None


@pytest.mark.slow
def test_free_running_campaign_impl_passes_and_reports_rates():
    result = run_gate(load_target("impl"), "ci", campaigns=(), concurrency="free")
    # free mode runs the faults, sw and constructions campaigns after the free-running one
    c, faults, threads, built = result.campaigns
    assert faults.name == "faults" and faults.completed and faults.error is None
    assert threads.name == "sw" and threads.completed and threads.error is None
    assert built.name == "constructions" and built.completed and built.error is None
    assert len(built.rates["constructions"]) == 3
    assert c.mode == "free" and c.completed and c.error is None
    assert result.verdict == "pass", result.violations
    assert c.rates["ops"] > 1000 and c.rates["ops_per_second"] > 0
    assert set(c.rates["per_process"]) == {"writer", "r1", "r2"}
    for pid in ("NRR", "RC", "CLR", "LEAK"):
        assert result.properties[pid] == "pass"
    assert multiprocess.active_children() == []


@pytest.mark.slow
def test_free_running_campaign_reports_history_in_lanes(tmp_path):
    target = load_file(VARIANTS_DIR / "deserialize_in_place.py")
    # the free-running campaign's finding is what this test reads: the campaigns after it are skipped
    result = run_gate(target, "ci", campaigns=(), concurrency="free", stop_at=frozenset({"NRR"}))
    assert [c.name for c in result.campaigns if c.skipped] == ["faults", "sw", "constructions"]
    (v,) = [v for v in result.violations if v.property == "NRR"]
    assert v.concurrency == "free" and "deserialized" in v.message
    assert all({"process", "invoke_us", "return_us", "observed"} <= set(s) for s in v.steps)
    (bad,) = [s for s in v.steps if s["violations"]]
    assert bad["violations"][0]["property"] == "NRR" and bad["action"] == "get"  # the get that broke it
    rep = write_report(result, tmp_path / "report", target_source=str(target.source))
    case = json.loads((rep / "report.json").read_text())["violations"][0]
    assert case["config"]["seed"] == result.seed and case["config"]["free_seconds"] > 0
    assert "invoke→return" in (rep / "report.html").read_text()


@pytest.mark.slow
def test_a_browser_renders_a_controlled_schedule_finding(tmp_path, monkeypatch):
    """report.html of a controlled-schedule violation, opened in a headless
    browser (chromium; .ci/run installs it where apt can): the DOM it
    builds has the violation list linking to the section, the marked and
    named breaking step and the replay command, and the page is drawn."""
    from helpers import Dom, browser, browser_dom

    if browser() is None:
        pytest.skip("no headless browser on PATH (apt install chromium)")
    smoke_shrink(monkeypatch)
    target = load_file(VARIANTS_DIR / "count_before_validate.py")
    result = _controlled(target)
    assert result.violations and result.violations[0].concurrency == "controlled"
    rep = write_report(result, tmp_path / "report", target_source=str(target.source))
    shot = tmp_path / "page.png"
    dom = Dom(browser_dom(rep / "report.html", screenshot=shot))
    assert dom.title.startswith("shmspec check file:") and dom.title.endswith(": FAIL")
    assert "#V1" in dom.links and "RC" in dom.by_id["violations"]
    last = result.violations[0].steps[-1]
    section = dom.by_id["V1"]
    assert f"Broken at step {last['index']}" in section and f"✗ {last['index']}" in section and "✗ breaks" in section
    assert f"{sys.executable} -m pytest {rep}/repro_test.py" in section
    # the lanes timeline: a column per process, the breaking step's cell marked and named; the why
    lanes = dom.by_id["V1-lanes"]
    assert all(p in lanes for p in ("writer", "r1")) and dom.by_id["V1-harmful"].startswith("✗ breaks RC")
    assert last["action"] in dom.by_id["V1-harmful"]
    assert "Why the store allowed it." in section and "read count reached its threshold" in section
    assert shot.stat().st_size > 50_000  # a drawn page, not a blank one


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs java")
def test_validated_traces_and_their_spec_coverage_are_in_the_report(tmp_path):
    """``--validate-traces`` (SessionConfig.record): every recorded controlled
    session of impl validates against ShmStore.tla, and the console and
    report.json give the spec coverage of those runs against the model."""
    result = run_gate(load_target("impl"), "ci", campaigns=(CONTROLLED,), concurrency="off",
                      config=replace(SessionConfig(), record=True))
    (c,) = result.campaigns
    assert c.error is None and result.verdict == "pass", c.error
    sv = c.rates["spec_validation"]
    assert sv["traces"] == sv["validated"] > 50 and not sv["departures"]
    cov = sv["coverage"]
    assert cov["model_config"] == "MC_impl_reread.cfg" and 200 < cov["run_parts"] < cov["model_parts"]
    assert {g["definition"] for g in cov["gaps"]} >= {"payload_read"}  # vLLM's read path: never impl's
    assert c.seconds > sv["seconds"]  # the campaign's time includes TLC's
    console = Console(width=4000, file=io.StringIO())
    render_console(console, result, None)
    out = console.file.getvalue()
    assert f"spec coverage: the runs reach {cov['run_parts']} of the {cov['model_parts']} parts" in out
    assert "payload_read line" in out and "~Hardened" in out
    write_report(result, tmp_path)
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["campaigns"][0]["rates"]["spec_validation"]["coverage"] == cov


def _free_running():
    from shmspec.conformance.protocols.ringbuffer.campaigns import CONCURRENT_CAMPAIGNS

    return CONCURRENT_CAMPAIGNS["free"][0]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs java")
def test_the_free_running_campaigns_recorded_run_validates_on_impl(tmp_path):
    """Issue 29: with ``--validate-traces --concurrency free`` the free-running
    campaign makes one more load, recorded (600 writer operations in a
    512-byte ring, so that it wraps and reclaims), and TLC checks it against
    ShmStore.tla: impl's run validates, reaching the reclaim's ``retire`` and
    the reader's ``unpin`` (the steps ShmStore.tla took in one with the one
    before until a free run showed impl takes them apart)."""
    result = run_gate(load_target("impl"), "ci", campaigns=(_free_running(),), concurrency="off",
                      config=replace(SessionConfig(), record=True))
    (c,) = result.campaigns
    assert c.error is None and result.verdict == "pass", (c.error, [v.message for v in c.violations])
    sv, rec = c.rates["spec_validation"], c.rates["recorded_run"]
    assert sv["traces"] == sv["validated"] == 1 and not sv["departures"], sv["departures"]
    assert rec["puts"] > 100 and "trace" not in rec and c.rates["ops"] > 0  # the unrecorded load's rates stay
    assert sv["actions"]["retire"] >= 5 and sv["actions"]["unpin"] >= 50 and sv["actions"]["free_step"] >= 5
    assert "coverage" in sv


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs java")
def test_a_seeded_fault_makes_the_free_running_campaigns_recorded_run_depart(tmp_path):
    """A store whose reader acknowledges a read before it checks the handle
    (``count_before_validate``: every get does, whatever the interleaving)
    gives a recorded free run that TLC rejects: a CONFORMANCE finding of the
    free-running campaign, with its trace in the report (traces/V<n>.json),
    which ``shmspec validate`` rejects at the same event."""
    from shmspec.conformance.spec.validate import validate

    result = run_gate(load_file(VARIANTS_DIR / "count_before_validate.py"), "ci", campaigns=(_free_running(),),
                      concurrency="off", config=replace(SessionConfig(), record=True))
    (c,) = result.campaigns
    conf = [v for v in c.violations if v.property == "CONFORMANCE"]
    assert c.error is None and result.verdict == "fail" and len(conf) == 1, [v.message for v in c.violations]
    (d,) = c.rates["spec_validation"]["departures"]
    assert conf[0].trace is not None and conf[0].concurrency == "free"
    again = validate(conf[0].trace)
    assert again.verdict == "fail" and again.departure.event == d["event"]
    # the report's steps: the departing event, marked, and the events that ran while it did
    marked = [s for s in conf[0].steps if s["violations"]]
    assert len(marked) == 1 and marked[0]["args"]["event"] == d["event"]
    assert [s["invoke_us"] for s in conf[0].steps] == sorted(s["invoke_us"] for s in conf[0].steps)
    console = Console(width=4000, file=io.StringIO())
    render_console(console, result, None)
    assert "recorded steps: the one where the run departs from the spec" in console.file.getvalue()
    write_report(result, tmp_path)
    rep = json.loads((tmp_path / "report.json").read_text())
    (v,) = [v for v in rep["violations"] if v["property"] == "CONFORMANCE"]
    assert (tmp_path / v["trace_file"]).is_file()
