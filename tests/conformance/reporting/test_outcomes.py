"""A run as a CI job sees it (conformance/reporting/outcomes.py): each
property's status against a baseline of known findings, JUnit XML, the
GitHub step summary, and ``shmspec check --baseline/--write-baseline/--junit``
with their exit statuses.  On the toy register store (tests/toy_protocol.py):
``toy:stale`` violates READ, ``toy:dup`` ONCE, ``toy:good`` neither; the
ring buffer's own run is tests/conformance/test_pytest_plugin.py's."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

import shmspec
from shmspec.conformance.cli import main
from shmspec.conformance.reporting.outcomes import Baseline, baseline_json, judge, junit_xml, step_summary


@pytest.fixture(scope="module")
def toy():
    """The toy protocol, registered for this module's tests."""
    import toy_protocol

    from shmspec.conformance import protocols

    protocols.register(toy_protocol.PROTOCOL)
    yield toy_protocol.PROTOCOL
    protocols.unregister(toy_protocol.PROTOCOL.name)


@pytest.fixture(scope="module")
def runs(toy, tmp_path_factory):
    """The toy gate on each target, with its report directory (run once)."""
    root = tmp_path_factory.mktemp("runs")
    return {t: (shmspec.check(f"toy:{t}", report_dir=root / t), root / t) for t in ("good", "stale", "dup")}


def _status(outcomes):
    return {o.id: o.status for o in outcomes}


def test_without_a_baseline_a_violation_fails_and_is_drawn(runs):
    stale, _ = runs["stale"]
    outcomes = judge(stale)
    assert _status(outcomes) == {"READ": "failed", "ONCE": "passed"}
    read = outcomes[0]
    assert read.failing and read.violations == ["V1"] and read.statement.startswith("a get returns")
    assert "READ" in read.text and "writer" in read.text and "get" in read.text and "\x1b[" not in read.text


def test_a_baseline_makes_known_findings_known_and_tells_new_and_fixed(runs):
    base = Baseline.load(runs["stale"][1] / "report.json")
    assert base.known == {"READ"} and base.protocol == "toy" and base.target == "toy:stale"
    assert _status(judge(runs["stale"][0], base)) == {"READ": "known", "ONCE": "passed"}
    assert _status(judge(runs["good"][0], base)) == {"READ": "fixed", "ONCE": "passed"}
    dup = _status(judge(runs["dup"][0], base))
    assert dup["ONCE"] == "failed"  # the new finding still fails
    assert not any(o.failing for o in judge(runs["stale"][0], base))


def test_a_baseline_file_round_trips(runs, tmp_path):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline_json(runs["stale"][0])))
    data = json.loads(path.read_text())
    assert data["schema"] == "shmspec.baseline/2" and data["known"] == ["READ"] and data["protocol"] == "toy"
    assert [f["fingerprint"] for f in data["findings"]] == [runs["stale"][0].violations[0].fingerprint]
    loaded = Baseline.load(path)
    assert loaded.known == {"READ"} and set(loaded.findings) == {runs["stale"][0].violations[0].fingerprint}
    assert loaded.notices(runs["stale"][0]) == []


def test_a_new_finding_of_a_known_property_fails_the_run(runs):
    """The regression a property-level baseline hid (issue 27): the baseline
    knows READ by another finding; this run's READ finding is new."""
    stale, _ = runs["stale"]
    v = stale.violations[0]
    other = v.fingerprint.replace(f":{v.exc.cause}:", ":get/elsewhere:")
    assert other != v.fingerprint
    base = Baseline("b.json", "toy", frozenset({"READ"}), "toy:stale", {other: {"property": "READ"}})
    outcomes = judge(stale, base)
    assert _status(outcomes) == {"READ": "failed", "ONCE": "passed"}
    assert outcomes[0].findings == [{"violation": "V1", "fingerprint": v.fingerprint, "status": "new"}]
    assert outcomes[0].text.startswith("[new finding] ")
    from shmspec.conformance.reporting.outcomes import summary_json

    block = summary_json(outcomes, base, stale)
    assert [f["fingerprint"] for f in block["findings"]["new"]] == [v.fingerprint]
    assert [f["fingerprint"] for f in block["findings"]["fixed"]] == [other]
    # the same baseline matched by property id (a shmspec.baseline/1 file) hides it, and says so
    old = Baseline("b.json", "toy", frozenset({"READ"}), "toy:stale", None, "a shmspec.baseline/1 file")
    assert _status(judge(stale, old))["READ"] == "known"
    assert "matched by property id" in old.notices(stale)[0]


