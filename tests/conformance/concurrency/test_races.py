"""The preemption campaign (conformance/concurrency/races.py): every yield point of a get,
and of the writer's operations, preempted once against an opposing operation.

impl passes the whole sweep; the seeded faults whose race window is one
preemption wide (a validation before the pin, an ack after the unpin or before
the validation, a writer that skips the pin scan, a read without a pin, the
segment-v1 in-band count with vLLM's lockless writer) are caught on the
property they name, every run, whatever the seed, and the recorded schedule
replays the violation on the fault and nothing on impl."""

from __future__ import annotations

from dataclasses import replace

import multiprocess
import pytest

from shmspec.conformance.runner.gate import PREEMPTION, run_gate
from shmspec.conformance.targets.loader import load_file, load_target
from shmspec.conformance.mutants import MUTANTS_DIR
from shmspec.conformance.concurrency.procs import ProcessPool
from shmspec.conformance.concurrency.races import READER_HISTORIES, READER_OPS, WRITER_OPS, Race, run_race, sweep
from shmspec.conformance.concurrency.schedule import replay_schedule
from shmspec.conformance.lockstep.session import SessionConfig


def _sweep(target):
    cfg = SessionConfig()
    found = []

    def record(race, point, exc, steps):
        found.append((race, point, exc))
        return replace(cfg, excused=cfg.excused | {f[2].prop for f in found})

    with ProcessPool(target, cfg.readers) as pool:
        runs, steps = sweep(target, cfg, pool, record)
    return runs, steps, found


def test_impl_passes_every_preemption():
    runs, steps, found = _sweep(load_target("impl"))
    assert found == []
    # every situation was preempted at every point it reaches: impl's get has 5
    # yield points (pin, reader_check, deserialize, counter_increment, unpin), its
    # writer operations 1 (clear) to 5 (put; free_unused of one chunk: free_step, retire)
    readers = len(READER_HISTORIES) * len(READER_OPS)
    assert runs >= 4 * readers + len(WRITER_OPS) and steps > 1000
    assert multiprocess.active_children() == []


def test_a_preempted_get_stops_where_asked():
    target = load_target("impl")
    cfg = SessionConfig()
    with ProcessPool(target, cfg.readers) as pool:
        points = []
        for k in range(1, 20):
            session, at, exc = run_race(target, Race("reader", "reread", "churn", k), cfg, pool)
            assert exc is None
            if at is None:
                break
            points.append(at)
            # the writer ran only between r1's (k-1)-th and k-th step: r1's
            # lane, from its last start to its last step, is interrupted once
            # (a writer waiting for the lock r1 holds finishes after r1)
            lanes = [s.process for s in session.trace]
            first_r1 = max(i for i, s in enumerate(session.trace) if s.process == "r1" and s.kind == "start")
            last_r1 = max(i for i, s in enumerate(session.trace) if s.process == "r1")
            tail = lanes[first_r1:last_r1 + 1]
            switches = sum(1 for a, b in zip(tail, tail[1:]) if a != b)
            assert switches <= 2, tail
    assert points[:3] == ["pin", "reader_check", "deserialize"]
    assert "counter_increment" in points and "unpin" in points


@pytest.mark.parametrize("fault,prop,point", [
    ("no_recheck", "NRR", "pin"),
    ("unlocked_increment", "RC", "counter_increment"),
    ("writer_unfenced", "NRR", "deserialize"),
    ("count_before_validate", "RC", "pin"),
    ("deserialize_in_place", "NRR", "deserialize"),
    ("inband_count_unfenced", "RC", "counter_increment"),
])
def test_preemption_catches_narrow_race(fault, prop, point):
    target = load_file(MUTANTS_DIR / f"{fault}.py")
    result = run_gate(target, "ci", campaigns=(PREEMPTION,), concurrency="off")
    (c,) = result.campaigns
    assert c.completed and c.error is None, c.error
    v = next(v for v in result.violations if v.property == prop)
    assert v.campaign == "preemption" and v.concurrency == "controlled"
    assert f"at {point}" in v.message, v.message
    assert result.properties[prop] == "fail"
    # the report's schedule alone reproduces it, and is harmless on impl
    got = replay_schedule(target.spec, v.calls(), v.config)
    assert got is not None and got.startswith(prop), got
    assert replay_schedule("impl", v.calls(), v.config) is None


@pytest.mark.slow
def test_gate_runs_the_sweep_before_the_drawn_schedules():
    result = run_gate(load_target("impl"), "ci", campaigns=(), concurrency="controlled", first_finding_only=True)
    assert [c.name for c in result.campaigns] == ["preemption", "controlled", "faults", "sw", "constructions"]
    assert result.verdict == "pass"
    assert result.campaigns[0].examples >= 4 * len(READER_HISTORIES) * len(READER_OPS) + len(WRITER_OPS)
