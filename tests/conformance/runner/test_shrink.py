"""Shrinking is budgeted in examples, not seconds (conformance/runner/gate.py,
``shrink_clock``): the same seed gives the same shrunk trace however slow
the machine's clock says it is.

The target is impl with one seeded fault (early_free: a chunk freed while a
reader may still read it), vLLM's construction, the lockstep ``core``
campaign only: a finding whose shrinking takes a few dozen examples.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from shmspec.conformance import protocols
from shmspec.conformance.mutants import faults
from shmspec.conformance.runner import gate


@pytest.fixture(scope="module")
def early_free():
    target = protocols.load(faults(["early_free"])[0].target)
    core = tuple(c for c in protocols.protocol_of(target).base_campaigns() if c.name == "core")
    return target, core


@pytest.fixture(scope="module")
def quiet(early_free):
    return _first(*early_free)


def _first(target, core):
    result = gate.run_gate(target, "ci", 0, campaigns=core, concurrency="off", first_finding_only=True)
    assert result.violations, "early_free is no longer found by core: pick another fault for this test"
    return result.violations[0]


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_a_loaded_machine_shrinks_to_the_same_trace(early_free, quiet, monkeypatch):
    assert quiet.shrink_examples > 0
    real = time.perf_counter
    calls = [0]

    def loaded() -> float:  # every reading an hour after the last: any time budget is spent at once
        calls[0] += 1
        return real() + 3600.0 * calls[0]

    monkeypatch.setattr(time, "perf_counter", loaded)
    busy = _first(*early_free)
    assert calls[0] > 0  # the clock was read (by Hypothesis) while the gate ran
    assert busy.steps == quiet.steps
    assert (busy.shrink_examples, busy.shrink_complete) == (quiet.shrink_examples, quiet.shrink_complete)


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_the_shrink_budget_counts_examples(early_free, quiet, monkeypatch):
    budget = max(1, quiet.shrink_examples // 4)
    monkeypatch.setitem(gate.GATE_PROFILES, "ci", replace(gate.GATE_PROFILES["ci"], shrink_examples=budget))
    cut = _first(*early_free)
    assert cut.shrink_complete is False
    # the engine checks after each example; its replay of the shrunk example is counted too
    assert budget <= cut.shrink_examples <= budget + 3
    assert len(cut.steps) >= len(quiet.steps)
    assert cut.property == quiet.property


def test_the_engine_is_given_back_its_clock():
    from hypothesis.internal.conjecture import engine

    before = (engine.time, engine.MAX_SHRINKING_SECONDS)
    with gate.shrink_clock(7) as clock:
        assert engine.time is clock and engine.MAX_SHRINKING_SECONDS == 7
        clock.counters = {"examples": 12}
        assert engine.time.perf_counter() == 12.0 and engine.time.sleep is time.sleep
    assert (engine.time, engine.MAX_SHRINKING_SECONDS) == before


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_a_cut_shrink_has_its_unneeded_steps_deleted(early_free, quiet, monkeypatch):
    """With shrinking cut by the budget, :func:`gate.delete_steps` drops each
    step the trace does not need (replayed on a fresh session: the shorter
    trace is a real run); the result is the same every run, and no single
    step of it can go.  Without the pass, a cut trace keeps such steps."""
    monkeypatch.setitem(gate.GATE_PROFILES, "ci", replace(gate.GATE_PROFILES["ci"], shrink_examples=3))
    cut = _first(*early_free)
    assert cut.shrink_complete is False and cut.property == quiet.property
    assert _first(*early_free).steps == cut.steps  # deterministic
    monkeypatch.setattr(gate, "delete_steps", lambda machine, exc, counters=None: exc)
    kept = _first(*early_free)
    assert len(kept.steps) > len(cut.steps), ([s["action"] for s in kept.steps],
                                                                       [s["action"] for s in cut.steps])
    # no single step of the deleted trace can go (the pass ran to its end)
    from shmspec.conformance.lockstep.machine import machine_for
    from shmspec.conformance.core.config import config_from_json

    target, core = early_free
    machine = machine_for(target, core[0], config_from_json(cut.config))
    calls = [{"process": s["process"], "action": s["action"], "args": s["args"]} for s in cut.steps[2:]
             if s["action"] != "close"]
    for i in range(len(calls) - 1):
        again = gate._replay_calls(machine, calls[:i] + calls[i + 1:])
        assert again is None or (again.prop, again.cause) != (cut.property, cut.exc.cause), i
