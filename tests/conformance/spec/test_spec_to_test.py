"""Spec-to-test generation (issue 4 Deliver 4c): behaviours sampled from TLC's
state graph of the smallest config, ``tla/MC_impl_reread.cfg`` (impl's
hardened protocol, a client that re-reads handles), each replayed on impl's
real writer and reader processes as one test: impl must follow the spec step
by step (every check's verdict, every object deserialized, every chunk freed,
the writer's ring after every step).

The behaviours are generated on every run from the current spec
(:func:`shmspec.conformance.commands.spectests.sample`, fixed seed: the same spec
gives the same behaviours).  The replay must also be able to fail: a vLLM
counterexample and behaviours with one expectation altered must depart.
"""

from __future__ import annotations

import json
import shutil

import pytest

from shmspec.conformance.commands import spectests
from shmspec.conformance.spec.agreement import model_config, replay_trace
from shmspec.conformance.targets.loader import load_target
from shmspec.conformance.concurrency.procs import ProcessPool
from shmspec.conformance.spec.spectrace import Behaviour, Observation, behaviour_of, departs_first, replay_on_target
from shmspec.conformance.spec.tlc import default_tla_dir, read_config, run_tlc

pytestmark = [pytest.mark.xdist_group("test_spec_to_test"),  # its module-scoped fixture is built once (make test: --dist loadgroup)
              pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs java"),
              pytest.mark.slow]  # every test here needs the TLC state graph of MC_impl_reread (about a minute)

CONFIG = default_tla_dir() / "MC_impl_reread.cfg"
N = spectests.BEHAVIOURS


@pytest.fixture(scope="session")  # built once by the worker its xdist_group runs on
def generated():
    cf = read_config(CONFIG)
    graph = spectests.state_graph(cf)
    return cf, graph, spectests.sample(cf, graph)


@pytest.fixture(scope="module")  # its process pool ends with the module: no test after it sees its children
def impl(generated):
    cfg = generated[2].model_config()
    target = load_target("impl")
    with ProcessPool(target, tuple(cfg.readers)) as pool:
        yield cfg, target, pool


@pytest.mark.parametrize("index", range(N), ids=[f"b{i:02d}" for i in range(N)])
def test_impl_follows_the_behaviour(index, generated, impl):
    tests = generated[2]
    if index >= len(tests.behaviours):
        pytest.skip(f"the sample has {len(tests.behaviours)} behaviours")
    cfg, target, pool = impl
    b = tests.behaviours[index]
    r = replay_on_target(cfg, b, target, pool)
    d = r.departure
    detail = f"{tests.ids[index]}: {r.summary()}" + (f"\n spec   {d.spec.render()}\n target {d.target.render()}"
                                                     if d else "")
    assert r.error is None and r.departs is None, detail
    assert len(r.steps) == len(b.steps) - 1 and r.violations == [], detail


def test_the_sample_covers_every_step_kind_and_outcome(generated):
    _, graph, tests = generated
    assert len(tests.behaviours) == N and len(set(map(len, (tests.ids, tests.behaviours)))) == 1
    assert set(tests.actions) >= {
        "pin_scan proceeds", "pin_scan waits", "pin_wait proceeds", "header_write header", "payload_write payload",
        "publish handle", "free_step plans", "retire freed", "clear cleared", "pin pinned", "check passed",
        "check stale", "deserialize deserialized", "counter_increment counted", "unpin unpinned"}
    assert tests.distinct == graph.distinct > 1000 and tests.visited > 300
    # every behaviour starts at Init and is a path of TLC's graph, taken as the store can take it
    for b in tests.behaviours:
        assert b.steps[0] is None and b.states is not None and len(b.states) == len(b.steps) > 5


def test_the_sample_is_reproducible_and_round_trips(generated):
    cf, graph, tests = generated
    text = spectests.dump(tests)
    assert spectests.dump(spectests.sample(cf, graph)) == text
    again = spectests.SpecTests.from_json(json.loads(text))
    assert spectests.dump(again) == text
    assert [b.steps for b in again.behaviours] == [b.steps for b in tests.behaviours]


def test_the_store_admits_only_greedy_frees(generated):
    cfg = generated[2].model_config()
    from shmspec.model.atomic import WRITER, Step

    free, put = Step("free_step", WRITER, (("abs", 0),)), Step("pin_scan", WRITER, (("key", "k1"), ("size", 2)))
    assert spectests.store_admissible(cfg, True, free) and not spectests.store_admissible(cfg, True, put)
    # impl's writer holds no lock while it reclaims: readers go on
    assert spectests.store_admissible(cfg, True, Step("counter_increment", "r1"))
    assert spectests.store_admissible(cfg, True, Step("pin", "r1", (("handle", (0, 0, 0, 1)),)))
    assert spectests.store_admissible(cfg, False, put)


# ---------------------------------------- the replay can fail: wrong behaviours
def test_a_vllm_counterexample_departs_on_impl():
    cf = read_config(default_tla_dir() / "MC_vllm.cfg")
    res = run_tlc(cf, invariants=["NRR"])
    assert res.status == "violation" and res.trace
    cfg = model_config(cf)
    replay = replay_trace(cfg, res.trace)
    r = replay_on_target(cfg, behaviour_of(cfg, replay, [s.action for s in res.trace]), load_target("impl"))
    assert replay.model_departs is None and r.departs is not None and r.error is None
    assert departs_first(replay.model_departs, r.departs) == "target"
    # impl drains the cleared handle (its check passes, as vLLM's does) and its
    # writer waits for the reader's pin instead of reusing the slot under it
    d = r.departure
    assert d.step.name == "header_write" and (d.spec.outcome, d.target.outcome) == ("header written", "waits for a pin")


@pytest.mark.parametrize("what", ["outcome", "ring"])
def test_an_altered_expectation_departs(what, generated, impl):
    cfg, target, pool = impl
    tests = generated[2]
    # the first behaviour with a stale check; alter that step (outcome), or
    # the ring the writer's first put must leave (an id one off; inside the
    # put the ring's id_end is not compared)
    b = next(b for b in tests.behaviours if any(o and o.outcome == "stale" for o in b.expect))
    k = (next(i for i, o in enumerate(b.expect) if o and o.outcome == "stale") if what == "outcome"
         else next(i for i, o in enumerate(b.expect) if o and o.ring[3] is not None))
    expect = list(b.expect)
    o = expect[k]
    expect[k] = (Observation("passed", o.ring) if what == "outcome"
                 else Observation(o.outcome, o.ring[:3] + (o.ring[3] + 1,) + o.ring[4:]))
    r = replay_on_target(cfg, Behaviour(b.steps, expect), target, pool)
    assert r.departs == k, r.summary()
    assert r.departure.target == b.expect[k]
