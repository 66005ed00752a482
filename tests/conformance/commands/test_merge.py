"""``shmspec merge``: shard reports merged equal one unsharded run; reports
of different runs, a missing shard and a lost unit never merge into a pass.

Runs use the register store of tests/toy_protocol.py (a lockstep gate of a
second); one test merges shards of vLLM 0.33.0's store (smoke profile).
"""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET

import pytest

import shmspec
from shmspec.conformance.cli import main


def _run(tmp_path, target: str, name: str, *extra: str) -> int:
    return main(["check", "--target", target, "--seeds", "4", "--seed", "3", "--example-db", "none",
                 "--report-dir", str(tmp_path / name), *extra])


def _same(whole: dict, merged: dict) -> None:
    keep = ("property", "fingerprint", "steps", "seed", "message", "campaign", "cause")
    assert [{k: v[k] for k in keep} for v in merged["violations"]] == [
        {k: v[k] for k in keep} for v in whole["violations"]]
    for key in ("target", "verdict", "properties", "seeds", "units", "protocol", "profile", "construction"):
        assert merged[key] == whole[key], key
    assert merged["shard"] is None
    assert [(c["name"], c["examples"], c["steps"], c["completed"], c["violations"]) for c in merged["campaigns"]] == [
        (c["name"], c["examples"], c["steps"], c["completed"], c["violations"]) for c in whole["campaigns"]]


@pytest.mark.slow
def test_four_shards_merged_equal_the_unsharded_run(second_protocol, tmp_path, capsys):
    assert _run(tmp_path, "toy:stale", "whole") == 1
    for i in range(1, 5):
        assert _run(tmp_path, "toy:stale", f"s{i}", "--shard", f"{i}/4") == 1
    capsys.readouterr()
    junit = tmp_path / "j.xml"
    rc = main(["merge", *(str(tmp_path / f"s{i}") for i in (3, 1, 4, 2)),  # any order
               "--report-dir", str(tmp_path / "m"), "--junit", str(junit)])
    assert rc == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("verdict: FAIL") and last.endswith(str(tmp_path / "m")), last
    whole = json.loads((tmp_path / "whole" / "report.json").read_text())
    merged = json.loads((tmp_path / "m" / "report.json").read_text())
    _same(whole, merged)
    assert (tmp_path / "m" / "report.html").is_file() and (tmp_path / "m" / "repro_test.py").is_file()
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "1"
    api = shmspec.merge([tmp_path / f"s{i}" for i in range(1, 5)])  # the Python API: the same merge, nothing written
    assert [v.fingerprint for v in api.violations] == [v["fingerprint"] for v in whole["violations"]]
    assert api.verdict == "fail" and api.shard is None and list(api.seeds) == whole["seeds"]
    with pytest.raises(shmspec.UsageError, match="shard 4/4 missing"):
        shmspec.merge([tmp_path / f"s{i}" for i in range(1, 4)])
    # judged against the unsharded run's findings: nothing new
    assert main(["merge", *(str(tmp_path / f"s{i}" / "report.json") for i in range(1, 5)),
                 "--report-dir", str(tmp_path / "m2"), "--baseline", str(tmp_path / "whole" / "report.json")]) == 0
    assert json.loads((tmp_path / "m2" / "report.json").read_text())["baseline"]["findings"]["new"] == []


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_a_missing_or_doubled_shard_or_another_run_is_refused(second_protocol, tmp_path, capsys):
    for i in (1, 2):
        assert _run(tmp_path, "toy:good", f"g{i}", "--shard", f"{i}/2") == 0
    capsys.readouterr()
    g1, g2 = str(tmp_path / "g1"), str(tmp_path / "g2")
    doc = json.loads((tmp_path / "g2" / "report.json").read_text())
    for name, key, value in (("newer", "tool", {**doc["tool"], "version": "99.0"}), ("other-seed", "seed", 4),
                             ("other-target", "target", "toy:stale")):
        other = copy.deepcopy(doc)  # shard 2/2 as another version, or another run, would have written it
        other[key] = value
        (tmp_path / f"{name}.json").write_text(json.dumps(other))
    (tmp_path / "junk.json").write_text(json.dumps({"schema": "shmspec.model/2"}))
    cases = [
        ([g1], "shard 2/2 missing: a merge covers every shard of the run"),
        ([g1, g1, g2], "shard 1/2 is given twice"),
        ([g1, str(tmp_path / "other-seed.json")], "different runs: base seed 3 and 4"),
        ([g1, str(tmp_path / "other-target.json")], "different runs: target toy:good and toy:stale"),
        ([g1, str(tmp_path / "newer.json")], "different shmspec versions"),
        ([g1, str(tmp_path / "junk.json")], "not a gate report (schema 'shmspec.model/2'"),
        ([str(tmp_path / "nowhere")], "cannot read a report"),
    ]
    for reports, message in cases:
        out = tmp_path / "refused"
        assert main(["merge", *reports, "--report-dir", str(out)]) == 2, message
        err = capsys.readouterr().err.strip()
        assert err.startswith("shmspec: error: ") and message in err and "\n" not in err, (message, err)
        assert not out.exists()
    assert main(["merge", g2, g1, "--report-dir", str(tmp_path / "ok")]) == 0


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_a_lost_unit_in_a_shard_merges_into_error_never_pass(second_protocol, tmp_path, capsys):
    for i in (1, 2):
        assert _run(tmp_path, "toy:good", f"g{i}", "--shard", f"{i}/2") == 0
    doc = json.loads((tmp_path / "g2" / "report.json").read_text())
    lost = doc["seeds"][0]
    doc["campaigns"].append({"name": f"seed {lost}", "checks": [], "examples": 0, "steps": 0, "seconds": 0.0,
                             "completed": False, "skipped": None, "error": "the unit sent no result", "mode": "unit",
                             "unknown": None, "rates": {}, "not_claimed": {}, "violations": []})
    (tmp_path / "g2" / "report.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "g1"), str(tmp_path / "g2"), "--report-dir", str(tmp_path / "m")]) == 2
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("verdict: ERROR")
    assert json.loads((tmp_path / "m" / "report.json").read_text())["verdict"] == "error"


@pytest.mark.slow
def test_shards_of_a_vllm_release_merge_into_its_unsharded_run(vllm_target, tmp_path):
    """The construction users deploy (writer without the readers' lock), the
    smoke profile's lockstep campaigns, vLLM 0.33.0's store: four shards of
    four seed units merged give the unsharded run's findings and counts."""
    vllm_target("0.33.0")  # fetched (or skipped) once
    for name, extra in [("whole", ())] + [(f"s{i}", ("--shard", f"{i}/4")) for i in range(1, 5)]:
        assert _run(tmp_path, "vllm==0.33.0", name, "--profile", "smoke", "--concurrency", "off", *extra) == 1
    assert main(["merge", *(str(tmp_path / f"s{i}") for i in range(1, 5)), "--report-dir", str(tmp_path / "m")]) == 1
    _same(json.loads((tmp_path / "whole" / "report.json").read_text()),
          json.loads((tmp_path / "m" / "report.json").read_text()))
