"""Every seeded fault's counterexample, replayed (the reduced form of the
seeded-fault score that runs in every test run).

``tests/corpus/mutants/<fault>.json`` is the first violation of the fault's
named property that the full ``shmspec mutants`` run found (shrunk lockstep
calls, or the exact schedule of a race), written by
``tests/corpus/update_mutants.py``.  Replayed on the fault it must violate
that property again; replayed on impl it must find nothing.  A new fault
without a corpus entry fails here until the full run has caught it, unless
it is listed in :data:`GATE_GAPS` (a fault the gate cannot catch yet).  (Whether
the gate's search still *finds* each fault is what ``shmspec mutants``
measures; tests/conformance/commands/test_mutants.py runs that search on a few fast faults, and
tests/conformance/concurrency/test_races.py and tests/conformance/proofs/test_boundary.py on the faults only the
preemption sweep and the boundary programs reach.)
"""

from __future__ import annotations

import json

import pytest

from shmspec.conformance.concurrency.faults import replay_fault
from shmspec.conformance.mutants import faults
from shmspec.conformance.runner.replay import replay
from shmspec.conformance.concurrency.schedule import replay_schedule
from shmspec.conformance.concurrency.sw import replay_sw
from helpers import TESTS

CORPUS = TESTS / "corpus" / "mutants"
FAULTS = faults()

GATE_GAPS = {
}
"""Faults the full run does not catch because the gate lacks the check each
docstring names: they have no counterexample until it has.  An entry here is
a known hole in the gate, not a passing fault; remove it when the gate
catches the fault (tests/corpus/update_mutants.py then writes its entry)."""


def _replay(spec: str, entry: dict) -> str | None:
    if entry["concurrency"] == "controlled":
        return replay_schedule(spec, entry["calls"], entry["config"])
    if entry["concurrency"] == "faults":
        return replay_fault(spec, entry["config"], entry["property"])
    if entry["concurrency"] == "threads":
        return replay_sw(spec, entry["config"], entry["property"])
    return replay(spec, entry["calls"], entry["config"])


def test_every_fault_has_a_counterexample():
    assert set(GATE_GAPS) <= {f.name for f in FAULTS}, "GATE_GAPS names a fault that no longer exists"
    found = [name for name in GATE_GAPS if (CORPUS / f"{name}.json").is_file()]
    assert not found, f"the gate catches these now: drop them from GATE_GAPS: {found}"
    missing = [f.name for f in FAULTS if f.name not in GATE_GAPS and not (CORPUS / f"{f.name}.json").is_file()]
    assert not missing, f"no corpus entry (run shmspec mutants, then tests/corpus/update_mutants.py): {missing}"
    stray = {p.stem for p in CORPUS.glob("*.json")} - {f.name for f in FAULTS}
    assert not stray, f"corpus entries for faults that no longer exist: {stray}"


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_counterexample_replays_on_the_fault_and_not_on_impl(fault):
    path = CORPUS / f"{fault.name}.json"
    if fault.name in GATE_GAPS:
        pytest.xfail(f"not caught by the gate: {GATE_GAPS[fault.name]}")
    if not path.is_file():
        pytest.skip("no corpus entry (reported by test_every_fault_has_a_counterexample)")
    entry = json.loads(path.read_text())
    assert entry["property"] == fault.expected
    got = _replay(fault.target, entry)
    assert got is not None and got.split(":")[0] == fault.expected, got
    assert _replay("impl", entry) is None
