"""Spec behaviours replayed on real targets (conformance/spec/spectrace.py, issue 4
Deliver 4b, target half).

The NRR counterexample of the vLLM configs (a handle read after ``clear()``
while the writer reuses its slot) is followed to its end by vLLM 0.33.0,
whose reader deserializes the new object (NRR on the real store), while impl
departs when the writer would reuse the slot: the reader's check of the
cleared handle passes (a drain read, CLR) and its hazard pin makes the
writer wait (``pin_wait``) until the read is over.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil

import pytest

from shmspec.conformance.cli import main
from shmspec.conformance.targets.loader import load_target
from shmspec.conformance.core.serde import object_nbytes
from shmspec.conformance.spec.agreement import TraceReplay
from shmspec.conformance.spec.spectrace import (Behaviour, Observation, behaviour_of, departs_first, geometry,
                                           object_data, recover_step, replay_on_target)
from shmspec.model import atomic
from shmspec.model.atomic import WRITER, Config, Step
from helpers import load_or_skip

# one worker runs this module: its module-scoped fixture is built once (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_spectrace")

java = pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs java")

# the constants of tla/MC_vllm.cfg, and the same with impl's protocol
VLLM = Config(readers=("r1", "r2"), ring_units=5, sizes=(2,), keys=("k1", "k2"), id_mod=2, max_puts=3,
              max_reads=1, hardened=False, read_once=True, clear_resets=False)
IMPL = dataclasses.replace(VLLM, hardened=True)
IMPL_REREAD = dataclasses.replace(IMPL, readers=("r1",), max_reads=2, read_once=False)


def put(key: str, abs_: int, size: int = 2, cfg: Config = VLLM) -> list[Step]:
    """A put's steps: impl's starts with its pin scan."""
    kn = (("key", key), ("size", size))
    first = [Step("pin_scan", WRITER, kn), Step("header_write", WRITER, kn)] if cfg.hardened else [
        Step("header_write", WRITER, kn)]
    return first + [Step("payload_write", WRITER, (("abs", abs_),)), Step("publish", WRITER, (("abs", abs_),))]


def get(cfg: Config, r: str, handle: tuple) -> list[Step]:
    """A get's steps of a live chunk: impl pins, checks, deserializes, acks, unpins."""
    if cfg.hardened:
        return [Step("pin", r, (("handle", handle),))] + [Step(n, r) for n in
                                                           ("reader_check", "deserialize", "counter_increment", "unpin")]
    return [Step("reader_check", r, (("handle", handle),))] + [Step(n, r) for n in ("payload_read", "counter_increment")]


def path(cfg: Config, steps: list[Step]) -> Behaviour:
    """The behaviour of ``steps`` from Init, its states computed by the model."""
    states = [atomic.initial(cfg)]
    for st in steps:
        states.append(next(t for s, t in atomic.successors(cfg, states[-1]) if s == st))
    return Behaviour.from_states(cfg, states, [None, *steps])


H0 = (0, 0, 0, 1)  # (abs, addr, id, obj) of the first put
NRR_AFTER_CLEAR = put("k1", 0) + [Step("clear", WRITER), Step("reader_check", "r1", (("handle", H0),))] + put("k1", 1)[:2] + [
    Step("payload_read", "r1")]
"""MC_vllm.cfg's NRR counterexample: r1 checks a handle issued before the
clear, the writer puts a new object into the same slot, r1 deserializes it."""


@pytest.fixture(scope="session")  # built once by the worker its xdist_group runs on
def impl():
    return load_target("impl")


# --------------------------------------------------------------- geometry
@pytest.mark.parametrize("size", range(2, 9))
def test_objects_fill_their_chunks_exactly(size):
    geo = geometry(VLLM)
    data = object_data(geo, 0, size)
    assert object_nbytes(data) + 8 == size * geo.unit  # header + reader_count + metadata + data
    assert len({object_data(geo, a, size) for a in range(30)}) == 30
    assert geo.ring_bytes == 5 * geo.unit and 2 * geo.max_object_size >= geo.ring_bytes


def test_a_unit_must_hold_a_header_and_a_count():
    with pytest.raises(ValueError):
        geometry(VLLM, unit=11)


