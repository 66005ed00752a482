"""impl in both writer constructions: the writer built as vLLM builds it (no
reader lock: the default) and given the readers' lock too.  The controlled
campaigns (the preemption sweep and the drawn schedules) and the free-running
campaign must pass in each; the lockstep model agrees with impl's counting of
a writer that has the lock (vLLM 0.33.0 counts such a writer's gets)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shmspec.conformance.gate import CONTROLLED, FAULTS, PREEMPTION, SW_CAMPAIGN, run_gate
from shmspec.conformance.loader import load_target
from shmspec.conformance.session import Call, Session, SessionConfig
from shmspec.conformance.serde import Blob


@pytest.mark.slow
@pytest.mark.parametrize("writer_lock", [False, True], ids=["vllm-construction", "writer-lock"])
def test_impl_passes_controlled_and_free_campaigns(writer_lock):
    target = load_target("impl")
    config = SessionConfig(writer_lock=writer_lock)
    for concurrency, campaigns in (("controlled", ()), ("free", ())):
        result = run_gate(target, "ci", campaigns=campaigns, concurrency=concurrency, config=config)
        assert result.writer_lock is writer_lock
        ran = [c for c in result.campaigns]
        assert ran and all(c.completed and c.error is None for c in ran), [(c.name, c.error) for c in ran]
        assert result.violations == [], [v.message for v in result.violations]
        if concurrency == "controlled":
            assert {c.name for c in ran} == {PREEMPTION.name, CONTROLLED.name, FAULTS.name, SW_CAMPAIGN.name}
            assert sum(c.steps for c in ran) > 500


def test_writer_with_the_lock_takes_a_reader_slot_and_counts_its_gets():
    """vLLM 0.33.0 counts the gets of a writer built with the readers' lock;
    impl makes that writer one of the ``n_readers`` readers (it takes a slot
    at its first get), and the model says the same, in lockstep."""
    target = load_target("impl")
    s = Session(target, SessionConfig(n_readers=2, readers=("r1",), writer_lock=True))
    try:
        s.execute(Call("writer", "put", {"key": "a", "data": b"aaaa".hex()}))
        s.execute(Call("r1", "get", {"ref": "h1"}))
        assert s.state.ring.chunks[0].reader_count == 1
        step = s.execute(Call("writer", "get", {"ref": "h1"}))
        assert step.observed == repr(Blob(b"aaaa")) and step.violations == []
        assert s.state.readers == ("r1", "writer")
        assert s.adapter.writer.reads(0) == (1, 1)
        s.execute(Call("writer", "free_unused", {}))
        assert s.state.ring.chunks == ()  # both slots read it: reclaimed, in model and target alike
    finally:
        s.close()


def test_writer_with_the_lock_beyond_n_readers_is_refused():
    target = load_target("impl")
    s = Session(target, replace(SessionConfig(), writer_lock=True))  # r1 and r2 hold both slots
    try:
        s.execute(Call("writer", "put", {"key": "a", "data": b"aaaa".hex()}))
        step = s.execute(Call("writer", "get", {"ref": "h1"}))
        assert step.observed.startswith("TooManyReaders") and step.violations == []
    finally:
        s.close()
