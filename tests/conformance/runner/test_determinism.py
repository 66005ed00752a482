"""Same seed, same findings: two ci gate runs (lockstep campaigns) on impl
and on vLLM 0.33.0 report the same properties from the same campaigns, and
the same shrunk steps, whether or not shrinking finished within its budget
(the budget counts examples, not seconds, since 2026-12-03; vLLM's runs use
the smoke tier's budget of 40, since 2026-12-07)."""

from __future__ import annotations

import pytest

from shmspec.conformance.runner.gate import run_gate
from shmspec.conformance.lockstep.machine import CAMPAIGNS
from helpers import load_or_skip, smoke_shrink

pytestmark = pytest.mark.slow


def _runs(spec, campaigns, n=2):
    target = load_or_skip(spec)
    return [run_gate(target, "ci", 0, campaigns=campaigns, concurrency="off") for _ in range(n)]


def _findings(result):
    return [(v.property, v.campaign) for v in result.violations]


@pytest.mark.slow
def test_impl_same_verdicts_every_run():
    runs = _runs("impl", CAMPAIGNS)
    assert all(r.verdict == "pass" for r in runs)
    assert runs[0].properties == runs[1].properties
    assert [c.steps for c in runs[0].campaigns] == [c.steps for c in runs[1].campaigns]  # the same exploration


@pytest.mark.slow
def test_vllm_same_findings_every_run(monkeypatch):
    # the smoke tier's shrink budget (40 examples): what is checked is that a budget counted in examples
    # gives the same trace every run, for a shrink it cut (PROM, OOM) and one that finished (EXC)
    smoke_shrink(monkeypatch)
    chosen = tuple(c for c in CAMPAIGNS if c.name in ("core", "stale", "protocol", "exc"))
    runs = _runs("vllm==0.33.0", chosen)
    first = _findings(runs[0])
    assert first and all(_findings(r) == first for r in runs[1:]), [_findings(r) for r in runs]
    assert {"PROM", "EXC"} <= {p for p, _ in first}
    assert {v.shrink_complete for v in runs[0].violations} == {True, False}
    for i, v in enumerate(runs[0].violations):
        others = [r.violations[i] for r in runs[1:]]
        assert all(o.steps == v.steps and o.shrink_examples == v.shrink_examples for o in others), \
            (v.property, v.campaign)
