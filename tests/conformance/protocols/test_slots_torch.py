"""The arena's campaigns with real CPU torch (the ``torch`` extra;
docs/slots.md#real-torch): vLLM 0.33.0's arena files get torch and numpy
for real, its tensors and views are torch's, and the verdicts are the
stand-in's.  Without torch installed, only the selection is checked."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

import pytest

import shmspec
from shmspec.conformance import protocols
from shmspec.conformance.core.errors import TargetError
from shmspec.conformance.protocols.slots import deployed as D
from shmspec.conformance.targets import slotfiles

HAVE_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "numpy"))
ARENA = D.Deployment(arena=True, remote=0, messages=16)


def test_the_torch_selection_is_explicit(monkeypatch):
    monkeypatch.setenv(slotfiles.TORCH_ENV, "stand-in")
    assert slotfiles.torch_mode() == "stand-in" and protocols.load("arena:impl").torch == "stand-in"
    monkeypatch.setenv(slotfiles.TORCH_ENV, "cuda")
    with pytest.raises(TargetError, match="use auto, real or stand-in"):
        protocols.load("arena:impl")  # refused when the target loads, before any campaign runs
    monkeypatch.setenv(slotfiles.TORCH_ENV, "real")
    if HAVE_TORCH:
        assert slotfiles.torch_mode() == "real"
    else:
        with pytest.raises(TargetError, match=r"pip install 'shmspec\[torch\]'"):
            slotfiles.torch_mode()
    monkeypatch.delenv(slotfiles.TORCH_ENV)
    assert slotfiles.torch_mode() == ("real" if HAVE_TORCH else "stand-in")


@pytest.mark.skipif(not HAVE_TORCH, reason="the torch extra is not installed")
@pytest.mark.network
def test_vllms_arena_with_real_torch_reaches_the_stand_ins_verdicts(monkeypatch, tmp_path):
    import torch

    monkeypatch.setenv(slotfiles.TORCH_ENV, "real")
    try:
        target = protocols.load("vllm-arena==0.33.0")
    except TargetError as exc:
        pytest.skip(f"registry unreachable: {exc}")
    assert target.torch == f"torch {torch.__version__}" and target.files.arena.torch is torch
    result = shmspec.check(target, report_dir=tmp_path, concurrency="off")
    assert result.verdict == "pass", [v.message for v in result.violations]
    dep = replace(ARENA, torch=target.torch, reuse=False)
    found = [(s.action, p, m) for s in D.judge(D.run(target, dep)) for p, m in s.violations]
    assert found and all(a == "arena-final" and p == "PROG" for a, p, _ in found)  # the lost slot, as with the stand-in
    impl = protocols.load("arena:impl")
    assert impl.torch == target.torch
    assert [s for s in D.judge(D.run(impl, replace(dep, reuse=True))) if s.violations] == []
