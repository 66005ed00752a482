"""The ``smoke`` gate profile (conformance/runner/gate.py): lockstep
campaigns only, one finding per campaign, small budgets.  On impl with one
seeded fault (early_free: a chunk freed while a reader may still read it)."""

from __future__ import annotations

import pytest

import shmspec
from shmspec.conformance.mutants import faults
from shmspec.conformance.runner.gate import GATE_PROFILES


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_smoke_runs_the_lockstep_campaigns_and_finds_a_seeded_fault(tmp_path):
    gp = GATE_PROFILES["smoke"]
    assert gp.deterministic and gp.concurrency == "off" and gp.rounds == 1 and gp.final_round
    result = shmspec.check(faults(["early_free"])[0].target, profile="smoke", report_dir=tmp_path)
    assert result.concurrency == "off" and result.profile == "smoke"
    assert {c.mode for c in result.campaigns} <= {"lockstep", "program"}
    assert "RC" in {v.property for v in result.violations}
    # per round at most its examples, those Hypothesis discards (overruns of the 30-step draws: up to about
    # as many again) and a shrink budget (+3: the engine's replays); two rounds at most
    per_round = 2 * gp.max_examples + gp.shrink_examples + 3
    assert all(c.examples <= 2 * per_round for c in result.campaigns if c.mode == "lockstep")
