"""The queue in its deployed construction (docs/slots.md#the-deployed-construction):
vLLM 0.33.0's and impl's ``MessageQueue`` built by their own constructors,
the writer and every reader a process of its own, pyzmq's sockets live,
messages through ``enqueue``/``dequeue``.  Both pass the free-running load
and every process fault while the writer's caller leaves its buffers alone;
once it reuses them after ``enqueue`` returns, vLLM 0.33.0's zero-copy
sends deliver the new bytes and impl's do not; the seeded faults of the
deployed paths (the out-of-band buffers, the overflow path, the remote
readers) are caught, by this construction and named with it; nothing is
left in /dev/shm or /tmp."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace

import pytest

import shmspec
from shmspec.conformance import protocols
from shmspec.conformance.core.errors import TargetError
from shmspec.conformance.mutants.slots import SLOT_MUTANTS_DIR
from shmspec.conformance.protocols.slots import deployed as D

pytestmark = pytest.mark.xdist_group("slots-deployed")


def _target(spec: str):
    if "==" not in spec:  # nothing to fetch: a load error is a failure
        return protocols.load(spec)
    try:
        return protocols.load(spec)
    except TargetError as exc:
        pytest.skip(f"registry unreachable: {exc}")


def _left_behind(out: D.Outcome) -> list[str]:
    """What the run's writer made and is still there: its segment, its ipc
    socket files, the processes' log."""
    h = out.handle or {}
    paths = [f"/dev/shm/{h[k]}" for k in ("segment", "arena_segment") if h.get(k)]
    paths += [h[k][6:] for k in ("local_subscribe_addr", "local_notify_addr") if (h.get(k) or "").startswith("ipc://")]
    return [p for p in paths + ([out.log] if out.log else []) if os.path.exists(p)]


def _violations(steps):
    return [(s.process, s.action, p, m) for s in steps for p, m in s.violations]


@pytest.fixture(params=["vllm-queue==0.33.0", "impl-queue"])
def queue(request):
    return _target(request.param)


@pytest.mark.parametrize("dep", [D.Deployment(), D.Deployment(start_method="spawn", local=1, remote=1)],
                         ids=["fork-2-local-1-remote", "spawn-1-local-1-remote"])
def test_every_reader_receives_the_written_sequence_and_keeps_its_arrays(queue, dep):
    dep = replace(dep, reuse=queue.origin == "impl")  # vLLM's sockets with a reusing caller: the test below
    out = D.run(queue, dep)
    steps = D.judge(out)
    assert _violations(steps) == [] and out.failures == {}
    assert out.exitcodes == {label: 0 for label in ["writer", *dep.labels()]}
    sent = [e for e in out.writer if e[0] == "sent"]
    assert [e[1] for e in sent] == list(range(dep.messages))
    assert {e[2] for e in sent} == set(D.KINDS)  # every path: in band, overflow, out of band, both
    for label in dep.labels():
        events, final, changed = out.readers[label]
        assert [e[1] for e in events if e[0] == "recv"] == list(range(dep.messages)) and changed == []
    assert out.handle and _left_behind(out) == []


@pytest.mark.parametrize("fault", D.KILLS)
def test_every_process_fault_ends_in_the_queues_timeout_with_the_survivors_whole(queue, fault):
    dep = D.Deployment(fault=fault, at=5, timeout=0.5, reuse=queue.origin == "impl")
    out = D.run(queue, dep)
    steps = D.judge(out)
    found = _violations(steps)
    if found and queue.origin != "impl":
        # vLLM's reader loses an overflow message whose frames came after its 0.25 s wait ended (a loaded
        # machine: the writer descheduled between the chunk's publish and the send); the stall fault shows
        # it on every run (test_a_readers_wait_that_ends_between_...); nothing else may appear
        lost = [int(m.group(1)) for *_, msg in found if (m := re.search(r"where message (\d+) was next \(lost\)", msg))]
        assert lost and {p for _, _, p, _ in found} == {"FIFO"}, found
        assert all(D.plan(dep)[n] in D.OVER_SOCKET for n in lost), (lost, D.plan(dep))
        return
    assert found == [], [(s.process, s.action, s.observed) for s in steps[-6:]]
    dead = "writer" if fault.startswith("writer") else "r1"
    assert out.exitcodes[dead] == -9
    sent = [e[1] for e in out.writer if e[0] == "sent"]
    if dead == "r1":  # the writer fills the ring up to the dead reader's chunk, then its wait ends, naming r1
        assert sent == list(range(len(sent))) and len(sent) in (dep.at + dep.chunks, dep.at + dep.chunks + 1)
        timeout = out.writer[-1]
        assert timeout[0] == "timeout" and timeout[6][1] == 0 and all(timeout[6][2:])
        survivors = ["r2", "remote1"]
    else:
        assert sent == list(range(dep.at))
        survivors = ["r1", "r2", "remote1"]
    for label in survivors:
        events, final, _ = out.readers[label]
        got = [e[1] for e in events if e[0] == "recv"]
        # a local reader: at most one in flight; a remote one, after the writer's SIGKILL: every message
        # still queued on the writer's socket dies with it (under load, vLLM 0.33.0 lost two, 2026-12-07)
        slack = len(sent) if dead == "writer" and label.startswith("remote") else 1
        assert got == sent[:len(got)] and len(got) >= len(sent) - slack
        assert final is None or final[0] == "timeout"
    assert out.handle and _left_behind(out) == []


