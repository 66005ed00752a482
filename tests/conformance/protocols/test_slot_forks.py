"""Forks of vLLM's queue in other projects (docs/slots.md#forks-in-other-projects):
SGLang's ``shm_broadcast.py`` fetched from its wheel (``sglang-queue==X.Y.Z``)
or given as a file, loaded with its own project's helpers stood in for (and
listed), run in the deployed construction; and the one-line answers to a
target of the wrong form or a file holding another store."""

from __future__ import annotations

import shutil

import pytest

from shmspec.conformance import protocols
from shmspec.conformance.core.errors import TargetError
from shmspec.conformance.protocols.slots import deployed as D
from shmspec.conformance.targets import loader

pytestmark = pytest.mark.xdist_group("slots-deployed")

SGLANG = "0.5.23"


def _sglang():
    try:
        return protocols.load(f"sglang-queue=={SGLANG}")
    except TargetError as exc:
        pytest.skip(f"registry unreachable: {exc}")


@pytest.mark.network
def test_sglangs_queue_loads_without_user_stubs_and_lists_what_was_stood_in(tmp_path):
    target = _sglang()
    assert target.origin == "sglang" and target.spec == f"queue:sglang=={SGLANG}"
    assert "sglang.srt.utils.stale_shm_cleanup.make_shm_name" in target.stand_ins
    assert "sglang.srt.environ.envs" in target.stand_ins
    # the same file from disk, anywhere, is the same target (its project's imports stood in for again)
    copy = tmp_path / "shm_broadcast.py"
    shutil.copy(target.source, copy)
    assert protocols.load(f"queue:file:{copy}").stand_ins == target.stand_ins


@pytest.mark.network
@pytest.mark.slow  # a gate run: make test, not the edit loop (make test-fast)
def test_sglangs_queue_in_the_deployed_construction_holds_and_its_waits_never_end():
    target = _sglang()
    assert not D.queue_api(target).timeouts
    assert [s for s in D.judge(D.run(target, D.Deployment(messages=10))) if s.violations] == []
    out = D.run(target, D.Deployment(fault="reader-killed-between", at=3, timeout=0.5))
    props = {p for s in D.judge(out) for p, _ in s.violations}
    assert props == {"LIVE"}  # no torn or repeated message: only waits that take no timeout


def test_a_file_of_the_wrong_kind_is_answered_with_the_target_to_use(tmp_path):
    queue = tmp_path / "shm_broadcast.py"
    queue.write_text("class ShmRingBuffer:\n    pass\n\n\nclass MessageQueue:\n    pass\n")
    with pytest.raises(TargetError, match=r"holds the broadcast queue .* use --target queue:file:"):
        loader.load_target(f"file:{queue}")
    store = tmp_path / "shm_object_storage.py"
    store.write_text("class SingleWriterShmObjectStorage:\n    pass\n")
    with pytest.raises(TargetError, match=r"holds the object store .* use --target file:"):
        protocols.load(f"queue:file:{store}")
    arena = tmp_path / "shm_tensor_arena.py"
    arena.write_text("class ShmTensorArena:\n    pass\n")
    with pytest.raises(TargetError, match=r"holds the tensor arena .* use --target arena:file:"):
        protocols.load(f"queue:file:{arena}")


def test_an_unknown_target_lists_every_form():
    with pytest.raises(TargetError) as info:
        protocols.load("sglang==0.5.23")
    for form in ("impl", "file:PATH", "vllm==X.Y.Z", "impl-queue", "queue:file:PATH", "vllm-queue==X.Y.Z",
                 "sglang-queue==X.Y.Z", "impl-arena", "arena:file:PATH", "vllm-arena==X.Y.Z"):
        assert form in str(info.value)
    with pytest.raises(TargetError, match="SGLang ships no tensor arena"):
        protocols.load("arena:sglang==0.5.23")


def test_a_projects_helpers_are_stood_in_by_name_wherever_its_modules_keep_them(tmp_path):
    from shmspec.conformance.targets import slotfiles

    f = tmp_path / "shm_broadcast.py"
    f.write_text("from sglang.srt.utils import format_tcp_address, get_open_port\n"
                 "from sglang.srt.utils.other import not_needed\n\n\n"
                 "class ShmRingBuffer:\n    pass\n\n\nclass MessageQueue:\n"
                 "    def address(self):\n        return format_tcp_address('127.0.0.1', get_open_port())\n"
                 "    def unused(self):\n        return not_needed()\n")
    files = slotfiles.load_slot_files(f)
    assert files.stood_in == ("sglang.srt.utils.format_tcp_address", "sglang.srt.utils.get_open_port",
                              "sglang.srt.utils.other.not_needed")
    assert files.broadcast.MessageQueue().address().startswith("tcp://127.0.0.1:")
    with pytest.raises(slotfiles.StandInMissing, match="not_needed"):
        files.broadcast.MessageQueue().unused()
