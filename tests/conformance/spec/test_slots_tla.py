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


def _set(names) -> str:
    return "{" + ", ".join(f'"{n}"' for n in sorted(names)) + "}"


def _cfg(tmp_path: Path, readers: int, slots: int, messages: int, faults: set[str], memory: str = "sc",
         fences: set[str] = frozenset({"publish"})) -> Path:
    path = tmp_path / f"MC_{readers}_{slots}_{messages}_{memory}.cfg"
    path.write_text(f"\\* Expected: every invariant holds\nSPECIFICATION Spec\nCONSTANTS\n    R = {readers}\n"
                    f"    S = {slots}\n    M = {messages}\n    Faults = {_set(faults)}\n    Memory = \"{memory}\"\n"
                    f"    Fences = {_set(fences)}\nINVARIANTS NRR FIFO\n")
    return path


@pytest.mark.parametrize("readers, slots, messages, faults, memory, fences", [
    (1, 1, 2, set(), "sc", {"publish"}), (2, 1, 3, set(), "sc", {"publish"}), (2, 2, 3, set(), "sc", {"publish"}),
    (3, 2, 3, set(), "sc", {"publish"}), (2, 2, 3, {"no_claim"}, "sc", {"publish"}),
    (2, 2, 3, {"reset_first"}, "sc", {"publish"}),
    # weak store orders: x86's TSO holds with vLLM's fence and without any; PSO holds with impl's two fences
    (2, 2, 3, set(), "tso", {"publish"}), (2, 2, 3, set(), "tso", set()), (2, 1, 3, set(), "pso", {"claim", "publish"}),
])
def test_tlc_reaches_the_states_the_model_reaches(tmp_path, readers, slots, messages, faults, memory, fences):
    res = tlc.run_tlc(_cfg(tmp_path, readers, slots, messages, faults, memory, fences), spec=SPEC)
    found = explore(Config(readers, slots, messages, frozenset(faults), memory, frozenset(fences)))
    assert res.status == "ok" and found.violation is None
    assert res.distinct == found.states


@pytest.mark.parametrize("name, model, invariant", [
    ("MC_slots_publish_first.cfg", Config(1, 1, 2, frozenset({"publish_first"})), "FIFO"),
    ("MC_slots_early_release.cfg", Config(1, 1, 2, frozenset({"early_release"})), "NRR"),
    # vLLM 0.33.0's fences under PSO: the next claim drains after the flag reset; a message read twice
    ("MC_slots_pso.cfg", Config(1, 1, 2, memory="pso"), "FIFO"),
])
def test_each_fault_config_fails_as_it_states_and_as_the_model_does(name, model, invariant):
    cfg = tlc.read_config(SLOTS / name)
    assert cfg.expected == [invariant]
    res = tlc.run_tlc(SLOTS / name, spec=SPEC)
    assert res.status == "violation" and res.invariant == invariant
    prop, _, trace = explore(model).violation
    assert prop == invariant and len(res.trace) == len(trace) + 1  # TLC counts the initial state


@pytest.mark.parametrize("name, model, states", [
    ("MC_slots.cfg", Config(2, 2, 3), 361),
    ("MC_slots_tso.cfg", Config(2, 2, 3, memory="tso"), 831),
    ("MC_slots_pso_fenced.cfg", Config(2, 2, 3, memory="pso", fences=frozenset({"claim", "publish"})), 992),
])
def test_the_holding_configs_hold(name, model, states):
    assert tlc.read_config(SLOTS / name).expected == []
    res = tlc.run_tlc(SLOTS / name, spec=SPEC)
    assert res.status == "ok" and res.distinct == explore(model).states == states


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_shmspec_model_runs_the_slot_configs_and_judges_them(tmp_path, capsys):
    import json

    from shmspec.conformance.cli import main

    assert main(["model", "--protocol", "queue", "--report-dir", str(tmp_path)]) == 0
    # the run ends with its verdict and its report, nothing after (the check/prove vocabulary)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("verdict: PASS  (6/6 configs as their Expected: line states)  report: "), last
    assert last.endswith("model-slots.json"), last
    data = json.loads((tmp_path / "model-slots.json").read_text())
    assert data["schema"] == "shmspec.model-slots/1" and data["ok"] is True and data["verdict"] == "pass"
    by = {c["config"]: c for c in data["configs"]}
    assert {"MC_slots.cfg", "MC_slots_tso.cfg", "MC_slots_pso.cfg", "MC_slots_pso_fenced.cfg"} <= set(by)
    assert by["MC_slots_pso.cfg"]["tlc"] == "violation" and by["MC_slots_pso.cfg"]["invariant"] == "FIFO"
    assert by["MC_slots_tso.cfg"]["distinct"] == by["MC_slots_tso.cfg"]["model_states"] == 831
    # a config whose Expected line is wrong is judged so (exit 1)
    wrong = SLOTS / "MC_slots_pso.cfg"
    (tmp_path / "x").mkdir()
    bad = tmp_path / "x" / "MC_slots_claimed.cfg"
    bad.write_text(wrong.read_text().replace("Expected: FIFO violated", "Expected: every invariant holds"))
    from shmspec.conformance.commands import modelcheck
    from shmspec.conformance.spec.tlc import read_config

    cf = read_config(bad)
    out = modelcheck.SlotConfigOutcome(cf, "violation", 63, "FIFO", 23, 68, ("FIFO", "", ["s"] * 22))
    assert not out.ok
    assert main(["model", "--protocol", "arena", "--deep", "--report-dir", str(tmp_path / "e")]) == 2
    assert "not with --protocol arena" in capsys.readouterr().err