@pytest.mark.parametrize("spec, arena", [("impl-queue", False), ("vllm-queue==0.33.0", False),
                                         ("impl-arena", True), ("vllm-arena==0.33.0", True)])
def test_a_readers_wait_that_ends_between_an_overflow_chunk_and_its_frames_loses_no_message(spec, arena):
    """The stall fault: the writer pauses between an overflow chunk's
    publish and its frames' send, every reader's wait ends in between and
    is called again.  vLLM 0.33.0's reader has released the chunk by then,
    so its next dequeue returns the message after (lost, and the late frames
    go to the next overflow chunk); impl's returns the owed frames first
    (found first by the writer-killed-mid-write run, under load)."""
    dep = D.Deployment(fault=D.STALL, at=6, timeout=0.5, reuse=False, arena=arena, remote=0 if arena else 1)
    out = D.run(_target(spec), dep)
    assert set(out.exitcodes.values()) == {0}
    fifo = [m for _, _, p, m in _violations(D.judge(out)) if p == "FIFO"]
    if spec.startswith("impl"):
        assert _violations(D.judge(out)) == []
        for label in ("r1", "r2"):
            assert [e[1] for e in out.readers[label][0] if e[0] == "recv"] == list(range(dep.messages))
    else:
        assert {f"{r} received message 7 out of order where message 6 was next (lost)" for r in ("r1", "r2")} <= set(fifo)


def test_a_caller_reusing_its_buffers_changes_what_vllms_socket_readers_receive_and_not_impls():
    dep = D.Deployment(messages=24)
    found = _violations(D.judge(D.run(_target("vllm-queue==0.33.0"), dep)))
    wrong = [f for f in found if f[1] == "dequeue"]
    assert wrong and all(p == "NRR" and "came over a socket" in m for _, _, p, m in wrong)
    kinds = {m.split("(")[1].split(")")[0] for _, _, _, m in wrong}
    assert kinds <= {"oob", "oob-overflow"}  # only the zero-copy out-of-band frames; every in-chunk read whole
    assert _violations(D.judge(D.run(_target("impl-queue"), dep))) == []


def test_impl_names_the_dead_reader_in_its_timeout():
    out = D.run(_target("impl-queue"), D.Deployment(fault="reader-killed-between", at=3, timeout=0.5))
    assert "readers [0] have not released it" in out.writer[-1][5]


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_the_gate_runs_the_deployed_construction_and_names_it(tmp_path):
    result = shmspec.check(f"queue:impl-file:{SLOT_MUTANTS_DIR / 'queue_oob_alias.py'}", report_dir=tmp_path)
    assert [c.name for c in result.campaigns] == ["lockstep", "deviations", "faults", "deployed-controlled",
                                                  "deployed", "deployed-faults"]
    assert result.properties["NRR"] == "fail"
    v = next(v for v in result.violations if v.property == "NRR")
    assert v.campaign.startswith("deployed") and v.concurrency == "deployed"
    assert v.construction.deployed and v.construction.name.startswith("deployed: writer process, 2 forked")
    data = json.loads((tmp_path / "report.json").read_text())
    names = [c["name"] for c in data["constructions"]]
    assert names[0] == "writer and 2 readers in one process" and any(n.startswith("deployed:") for n in names)
    assert data["violations"][0]["construction"]["deployed"] is True
    # replayed from report.json alone: found again on the fault, not on impl
    case = data["violations"][0]
    assert shmspec.replay(data["target"], case) is not None
    assert shmspec.replay("queue:impl", case) is None


