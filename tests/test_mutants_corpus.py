"""Every seeded fault's counterexample, replayed (the reduced form of the
seeded-fault score that runs in every test run).

``tests/corpus/mutants/<fault>.json`` is the first violation of the fault's
named property that the full ``shmspec mutants`` run found (shrunk lockstep
calls, or the exact schedule of a race), written by
``tests/corpus/update_mutants.py``.  Replayed on the fault it must violate
that property again; replayed on impl it must find nothing.  A new fault
without a corpus entry fails here until the full run has caught it.  (Whether
the gate's search still *finds* each fault is what ``shmspec mutants``
measures; tests/test_mutants.py runs that search on a few fast faults, and
tests/test_races.py and tests/test_boundary.py on the faults only the
preemption sweep and the boundary programs reach.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shmspec.conformance.mutants import faults
from shmspec.conformance.replay import replay
from shmspec.conformance.schedule import replay_schedule

CORPUS = Path(__file__).resolve().parent / "corpus" / "mutants"
FAULTS = faults()


def _replay(spec: str, entry: dict) -> str | None:
    if entry["concurrency"] == "controlled":
        return replay_schedule(spec, entry["calls"], entry["config"])
    return replay(spec, entry["calls"], entry["config"])


def test_every_fault_has_a_counterexample():
    missing = [f.name for f in FAULTS if not (CORPUS / f"{f.name}.json").is_file()]
    assert not missing, f"no corpus entry (run shmspec mutants, then tests/corpus/update_mutants.py): {missing}"
    stray = {p.stem for p in CORPUS.glob("*.json")} - {f.name for f in FAULTS}
    assert not stray, f"corpus entries for faults that no longer exist: {stray}"


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_counterexample_replays_on_the_fault_and_not_on_impl(fault):
    path = CORPUS / f"{fault.name}.json"
    if not path.is_file():
        pytest.skip("no corpus entry (reported by test_every_fault_has_a_counterexample)")
    entry = json.loads(path.read_text())
    assert entry["property"] == fault.expected
    got = _replay(fault.target, entry)
    assert got is not None and got.split(":")[0] == fault.expected, got
    assert _replay("impl", entry) is None
