"""The store benchmark (bench/store.py) in its smallest form: it runs, writes
the documented keys with positive rates, and checks every object a reader got
against what was put -- a store that hands back wrong bytes makes it fail.

Timings are not asserted (benchmarks measure, tests check behaviour)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

ROW_KEYS = {"size", "size_label", "readers", "objects", "rounds", "warmup_rounds", "ring_bytes",
            "max_object_size", "put", "get", "ratios", "verified"}


def _bench(tmp_path, *args):
    out = tmp_path / "store.json"
    p = subprocess.run([sys.executable, "-m", "bench.store", "--quick", "--readers", "1", "--rounds", "1",
                        "--objects", "6", "--json", str(out), *args],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    doc = json.loads(out.read_text()) if out.is_file() else None
    return p, doc


def _check_rows(doc, stores, sizes):
    assert doc["schema"] == "shmspec.bench/1"
    assert {"cpu_count", "python", "platform"} <= set(doc["machine"])
    section = doc["store"]
    assert set(section["stores"]) == set(stores)
    assert section["units"]["mb_per_s"]
    rows = section["rows"]
    assert [r["size"] for r in rows] == sizes
    for row in rows:
        assert ROW_KEYS <= set(row)
        assert row["readers"] == 1 and row["objects"] == 6
        for op in ("put", "get"):
            for name in stores:
                rate = row[op][name]
                assert rate["objects_per_s"] > 0 and rate["mb_per_s"] > 0
                assert len(rate["seconds"]) == 1
            assert row["ratios"][op]["impl_copy"] > 0
        for name in stores:
            v = row["verified"][name]
            # one warm-up and one timed round, each of 6 objects, read by the one reader
            assert v["objects"] == 12
            assert (v["mismatches"], v["errors"], v["first_problem"]) == (0, 0, None)


def test_store_bench_impl_and_copy(tmp_path):
    p, doc = _bench(tmp_path, "--sizes", "1KiB,64KiB", "--stores", "impl,copy")
    assert p.returncode == 0, p.stdout + p.stderr
    _check_rows(doc, ["impl", "copy"], [1024, 64 * 1024])
    assert "impl/copy" in p.stdout  # the ratio columns of the table


@pytest.mark.network
def test_store_bench_against_vllm(tmp_path):
    from shmspec.conformance.loader import TargetError, load_target

    try:
        load_target("vllm==0.33.0")
    except TargetError as exc:
        pytest.skip(f"registry unreachable: {exc}")
    p, doc = _bench(tmp_path, "--sizes", "1KiB", "--stores", "impl,vllm,copy", "--serde", "pickle")
    assert p.returncode == 0, p.stdout + p.stderr
    _check_rows(doc, ["impl", "vllm", "copy"], [1024])
    assert doc["store"]["rows"][0]["ratios"]["get"]["impl_vllm"] > 0


CORRUPTING_STORE = '''
from shmspec.impl import ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import storage as _storage


class SingleWriterShmObjectStorage(_storage.SingleWriterShmObjectStorage):
    """impl, but every reader get flips the last bit of the object it returns."""

    def get(self, *args, **kwargs):
        obj = super().get(*args, **kwargs)
        return obj[:-1] + bytes([obj[-1] ^ 1])
'''


def test_store_bench_rejects_wrong_bytes(tmp_path):
    bad = tmp_path / "corrupting_store.py"
    bad.write_text(CORRUPTING_STORE)
    p, doc = _bench(tmp_path, "--sizes", "1KiB", "--stores", "impl,vllm", "--vllm", f"file:{bad}")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "WRONG BYTES" in p.stdout
    verified = doc["store"]["rows"][0]["verified"]
    assert verified["impl"]["mismatches"] == 0
    assert verified["vllm"]["mismatches"] == 12
    assert "CRC32" in verified["vllm"]["first_problem"]