def test_a_killed_writers_segment_and_sockets_are_removed():
    out = D.run(_target("vllm-queue==0.33.0"), D.Deployment(fault="writer-killed-mid-write", at=2, timeout=0.5))
    assert out.exitcodes["writer"] == -9
    assert out.handle["segment"] and _left_behind(out) == []


def _controlled(spec: str, profile: str = "ci"):
    from shmspec.conformance.protocols.slots.campaigns import DEPLOYED_CHECKS, SlotCampaign
    from shmspec.conformance.runner.gate import run_gate

    campaign = SlotCampaign("deployed-controlled", DEPLOYED_CHECKS, mode="deployed-controlled")
    return run_gate(_target(spec), profile, 0, campaigns=(campaign,), concurrency="off")


@pytest.mark.parametrize("spec", ["vllm-queue==0.33.0", "impl-queue"])
@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_controlled_interleavings_at_every_flag_access_hold_on_vllm_and_impl(spec):
    result = _controlled(spec)
    c = result.campaigns[0]
    assert result.verdict == "pass" and c.completed and c.examples >= 10 and c.steps > 1000
    assert c.rates["construction"]["deployed"] and "scheduled at every flag access" in c.rates["construction"]["name"]


@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_a_release_before_the_copy_is_found_by_a_schedule_and_the_same_seed_gives_the_same_trace():
    spec = f"queue:impl-file:{SLOT_MUTANTS_DIR / 'queue_release_before_copy.py'}"
    # the smoke budget (8 schedules, 12 shrink runs): what is checked is that a seed fixes the
    # trace, which any budget counted in runs must give; the ci budget is the fault test's
    first, second = _controlled(spec, "smoke"), _controlled(spec, "smoke")
    v = first.violations[0]
    assert v.property == "NRR" and "recycled read" in v.message and v.construction.deployed
    # budgets count runs, not seconds: the same schedule and the same steps on any machine, under any load
    assert v.config["deployment"]["schedule"] == second.violations[0].config["deployment"]["schedule"]
    strip = [(s["process"], s["action"], s["args"]) for s in v.steps]
    assert strip == [(s["process"], s["action"], s["args"]) for s in second.violations[0].steps]
    # the schedule replays exactly: found again on the fault, not on impl
    case = v.to_json()
    assert shmspec.replay(spec, case).startswith("NRR")
    assert shmspec.replay("queue:impl", case) is None


def test_a_writer_that_rewrites_the_dead_readers_chunk_is_found_by_the_fault_run():
    target = _target(f"queue:impl-file:{SLOT_MUTANTS_DIR / 'queue_no_wait.py'}")
    out = D.run(target, D.Deployment(fault="reader-killed-holding", at=5, timeout=0.5))
    found = [m for _, _, p, m in _violations(D.judge(out)) if p == "NRR"]
    assert found and "which r1 (killed) never released" in found[0]


def test_a_construction_that_cannot_be_built_is_an_error_never_a_pass(tmp_path):
    broken = tmp_path / "broken_queue.py"
    broken.write_text("from shmspec.impl import broadcast as _b\n\n\nclass MessageQueue(_b.MessageQueue):\n"
                      "    def __init__(self, *args, **kwargs):\n        raise OSError('no sockets here')\n")
    result = shmspec.check(f"queue:impl-file:{broken}", report_dir=tmp_path / "r")
    deployed = [c for c in result.campaigns if c.name.startswith("deployed")]
    assert len(deployed) == 3 and all(c.error and "no sockets here" in c.error for c in deployed)
    assert result.verdict == "error"


def test_a_finding_in_another_construction_is_not_excused_in_the_deployed_one():
    from types import SimpleNamespace

    from shmspec.conformance.core.config import SessionConfig
    from shmspec.conformance.protocols.slots.campaigns import _own_excusals

    # LIVE and FIFO@get were excused because the lockstep found them; SW because the contract does not claim it
    ctx = SimpleNamespace(config=SessionConfig(excused=frozenset({"LIVE", "FIFO@get", "SW"})),
                          failed=frozenset({"LIVE", "FIFO"}))
    assert _own_excusals(ctx).excused == {"SW"}


