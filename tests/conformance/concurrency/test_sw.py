"""The sw campaign (SW): two threads on one writer, a preemption sweep of
each scenario; impl serializes them, vLLM's writer (one thread's by its
contract) is corrupted and reported as not claimed, a seeded fault fails."""

from __future__ import annotations

import dataclasses
import threading
import types

import pytest

from shmspec.conformance.runner import gate
from shmspec.conformance.concurrency import sw
from shmspec.conformance.mutants import MUTANTS_DIR
from helpers import load_or_skip, run_campaign

FAULT = f"file:{MUTANTS_DIR / 'writer_lock_per_thread.py'}"


def _campaign(spec, writer_lock=False):
    return run_campaign(spec, gate.SW_CAMPAIGN, writer_lock)


@pytest.mark.slow
@pytest.mark.parametrize("writer_lock", [False, True], ids=["vllm-construction", "writer-lock"])
def test_impl_serializes_two_writer_threads(writer_lock):
    res = _campaign("impl", writer_lock)
    assert res.completed and res.error is None and res.violations == [], [v.message for v in res.violations]
    scen = res.rates["scenarios"]
    assert set(scen) == set(sw.SCENARIOS) and res.rates["contract"] == "threads"
    assert all(not s["note"] for s in scen.values()), scen  # every serial run passed its checks
    # the sweep reached impl's writer points, where the other thread blocks on impl's lock
    assert scen["put_put_reclaim"]["schedules"] >= 8, scen


def test_impl_schedule_blocks_the_second_thread_on_the_writer_lock():
    reached, found, rows = sw.run_schedule(load_or_skip("impl"), "put_put_reclaim", 0)
    assert reached and found == []
    seen = [(r["process"], r["observed"]) for r in rows if r["process"].startswith("thread")]
    assert seen[0] == ("thread A", "▸ serialize")
    assert seen[1] == ("thread B", "blocked (no yield point, CPU clock still)")
    done = {p: o for p, o in seen if o.startswith("⇒")}
    assert set(done) == {"thread A", "thread B"}
    # A's put allocated first (id 4, B's id 5): B waited for the lock.  (A's
    # lane then takes the signature, a second writer call, which B may get
    # the lock before: then A shows as blocked once and returns last.)
    assert done["thread A"] == "⇒ (0, 4)" and done["thread B"] == "⇒ (60, 5)"


def test_seeded_fault_writer_lock_per_thread_is_caught_and_replays():
    res = _campaign(FAULT)
    assert res.completed
    assert {v.config["scenario"] for v in res.violations} >= {"put_put_same_key", "put_put_reclaim"}
    same = next(v for v in res.violations if v.config["scenario"] == "put_put_same_key")
    assert same.property == "SW" and "one key, two objects" in same.message
    assert same.config["k"] == 0 and same.calls() == [] and same.steps[-1]["violations"]
    assert sw.replay_sw(FAULT, same.config).startswith("SW: both threads' puts of k1")
    assert sw.replay_sw("impl", same.config) is None


def test_vllm_writer_is_one_threads_by_contract():
    """vLLM 0.33.0: the sweep corrupts its writer (a key whose chunk is gone,
    a promised handle reclaimed), reported as not claimed: no violation."""
    res = _campaign("vllm==0.33.0")
    assert res.completed and res.violations == [] and res.checks == []
    assert res.not_claimed.keys() == {"SW"} and res.rates["contract"] == "one-thread"
    msgs = {f["scenario"]: f["message"] for f in res.rates["not_claimed"]}
    assert "one key, two objects" in msgs["put_put_same_key"]
    assert "which is not a live chunk" in msgs["put_put_reclaim"]
    assert "reclaimed the chunk it had just promised" in msgs["put_get_cached"]
    result = gate.GateResult("vllm==0.33.0", "vllm-0.32", "ci", 0, [res], 1.0)
    assert result.properties["SW"] == "not-claimed" and result.verdict == "pass"


def test_a_deadlock_is_a_bounded_finding(monkeypatch):
    """A writer whose put takes a lock it never gives back: the second thread
    waits for ever; the sweep reports it after STEP_BOUND, even in the serial run."""
    from shmspec import impl as _impl

    class Stuck(_impl.SingleWriterShmObjectStorage):
        def put(self, key, value):
            if self.is_writer:
                if not hasattr(self, "_held"):
                    self._held = threading.Lock()
                self._held.acquire()  # never released
            return super().put(key, value)

    impl_target = load_or_skip("impl")
    module = types.SimpleNamespace(**vars(impl_target.module))
    module.SingleWriterShmObjectStorage = Stuck
    target = dataclasses.replace(impl_target, module=module)
    monkeypatch.setattr(sw, "STEP_BOUND", 0.5)
    res = sw.run_scenario(target, "put_put_same_key")
    assert res.note == "" and len(res.findings) == 1
    f = res.findings[0]
    assert f.k == -1 and f.message.startswith(sw.DEADLOCK) and "blocked for 0.5 s" in f.message


def test_a_child_past_its_bound_is_killed_and_reported():
    results, error = sw.run_all(load_or_skip("impl"), bound=0.0)
    assert error is None and len(results) == 1
    assert results[0].findings[0].message.startswith("the sw child ran past 0 s in scenario put_put_same_key")
