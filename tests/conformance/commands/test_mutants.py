"""The seeded-fault library and ``shmspec mutants``, in reduced form.

The full run (every fault through the whole ``ci`` gate, tens of minutes) is
``shmspec mutants``; here a few fast faults go through the mutants runner with
a reduced gate (profile ``tiny``: the ``ci`` profile with fewer, shorter
examples, registered for these tests only; its ``core`` campaign only, no
processes), and the unmodified control must *not* be caught, so a runner that
calls everything caught fails this file.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shmspec.conformance import cli

from shmspec.conformance.commands import mutation
from shmspec.conformance.runner.gate import ALL_PROPERTIES, GATE_PROFILES, run_gate
from shmspec.conformance.targets.loader import load_file
from shmspec.conformance.lockstep.machine import CAMPAIGNS
from shmspec.conformance.mutants import CONTROL, MUTANTS_DIR, control, faults

CORE = tuple(c for c in CAMPAIGNS if c.name == "core")
FAST = ["dup_overwrite", "size_off_by_one", "leaky_close", "partial_put_on_reject"]


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    """The reduced gate profile ``tiny`` (ci with 30 examples of 20 steps,
    one excusal round, 5 s of shrinking per counterexample)."""
    monkeypatch.setitem(GATE_PROFILES, "tiny", replace(GATE_PROFILES["ci"], name="tiny", max_examples=30,
                                                        step_count=20, rounds=1, shrink_examples=40))


def _narrow(monkeypatch):
    """Make the CLI's gate runs ``tiny`` and core-only."""
    gate = mutation.run_gate

    def core_only(target, profile, seed, on_progress=None, campaigns=None, concurrency=None, stop_at=None):
        return gate(target, "tiny", seed, on_progress=on_progress, campaigns=CORE, concurrency="off",
                    stop_at=stop_at)

    monkeypatch.setattr(mutation, "run_gate", core_only)
    monkeypatch.setattr(mutation, "ISOLATE", False)  # the patch must reach the gate: same process

ROW_KEYS = {"name", "expected", "caught", "caught_by", "campaign", "seconds_to_detection", "steps_to_detection",
            "expected_detection", "violated", "verdict", "gate_seconds", "errors", "report"}


def test_library_has_at_least_20_named_faults_each_naming_a_property():
    fs = faults()
    assert len(fs) >= 20
    assert len({f.name for f in fs}) == len(fs)
    assert CONTROL not in {f.name for f in fs}
    for f in fs:
        assert f.expected in ALL_PROPERTIES, f"{f.name}: unknown property {f.expected}"
        assert f.summary, f"{f.name}: docstring has no 'Fault <name>: <bug>' first line"
        assert f.path.parent == MUTANTS_DIR


def test_every_fault_loads_as_an_impl_profile_file_target():
    for f in faults() + [control()]:
        target = load_file(f.path)
        assert target.profile.name == "impl", f.name


def test_ack_word_faults_build_small_rings():
    """count_before_validate and unlocked_increment misattribute an ack only once
    an ack word is taken over, ``max_chunks`` allocations later: their rings
    hold ``MAX_CHUNKS = 2`` chunks (readers take the writer's bound), which the
    preemption sweep's puts reach; impl's default (1024) the gate never does."""
    for name in ("count_before_validate", "unlocked_increment"):
        target = load_file(MUTANTS_DIR / f"{name}.py")
        ring = target.ring_cls(256, None, True)
        try:
            assert ring.max_chunks == target.module.MAX_CHUNKS == 2, name
            view = target.ring_cls(256, ring.shared_memory.name)
            assert view.max_chunks == 2, name
            view.close()
        finally:
            ring.close()


def test_only_keeps_the_order_and_rejects_unknown_names():
    assert [f.name for f in faults(["leaky_close", "dup_overwrite"])] == ["leaky_close", "dup_overwrite"]
    with pytest.raises(KeyError, match="nope"):
        faults(["nope"])


