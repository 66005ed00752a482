"""Distinct findings (issue 13, item 6): after a property's first violation
the gate keeps searching for violations of it at another step kind, up to the
profile's ``distinct`` budget, and reports each with its own shrunk trace."""

from __future__ import annotations

import pytest

from shmspec.conformance.runner import gate
from shmspec.conformance.lockstep.machine import CAMPAIGNS
from shmspec.conformance.runner.replay import replay
from shmspec.conformance.lockstep.session import PropertyViolation, SessionConfig
from helpers import load_or_skip, smoke_shrink


def _pv(prop, cause):
    return PropertyViolation(prop, "m", [], cause.split("/")[0], cause)


def test_findings_excuse_by_cause_while_the_budget_lasts():
    f = gate.Findings(extra=1)
    c = SessionConfig()
    first = _pv("NRR", "get/cleared")
    assert f.record(first) == 1
    c = f.excuse(c, first)
    assert c.excused == {"NRR@get/cleared"}  # NRR at another step kind still raises
    second = _pv("NRR", "get/stale")
    assert f.record(second) == 2 and f.extra == 0
    c = f.excuse(c, second)
    assert "NRR" in c.excused  # the budget is spent: NRR is excused outright
    third = _pv("CLR", "get/cleared")
    assert f.record(third) == 1
    assert {"NRR", "CLR"} <= f.excuse(c, third).excused


def test_conformance_keeps_its_own_excusal():
    f = gate.Findings(extra=3)
    pv = PropertyViolation("CONFORMANCE", "model: x; target: y", [], "get", "get/live")
    assert f.record(pv) == 1 and f.extra == 3
    assert f.excuse(SessionConfig(), pv).excused == {"CONFORMANCE@get"}


@pytest.mark.slow
def test_a_second_nrr_cause_behind_the_first(monkeypatch):
    """vLLM 0.15.0: NRR through a cleared handle (ids reset by clear()) is
    found first; the forged chunk inside a payload (a stale handle reading a
    fake header) is a second NRR finding, not hidden behind it."""
    # the smoke tier's shrink budget: the same two findings, shrunk to 6 and 14 steps, as with ci's 200
    # (23.2 s -> 5.3 s quiet, 2026-12-07)
    smoke_shrink(monkeypatch)
    target = load_or_skip("vllm==0.15.0")
    campaigns = tuple(c for c in CAMPAIGNS if c.name in ("stale", "adversarial"))
    result = gate.run_gate(target, "ci", campaigns=campaigns, concurrency="off")
    nrr = [v for v in result.violations if v.property == "NRR"]
    assert [v.occurrence for v in nrr] == [1, 2], [v.message for v in nrr]
    assert [v.exc.cause for v in nrr] == ["get/cleared", "get/stale"]
    assert "FORGED" in bytes.fromhex(nrr[1].message.split("Blob(")[1][:16]).decode(errors="replace")
    # each reproduces on its own from its calls and config
    for v in nrr:
        assert replay("vllm==0.15.0", v.calls(), v.config).startswith("NRR"), v.message


@pytest.mark.slow
def test_the_budget_is_zero_when_asked_for_first_findings_only(monkeypatch):
    smoke_shrink(monkeypatch)
    target = load_or_skip("vllm==0.15.0")
    campaigns = tuple(c for c in CAMPAIGNS if c.name in ("stale", "adversarial"))
    result = gate.run_gate(target, "ci", campaigns=campaigns, concurrency="off", first_finding_only=True)
    assert [v.occurrence for v in result.violations if v.property == "NRR"] == [1]
