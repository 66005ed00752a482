"""Seed units (``--seeds``, ``--workers``, ``--shard``, ``--example-db``):
conformance/runner/units.py and the gate's use of it.

Most runs use the test protocol of tests/toy_protocol.py (a register store
whose lockstep gate takes a second); one runs a seeded fault of impl, the
construction users deploy (writer without the readers' lock), lockstep only.
"""

from __future__ import annotations

import json
import os
import signal
import time

import multiprocess
import pytest

import shmspec
from shmspec.conformance import protocols
from shmspec.conformance.cli import main
from shmspec.conformance.core.results import GateResult
from shmspec.conformance.runner import units
from shmspec.conformance.runner.gate import GATE_PROFILES, run_gate
from helpers import smoke_shrink


def _findings(result: GateResult) -> list[tuple]:
    return [(v.property, v.campaign, v.seed, getattr(v.exc, "cause", None)) for v in result.violations]


def test_unit_seeds_are_derived_from_the_base_seed():
    assert units.unit_seed(7, 0) == 7
    assert units.unit_seed(7, 1) == (7 + 0x9E3779B9) % 2**32
    assert len({units.unit_seed(0, k) for k in range(64)}) == 64


def test_shards_split_the_units_without_overlap():
    parts = [units.shard_units(8, (i, 3)) for i in (1, 2, 3)]
    assert sorted(k for p in parts for k in p) == list(range(8))
    assert parts[0] == [0, 3, 6]
    assert units.shard_units(8, None) == list(range(8))
    for bad in ("2", "0/3", "4/3", "a/b"):
        with pytest.raises(ValueError, match="--shard"):
            units.parse_shard(bad)


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_the_same_seeds_give_the_same_findings_on_one_worker_and_on_two(second_protocol, tmp_path):
    one = shmspec.check("toy:stale", seeds=3, workers=1, seed=5)
    two = shmspec.check("toy:stale", seeds=3, workers=2, seed=5, report_dir=tmp_path)
    assert one.seeds == two.seeds == tuple(units.unit_seed(5, k) for k in range(3))
    assert _findings(one) == _findings(two) and _findings(one)
    assert [v.steps for v in one.violations] == [v.steps for v in two.violations]  # shrinking completes here
    assert one.verdict == two.verdict == "fail"
    # each unit ran the whole campaign: the merged counts are the three units' sums
    solo = [run_gate(protocols.load("toy:stale"), "ci", s) for s in one.seeds]
    assert one.campaigns[0].examples == sum(r.campaigns[0].examples for r in solo)
    assert {v.property for v in one.violations} == {v.property for r in solo for v in r.violations}
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["seeds"] == list(two.seeds) and data["units"] == 3 and data["workers"] == 2
    assert data["shard"] is None and all(v["seed"] in two.seeds for v in data["violations"])
    assert "3 seed units" in (tmp_path / "report.html").read_text()


