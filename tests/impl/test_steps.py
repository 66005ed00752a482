"""One vocabulary of atomic steps: the model's, impl's yield points, the harness's."""

from __future__ import annotations

import re
from pathlib import Path

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