# ---- the arena: the queue with its tensor arena on ---------------------------------------

ARENA = D.Deployment(arena=True, remote=0, messages=16)


def test_vllms_arena_loses_the_slot_of_a_message_that_fails_to_pickle_and_impls_does_not():
    out = D.run(_target("vllm-arena==0.33.0"), replace(ARENA, reuse=False))  # (a reusing caller: the queue's test)
    assert out.handle["arena_segment"] and _left_behind(out) == []  # its arena's segment too
    steps = D.judge(out)
    found = _violations(steps)
    # held tensors never change and every reader receives the sequence; the one finding is the leaked slot
    assert found and all(a == "arena-final" and p == "PROG" for _, a, p, _ in found), found
    assert "enqueue raised after its tensor was copied into the arena" in found[0][3]
    drops = [s for s in steps if s.action == "drop"]
    assert len(drops) >= 10 and all(s.observed == "unchanged" for s in drops)
    placed = [e for e in out.writer if e[0] == "arena"]
    assert placed and sum(len(e[3]) for e in placed) > 0  # tensors went through the arena's slots
    out = D.run(_target("impl-arena"), ARENA)
    assert _violations(D.judge(out)) == [] and out.failures == {}
    assert out.arena_final and all(r[0] == 0 or all(r[1:]) for r in out.arena_final)
    assert ARENA.construction()["arena"] is True and "tensor arena on" in ARENA.name
    assert _left_behind(out) == []


def test_an_arena_queue_with_a_remote_reader_runs_without_its_arena_and_the_writer_says_so():
    # vLLM and impl turn the arena off with remote readers: the writer answers the controller's last
    # wait with no rows (before 2026-12-07 it did not answer, and every such run waited 10 s for it)
    out = D.run(_target("impl-arena"), replace(ARENA, local=1, remote=1))
    assert out.failures == {} and _violations(D.judge(out)) == []
    assert out.arena_final is None and not [n for n in out.notes if n[0] == "arena-final-missing"]


@pytest.mark.parametrize("fault, dep, prop", [
    ("arena_remote_stub", replace(ARENA, local=1, remote=1), "NRR"),
    ("arena_no_take_back", ARENA, "PROG"),
])
def test_the_arenas_deployed_paths_faults_are_found_by_the_deployed_construction(fault, dep, prop):
    out = D.run(_target(f"arena:impl-file:{SLOT_MUTANTS_DIR / (fault + '.py')}"), dep)
    assert prop in {p for _, _, p, _ in _violations(D.judge(out))}


def test_a_message_that_never_comes_ends_the_free_loads_wait_once_the_writer_is_done():
    # queue_remote_inband_only: the remote reader never gets some messages; its wait ends
    # FREE_IDLE_POLLS slices after the writer is done (2 s), not at the 10 s timeout (before 2026-12-07)
    out = D.run(_target(f"queue:impl-file:{SLOT_MUTANTS_DIR / 'queue_remote_inband_only.py'}"), D.Deployment())
    steps = D.judge(out)
    waits = [s for s in steps if s.action == "dequeue" and s.observed.startswith("TimeoutError")]
    assert waits and all("the writer was done" in s.observed for s in waits), [s.observed for s in waits]
    assert "PROG" in {p for s in waits for p, _ in s.violations}


@pytest.mark.network
@pytest.mark.parametrize("version, found", [
    ("0.9.1", set()),  # in-band pickles only (helpers in vllm.utils)
    ("0.27.0", {("NRR", "dequeue"), ("NRR", "recheck")}),  # out-of-band arrays alias the ring (until 0.32.0)
    ("0.32.0", {("NRR", "dequeue")}),  # copied out of the chunk; still sent zero-copy over the sockets
])
def test_older_releases_build_in_the_deployed_construction_and_show_where_their_arrays_alias(version, found):
    out = D.run(_target(f"vllm-queue=={version}"), D.Deployment(messages=24))
    assert out.failures == {} and out.exitcodes["writer"] == 0
    assert {(p, s.action) for s in D.judge(out) for p, _ in s.violations} == found