# ---------------------------------------------------- steps and departures
@pytest.mark.parametrize("cfg", [VLLM, IMPL, IMPL_REREAD], ids=["vllm", "impl", "impl_reread"])
def test_steps_read_off_state_differences_are_the_models(cfg):
    rng = random.Random(4)
    for _ in range(40):
        s = atomic.initial(cfg)
        for _ in range(30):
            succ = list(atomic.successors(cfg, s))
            if not succ:
                break
            step, t = rng.choice(succ)
            assert recover_step(cfg, s, t, step.name) == step
            s = t


def test_after_the_model_departs_the_steps_come_from_the_trace():
    full = path(VLLM, NRR_AFTER_CLEAR)
    actions = ["-"] + [st.name for st in NRR_AFTER_CLEAR]
    for departs in (None, 4, 0):
        known = full.steps if departs is None else full.steps[:departs] if departs else []
        b = behaviour_of(VLLM, TraceReplay(full.states, list(known), departs), actions)
        assert b.steps[1:] == full.steps[1:] and b.expect == full.expect
    # TLC's name for impl's check of the pinned allocation is the spec's reader_check
    b = behaviour_of(IMPL, TraceReplay(path(IMPL, put("k1", 0, cfg=IMPL) + get(IMPL, "r1", H0)).states, [], 0),
                     ["-", "pin_scan", "header_write", "payload_write", "publish", "pin", "PinnedCheck", "deserialize",
                      "counter_increment", "unpin"])
    assert b.steps[5] == Step("pin", "r1", (("handle", H0),)) and b.steps[6] == Step("reader_check", "r1")


def test_who_departs_first():
    assert departs_first(None, None) is None
    assert departs_first(None, 5) == departs_first(7, 5) == "target"
    assert departs_first(3, None) == departs_first(3, 5) == "model"
    assert departs_first(4, 4) == "spec"


def test_behaviours_round_trip_through_json():
    b = path(VLLM, NRR_AFTER_CLEAR)
    again = Behaviour.from_json(json.loads(json.dumps(b.to_json())))
    assert again.steps == b.steps and again.expect == b.expect
    assert b.expect[5] == Observation("passed", (0, 0, 1, 1, ()))
    assert b.expect[-1].outcome == "deserialized o2"


# ------------------------------------------------------------- on impl
def test_impl_makes_the_writer_wait_for_the_reader_of_a_cleared_handle(impl):
    r = replay_on_target(VLLM, path(VLLM, NRR_AFTER_CLEAR), impl)
    assert r.error is None and r.departs == 6, r.summary()
    # the check of the cleared handle passes: its bytes are intact (drain, CLR)
    assert r.steps[4].step.name == "reader_check" and r.steps[4].target.outcome == "passed"
    d = r.departure
    assert (d.step.name, d.step.process) == ("header_write", "writer")
    assert (d.spec.outcome, d.target.outcome) == ("header written", "waits for a pin")
    assert all(s.agrees for s in r.steps[:-1]) and r.violations == []
    assert "departs at step 6 header_write(writer)" in r.summary()


def test_impl_follows_its_own_protocol_step_by_step(impl):
    # two puts read by both readers with their steps interleaved, one free_unused
    # that plans both (the writer pauses at its second free_step) and applies
    # them at its retire, a third put, clear
    steps = put("k1", 0, cfg=IMPL) + put("k2", 1, cfg=IMPL)
    g1, g2 = get(IMPL, "r1", H0), get(IMPL, "r2", H0)
    steps += [x for pair in zip(g1, g2) for x in pair]
    steps += get(IMPL, "r1", (1, 2, 1, 2)) + get(IMPL, "r2", (1, 2, 1, 2))
    steps += [Step("free_step", WRITER, (("abs", 0),)), Step("free_step", WRITER, (("abs", 1),)),
              Step("retire", WRITER, (("abs", 1),))]
    steps += put("k1", 2, cfg=IMPL) + [Step("clear", WRITER)]
    r = replay_on_target(IMPL, path(IMPL, steps), impl)
    assert r.departs is None and r.error is None, r.summary()
    assert len(r.steps) == len(steps) and r.violations == []
    outcomes = [s.target.outcome for s in r.steps]
    assert outcomes.count("deserialized o1") == 2 and outcomes.count("deserialized o2") == 2
    assert outcomes.count("pinned") == 4 and outcomes.count("counted") == 4
    assert "plans id 0" in outcomes and "plans id 1, the last" in outcomes and "freed ids 0, 1" in outcomes
    assert "handle h2 = (0, 0)" in outcomes  # the third put: id 2 is 0 modulo IdMod 2


