"""Declared contracts (conformance/core/contract.py): ``--contract FILE`` and
``SHMSPEC_CONTRACT`` in a target module decide what the target is judged by,
and every report names it.  The gate runs here are impl in vLLM's
construction (writer without the readers' lock), lockstep campaigns only."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

import shmspec
from shmspec.conformance.cli import main
from shmspec.conformance.core import contract as contracts
from shmspec.conformance.targets.loader import load_file
from shmspec.model.profile import IMPL, IMPL_STRICT, VLLM_0_32
from helpers import TESTS

IDS = ("NRR", "CLR", "LIVE", "PROG")


@pytest.mark.parametrize("data, message", [
    ({"clr": "lax"}, "clr must be one of drain, strict"),
    ({"colour": 1}, "unknown contract key 'colour'"),
    ({"profile": "vllm-9"}, "unknown profile 'vllm-9'"),
    ({"relies_on": ["readers are polite"]}, "relies_on names client rules"),
    ({"not_claimed": {"FAST": "x"}}, "not_claimed names 'FAST'"),
    ({"not_claimed": {"LIVE": ""}}, "not_claimed LIVE needs a reason"),
    ([1, 2], "a contract is a table"),
    ({"excused": {"NRR:core:get": "x"}}, "excused names 'NRR:core:get', not a finding's fingerprint"),
    ({"excused": {"FAST:core:get:0123abcd": "x"}}, "not a finding's fingerprint"),
    ({"excused": {"NRR:core:get:0123abcd": " "}}, "excused NRR:core:get:0123abcd needs a reason"),
    ({"excused": ["NRR"]}, "excused is a table of fingerprint = reason"),
])
def test_a_bad_declaration_is_refused_in_one_line(data, message):
    with pytest.raises(shmspec.UsageError, match=message) as info:
        contracts.parse(data, IMPL, "here", IDS)
    assert "\n" not in str(info.value) and str(info.value).startswith("here: ")


def test_a_contract_names_what_it_changes():
    assert contracts.of_profile(VLLM_0_32).name == "vllm-0.32"
    c = contracts.parse({"clr": "strict", "not_claimed": {"LIVE": "blocks"}, "relies_on": []}, VLLM_0_32, "s", IDS)
    assert c.name == "vllm-0.32 (clr=strict; not claimed: LIVE; relies on no client rule)"
    assert c.apply(VLLM_0_32).clr == "strict" and c.apply(VLLM_0_32).signed == VLLM_0_32.signed
    strict = contracts.parse({"clr": "strict"}, IMPL, "s", IDS).apply(IMPL)
    assert strict == replace(IMPL_STRICT, name="impl")  # the strict model, as impl-strict's


def test_a_contract_excuses_one_finding_by_fingerprint():
    c = contracts.parse({"excused": {"NRR:core:get/live:0123abcd": "tracked upstream"}}, IMPL, "s", IDS)
    assert c.excused == {"NRR:core:get/live:0123abcd": "tracked upstream"}
    assert c.name == "impl (1 finding excused)" and c.to_json()["excused"] == c.excused


def test_a_module_declares_its_contract(tmp_path):
    src = (TESTS / "targets" / "impl_strict_clr.py").read_text().replace(
        'SHMSPEC_PROFILE = "impl-strict"', 'SHMSPEC_CONTRACT = {"profile": "impl", "clr": "strict"}')
    assert "SHMSPEC_CONTRACT" in src
    path = tmp_path / "store.py"
    path.write_text(src)
    target = load_file(path)
    assert target.profile.clr == "strict" and target.contract.source == f"SHMSPEC_CONTRACT in {path}"
    path.write_text(src.replace('"clr": "strict"', '"clr": "sometimes"'))
    with pytest.raises(shmspec.TargetError, match="clr must be one of"):
        load_file(path)


def test_a_bad_contract_file_fails_before_the_target_is_fetched(tmp_path, capsys):
    bad = tmp_path / "c.toml"
    bad.write_text('clr = "lax"\n')
    out = tmp_path / "r"
    assert main(["check", "--target", "vllm==0.0.1", "--contract", str(bad), "--report-dir", str(out)]) == 2
    assert "clr must be one of" in capsys.readouterr().err and not out.exists()
    bad.write_text("clr = \n")
    assert main(["check", "--contract", str(bad), "--report-dir", str(out)]) == 2
    assert "--contract " in (err := capsys.readouterr().err) and "not TOML" in err and not out.exists()


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_the_run_is_judged_by_the_declared_contract_and_says_so(tmp_path, capsys):
    """impl keeps vLLM's drain CLR and relies on its clients reading what
    they were promised; declared strict and relying on no client rule, it
    fails CLR and PROG, and LIVE, not claimed, is neither pass nor fail."""
    contract = tmp_path / "contract.toml"
    contract.write_text('clr = "strict"\nrelies_on = []\n[not_claimed]\nLIVE = "measured elsewhere"\n')
    report = tmp_path / "r"
    status = main(["check", "--concurrency", "off", "--contract", str(contract), "--report-dir", str(report),
                   "--junit", str(tmp_path / "j.xml")])
    assert status == 1
    out = capsys.readouterr().out
    assert "LIVE not claimed by the contract: measured elsewhere" in out and "contract impl (clr=strict" in out
    data = json.loads((report / "report.json").read_text())
    assert data["contract"]["name"] == "impl (clr=strict; not claimed: LIVE; relies on no client rule)"
    assert data["contract"]["source"] == f"--contract {contract}"
    assert data["properties"]["CLR"] == "fail" and data["properties"]["PROG"] == "fail"
    assert data["properties"]["LIVE"] == "not-claimed" and data["properties"]["NRR"] == "pass"
    junit = ET.parse(tmp_path / "j.xml").getroot()
    assert data["contract"]["name"] in {p.get("value") for p in junit.iter("property") if p.get("name") == "contract"}
    html = (report / "report.html").read_text()
    assert "contract impl (clr=strict" in html and "Not claimed by the contract: measured elsewhere" in html
    # a replay judges by the contract it was found under, not the target's own
    clr = next(v for v in data["violations"] if v["property"] == "CLR")
    assert clr["config"]["contract"] == {"profile": "impl", "clr": "strict", "sw": "threads"}
    assert shmspec.replay("impl", clr).startswith("CLR")
    prog = next(v for v in data["violations"] if v["property"] == "PROG")
    assert shmspec.replay("impl", prog).startswith("PROG")
