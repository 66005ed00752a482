"""Constructions: impl in both writer constructions (the writer built as vLLM
builds it, no reader lock: the default; and given the readers' lock too), the
controlled and free-running campaigns passing in each; the lockstep model
agreeing with impl's counting of a writer that has the lock (vLLM 0.33.0
counts such a writer's gets); and the ``constructions`` campaign, which runs
the preemption sweep and a free-running load with readers spawned, with one
reader, and in the other writer construction, and names the construction of
each finding."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest

from shmspec.conformance.core.constructions import CONSTRUCTIONS, VLLM, Construction, others
from shmspec.conformance.concurrency.freerun import free_config, run_free
from shmspec.conformance.protocols.ringbuffer.campaigns import CONCURRENT_CAMPAIGNS
from shmspec.conformance.runner.gate import (CONSTRUCTIONS_CAMPAIGN, CONTROLLED, FAULTS, PREEMPTION, SW_CAMPAIGN,
                                      config_from_json, run_gate)
from shmspec.conformance.targets.loader import load_file, load_target
from shmspec.conformance.mutants import MUTANTS_DIR
from shmspec.conformance.concurrency.procs import ProcessPool
from shmspec.conformance.concurrency.races import sweep
from shmspec.conformance.reporting.report import report_json
from shmspec.conformance.concurrency.schedule import replay_schedule
from shmspec.conformance.lockstep.session import Call, Session, SessionConfig
from shmspec.conformance.core.serde import Blob


@pytest.mark.slow
@pytest.mark.parametrize("construction", [c for c in CONSTRUCTIONS if c != VLLM], ids=lambda c: c.name)
def test_impl_passes_controlled_faults_and_free_campaigns_in_every_construction(construction):
    """The concurrent campaigns on impl in each construction other than
    vLLM's (the writer given the readers' lock, readers spawned, one reader):
    each of the controlled mode's campaigns (the controlled one with
    zero-copy reads, ``keep_get``; the faults one, which needs a survivor,
    with two readers started as the construction says) and the free-running
    one (a fifth of its first reads zero-copy), once (issue 28: every
    construction, with leases and zero-copy reads).  In vLLM's construction
    the same runs are tests/conformance/test_cli.py::test_gate_passes_on_impl_ci_profile
    (the controlled ones, in the whole ci gate) and
    tests/conformance/runner/test_gate_concurrency.py::test_free_running_campaign_impl_passes_and_reports_rates;
    impl with a lease time is tests/impl/test_impl_leases.py's."""
    target = load_target("impl")
    config = construction.config(SessionConfig())
    free = CONCURRENT_CAMPAIGNS["free"][0]
    for campaigns in ((PREEMPTION, CONTROLLED, FAULTS, SW_CAMPAIGN), (free,)):
        result = run_gate(target, "ci", campaigns=campaigns, concurrency="off", config=config)
        assert result.construction == construction
        ran = [c for c in result.campaigns]
        assert [c.name for c in ran] == [c.name for c in campaigns]
        assert all(c.completed and c.error is None for c in ran), [(c.name, c.error) for c in ran]
        assert result.violations == [], [v.message for v in result.violations]
        if CONTROLLED in campaigns:
            assert sum(c.steps for c in ran) > 500
            controlled = ran[1]
            assert controlled.rates.get("zero_copy_reads", 0) > 0, controlled.rates
            faults = ran[2].rates["scenarios"]
            assert faults["reader_keeps_zero_copy"]["reachable"] and faults["reader_serde_keeps_view"]["reachable"]
        else:
            assert ran[0].rates["ops"] > 0 and ran[0].rates["zero_copy_values"] > 0


def test_writer_with_the_lock_counts_its_gets_in_place_of_readers():
    """vLLM 0.33.0 counts the gets of a writer built with the readers' lock
    as readers' reads; impl's writer holds no reader slot and its gets make
    up any slot's shortfall (issue 28 item 6), and the model says the same,
    in lockstep."""
    target = load_target("impl")
    s = Session(target, SessionConfig(n_readers=2, readers=("r1",), writer_lock=True))
    try:
        s.execute(Call("writer", "put", {"key": "a", "data": b"aaaa".hex()}))
        s.execute(Call("r1", "get", {"ref": "h1"}))
        assert s.state.ring.chunks[0].reader_count == 1
        step = s.execute(Call("writer", "get", {"ref": "h1"}))
        assert step.observed == repr(Blob(b"aaaa")) and step.violations == []
        assert s.state.readers == ("r1",)
        assert s.adapter.writer.reads(0) == (1, 0) and s.adapter.writer.stand_in_reads(0) == 1
        s.execute(Call("writer", "free_unused", {}))
        assert s.state.ring.chunks == ()  # slot 2's read made up by the writer's: reclaimed in both
    finally:
        s.close()


