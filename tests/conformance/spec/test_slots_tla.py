"""The slot-flag protocol's TLA+ spec (tla/slots/Slots.tla) against its
model (model/slots.py): TLC's distinct states equal the model's BFS count
for vLLM's order, and each fault config fails the invariant it states, with
a counterexample as long as the model's shortest trace."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shmspec.conformance.spec import tlc
from shmspec.model.slots import Config, explore

SLOTS = Path(tlc.default_tla_dir()) / "slots"
SPEC = SLOTS / "Slots.tla"

pytestmark = [pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs java"),
              pytest.mark.xdist_group("test_slots_tla")]


def _cfg(tmp_path: Path, readers: int, slots: int, messages: int, faults: set[str]) -> Path:
    path = tmp_path / f"MC_{readers}_{slots}_{messages}.cfg"
    fs = ", ".join(f'"{f}"' for f in sorted(faults))
    path.write_text(f"\\* Expected: every invariant holds\nSPECIFICATION Spec\nCONSTANTS\n    R = {readers}\n"
                    f"    S = {slots}\n    M = {messages}\n    Faults = {{{fs}}}\nINVARIANTS NRR FIFO\n")
    return path


@pytest.mark.parametrize("readers, slots, messages, faults", [
    (1, 1, 2, set()), (2, 1, 3, set()), (2, 2, 3, set()), (3, 2, 3, set()),
    (2, 2, 3, {"no_claim"}), (2, 2, 3, {"reset_first"}),
])
def test_tlc_reaches_the_states_the_model_reaches(tmp_path, readers, slots, messages, faults):
    res = tlc.run_tlc(_cfg(tmp_path, readers, slots, messages, faults), spec=SPEC)
    found = explore(Config(readers, slots, messages, frozenset(faults)))
    assert res.status == "ok" and found.violation is None
    assert res.distinct == found.states


@pytest.mark.parametrize("name, fault, invariant", [
    ("MC_slots_publish_first.cfg", "publish_first", "FIFO"),
    ("MC_slots_early_release.cfg", "early_release", "NRR"),
])
def test_each_fault_config_fails_as_it_states_and_as_the_model_does(name, fault, invariant):
    cfg = tlc.read_config(SLOTS / name)
    assert cfg.expected == [invariant]
    res = tlc.run_tlc(SLOTS / name, spec=SPEC)
    assert res.status == "violation" and res.invariant == invariant
    prop, _, trace = explore(Config(1, 1, 2, frozenset({fault}))).violation
    assert prop == invariant and len(res.trace) == len(trace) + 1  # TLC counts the initial state


def test_the_holding_config_holds():
    assert tlc.read_config(SLOTS / "MC_slots.cfg").expected == []
    res = tlc.run_tlc(SLOTS / "MC_slots.cfg", spec=SPEC)
    assert res.status == "ok" and res.distinct == explore(Config(2, 2, 3)).states == 361