@pytest.mark.slow
def test_reduced_run_catches_fast_faults_and_writes_mutants_json(tmp_path):
    res = mutation.run_mutants(faults(FAST), "tiny", report_dir=tmp_path, campaigns=CORE, concurrency="off")
    path = mutation.write_json(res, tmp_path)
    data = json.loads(path.read_text())
    assert data["schema"] == "shmspec.mutants/1"
    assert (data["caught"], data["total"]) == (4, 4), json.dumps(data["faults"], indent=1)
    assert data["score"] == 1.0
    assert [r["name"] for r in data["faults"]] == FAST
    for row in data["faults"]:
        assert ROW_KEYS <= set(row), row
        assert row["caught"] and row["expected"] in row["violated"]
        assert row["caught_by"] == row["violated"][0]
        assert row["campaign"] == "core"
        assert 0 < row["seconds_to_detection"] <= row["gate_seconds"]
        assert row["steps_to_detection"] >= 1
        assert row["expected_detection"]["shrunk_steps"] >= 1
        report = json.loads((tmp_path / row["report"] / "report.json").read_text())
        assert report["verdict"] == "fail" and report["properties"][row["expected"]] == "fail"
    assert data["median_seconds_to_detection"] <= data["worst_seconds_to_detection"]


@pytest.mark.slow
def test_isolated_run_streams_progress_and_matches_in_process(tmp_path):
    """What the CLI does: the fault's gate in a spawned process, the reduced
    profile and campaigns passed along; same row as in this process."""
    seen = []
    res = mutation.run_mutants(faults(["size_off_by_one"]), "tiny", report_dir=tmp_path, campaigns=CORE,
                               concurrency="off", isolate=True, on_progress=lambda *a: seen.append(a))
    row = res.rows[0]
    assert row["caught"] and row["caught_by"] == "SIZE" and not row["errors"], row
    assert ("core", 0, 1) in seen and seen[-1][0] == "done"
    assert (tmp_path / "size_off_by_one" / "report.json").exists()
    here = mutation.run_fault(faults(["size_off_by_one"])[0], "tiny", campaigns=CORE, concurrency="off").to_json()
    assert (here["caught_by"], here["campaign"], here["violated"]) == (row["caught_by"], row["campaign"],
                                                                       row["violated"])


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_a_faults_gate_stops_at_the_first_finding_of_its_property():
    """``stop_at``: the campaigns after the first finding of the fault's
    property are skipped, saying why; without it (``--full``) they run."""
    fault = faults(["dup_overwrite"])[0]
    two = tuple(c for c in CAMPAIGNS if c.name in ("core", "stale"))
    stopped = run_gate(load_file(str(fault.path)), "tiny", 0, campaigns=two, concurrency="off",
                       stop_at=frozenset({"DUP"}))
    core, stale = stopped.campaigns
    assert "DUP" in {v.property for v in core.violations} and not core.completed  # no round after the finding
    assert not stale.completed and stale.examples == 0 and stale.skipped == (
        "not run: the gate stopped at the first finding of DUP (campaign core)")
    full = mutation.run_fault(fault, "tiny", campaigns=two, concurrency="off", full=True)
    assert [c.completed for c in full.result.campaigns] == [True, True] and full.caught
    assert full.result.campaigns[0].examples > core.examples  # the stopped campaign ran fewer rounds
    assert mutation.run_fault(fault, "tiny", campaigns=two, concurrency="off").result.campaigns[1].skipped


@pytest.mark.slow
def test_faults_run_at_once_give_the_rows_of_one_at_a_time(tmp_path):
    """``jobs=2``: two faults' gates in two spawned processes at once; the
    rows, in the faults' order, are those of one at a time."""
    names = ["size_off_by_one", "dup_overwrite", "leaky_close"]
    key = lambda r: (r["name"], r["caught"], r["caught_by"], r["campaign"], r["violated"],  # noqa: E731
                     r["expected_detection"]["shrunk_steps"])
    both = mutation.run_mutants(faults(names), "tiny", report_dir=tmp_path, campaigns=CORE, concurrency="off",
                                isolate=True, jobs=2)
    one = mutation.run_mutants(faults(names), "tiny", campaigns=CORE, concurrency="off")
    assert [key(r) for r in both.rows] == [key(r) for r in one.rows] and [r["name"] for r in both.rows] == names
    assert all(not r["errors"] for r in both.rows), both.rows
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        mutation.run_mutants(faults(names), "tiny", jobs=0)