def test_writer_with_the_lock_reads_with_every_slot_held():
    """With both slots held by readers the writer's get is still served and
    counted (vLLM has no slots to run out of); two of them free a chunk
    neither reader read."""
    target = load_target("impl")
    s = Session(target, replace(SessionConfig(), writer_lock=True))  # r1 and r2 hold both slots
    try:
        s.execute(Call("writer", "put", {"key": "a", "data": b"aaaa".hex()}))
        for _ in range(2):
            step = s.execute(Call("writer", "get", {"ref": "h1"}))
            assert step.observed == repr(Blob(b"aaaa")) and step.violations == []
        s.execute(Call("writer", "free_unused", {}))
        assert s.state.ring.chunks == ()
        step = s.execute(Call("r1", "get", {"ref": "h1"}))
        assert step.observed.startswith("StaleHandle") and step.violations == [], step.observed
        assert s.deviations[-1]["property"] == "PROM"  # the writer's gets spent r1's promise: not the store's fault
    finally:
        s.close()


# ------------------------------------------------------------- the dimension
def test_construction_names_configs_and_reports_round_trip():
    assert [c.name for c in CONSTRUCTIONS] == [
        "writer unlocked, 2 forked readers", "writer unlocked, 2 spawned readers",
        "writer unlocked, 1 forked reader", "writer locked, 2 forked readers"]
    assert CONSTRUCTIONS[0] == VLLM and len(set(CONSTRUCTIONS)) == 4
    assert others(VLLM) == CONSTRUCTIONS[1:]
    assert VLLM in others(Construction(writer_lock=True)) and len(others(Construction(writer_lock=True))) == 3
    assert len(others(Construction(start_method="spawn", n_readers=3))) == 4  # a primary outside the list
    cfg = Construction(start_method="spawn", n_readers=1).config(SessionConfig())
    assert (cfg.start_method, cfg.n_readers, cfg.readers, cfg.writer_lock) == ("spawn", 1, ("r1",), False)
    assert Construction.of(cfg) == Construction(start_method="spawn", n_readers=1)
    from shmspec.conformance.runner.gate import _config_json
    assert config_from_json(_config_json(cfg)) == cfg
    # a report written before constructions: vLLM's construction
    assert Construction.of({"n_readers": 2, "writer_lock": False}) == VLLM


def test_a_target_pickles_as_its_spec_and_profile():
    """A spawned worker loads the target afresh from its spec (a module is not
    picklable) and keeps the controller's profile."""
    impl = load_target("impl")
    again = pickle.loads(pickle.dumps(impl))
    assert again.module is impl.module and again.profile == impl.profile
    fault = load_file(MUTANTS_DIR / "lone_reader_unscanned.py")
    again = pickle.loads(pickle.dumps(fault))
    assert again.spec == fault.spec and again.profile == fault.profile
    assert again.module is not fault.module and again.module.__doc__ == fault.module.__doc__


@pytest.mark.slow
def test_spawned_readers_run_the_sweep_and_the_free_load():
    """Readers spawned (fresh interpreters) and the writer forked: impl passes
    the preemption sweep and a free-running load; the fault whose writer skips
    the pin scan is caught with spawned readers too (so they really load and
    run the file target)."""
    readers = ("r1", "r2")
    config = SessionConfig(start_method="spawn")
    for spec, expect in (("impl", set()), (f"file:{MUTANTS_DIR / 'writer_unfenced.py'}", {"NRR"})):
        target = load_target(spec)
        found = set()

        def record(race, point, exc, steps):
            found.add(exc.prop)
            return replace(config, excused=config.excused | found)

        with ProcessPool(target, readers, start_method="spawn") as pool:
            assert type(pool.procs["writer"].process).__name__ == "ForkProcess"
            assert {type(pool.procs[r].process).__name__ for r in readers} == {"SpawnProcess"}
            runs, steps = sweep(target, config, pool, record)
        assert runs > 30 and steps > 500
        assert found == expect, (spec, found)
    fr = run_free(load_target("impl"), free_config(2, start_method="spawn"), 0.5, 2, 0)
    assert fr.verdict == "pass" and fr.puts > 50 and set(fr.per_process) == {"writer", "r1", "r2"}


