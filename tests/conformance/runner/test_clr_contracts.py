"""CLR is judged by the contract a target declares (SEMANTICS.md, CLR): vLLM's
drain contract for impl (a pre-clear handle may read its own object until its
bytes are reused), or the strict one (``impl-strict``: never after the clear).
A store keeping the contract it declares passes; the same store judged by the
other contract fails CLR, so the verdict really depends on the declaration."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shmspec.conformance.runner.gate import run_gate
from shmspec.conformance.targets.loader import load_file, load_target
from shmspec.conformance.lockstep.machine import CAMPAIGNS
from shmspec.model.profile import IMPL, IMPL_STRICT
from helpers import TESTS

STRICT = TESTS / "targets" / "impl_strict_clr.py"
STALE = tuple(c for c in CAMPAIGNS if c.name == "stale")


def _clr(target) -> str:
    result = run_gate(target, "ci", campaigns=STALE, concurrency="off", first_finding_only=True)
    return result.properties["CLR"]


def test_strict_target_declares_and_keeps_the_strict_contract():
    target = load_file(STRICT)
    assert target.profile is IMPL_STRICT
    assert _clr(target) == "pass"


@pytest.mark.slow
def test_draining_impl_fails_the_strict_contract_and_passes_its_own():
    impl = load_target("impl")
    assert impl.profile is IMPL and _clr(impl) == "pass"
    assert _clr(replace(impl, profile=IMPL_STRICT)) == "fail"


@pytest.mark.slow
def test_strict_target_fails_the_exact_drain_model():
    """Judged by impl's exact drain model, a store that never drains diverges
    (CONFORMANCE): the model expects the pre-clear handle's own object."""
    target = replace(load_file(STRICT), profile=IMPL)
    result = run_gate(target, "ci", campaigns=STALE, concurrency="off", first_finding_only=True)
    assert result.properties["CONFORMANCE"] == "fail"
    assert any("target: StaleHandle" in v.message for v in result.violations), [v.message for v in result.violations]