def test_the_unmodified_control_is_not_caught(tmp_path):
    """impl wrapped like a fault, claimed to be a DUP fault: the runner must
    report it not caught (the gate passes it)."""
    decoy = replace(control(), expected="DUP")
    out = mutation.run_fault(decoy, "tiny", campaigns=CORE, concurrency="off")
    assert out.result.verdict == "pass"
    assert not out.caught and out.violated == []
    row = out.to_json()
    assert row["caught_by"] is None and row["seconds_to_detection"] is None


@pytest.mark.slow
def test_detection_is_before_shrinking_and_counts_gate_steps():
    target = load_file(MUTANTS_DIR / "dup_overwrite.py")
    result = run_gate(target, "tiny", campaigns=CORE, concurrency="off", first_finding_only=True)
    v = result.violations[0]
    assert v.detected_seconds is not None and v.detected_seconds <= result.seconds
    assert v.detected_steps <= result.campaigns[0].steps
    assert v.detected_steps >= len([s for s in v.steps if s["action"] != "attach_reader"])


@pytest.mark.slow
def test_cli_mutants_exit_status_and_table(tmp_path, monkeypatch, capsys):
    _narrow(monkeypatch)
    rc = cli.main(["mutants", "--only", "dup_overwrite,leaky_close", "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "2/2 caught" in out and "score 2/2" in out
    last = out.strip().splitlines()[-1]  # the run ends with its verdict and its report, nothing after
    assert last.startswith("verdict: PASS  (score 2/2;") and last.endswith("mutants.json"), last
    data = json.loads((tmp_path / "mutants.json").read_text())
    assert (data["caught"], data["total"]) == (2, 2)
    assert (tmp_path / "leaky_close" / "report.html").exists()
    assert "dup_overwrite" in (tmp_path / "mutants.html").read_text()


def test_cli_mutants_fails_when_a_fault_escapes(tmp_path, monkeypatch):
    """A fault whose expected property the (narrowed) gate cannot see exits 1:
    LOCK is checked only by the lock campaign, not by core."""
    _narrow(monkeypatch)
    assert cli.main(["mutants", "--only", "lockless_reader", "--report-dir", str(tmp_path)]) == 1
    row = json.loads((tmp_path / "mutants.json").read_text())["faults"][0]
    assert row["caught"] is False and row["expected"] == "LOCK"


def test_cli_mutants_usage_errors(tmp_path):
    assert cli.main(["mutants", "--only", "nope", "--report-dir", str(tmp_path)]) == 2
    assert cli.main(["mutants", "--list"]) == 0


def test_seed_only_switches_off_hypothesis_local_constants():
    """A fault's run must not depend on which local modules happen to be
    loaded: inside ``_seed_only`` Hypothesis's pool of local constants is empty."""
    providers = pytest.importorskip("hypothesis.internal.conjecture.providers")
    if not hasattr(providers, "_get_local_constants"):
        pytest.skip("this Hypothesis has no local-constants pool")
    original = providers._get_local_constants
    with mutation._seed_only():
        pool = providers._get_local_constants()
        assert not list(pool.set_for_type("integer")) and not list(pool.set_for_type("bytes"))
    assert providers._get_local_constants is original


def test_a_ring_fault_naming_a_construction_is_gated_in_that_construction():
    """``Construction: writer-lock`` (``writer_gets_uncounted``): its gate's
    primary construction gives the writer the readers' lock, and its lockstep
    campaign then finds the put the writer's counted gets should have made
    room for (OOM); in vLLM's construction (no lock) the same campaign finds
    nothing.  An unknown construction name is an error row, not a run."""
    fault = faults(["writer_gets_uncounted"])[0]
    assert fault.construction == "writer-lock"
    core = tuple(c for c in CAMPAIGNS if c.name == "core")
    out = mutation.run_fault(fault, "ci", 0, campaigns=core, concurrency="off")
    assert out.caught and out.result.construction.writer_lock, out.result.violations
    plain = run_gate(load_file(str(fault.path)), "ci", 0, campaigns=core, concurrency="off")
    assert plain.violations == [] and not plain.construction.writer_lock
    bad = mutation.run_fault(replace(fault, construction="upside-down"), "ci", 0, campaigns=core)
    assert bad.error.startswith("unknown construction 'upside-down'") and not bad.caught