def test_spawned_readers_do_not_rerun_a_script_without_a_main_guard(tmp_path):
    """A controller script with no ``if __name__ == "__main__"`` guard: its
    spawned readers do not execute it again (they would start the load again,
    recursively, and die on multiprocessing's bootstrapping error)."""
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent("""
        from shmspec.conformance.concurrency.freerun import free_config, run_free
        from shmspec.conformance.targets.loader import load_target
        fr = run_free(load_target("impl"), free_config(1, start_method="spawn"), 0.3, 1, 0)
        print("RAN", fr.verdict)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["RAN", "pass"]
    assert "bootstrapping phase" not in out.stderr


def test_a_bad_start_method_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown start method 'forkserver'"):
        ProcessPool(load_target("impl"), ("r1",), start_method="forkserver")


# ------------------------------------------------------ the campaign, a fault
@pytest.mark.slow
def test_the_constructions_campaign_catches_a_one_reader_fault_and_names_its_construction():
    """``lone_reader_unscanned`` skips the writer's pin scan only when the store
    has one reader: every campaign of the primary construction (two readers)
    passes it; the constructions campaign's one-reader construction catches
    it (NRR), the finding names that construction, replays from its report
    entry, and does not replay on impl.  report.json lists the four
    constructions, the primary one first."""
    spec = f"file:{MUTANTS_DIR / 'lone_reader_unscanned.py'}"
    target = load_target(spec)
    primary = run_gate(target, "ci", concurrency="off")  # every lockstep campaign and the boundary programs
    assert len(primary.campaigns) >= 10 and primary.violations == []
    pre = run_gate(target, "ci", campaigns=(PREEMPTION,), concurrency="off")
    assert pre.violations == [] and pre.campaigns[0].completed
    result = run_gate(target, "ci", campaigns=(CONSTRUCTIONS_CAMPAIGN,), concurrency="off")
    (camp,) = result.campaigns
    assert camp.error is None and camp.completed, camp.error
    # the sweep's finding is fixed; the free-running load's depend on the OS's
    # interleaving (it may also catch the drain read as CLR), in that construction only
    assert [v.property for v in result.violations if v.concurrency == "controlled"] == ["NRR"]
    assert all(v.construction == Construction(n_readers=1) for v in result.violations)
    v = result.violations[0]
    assert v.construction == Construction(n_readers=1) and v.campaign == "constructions"
    assert v.message.startswith("writer unlocked, 1 forked reader: preemption: ")
    doc = json.loads(json.dumps(report_json(result, "2026-12-01T00:00:00Z")))
    assert doc["violations"][0]["construction"]["name"] == "writer unlocked, 1 forked reader"
    rows = doc["constructions"]
    assert [r["name"] for r in rows] == [c.name for c in CONSTRUCTIONS]
    assert rows[0]["primary"] and not any(r["primary"] for r in rows[1:])
    assert [r["violations"] > 0 for r in rows[1:]] == [False, True, False]
    assert all(r["preemption"]["schedules"] > 30 and r["free_running"]["ops"] > 100 for r in rows[1:])
    entry = doc["violations"][0]
    calls = [{k: s[k] for k in ("process", "kind", "action", "args")} for s in entry["steps"]]
    got = replay_schedule(spec, calls, entry["config"])
    assert got is not None and got.startswith("NRR"), got
    assert replay_schedule("impl", calls, entry["config"]) is None


@pytest.mark.slow
def test_impl_passes_the_constructions_campaign_from_any_primary():
    for primary in (VLLM, Construction(start_method="spawn", n_readers=1)):
        result = run_gate(load_target("impl"), "ci", campaigns=(CONSTRUCTIONS_CAMPAIGN,), concurrency="off",
                          config=primary.config(SessionConfig()))
        (camp,) = result.campaigns
        assert camp.completed and camp.error is None, camp.error
        assert result.violations == [], [v.message for v in result.violations]
        ran = [r["name"] for r in result.constructions[1:]]
        assert ran == [c.name for c in others(primary)] and result.construction == primary


def test_the_faults_campaign_is_listed_under_the_two_reader_construction_it_ran_in():
    """With a one-reader primary construction, the faults campaign (which needs
    a survivor) runs two readers, started as the primary says: report.json
    lists it there, not under the primary."""
    from shmspec.conformance.runner.gate import FAULTS
    primary = Construction(start_method="spawn", n_readers=1)
    result = run_gate(load_target("impl"), "ci", campaigns=(FAULTS,), concurrency="off",
                      config=primary.config(SessionConfig()))
    assert result.campaigns[0].completed and result.violations == []
    rows = result.constructions
    assert rows[0]["name"] == "writer unlocked, 1 spawned reader" and rows[0]["campaigns"] == []
    assert rows[1] == {**Construction(start_method="spawn").to_json(), "primary": False, "campaigns": ["faults"]}