def test_a_contract_excuses_one_finding_not_its_property(runs):
    from dataclasses import replace

    from shmspec.conformance.core.contract import Contract

    stale, _ = runs["stale"]
    v = stale.violations[0]
    excused = replace(stale, contract=Contract("impl", "drain", "threads", excused={v.fingerprint: "tracked"}))
    read = judge(excused)[0]
    assert read.status == "known" and read.findings[0]["status"] == "excused" and not read.failing
    assert read.text.startswith("[excused by the contract: tracked] ")
    junit = ET.fromstring(junit_xml(excused, judge(excused))).find("testsuite")
    assert junit.get("failures") == "0" and "excused by the contract" in next(junit.iter("skipped")).get("message")
    other = replace(stale, contract=Contract("impl", "drain", "threads",
                                             excused={v.fingerprint[:-8] + "00000000": "another finding"}))
    assert judge(other)[0].status == "failed"  # excusing another finding of READ does not excuse this one


def test_a_fingerprint_names_no_seed_and_no_step(runs):
    v = runs["stale"][0].violations[0]
    prop, campaign, cause, digest = v.fingerprint.split(":")
    assert (prop, campaign, cause) == ("READ", v.campaign, v.exc.cause or "-") and len(digest) == 8
    from shmspec.conformance.core.results import finding_fingerprint

    construction = v.construction.to_json()
    assert finding_fingerprint("toy", "READ", v.campaign, v.exc.cause, construction) == v.fingerprint
    assert finding_fingerprint("toy", "READ", v.campaign, v.exc.cause, {**construction, "n_readers": 3}) \
        != v.fingerprint  # another construction: another finding


def test_an_old_baseline_file_loads_by_property_with_a_notice(runs, tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema": "shmspec.baseline/1", "protocol": "toy", "target": "toy:other",
                                "known": ["READ"]}))
    base = Baseline.load(path)
    assert base.findings is None and base.known == {"READ"}
    assert _status(judge(runs["stale"][0], base))["READ"] == "known"
    notices = base.notices(runs["stale"][0])
    assert len(notices) == 2 and all("\n" not in n for n in notices)
    assert "shmspec.baseline/1" in notices[0] and "recorded on toy:other, not on toy:stale" in notices[1]


@pytest.mark.parametrize("content, message", [
    (None, "cannot read the baseline"),
    ("{not json", "is not JSON"),
    ('{"schema": "shmspec.model/2"}', "neither a report.json"),
    ("[1, 2]", "neither a report.json"),
])
def test_a_bad_baseline_is_a_one_line_usage_error(tmp_path, content, message):
    path = tmp_path / "b.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(shmspec.UsageError, match=message) as exc:
        Baseline.load(path)
    assert "\n" not in str(exc.value)


def test_a_baseline_of_another_protocol_is_refused(runs, tmp_path):
    ring = Baseline(str(tmp_path / "r.json"), "ringbuffer", frozenset({"NRR"}))
    with pytest.raises(shmspec.UsageError, match="protocol 'ringbuffer'"):
        judge(runs["stale"][0], ring)


def test_junit_has_one_testcase_per_property_and_tells_failed_from_known(runs):
    stale, d = runs["stale"]
    root = ET.fromstring(junit_xml(stale, judge(stale), d))
    suite = root.find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1" and suite.get("skipped") == "0"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"READ", "ONCE"} and cases["READ"].get("classname") == "shmspec.toy:stale"
    failure = cases["READ"].find("failure")
    assert failure is not None and failure.get("message").startswith("READ: ") and "get" in failure.text
    assert cases["ONCE"].find("failure") is None
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["target"] == "toy:stale" and props["report_dir"] == str(d) and props["seed"] == "0"
    base = Baseline.load(d / "report.json")
    known = ET.fromstring(junit_xml(stale, judge(stale, base), d, base.source)).find("testsuite")
    assert known.get("failures") == "0" and known.get("skipped") == "1"
    skipped = next(known.iter("testcase")).find("skipped")
    assert skipped.get("type") == "known" and skipped.get("message") == f"known finding (baseline {base.source}): V1"


def test_junit_classnames_are_what_pytest_makes_of_the_plugins_items():
    from _pytest.junitxml import mangle_test_address

    from shmspec.conformance.reporting.outcomes import junit_classname

    for target in ("impl", "toy:stale", "file:src/my_store.py", "vllm==0.33.0", "arena:file:/abs/store.py"):
        assert junit_classname(target) == ".".join(mangle_test_address(f"shmspec/{target}::NRR")[:-1]), target


