"""Memory order per release (docs/slots.md#memory-order-per-release): the
writer's fences read from a store file's code, and the model's verdict for
that placement under TSO and PSO."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from shmspec.conformance.commands.matrix import matrix_protocol, version_key
from shmspec.conformance.core.errors import TargetError
from shmspec.conformance.protocols import load
from shmspec.conformance.protocols.slots import fences as F

WRITER = '''
class MessageQueue:
    @contextmanager
    def acquire_write(self, timeout=None):
        while True:
            with self.buffer.get_metadata(self.current_idx) as metadata_buffer:
                def check():
                    memory_fence()
                    return True
                metadata_buffer[0] = 0
                {after_claim}
                with self.buffer.get_data(self.current_idx) as buf:
                    yield buf
                for i in range(1, self.buffer.n_reader + 1):
                    metadata_buffer[i] = 0
                {before_publish}
                metadata_buffer[0] = 1
                memory_fence()
                break
'''


@pytest.mark.parametrize("after_claim,before_publish,fences,pso", [
    ("pass", "pass", set(), "FIFO (9 steps)"),
    ("pass", "memory_fence()", {"publish"}, "FIFO (22 steps)"),
    ("memory_fence()", "memory_fence()", {"claim", "publish"}, "holds"),
], ids=["none", "vllm-0.33", "impl"])
def test_the_fences_are_read_in_source_order_and_judged_under_tso_and_pso(tmp_path, after_claim, before_publish,
                                                                          fences, pso):
    f = tmp_path / "shm_broadcast.py"
    f.write_text(textwrap.dedent(WRITER).format(after_claim=after_claim, before_publish=before_publish))
    placement = F.writer_fences(f)
    assert placement.found == "MessageQueue.acquire_write" and placement.fences == fences
    entry = F.memory_order(f)
    assert F.cell(entry, "tso") == "holds" and F.cell(entry, "pso") == pso
    # the fence inside check() (before the free check) and the one after the publish order no race the model has
    assert placement.events[0] == "claim" and placement.events[-1] == "fence"


def test_impls_fences_are_what_its_code_places():
    from shmspec.impl import slots

    claim = ast.parse(textwrap.dedent(inspect.getsource(slots._Segment._claim)))
    publish = ast.parse(textwrap.dedent(inspect.getsource(slots._Segment._publish)))
    def calls(tree):  # in source order
        found = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        return [ast.unparse(n.func) for n in sorted(found, key=lambda n: (n.lineno, n.col_offset))]

    assert calls(claim)[0] == "self._set_flag" and calls(claim)[-1] == "fence"
    assert calls(publish)[-3:] == ["fence", "self._set_flag", "fence"]
    assert F.IMPL_FENCES == {"claim", "publish"}
    assert F.cell(F.memory_order(None, fences=F.IMPL_FENCES), "pso") == "holds"


@pytest.mark.network
def test_vllm_0_33_0_places_the_publish_fence_only():
    try:
        target = load("vllm-queue==0.33.0")
    except TargetError as exc:
        pytest.skip(f"registry unreachable: {exc}")
    assert F.writer_fences(target.files.broadcast_path).fences == {"publish"}


def test_the_sglang_matrix_is_the_queues_over_sglangs_releases_post_releases_included():
    mp = matrix_protocol("queue", "sglang")
    assert mp.project == "sglang" and mp.target_prefix == "sglang-queue==" and mp.members[0].startswith("sglang/")
    with pytest.raises(ValueError, match="SGLang ships only the queue"):
        matrix_protocol("arena", "sglang")
    assert version_key("0.4.3") < version_key("0.4.3.post1") < version_key("0.4.3.post2") < version_key("0.4.4")
