"""The slot-flag protocols (``arena``, ``queue``: docs/slots.md) through the
gate, the report, replay and ``shmspec mutants``: impl passes, every seeded
fault is caught by the property its file names, vLLM 0.33.0's files load
under the stand-ins and reach a verdict, and a finding replays from
report.json alone."""

from __future__ import annotations

import json
import sys

from dataclasses import replace

import pytest

import shmspec
from shmspec.conformance import protocols
from shmspec.conformance.commands.mutation import run_fault
from shmspec.conformance.core.errors import TargetError
from shmspec.conformance.mutants import slots as slot_mutants
from shmspec.conformance.protocols.slots.campaigns import CONTROLLED_BUDGET, deployed_campaigns
from shmspec.conformance.protocols.slots.session import ArenaSession, QueueSession
from shmspec.conformance.core.config import SessionConfig
from shmspec.conformance.lockstep.session import Call, PropertyViolation
from shmspec.conformance.runner.gate import GATE_PROFILES
from shmspec.conformance.targets import slotfiles


def _vllm(kind: str):
    try:
        return protocols.load(f"vllm-{kind}==0.33.0")
    except TargetError as exc:
        pytest.skip(f"registry unreachable: {exc}")


@pytest.mark.parametrize("kind", ["arena", "queue"])
@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_impl_passes_every_property_of_its_protocol(kind, tmp_path):
    result = shmspec.check(f"{kind}:impl", report_dir=tmp_path)
    assert result.verdict == "pass" and result.protocol == kind
    want = {"NRR", "FIFO", "PROG", "LIVE", "CONFORMANCE"} | ({"DISJ", "FALLBACK"} if kind == "arena" else set())
    assert result.properties == {p: "pass" for p in want}
    # the default concurrency (free) adds the deployed construction (test_slots_deployed.py)
    assert [c.name for c in result.campaigns] == ["lockstep", "deviations", "faults", "deployed-controlled",
                                                  "deployed", "deployed-faults"]
    assert all(c.examples >= 100 and c.completed for c in result.campaigns[:2]) and result.campaigns[2].completed
    assert all(c.completed for c in result.campaigns[3:])
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["construction"]["name"] == "writer and 2 readers in one process"
    assert data["target"] == f"{kind}:impl" and data["protocol"] == kind


DEPLOYED_OR_LONG = {"queue_remote_inband_only", "arena_no_take_back", "arena_remote_stub", "queue_release_before_copy",
                    "queue_zero_copy_send", "queue_overflow_drops_oob"}
"""Faults whose run takes 8-30 s (the deployed construction's processes and
sockets): marked slow, run by make test, not by make test-fast."""
assert DEPLOYED_OR_LONG <= {f.name for f in slot_mutants.faults()}  # a renamed fault would lose its mark


@pytest.mark.parametrize("fault", [pytest.param(f, marks=pytest.mark.slow) if f.name in DEPLOYED_OR_LONG else f
                                   for f in slot_mutants.faults()], ids=lambda f: f.name)
def test_every_seeded_fault_is_caught_by_its_property(fault, monkeypatch):
    # the ci gate with shrinking cut at 1 s: whether the fault is caught is decided before shrinking
    # (`shmspec mutants --protocol arena|queue` runs the full ci gate; docs/slots.md has its figures)
    # a fault of the queue's deployed paths runs with the deployed construction (the queue's default), the
    # others in one process (--concurrency off), where the lockstep campaigns catch them
    monkeypatch.setitem(GATE_PROFILES, "ci", replace(GATE_PROFILES["ci"], shrink_examples=10))
    monkeypatch.setitem(CONTROLLED_BUDGET, "ci", (CONTROLLED_BUDGET["ci"][0], 4))  # 4 shrink runs of a schedule
    deployed = deployed_campaigns(fault.kind) if fault.construction == "deployed" else None
    out = run_fault(fault, campaigns=deployed, concurrency="off")
    assert out.error is None and out.result is not None
    assert out.caught, f"{fault.name}: {fault.expected} not among {out.violated}"
    first = out.first(fault.expected)
    assert first.steps and first.protocol == fault.kind
    assert first.construction.deployed == (fault.construction == "deployed")
    # a deployed campaign stops after the run that found the fault's property, and says so (not completed)
    for c in out.result.campaigns:
        if "stopped" in c.rates:
            assert not c.completed and fault.expected in {v.property for v in c.violations}, c.rates["stopped"]
    if fault.name == "queue_overflow_drops_oob":  # found by the free load's first run: the second is skipped
        [free] = [c for c in out.result.campaigns if c.name == "deployed"]
        assert len(free.rates["deployed"]) == 1 and free.rates["stopped"] == f"after run 1 of 2, at a finding of {fault.expected}"


