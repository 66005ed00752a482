"""The TLA+ spec under TLC (tla/): what should hold holds, what should fail fails,
and the spec's actions are the model's atomic steps."""

from __future__ import annotations

import re
import shutil

import pytest

from shmspec.conformance.cli import main
from shmspec.conformance.tlc import check_model, default_tla_dir, parse_output
from shmspec.model.steps import ATOMIC_STEPS

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs java")


def test_every_config_does_what_it_states(tmp_path):
    checks = {c.config: c for c in check_model()}
    assert set(checks) == {"MC_impl.cfg", "MC_vllm.cfg", "MC_vllm_old.cfg"}
    for c in checks.values():
        assert c.ok, (c.config, c.expected, c.result.status, c.result.invariant, c.result.output[-2000:])
    hardened = checks["MC_impl.cfg"].result
    assert hardened.status == "ok" and hardened.distinct > 10_000 and hardened.depth > 10
    for name in ("MC_vllm.cfg", "MC_vllm_old.cfg"):
        r = checks[name].result
        assert r.invariant == "NRR" and r.trace[0].action == "Initial"
        # the counterexample: a check, then the slot is reused, then the read
        actions = [s.action for s in r.trace]
        assert "clear" in actions and actions[-1] == "payload_read"
        assert r.trace[-1].variables["got"] != "(r1 :> 0 @@ r2 :> 0)"


def test_spec_actions_are_model_steps():
    src = (default_tla_dir() / "ShmStore.tla").read_text()
    nxt = src[src.index("Next =="):src.index("Spec ==")]
    actions = set(re.findall(r"\b([a-z_]+)(?:\(r\))?\s*(?:\\/|$)", nxt, re.M)) - {"r"}
    assert actions and actions <= set(ATOMIC_STEPS), actions


def test_shmspec_model_cli(tmp_path):
    assert main(["model", "--config", "MC_vllm*.cfg", "--report-dir", str(tmp_path)]) == 0
    assert (tmp_path / "model.json").is_file()


def test_a_wrong_expectation_fails(tmp_path):
    """A config that claims NRR holds for the vLLM protocol makes `shmspec model` exit 1."""
    for f in ("ShmStore.tla", "MC_vllm.cfg"):
        shutil.copy(default_tla_dir() / f, tmp_path / f)
    cfg = tmp_path / "MC_vllm.cfg"
    cfg.write_text(cfg.read_text().replace("Expected: NRR violated", "Expected: every invariant holds"))
    assert main(["model", "--tla-dir", str(tmp_path), "--report-dir", str(tmp_path / "r")]) == 1


def test_parse_output_reads_counts_and_trace():
    out = ("Error: Invariant NRR is violated.\nError: The behavior up to this point is:\n"
           "State 1: <Initial predicate>\n/\\ x = 0\n/\\ y = ( 0 :> 1 @@\n  1 :> 2 )\n\n"
           "State 2: <publish line 70, col 5 to line 76, col 62 of module ShmStore>\n/\\ x = 1\n/\\ y = 0\n\n"
           "150 states generated, 81 distinct states found, 47 states left on queue.\n"
           "The depth of the complete state graph search is 7.\n")
    r = parse_output("MC.cfg", 12, out, 1.0)
    assert (r.status, r.invariant, r.generated, r.distinct, r.depth) == ("violation", "NRR", 150, 81, 7)
    assert [(s.index, s.action) for s in r.trace] == [(1, "Initial"), (2, "publish")]
    assert r.trace[0].variables == {"x": "0", "y": "( 0 :> 1 @@ 1 :> 2 )"}