def test_step_summary_is_a_markdown_table_with_the_new_findings(runs):
    stale, d = runs["stale"]
    md = step_summary(stale, judge(stale), d)
    assert md.startswith("### shmspec check `toy:stale`: FAIL")
    assert "| READ | **FAIL (new)** | V1 |" in md and "| ONCE | pass |  |" in md
    assert f"- **READ** (registers, `{stale.violations[0].fingerprint}`): " in md and "repro_test.py" in md and str(d) in md
    assert "PASS" in step_summary(runs["good"][0], judge(runs["good"][0]), None).splitlines()[0]


def _last_line(capsys) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_check_baseline_exit_statuses_junit_and_step_summary(toy, tmp_path, monkeypatch, capsys):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    base, junit = tmp_path / "baseline.json", tmp_path / "j.xml"
    assert main(["check", "--target", "toy:stale", "--report-dir", str(tmp_path / "r1"), "--junit", str(junit),
                 "--write-baseline", str(base)]) == 1
    assert json.loads(base.read_text())["known"] == ["READ"]
    assert _last_line(capsys).startswith("verdict: FAIL  (1 violation(s), ")
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "1"
    assert "| READ | **FAIL (new)** | V1 |" in summary.read_text()
    # the same findings against that baseline: exit 0, and report.json says why
    assert main(["check", "--target", "toy:stale", "--report-dir", str(tmp_path / "r2"), "--baseline", str(base)]) == 0
    # the last line says what the exit status says, after the baseline's lines
    last = _last_line(capsys)
    assert last.startswith("verdict: PASS  (1 violation(s), none new to the baseline, ") and "report: " in last
    block = json.loads((tmp_path / "r2" / "report.json").read_text())["baseline"]
    assert block["still"] == ["READ"] and block["new"] == [] and block["source"] == str(base)
    assert block["matched_by"] == "fingerprint" and [f["violation"] for f in block["findings"]["known"]] == ["V1"]
    r2 = json.loads((tmp_path / "r2" / "report.json").read_text())
    assert r2["violations"][0]["baseline"] == "known" and r2["violations"][0]["fingerprint"]
    page = (tmp_path / "r2" / "report.html").read_text()
    assert "id='baseline'" in page and "<span class='finding-known'>known</span>" in page
    assert json.loads((tmp_path / "r2" / "report.json").read_text())["verdict"] == "fail"  # the truth is kept
    # a new finding on top of the baseline fails again; a fixed one is told
    assert main(["check", "--target", "toy:dup", "--report-dir", str(tmp_path / "r3"), "--baseline", str(base)]) == 1
    assert _last_line(capsys).startswith("verdict: FAIL  (2 violation(s), 1 new to the baseline, ")
    r3 = json.loads((tmp_path / "r3" / "report.json").read_text())
    assert r3["baseline"]["new"] == ["ONCE"] and r3["violations"][0]["baseline"] == "new"
    assert "<span class='finding-new'>new</span>" in (tmp_path / "r3" / "report.html").read_text()
    assert "recorded on toy:stale, not on toy:dup" in r3["baseline"]["notices"][0]
    assert main(["check", "--target", "toy:good", "--report-dir", str(tmp_path / "r4"), "--baseline", str(base)]) == 0
    assert json.loads((tmp_path / "r4" / "report.json").read_text())["baseline"]["fixed"] == ["READ"]
    assert summary.read_text().count("### shmspec check") == 4  # appended, one section per run
    assert "| V1 READ | `" in summary.read_text() and "| known |" in summary.read_text()
    # without a baseline the block is null
    assert json.loads((tmp_path / "r1" / "report.json").read_text())["baseline"] is None


def test_check_refuses_a_bad_baseline_before_running(toy, tmp_path, capsys):
    bad = tmp_path / "b.json"
    bad.write_text("{}")
    assert main(["check", "--target", "toy:stale", "--report-dir", str(tmp_path / "r"), "--baseline", str(bad)]) == 2
    assert not (tmp_path / "r").exists()
    err = capsys.readouterr().err.strip()
    assert err.startswith("shmspec: error: the baseline") and "\n" not in err


def test_every_command_speaks_one_verdict_vocabulary():
    """``verdict_line``: the last line of check, model, prove, mutants and
    matrix; a verdict outside the vocabulary is refused."""
    from shmspec.conformance.reporting.report import VERDICTS, verdict_line

    assert str(verdict_line("pass", "3/3 proven, 1.0s", "r/prove.json")) == (
        "verdict: PASS  (3/3 proven, 1.0s)  report: r/prove.json")
    assert str(verdict_line("unknown")) == "verdict: UNKNOWN"
    assert set(VERDICTS) >= {"pass", "fail", "error", "unknown"}
    with pytest.raises(ValueError, match="verdict 'ok' is not one of"):
        verdict_line("ok")