def test_a_gate_run_leaves_no_segment_to_the_garbage_collector():
    """Every session the gate opens is closed, its replays' included (the
    step-deletion pass left a session whose replay broke a property open:
    its segments' ``__del__`` then raised BufferError inside later garbage
    collections, which under pytest broke CPython 3.11's ``ast.parse``:
    "AST constructor recursion depth mismatch", 2026-12-04)."""
    import gc

    from shmspec.impl import segment

    seen = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(f"{u.exc_type.__name__} in {u.object!r}")
    try:
        # the smoke tier: its shrink budget is spent, so the step-deletion pass replays (as ci's does)
        out = run_fault(slot_mutants.faults(["arena_flush_all"])[0], profile="smoke", concurrency="off")
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert out.caught
    assert seen == [] and segment.retry_unclosed() == 0


def test_the_fault_library_has_at_least_ten_faults_over_the_properties():
    faults = slot_mutants.faults()
    assert len(faults) >= 10 and {f.kind for f in faults} == {"arena", "queue"}
    assert {f.expected for f in faults} >= {"NRR", "FIFO", "PROG", "FALLBACK", "DISJ", "CONFORMANCE"}
    assert [f.name for f in slot_mutants.faults(protocol="queue")] == sorted(
        f.name for f in faults if f.kind == "queue")
    with pytest.raises(KeyError, match="unknown fault"):
        slot_mutants.faults(["nosuch"])


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_a_finding_replays_from_its_report_and_not_on_the_fixed_store(tmp_path):
    fault = slot_mutants.faults(["queue_no_wait"])[0]
    # the one-process campaigns' finding (the deployed construction's replay: test_slots_deployed.py)
    # the smoke tier: a finding replays alike whatever budget found it
    result = shmspec.check(fault.target, report_dir=tmp_path, concurrency="off", profile="smoke")
    assert result.verdict == "fail" and result.properties["NRR"] == "fail"
    case = json.loads((tmp_path / "report.json").read_text())["violations"][0]
    assert case["config"]["start_method"] == "one-process" and case["protocol"] == "queue"
    assert shmspec.replay(fault.target, case).startswith(f"{case['property']}: step ")
    assert shmspec.replay("queue:impl", case) is None


def test_bad_slot_targets_give_one_line_errors(tmp_path):
    with pytest.raises(TargetError, match="unknown arena target 'nope'"):
        protocols.load("arena:nope")
    with pytest.raises(TargetError, match="target file not found"):
        protocols.load(f"queue:file:{tmp_path / 'missing.py'}")
    bad = tmp_path / "shm_broadcast.py"
    bad.write_text("class ShmRingBuffer:\n    pass\n")
    with pytest.raises(TargetError, match="does not define MessageQueue"):
        protocols.load(f"queue:file:{bad}")
    (tmp_path / "boom.py").write_text("raise RuntimeError('at import')\n")
    with pytest.raises(TargetError, match="failed to import .*RuntimeError: at import"):
        protocols.load(f"queue:file:{tmp_path / 'boom.py'}")


def test_the_stand_ins_leave_sys_modules_as_they_were(tmp_path):
    before = {k for k in sys.modules if k.split(".")[0] in ("torch", "numpy", "zmq", "vllm")}
    f = tmp_path / "shm_broadcast.py"
    f.write_text("import torch\nimport zmq\nimport vllm.envs as envs\nfrom vllm.utils.nothing import anything\n"
                 "W = envs.VLLM_RINGBUFFER_WARNING_INTERVAL\n"
                 "class ShmRingBuffer: pass\nclass MessageQueue: pass\n")
    files = slotfiles.load_slot_files(f)
    assert files.broadcast.W == 60 and files.arena is None
    with pytest.raises(slotfiles.StandInMissing, match="vllm.utils.nothing.anything is not implemented"):
        files.broadcast.anything()
    assert {k for k in sys.modules if k.split(".")[0] in ("torch", "numpy", "zmq", "vllm")} == before


def test_the_torch_stand_in_keeps_an_array_alive_like_torch_storage():
    import weakref

    buf = bytearray(b"abcdefgh")
    arr = slotfiles.StandInArray(memoryview(buf), slotfiles.DTYPES["uint8"])
    fired = []
    weakref.finalize(arr, fired.append, 1)
    t = sys.modules["shmspec.conformance.targets.slotfiles"]._from_numpy(arr).view(slotfiles.DTYPES["int32"])
    del arr
    assert t.numel() == 2 and t.element_size() == 4 and not fired
    v = t.view((2, 1))
    del t
    assert not fired and v.tobytes() == b"abcdefgh"
    del v
    assert fired == [1]


@pytest.mark.network
@pytest.mark.parametrize("kind", ["arena", "queue"])
def test_vllm_0_33_0_reaches_a_verdict_and_passes_lockstep(kind, tmp_path):
    # in one process (its deployed construction's findings: test_slots_deployed.py)
    target = _vllm(kind)
    assert target.source.name == ("shm_tensor_arena.py" if kind == "arena" else "shm_broadcast.py")
    result = shmspec.check(target, report_dir=tmp_path, concurrency="off")
    assert result.verdict == "pass", ([v.message for v in result.violations],
                                      [f"{c.name}: {c.error}" for c in result.campaigns if c.error])
    # (no wall-time bound: a run's seconds depend on the machine's load; its work is fixed by the profile)


