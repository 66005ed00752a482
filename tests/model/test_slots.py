"""The slot-flag protocol's model (model/slots.py, docs/slots.md): the
order vLLM 0.33.0's ring and arena keep holds every invariant and never
deadlocks; each wrong order breaks the property the contract says, with a
shortest trace; the state counts are pinned (the TLA+ spec's TLC runs must
equal them, issue 16)."""

from __future__ import annotations

import pytest

from shmspec.model.slots import FAULTS, PROPERTIES, Config, explore, initial, successors


@pytest.mark.parametrize("readers, slots, messages, states", [(1, 1, 2, 25), (2, 1, 3, 109), (2, 2, 3, 361),
                                                              (3, 2, 3, 2017)])
def test_vllms_order_holds_every_invariant_without_deadlock(readers, slots, messages, states):
    found = explore(Config(readers, slots, messages))
    assert found.violation is None and found.deadlocks == 0
    assert found.states == states


@pytest.mark.parametrize("faults, prop, needle", [
    ({"publish_first"}, "FIFO", "received [0, 0]"),
    ({"no_claim", "reset_first"}, "FIFO", "received [0, 0]"),
    ({"early_release"}, "NRR", "mid-copy"),
    ({"free_ignores_readers"}, "NRR", "mid-copy"),
])
def test_each_wrong_order_breaks_its_property(faults, prop, needle):
    found = explore(Config(1, 1, 2, frozenset(faults)))
    assert found.violation is not None
    got, message, trace = found.violation
    assert got == prop and needle in message
    assert trace[0] == "writer claim" and all(label.split()[0] in ("writer", "r1") for label in trace)


def test_publish_first_loses_a_release_to_the_reset():
    """``written`` set before the flags are reset: the reset wipes a release
    a reader made in between, and the reader reads the message again."""
    _, _, trace = explore(Config(1, 1, 2, frozenset({"publish_first"}))).violation
    assert trace[trace.index("writer publish"):] == ["writer publish", "r1 acquire", "r1 read", "r1 release",
                                                      "writer reset_flags", "r1 acquire", "r1 read"]


@pytest.mark.parametrize("faults, states", [({"no_claim"}, 394), ({"reset_first"}, 361)])
def test_one_missing_step_alone_is_harmless_under_sequential_consistency(faults, states):
    found = explore(Config(2, 2, 3, frozenset(faults)))
    assert found.violation is None and found.deadlocks == 0 and found.states == states


def test_the_writer_waits_for_a_reader_that_never_releases():
    """PROG names the reader: with one slot, a reader that holds it stops the
    writer (the state has a step only for that reader)."""
    cfg = Config(2, 1, 2)
    s = initial(cfg)
    for want in ("writer claim", "writer copy_begin", "writer copy_end", "writer reset_flags", "writer publish",
                 "writer advance", "r1 acquire", "r1 read", "r2 acquire", "r2 read", "r2 release"):
        s = dict(successors(cfg, s))[want]
    assert [label for label, _ in successors(cfg, s)] == ["r1 release"]


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="unknown fault 'late'"):
        Config(faults=frozenset({"late"}))
    with pytest.raises(ValueError, match="slots must be >= 1"):
        Config(slots=0)
    with pytest.raises(RuntimeError, match="more than 10 states"):
        explore(Config(2, 2, 3), limit=10)
    assert {p.id for p in PROPERTIES} == {"NRR", "FIFO", "PROG", "LIVE", "DISJ", "FALLBACK", "CONFORMANCE"}
    assert "publish_first" in FAULTS


def test_weak_store_orders_what_the_fences_buy():
    """TSO (x86) holds with vLLM's one fence and with none; under PSO (ARM,
    POWER) no fence reads an unwritten slot, vLLM's fence still lets the next
    claim drain after the flag reset (a message read twice), and impl's two
    fences (after the claim as well) hold."""
    assert explore(Config(2, 2, 3, memory="tso")).violation is None
    assert explore(Config(2, 2, 3, memory="tso", fences=frozenset())).violation is None
    prop, msg, trace = explore(Config(1, 1, 2, memory="pso", fences=frozenset())).violation
    assert prop == "FIFO" and "[-1]" in msg and len(trace) == 9 and "writer drain w[0]=1" in trace
    prop, msg, trace = explore(Config(1, 1, 2, memory="pso")).violation
    assert prop == "FIFO" and msg == "r1 received [0, 0], not [0, 1]" and len(trace) == 22
    second = trace[trace.index("r1 release"):]
    # the second claim is still buffered when the flag reset drains, and the reader reads again
    assert second[1:5] == ["writer claim", "writer copy_begin", "writer copy_end", "writer reset_flags"]
    assert second[-3:] == ["writer drain d[0,0]=0", "r1 acquire", "r1 read"]
    hardened = Config(2, 2, 3, memory="pso", fences=frozenset({"claim", "publish"}))
    assert explore(hardened).violation is None and explore(hardened).states == 992
    with pytest.raises(ValueError, match="unknown memory order"):
        Config(memory="arm")
    with pytest.raises(ValueError, match="unknown fence"):
        Config(fences=frozenset({"read"}))
