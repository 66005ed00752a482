"""PROM and PROG in the controlled campaign (its reads are drawn): the
sessions keep the client's account of promised reads, a get a reader was
promised and has not made must not raise StaleHandle (PROM), and when a
session ends, once every promised read is made and ``free_unused`` ran, a put
of the largest object must find room (PROG).  Findings replay from their
report entry (``config["promises"]``)."""

from __future__ import annotations

from dataclasses import replace


import pytest

from shmspec.conformance.runner.gate import CONTROLLED, GATE_PROFILES, run_gate
from shmspec.conformance.targets.loader import load_target
from shmspec.conformance.concurrency.schedule import CONTROLLED_CHECKS, replay_schedule
from helpers import TESTS, smoke_shrink

LOST_ACKS = f"file:{TESTS / 'targets' / 'impl_lost_acks.py'}"


def _controlled(spec):
    result = run_gate(load_target(spec), "ci", campaigns=(CONTROLLED,), concurrency="off")
    (camp,) = result.campaigns
    assert camp.error is None and camp.completed, camp.error
    return result


@pytest.mark.slow
def test_impl_keeps_every_promise_in_controlled_schedules():
    result = _controlled("impl")
    assert {"PROM", "PROG"} <= set(result.campaigns[0].checks) and {"PROM", "PROG"} <= CONTROLLED_CHECKS
    assert result.violations == [], [v.message for v in result.violations]
    assert result.properties["PROM"] == result.properties["PROG"] == "pass"


@pytest.mark.slow
def test_a_reader_whose_acks_are_lost_pins_the_ring_and_prog_names_the_chunks(monkeypatch):
    smoke_shrink(monkeypatch)  # what PROG names and the replays; not how short the schedule got
    result = _controlled(LOST_ACKS)
    (v,) = [v for v in result.violations if v.property == "PROG"]
    assert v.concurrency == "controlled" and v.config["promises"] is True
    assert "every promised read made and free_unused run, a put of the largest object" in v.message
    assert "still live: id " in v.message and "reads per reader [" in v.message and ", 0] (slot 2: 0 < writer_count 1)" in v.message
    assert v.steps[-1]["action"] == "put" and v.steps[-1]["args"]["key"] == "prog"
    calls = v.calls()
    got = replay_schedule(LOST_ACKS, calls, v.config)
    assert got is not None and got.startswith("PROG: "), got
    assert replay_schedule("impl", calls, v.config) is None
    # without the client's account the same schedule finds nothing
    assert replay_schedule(LOST_ACKS, calls, {**v.config, "promises": False}) is None


@pytest.mark.slow
def test_vllm_evicts_a_promised_reference_after_another_readers_second_read(monkeypatch):
    """vLLM counts reads, not readers: a reader's second read of one handle
    (an n > 1 fan-out) completes the count, the chunk is reclaimed, and the
    other reader's promised read fails (the over-read eviction, PROM).
    Shrinking is cut at 2 s (the ci profile: 10 s): the finding and its
    replay do not depend on how short its schedule got."""
    monkeypatch.setitem(GATE_PROFILES, "ci", replace(GATE_PROFILES["ci"], shrink_examples=20))
    result = _controlled("vllm==0.33.0")
    (v,) = [v for v in result.violations if v.property == "PROM"]
    assert "failed with StaleHandle: its chunk was evicted before" in v.message
    assert "read it 2 times: the client broke the read-once rule; PROM still holds the store" in v.message
    got = replay_schedule("vllm==0.33.0", v.calls(), v.config)
    assert got is not None and got.startswith("PROM: "), got


def _zero_copy_program(spec):
    """r1 keeps a ``get(copy=False)`` value of h1 while the writer puts the
    largest objects and both readers read each; then r1 releases it (NRR on
    the kept value) and the session ends (PROG: the final put must fit once
    the value is gone).  Returns the violation raised, or None."""
    from shmspec.conformance.concurrency.procs import ProcessPool
    from shmspec.conformance.concurrency.schedule import ScheduledSession, payload, run_whole
    from shmspec.conformance.core.config import SessionConfig
    from shmspec.conformance.lockstep.session import PropertyViolation

    target, cfg = load_target(spec), SessionConfig()
    with ProcessPool(target, cfg.readers) as pool:
        s = ScheduledSession(pool, target, cfg, promises=True)

        def do(proc, action, args):
            s.execute({"process": proc, "kind": "start", "action": action, "args": args})
            run_whole(s, proc)

        try:
            do("writer", "put", {"key": "k0", "data": payload(cfg, 1, 100).hex()})
            do("r1", "keep_get", {"ref": "h1"})
            do("r2", "get", {"ref": "h1"})
            for i in range(2, 7):
                n = len(s.refs)
                do("writer", "put", {"key": f"k{i}", "data": payload(cfg, i, 100).hex()})
                if len(s.refs) > n:
                    do("r1", "get", {"ref": s.refs[-1].ref})
                    do("r2", "get", {"ref": s.refs[-1].ref})
            assert s.kept == {"r1": {"k0": "h1"}}
            s.release_kept("r1")
            assert s.kept == {}
            s.finish()
        except PropertyViolation as exc:
            s.finish_quietly()
            return exc
    return None


def test_zero_copy_values_in_controlled_sessions_nrr_and_prog():
    """The controlled campaign's zero-copy steps (issue 28 item 5): on impl a
    kept value reads as put after the writer wrapped the ring, and the final
    put fits once it is dropped; an unleased value is caught by NRR when it
    is released, a lease that outlives its value by PROG, which quotes the
    store's refusal naming the lease."""
    assert _zero_copy_program("impl") is None
    from shmspec.conformance.mutants import MUTANTS_DIR

    nrr = _zero_copy_program(f"file:{MUTANTS_DIR / 'zero_copy_unleased.py'}")
    assert nrr is not None and nrr.prop == "NRR", nrr
    assert nrr.message.startswith("reader r1's kept value of get(copy=False) now reads Blob(")
    prog = _zero_copy_program(f"file:{MUTANTS_DIR / 'zero_copy_lease_leaks.py'}")
    assert prog is not None and prog.prop == "PROG", prog
    assert "zero-copy lease of reader slot" in prog.message, prog.message