@pytest.mark.network
@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_a_vllm_arena_with_its_reuse_check_broken_is_found(tmp_path):
    target = _vllm("arena")
    src = target.source.read_text()
    good = "free = meta[0] == 0 or sum(meta[1:]) == self.n_reader"
    assert good in src
    (tmp_path / "shm_broadcast.py").write_text(target.files.broadcast_path.read_text())
    (tmp_path / "shm_tensor_arena.py").write_text(src.replace(good, "free = meta[0] == 0 or sum(meta[1:]) >= 1"))
    # the smoke tier (lockstep campaigns, 30 steps): what `shmspec check --profile smoke` runs on a push
    result = shmspec.check(f"arena:file:{tmp_path / 'shm_tensor_arena.py'}", report_dir=tmp_path / "r",
                           concurrency="off", profile="smoke")
    assert result.properties["NRR"] == "fail"
    v = next(v for v in result.violations if v.property == "NRR")
    assert "rewritten while" in v.message or "changed" in v.message


@pytest.mark.network
def test_vllm_queue_session_detects_a_read_mid_write_on_a_patched_ring(tmp_path):
    """Lockstep inside the blocks: vLLM's acquire_write with its claim removed
    and its reader-flag reset moved before the copy: a reader re-reads its old
    message while the writer copies (the model's no_claim + reset_first)."""
    target = _vllm("queue")
    src = target.source.read_text()
    claim = "                metadata_buffer[0] = 0\n"
    assert src.count(claim) == 1
    patched = src.replace(claim, "                for i in range(1, self.buffer.n_reader + 1):\n"
                                 "                    metadata_buffer[i] = 0\n")
    f = tmp_path / "shm_broadcast.py"
    f.write_text(patched)
    session = QueueSession(protocols.load(f"queue:file:{f}"), SessionConfig(excused=frozenset({"CONFORMANCE"})))
    calls = [Call("writer", "put", {"size": 4, "seed": 1})] * 3
    calls += [Call(f"r{r + 1}", "get", {"reader": r}) for r in (0, 1) for _ in range(3)]
    calls += [Call("writer", "begin_write", {}), Call("r1", "begin_read", {"reader": 0})]
    with pytest.raises(PropertyViolation, match="r1 read slot 0 with nothing readable") as exc:
        for c in calls:
            session.execute(c)
    assert exc.value.prop == "FIFO"
    session.close()


def test_sessions_close_their_segments():
    import os

    for cls, spec in ((ArenaSession, "arena:impl"), (QueueSession, "queue:impl")):
        s = cls(protocols.load(spec), SessionConfig())
        name = s.driver.w.name
        s.execute(Call("writer", "write" if cls is ArenaSession else "put", {"size": 3, "seed": 0}))
        s.close()
        assert not os.path.exists(f"/dev/shm/{name}")


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_the_cli_checks_a_slot_target_and_lists_its_faults(tmp_path, capsys):
    from shmspec.conformance.cli import main

    # the smoke tier: the CLI's exit codes and lists (impl's ci gate: test_impl_passes_every_property_...)
    smoke = ["--concurrency", "off", "--profile", "smoke"]
    assert main(["check", "--target", "impl-queue", *smoke, "--report-dir", str(tmp_path / "ok")]) == 0
    fault = slot_mutants.faults(["queue_no_wait"])[0]
    assert main(["check", "--target", fault.target, *smoke, "--report-dir", str(tmp_path / "bad")]) == 1
    capsys.readouterr()
    assert main(["mutants", "--protocol", "arena", "--list"]) == 0
    out = capsys.readouterr().out
    n = len(slot_mutants.faults(protocol="arena"))
    assert n >= 11 and f"{n} seeded faults" in out and "arena_spill" in out and "queue_no_wait" not in out
    assert main(["check", "--target", "arena:nope", "--report-dir", str(tmp_path / "e")]) == 2
    assert "unknown arena target 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["arena", "queue"])
def test_a_reader_killed_holding_a_slot_never_blocks_the_writer_and_is_named(kind):
    from shmspec.conformance.protocols.slots.faults import run_scenario

    trace, exc = run_scenario(protocols.load(f"{kind}:impl"), SessionConfig())
    assert exc is None
    assert [s.action for s in trace[1:3]] == (["view", "killed"] if kind == "arena" else ["begin_read", "killed"])
    assert trace[2].observed == "exit -9"
    last_writes = [s for s in trace if s.process == "writer"][-2:]
    # the dead reader holds every slot now: the arena falls back, the queue's writer times out; both name r1
    assert all(("fallback" if kind == "arena" else "timeout") in s.observed for s in last_writes)
    assert all("r1" in s.expected for s in last_writes)


def test_the_fault_scenario_finds_a_store_that_reuses_the_dead_readers_slot():
    from shmspec.conformance.protocols.slots.faults import run_scenario

    fault = slot_mutants.faults(["queue_no_wait"])[0]
    _, exc = run_scenario(protocols.load(fault.target), SessionConfig())
    assert exc is not None and exc.prop == "NRR" and "while r1" in exc.message
    fault = slot_mutants.faults(["arena_any_reader"])[0]
    _, exc = run_scenario(protocols.load(fault.target), SessionConfig())
    assert exc is not None and exc.prop == "NRR" and "slot 0 rewritten while r1" in exc.message
