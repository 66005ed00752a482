"""One vocabulary of atomic steps: the model's, impl's yield points, the harness's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shmspec.conformance.concurrency.procs import LOCK_POINTS
from shmspec.impl import yieldpoints
from shmspec.model.steps import ATOMIC_STEPS, LOCK_STEPS, READ_STEPS, WRITE_STEPS
from helpers import ROOT

IMPL_DIR = Path(yieldpoints.__file__).parent


def _hook_calls() -> set[str]:
    """Every literal name impl/ passes to the hook at a call site."""
    names = set()
    for f in IMPL_DIR.glob("*.py"):
        names |= set(re.findall(r'yieldpoints\.HOOK\("([a-z_]+)"\)', f.read_text()))
    return names


def test_impl_call_sites_are_the_declared_points():
    assert _hook_calls() == set(yieldpoints.READ_POINTS) | set(yieldpoints.WRITE_POINTS)


def test_impl_points_are_the_models_read_and_write_steps():
    assert set(yieldpoints.READ_POINTS) == set(READ_STEPS)
    assert set(yieldpoints.WRITE_POINTS) == set(WRITE_STEPS)


def test_harness_points_are_model_steps():
    assert set(LOCK_POINTS) == set(LOCK_STEPS)
    assert set(ATOMIC_STEPS) == set(READ_STEPS) | set(WRITE_STEPS) | set(LOCK_STEPS)
    # the harness's own pauses (lock, serde, ring access) are model steps too
    src = (ROOT / "conformance" / "concurrency" / "procs.py").read_text()
    assert set(re.findall(r'_pause\("([a-z_]+)"\)', src)) == set(LOCK_STEPS) | {"deserialize", "reader_check"}


class _Table:
    """The part of a reader table ``_wait_unpinned`` reads: reader 0's pin
    word, released after ``rounds`` calls of the hook."""

    lease_us = 0
    revoked_pins: dict = {}

    def __init__(self) -> None:
        self.words = [7]
        self.alive_calls = 0

    def pin_index(self, reader: int) -> int:
        return 0

    def revoked(self, reader: int) -> bool:
        return False

    def alive(self, reader: int) -> bool:
        self.alive_calls += 1
        return True


@pytest.mark.parametrize("observer", [False, True])
def test_a_pin_wait_under_an_observing_hook_keeps_its_own_pacing(observer, monkeypatch):
    """A scheduler's hook hands control away at every ``pin_wait`` round, so
    the wait checks the reader's lock each round and never sleeps.  A hook
    that only observes (``yieldpoints.OBSERVER``, the free-run recorder) is
    called each round too, but the wait spins, then checks the lock every
    16th round and sleeps, as with no hook (recording cost 20 % of a free
    run's throughput before, 11.8 % after: docs/measurements.md)."""
    from shmspec.impl import ring as impl_ring
    from shmspec.impl import yieldpoints

    table, calls, sleeps = _Table(), [], []

    def hook(name: str) -> None:
        calls.append(name)
        if len(calls) == 3000:
            table.words[0] = 0  # the reader unpins

    monkeypatch.setattr(impl_ring.time, "sleep", lambda s: sleeps.append(s))
    monkeypatch.setattr(yieldpoints, "HOOK", hook)
    monkeypatch.setattr(yieldpoints, "OBSERVER", observer)
    impl_ring.SingleWriterShmRingBuffer._wait_unpinned(table, 0, 7)
    assert set(calls) == {"pin_wait"} and len(calls) == 3000
    if observer:
        assert table.alive_calls < 3000 // 16 + 1 and len(sleeps) == 3000 - 200
    else:
        assert table.alive_calls == 3000 - 1 and sleeps == []
