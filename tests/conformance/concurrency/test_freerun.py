"""The free-running mode: real writer and reader processes at full speed, then
a per-handle linearizability check of their history.

impl must pass; variants whose bug shows under concurrency must be caught on
the right property.  Every run must stop all its processes and leave no
segment behind, also when a process hangs.
"""

from __future__ import annotations

import time

import multiprocess
import pytest

from shmspec.conformance.targets.adapter import segment_exists
from shmspec.conformance.concurrency.freerun import (
    FreeRunError,
    free_config,
    free_rates,
    make_payload,
    run_free,
    value_of,
)
from shmspec.conformance.concurrency.history import render
from shmspec.conformance.targets.loader import load_file, load_target
from shmspec.conformance.mutants import MUTANTS_DIR
from shmspec.conformance.core.serde import Blob, Garbage

VARIANTS_DIR = MUTANTS_DIR  # the seeded faults ship in the package


def test_payload_tags_round_trip():
    data = make_payload(12345, 100)
    assert len(data) == 100 and value_of(Blob(data)) == 12345
    torn = data[:50] + make_payload(777, 50)
    assert isinstance(value_of(Blob(torn)), str)
    assert value_of(Garbage(b"\x00" * 9)).startswith("Garbage(")


@pytest.mark.slow
def test_impl_passes_free_run():
    t0 = time.monotonic()
    res = run_free(load_target("impl"), free_config(2), 2.0, 2, seed=0)
    took = time.monotonic() - t0
    info = "\n".join(render(f) for f in res.check.findings[:3])
    assert res.verdict == "pass", info
    assert res.properties == {"NRR": "pass", "RC": "pass", "CLR": "pass", "CONFORMANCE": "pass", "LEAK": "pass"}
    assert res.check.partitions == res.puts > 500 and res.check.nodes > 0 and not res.check.unknown
    assert set(res.per_process) == {"writer", "r1", "r2"}
    assert all(p["ops"] > 0 and p["ops_per_second"] > 0 for p in res.per_process.values())
    # every handle read once by every reader (read-once protocol), plus re-reads
    once = [o for o in res.history if o.action == "get" and o.args["mode"] == "once"]
    assert len(once) == 2 * res.puts
    assert {o.args["mode"] for o in res.history if o.action == "get"} == {"once", "reread"}
    assert any(o.action == "free_unused" for o in res.history)
    assert res.ops_per_second > 0 and 1.8 < res.seconds < 4 and took < 15
    assert multiprocess.active_children() == []
    print(f"\n[free] impl 2 readers: {res.ops_per_second:.0f} ops/s {res.per_process}")


@pytest.mark.slow
def test_deserialize_in_place_is_caught():
    target = load_file(VARIANTS_DIR / "deserialize_in_place.py")
    res = run_free(target, free_config(2), 2.0, 2, seed=0)
    nrr = res.check.by_property().get("NRR", [])
    assert res.verdict == "fail" and nrr, res.properties
    f = nrr[0]
    assert "deserialized" in f.message
    racing = [o for o in f.ops if o.action == "get" and any(d != f.ops[0].args["value"] for d in o.deserialized)]
    assert racing and racing[0].args["ref"] == f.ref
    # the writer reused the slot while that get ran: some writer op in the
    # sub-history freed the handle, and the values returned were all right
    assert any(f.ref in o.freed for o in f.ops if o.process == "writer")
    assert res.properties["CONFORMANCE"] == "pass" and res.leak == "pass"
    assert multiprocess.active_children() == []


def test_a_misattributed_ack_is_caught_as_rc():
    """count_before_validate (a stale re-read acknowledges a younger chunk that
    shares its ack word) frees chunks early: a first read finds them gone.
    (early_free's surplus re-read standing in for another reader is not judged
    here by design: a handle a re-read read successfully is excused from RC;
    the lockstep campaigns catch it.)"""
    target = load_file(VARIANTS_DIR / "count_before_validate.py")
    res = run_free(target, free_config(2), 1.0, 2, seed=0)
    rc = res.check.by_property().get("RC", [])
    assert rc, res.properties
    assert "before every reader had read it" in rc[0].message
    assert res.properties["NRR"] == "pass"


def test_unknown_when_the_check_runs_out_of_budget():
    res = run_free(load_target("impl"), free_config(2), 0.3, 2, seed=0, max_nodes=1)
    assert res.check.verdict == "unknown" and res.verdict == "unknown"
    assert res.check.unknown and res.properties["CONFORMANCE"] == "unknown"


HANGING_READER = '''
import time
from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def get(self, *args, **kwargs):
        if not self.is_writer:
            time.sleep(60)  # a reader that never finishes its get
        return super().get(*args, **kwargs)

    @staticmethod
    def create_from_handle(handle):
        view = _impl.SingleWriterShmObjectStorage.create_from_handle(handle)
        view.__class__ = SingleWriterShmObjectStorage
        return view
'''


@pytest.mark.slow
def test_a_hanging_reader_is_a_clear_error_and_nothing_is_left_behind(tmp_path):
    path = tmp_path / "hanging_reader.py"
    path.write_text(HANGING_READER)
    t0 = time.monotonic()
    with pytest.raises(FreeRunError, match=r"reader r1 did not finish within 1 s") as info:
        run_free(load_file(path), free_config(2), 0.3, 2, seed=0, finish_timeout=1.0)
    assert time.monotonic() - t0 < 10
    assert info.value.segment and not segment_exists(info.value.segment)
    assert multiprocess.active_children() == []


@pytest.mark.slow
def test_free_rates():
    rates = free_rates(load_target("impl"), (2, 4), seconds=0.5)
    assert set(rates) == {2, 4} and all(r > 0 for r in rates.values())
    print(f"\n[free] impl ops/s by readers: {rates}")


@pytest.mark.slow
def test_zero_copy_values_kept_across_the_writers_puts_read_as_put_and_an_unleased_one_is_caught():
    """On impl a fifth of the first reads are ``get(copy=False)``, their
    values kept over the next 8 first reads and checked (``kept`` ops): all
    read as put.  ``zero_copy_unleased`` (the value's chunk is not leased)
    lets the writer reuse kept bytes: NRR names a kept value."""
    res = run_free(load_target("impl"), free_config(2), 2.0, 2, seed=0)
    held = [o for o in res.history if o.action == "kept"]
    assert res.verdict == "pass", "\n".join(render(f) for f in res.check.findings[:3])
    assert len(held) > 200 and {o.process for o in held} == {"r1", "r2"}
    bad = run_free(load_file(VARIANTS_DIR / "zero_copy_unleased.py"), free_config(2), 2.0, 2, seed=0)
    nrr = bad.check.by_property().get("NRR", [])
    assert nrr and any("kept value of get(copy=False) now reads" in f.message for f in nrr), bad.properties
    vllm = run_free(load_target("vllm==0.33.0"), free_config(2), 0.5, 2, seed=0)
    assert not any(o.action == "kept" for o in vllm.history)  # its get takes no copy=False
