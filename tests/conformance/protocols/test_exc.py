"""EXC in the gate (SEMANTICS.md): the ``exc`` campaign makes puts fail --
a serialized object the store cannot copy into the ring, on any target, and
an asynchronous exception raised at each write yield point of a put, a
reclaim and a clear, on targets that run impl's yield points -- and requires
the store afterwards to be as before the operation or as after it (a put:
or as after its reclaim alone), with every cached key on the object put
under it."""

from __future__ import annotations

import pytest

from shmspec.conformance.runner.gate import run_gate
from shmspec.conformance.targets.loader import load_file, load_target
from shmspec.conformance.lockstep.machine import CAMPAIGNS
from shmspec.conformance.mutants import MUTANTS_DIR
from shmspec.conformance.lockstep.session import INTERRUPT_POINTS, Call, Session, SessionConfig

EXC = tuple(c for c in CAMPAIGNS if c.name == "exc")


def test_impl_passes_the_exception_campaign():
    result = run_gate(load_target("impl"), "ci", campaigns=EXC, concurrency="off")
    assert result.properties["EXC"] == "pass" and result.violations == []
    assert sum(c.steps for c in result.campaigns) > 500


@pytest.mark.parametrize("op,at", [(op, at) for op, points in INTERRUPT_POINTS.items() for at in points])
def test_impl_interrupted_at_each_point_is_as_before_or_after(op, at):
    s = Session(load_target("impl"), SessionConfig())
    try:
        for i in range(4):  # fill most of the ring, every chunk read: a put must reclaim
            s.execute(Call("writer", "put", {"key": f"f{i}", "data": (bytes([i]) * 56).hex()}))
            for r in ("r1", "r2"):
                s.execute(Call(r, "get", {"ref": f"h{i + 1}"}))
        args = {"op": op, "at": at}
        if op == "put":
            args.update(key="new", data=(b"n" * 56).hex())
        step = s.execute(Call("writer", "interrupt", args))
        assert step.violations == [] and "store as" in step.observed, step
        # the store stays usable: every cached key reads back its object
        for key, (address, id_) in s.adapter.writer.key_index.items():
            ref = next(r for r in s.refs if (r.address, r.id) == (address, id_))
            assert s.execute(Call("r1", "get", {"ref": ref.ref})).violations == []
    finally:
        s.close()


@pytest.mark.slow
def test_the_non_exception_safe_put_is_caught_as_exc():
    target = load_file(MUTANTS_DIR / "put_not_exception_safe.py")
    result = run_gate(target, "ci", campaigns=EXC, concurrency="off", first_finding_only=True)
    assert result.properties["EXC"] == "fail"
    (v,) = [v for v in result.violations if v.property == "EXC"]
    assert "is cached" in v.message and v.steps[-1]["action"] == "interrupt"