def test_the_writer_waits_for_a_pin_on_a_reclaimed_chunk(impl):
    # r1 reads h0, then reads it again; h0 is reclaimed meanwhile (every
    # promised read was made), and the next put, which reuses h0's bytes,
    # waits at pin_wait until r1's read is over: r1 still deserializes o1
    h1 = (1, 2, 1, 2)
    steps = put("k1", 0, cfg=IMPL) + put("k2", 1, cfg=IMPL) + get(IMPL_REREAD, "r1", H0)
    steps += get(IMPL_REREAD, "r1", H0)[:2] + [Step("free_step", WRITER, (("abs", 0),)),
                                                Step("retire", WRITER, (("abs", 0),))]
    steps += put("k1", 2, cfg=IMPL)[:1] + get(IMPL_REREAD, "r1", H0)[2:] + [Step("pin_wait", WRITER)]
    steps += put("k1", 2, cfg=IMPL)[1:] + get(IMPL_REREAD, "r1", h1)
    b = path(IMPL_REREAD, steps)
    r = replay_on_target(IMPL_REREAD, b, impl)
    assert r.error is None and r.departs is None, r.summary()
    outcomes = [(s.step.name, s.target.outcome) for s in r.steps]
    assert ("retire", "freed id 0") in outcomes and ("pin_scan", "waits for a pin") in outcomes
    assert ("pin_wait", "proceeds") in outcomes and ("publish", "handle h2 = (5, 0)") in outcomes
    i = outcomes.index(("pin_scan", "waits for a pin"))
    assert outcomes[i + 1] == ("deserialize", "deserialized o1") and r.violations == []


def test_a_wrong_expectation_is_a_departure(impl):
    b = path(IMPL, put("k1", 0, cfg=IMPL) + get(IMPL, "r1", H0))
    assert b.steps[7].name == "deserialize"
    b.expect[7] = Observation("deserialized o2", b.expect[7].ring)
    r = replay_on_target(IMPL, b, impl)
    assert r.departs == 7 and r.departure.target.outcome == "deserialized o1"


# ------------------------------------------------------------- on vLLM
@pytest.mark.network
def test_vllm_0_33_follows_the_counterexample_and_deserializes_the_new_object():
    target = load_or_skip("vllm==0.33.0")
    r = replay_on_target(VLLM, path(VLLM, NRR_AFTER_CLEAR), target)
    assert r.departs is None and r.error is None, r.summary()
    assert r.steps[-1].target.outcome == "deserialized o2"
    # the harness's own checks see the recycled read (and, once the paused
    # operations are drained, the count that lands on the new chunk)
    assert {p for p, m in r.violations} <= {"NRR", "RC"}
    assert any(p == "NRR" and "deserialized" in m for p, m in r.violations)


# ------------------------------------------------------------------ CLI
@java
@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_model_target_flag_reports_who_departs_first(tmp_path):
    rep = tmp_path / "m"
    assert main(["model", "--config", "MC_vllm_reread.cfg", "--no-agreement", "--target", "impl",
                 "--report-dir", str(rep)]) == 0
    data = json.loads((rep / "model.json").read_text())
    cexs = data["configs"][0]["counterexamples"]
    assert {c["property"] for c in cexs} == {"NRR", "CLR", "RC"}
    for c in cexs:
        assert {"property", "message", "steps", "model_departs", "concurrency"} <= set(c)  # unchanged keys
        assert c["target"] == "impl" and c["model_departs"] is None
        assert c["departs_first"] == "target"
        # impl drains the cleared handle, and its writer waits for the reader's pin
        step = c["steps"][c["target_departs"]]
        assert step["action"] == "header_write"
        assert c["target_replay"]["steps"][-1]["target"].startswith("waits for a pin")


def test_model_with_an_unloadable_target_is_a_usage_error(tmp_path, capsys):
    assert main(["model", "--config", "MC_vllm_reread.cfg", "--target", f"file:{tmp_path}/none.py",
                 "--report-dir", str(tmp_path / "m")]) == 2
    assert "target file not found" in capsys.readouterr().err