def test_one_seed_run_is_unchanged(second_protocol, tmp_path):
    result = shmspec.check("toy:stale", report_dir=tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert result.seeds == () and data["seeds"] == [0] and data["units"] == 1
    assert data["violations"] and all(v["seed"] == 0 for v in data["violations"])


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_shards_of_a_run_together_cover_its_seeds(second_protocol):
    whole = shmspec.check("toy:good", seeds=4, seed=9, profile="dev", example_db="none")
    halves = [shmspec.check("toy:good", seeds=4, seed=9, profile="dev", shard=f"{i}/2", example_db="none")
              for i in (1, 2)]
    assert sorted(halves[0].seeds + halves[1].seeds) == sorted(whole.seeds)
    assert halves[0].shard == (1, 2) and halves[0].seeds == (whole.seeds[0], whole.seeds[2])
    assert all(h.verdict == "pass" for h in halves)


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_a_seeded_fault_is_found_alike_on_one_and_two_workers(monkeypatch):
    """impl with one seeded fault (early_free: a chunk freed while a reader
    may still read it), vLLM's construction, lockstep campaigns only."""
    smoke_shrink(monkeypatch)  # the forked workers inherit it: both runs shrink alike
    from shmspec.conformance import protocols
    from shmspec.conformance.mutants import faults

    target = protocols.load(faults(["early_free"])[0].target)
    core = tuple(c for c in protocols.protocol_of(target).base_campaigns() if c.name == "core")
    runs = [run_gate(target, "ci", 0, campaigns=core, concurrency="off", seeds=2, workers=w,
                     first_finding_only=True) for w in (1, 2)]
    assert _findings(runs[0]) == _findings(runs[1])
    assert "RC" in {v.property for v in runs[0].violations}


def _exits(seed):
    os._exit(3)


def _sleeps(seed):
    time.sleep(60)


def _raises(seed):
    raise RuntimeError("boom")


def test_a_unit_that_sends_no_result_is_an_error_never_a_pass():
    out = units.run_units(_exits, [1, 2], workers=2)
    assert all(isinstance(o, str) and "without a result" in o for o in out)
    out = units.run_units(_raises, [1], workers=1)
    assert "RuntimeError: boom" in out[0]


def test_a_unit_past_its_limit_is_stopped():
    t0 = time.monotonic()
    out = units.run_units(_sleeps, [4], workers=1, unit_limit=1.0)
    assert "still running after 1 s" in out[0] and time.monotonic() - t0 < 30
    assert not multiprocess.active_children()


def test_a_run_whose_units_are_lost_has_verdict_error(second_protocol, monkeypatch):
    monkeypatch.setattr(units, "run_units", lambda run_one, seeds, workers, on_progress=None: ["lost"] * len(seeds))
    result = shmspec.check("toy:good", seeds=2)
    assert result.verdict == "error" and "lost" in result.campaigns[0].error
    ok = run_gate(protocols.load("toy:good"), "ci", 0)
    merged = units.merge([(0, ok), (1, "seed 1: lost")], 1.0, None, 1, 2)
    assert merged.verdict == "error" and merged.campaigns[-1].name == "seed 1"


def test_an_interrupt_stops_every_unit():
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            units.run_units(_sleeps, [1, 2], workers=2)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not multiprocess.active_children()


def test_the_example_database_replays_a_counterexample_first(second_protocol, tmp_path):
    db = tmp_path / "examples"
    first = shmspec.check("toy:stale", example_db=str(db), seed=3)
    assert db.is_dir() and any(db.iterdir())
    again = shmspec.check("toy:stale", example_db=str(db), seed=3)
    assert {v.property for v in again.violations} == {v.property for v in first.violations}
    # the saved counterexample is the first example run: found within its own steps
    v = again.violations[0]
    assert v.detected_steps <= len(v.steps)
    assert first.violations[0].detected_steps > v.detected_steps


def test_profiles_name_their_units_and_database():
    assert GATE_PROFILES["ci"].seeds == 1 and not GATE_PROFILES["ci"].example_db
    assert GATE_PROFILES["deep"].seeds == 8 and GATE_PROFILES["deep"].example_db


@pytest.mark.parametrize("argv, message", [
    (["--profile", "deep", "--shard", "1/2"], "--shard needs --seed"),
    (["--shard", "2/2"], "no unit of the 1 seed units"),
    (["--workers", "0"], "--workers must be an integer >= 1"),
    (["--seeds", "0"], "--seeds must be an integer >= 1"),
    (["--example-db", "github:nobody"], "github:OWNER/REPO"),
])
def test_bad_unit_settings_are_refused_before_any_work(argv, message, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["check", "--target", "vllm==0.0.1", "--report-dir", str(out), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def _large(seed):
    return {"seed": seed, "blob": "x" * 4_000_000}  # far beyond a pipe's buffer


def test_a_result_larger_than_a_pipe_buffer_is_received(monkeypatch):
    monkeypatch.setattr(units, "_portable", lambda r: r)
    t0 = time.monotonic()
    out = units.run_units(_large, [1, 2], workers=2, unit_limit=60)
    assert [o["seed"] for o in out] == [1, 2] and len(out[0]["blob"]) == 4_000_000
    assert time.monotonic() - t0 < 30
