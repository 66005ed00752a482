"""The store benchmark (bench/store.py) in its smallest form: it runs, writes
the documented keys with positive rates, and checks every object a reader got
against what was put -- a store that hands back wrong bytes makes it fail.

Timings are not asserted (benchmarks measure, tests check behaviour)."""

import json
import subprocess
import sys

import pytest
from helpers import load_or_skip

from helpers import ROOT as REPO

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


def test_store_bench_impl_copy_and_physical(tmp_path):
    p, doc = _bench(tmp_path, "--sizes", "1KiB,64KiB", "--stores", "impl,copy,physical")
    assert p.returncode == 0, p.stdout + p.stderr
    _check_rows(doc, ["impl", "copy", "physical"], [1024, 64 * 1024])
    for col in ("impl/copy", "impl/physical", "physical MB/s"):  # the rate and ratio columns of the table
        assert col in p.stdout
    assert "quick run: ratios are not measurements" in p.stdout
    assert doc["store"]["stores"]["physical"].startswith("one memmove per object")
    for row in doc["store"]["rows"]:
        for op in ("put", "get"):
            assert row["ratios"][op]["impl_physical"] > 0
            assert row["ratios"][op]["impl_vllm"] is None and row["ratios"][op]["vllm_physical"] is None


def test_store_bench_zero_copy_reads_are_checked(tmp_path):
    """The zerocopy store (impl read with get(copy=False)) runs beside impl, and
    every object its readers got is checked against what was put."""
    p, doc = _bench(tmp_path, "--sizes", "64KiB", "--stores", "impl,copy,zerocopy", "--objects", "6")
    assert p.returncode == 0, p.stdout + p.stderr
    _check_rows(doc, ["impl", "copy", "zerocopy"], [64 * 1024])
    assert "zero-copy MB/s" in p.stdout


def test_default_run_covers_the_sizes_and_reader_counts():
    """The default run is 1 KiB .. 16 MiB x 1, 2 and 4 readers, and each
    round fits impl's default live-chunk bound (segment v2: at most
    ``max(1024, B // 4096)`` chunks live), as it fits vLLM's ring."""
    from bench.store import DEFAULT_READERS, DEFAULT_SIZES, STORES, build_parser, geometry
    from shmspec.impl import layout

    assert DEFAULT_SIZES == (1024, 64 * 1024, 1024**2, 16 * 1024**2)
    assert DEFAULT_READERS == (1, 2, 4)
    assert STORES == ("impl", "vllm", "copy", "physical", "zerocopy")
    args = build_parser().parse_args([])
    assert (args.sizes, args.readers, args.rounds, args.serde, args.reader_malloc) == (None, None, None, "buffers",
                                                                                      "default")
    assert args.stores == ",".join(STORES)
    for size in DEFAULT_SIZES:
        g = geometry(size)
        assert g.objects <= layout.default_max_chunks(g.ring_bytes), (size, g)


@pytest.mark.network
@pytest.mark.parametrize("version", ["0.33.0", "0.31.0", "0.11.0"])
def test_store_bench_against_vllm(tmp_path, version):
    """The newest store, and the unsigned layouts before 0.32 (no data-region
    offset; 0.11.0 also without close())."""
    load_or_skip(f"vllm=={version}")
    p, doc = _bench(tmp_path, "--sizes", "1KiB", "--stores", "impl,vllm,copy", "--serde", "pickle",
                    "--vllm", f"vllm=={version}")
    assert p.returncode == 0, p.stdout + p.stderr
    _check_rows(doc, ["impl", "vllm", "copy"], [1024])
    assert doc["store"]["stores"]["vllm"] == f"vllm=={version}"
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


# --- usage errors: one line, exit 2, before anything runs ----------------------------------------

def _run(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("module", ["bench.store", "bench.run"])
def test_rounds_zero_is_refused(module):
    p = _run(module, "--rounds", "0")
    assert p.returncode == 2 and "--rounds" in p.stderr and "Traceback" not in p.stderr
    assert p.stdout == ""


def test_unusable_output_paths_fail_first(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    p = _run("bench.store", "--stores", "copy", "--json", str(blocker / "store.json"))
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith("bench.store: --json ") and len(p.stderr.strip().splitlines()) == 1
    assert "done" not in p.stdout and "Traceback" not in p.stderr
    p = _run("bench.store", "--stores", "copy", "--json", str(tmp_path))
    assert p.returncode == 2 and "is a directory" in p.stderr
    p = _run("bench.run", "--parts", "free", "--out", str(blocker / "out"))
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith("bench.run: --out ") and len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr and not (blocker.parent / "out").exists()


# --- bench.run's decisions -----------------------------------------------------------------------

def test_quick_skips_the_gate_and_says_so():
    from bench.run import PARTS, QUICK_SKIP, select_parts

    assert select_parts(",".join(PARTS), quick=False) == (list(PARTS), [])
    parts, skipped = select_parts(",".join(PARTS), quick=True)
    assert parts == ["store", "free", "tlc"] and skipped == [QUICK_SKIP] and skipped[0].startswith("gate: ")
    assert select_parts("gate,tlc", quick=True) == (["gate", "tlc"], [])  # named: it runs
    with pytest.raises(ValueError, match="unknown part 'x'"):
        select_parts("store,x", quick=False)


def test_wrong_bytes_win_over_a_part_that_could_not_run():
    from bench.run import exit_code

    assert exit_code(True, ["tlc: no java"]) == 1
    assert exit_code(False, ["tlc: no java"]) == 2
    assert exit_code(True, []) == 1 and exit_code(False, []) == 0


def test_free_rates_use_bench_key_names():
    from bench.harness import free_rates

    (row,) = free_rates([1], 0.3)
    assert row["ops_per_s"] > 0 and row["per_process"]
    for rates in row["per_process"].values():
        assert set(rates) == {"ops", "seconds", "ops_per_s"}


# --- the plot ------------------------------------------------------------------------------------

def _store_doc(sizes, readers, stores, started=True):
    rates = {"impl": 30.0, "vllm": 40.0, "copy": 55.0}
    rows = [{"size": s, "size_label": f"{s} B", "readers": n,
             "put": {k: {"mb_per_s": rates[k] * (1 + i)} for k in stores},
             "get": {k: {"mb_per_s": rates[k] * (1.1 + i)} for k in stores},
             "ratios": {op: {"impl_vllm": 0.75 if "vllm" in stores else None} for op in ("put", "get")}}
            for i, s in enumerate(sizes) for n in readers]
    section = {"stores": {k: {"impl": "impl", "vllm": "vllm==0.11.0", "copy": "plain shared-memory copy"}[k]
                          for k in stores}, "rows": rows}
    if started:
        section["started"] = "2026-12-01T00:00:00+00:00"
    return {"schema": "shmspec.bench/1", "machine": {"cpu_count": 2, "python": "3.11.7", "load_average": [1.0]},
            "store": section}


def test_plot_labels_and_panels():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from bench.plot import draw, store_label, title

    assert store_label("vllm", "vllm==0.11.0") == "vLLM 0.11.0"
    assert store_label("vllm", "file:/x/store.py") == "vLLM (file:/x/store.py)"
    assert store_label("impl", "impl") == "impl" and store_label("copy", None) == "plain copy"
    # a bench.store JSON: no top-level `started`, the store section's is used
    doc = _store_doc([1024], [1], ["impl", "vllm", "copy"])
    assert title(doc) == "shmspec bench (2026-12-01T00:00:00+00:00; 2 CPUs, Python 3.11.7; load [1.0])"
    assert "(;" not in title(_store_doc([1024], [1], ["impl"], started=False))
    # a quick run (one reader count, no TLC): put, get, ratio -- no empty panel
    fig = draw(doc)
    try:
        fig.canvas.draw()
        axes = fig.get_axes()
        assert len(axes) == 3 and all(ax.has_data() for ax in axes)
        assert all(ax.get_xlabel() == "object size" for ax in axes)
        put = axes[0]
        assert "vLLM 0.11.0" in [t.get_text() for t in put.get_legend().get_texts()]
        # one size, rates within a decade: the log axis still has labelled ticks
        lo, hi = put.get_ylim()
        labels = [t.get_text() for t, v in zip(put.get_yticklabels(), put.get_yticks()) if lo <= v <= hi]
        assert any(labels), labels
    finally:
        plt.close(fig)
    # impl and copy only, 2 reader counts: no ratio panel, no TLC panel
    fig = draw(_store_doc([1024, 65536], [1, 2], ["impl", "copy"]))
    try:
        assert len(fig.get_axes()) == 4 and all(ax.has_data() for ax in fig.get_axes())
    finally:
        plt.close(fig)


def test_keeping_serde_keeps_only_a_private_bytes_buffer():
    """``--serde keep``: zero-copy on a private ``bytes`` (what impl hands a
    serde that declares ``keeps_buffer``), a copy of a view of anything
    writable such as shared memory (what vLLM hands), so a later overwrite of
    the segment cannot reach the object."""
    from multiprocessing import shared_memory

    from bench.store import BufferSerde, KeepingBufferSerde

    assert KeepingBufferSerde.keeps_buffer is True
    assert not getattr(BufferSerde, "keeps_buffer", False)  # the default serde copies: impl hands it shared memory
    serde = KeepingBufferSerde()
    payload = b"\x07" * 1000
    parts, nbytes, md, md_n = serde.serialize(payload)
    private = md + bytes(parts[0])
    kept = serde.deserialize(memoryview(private))
    assert bytes(kept) == payload and isinstance(kept, memoryview) and kept.obj is private
    shm = shared_memory.SharedMemory(create=True, size=len(private))
    try:
        shm.buf[: len(private)] = private
        got = serde.deserialize(shm.buf[: len(private)])
        assert type(got) is bytes and got == payload
        shm.buf[len(md)] = 0  # the writer reuses the slot: the object must not change
        assert got == payload
    finally:
        shm.close()
        shm.unlink()


def test_store_bench_keep_serde_verifies_views(tmp_path):
    p, doc = _bench(tmp_path, "--sizes", "64KiB", "--stores", "impl,copy", "--serde", "keep")
    assert p.returncode == 0, p.stdout + p.stderr
    _check_rows(doc, ["impl", "copy"], [64 * 1024])
    assert doc["store"]["serde"] == "keep"


@pytest.mark.parametrize("serde_name", ["buffers", "keep"])
def test_impl_hands_each_bench_serde_what_it_declares(serde_name):
    """segment v2: impl deserializes straight from shared memory (the
    ``buffers`` serde copies out: a ``bytes``), unless the serde declares
    ``keeps_buffer`` (``keep``: impl hands it a private ``bytes`` copy, which it
    keeps as a view) -- and the object survives the reuse of its slot."""
    import multiprocessing

    from bench.store import SERDES
    from shmspec.conformance.targets.adapter import open_writer
    from shmspec.conformance.targets.loader import load_target

    target = load_target("impl")
    lock = multiprocessing.Lock()
    serde = SERDES[serde_name]
    writer = open_writer(target, 64 * 1024, 16 * 1024, 1, lock, serde)
    try:
        handle = target.module.ShmObjectStorageHandle(
            max_object_size=16 * 1024, n_readers=1, ring_buffer_handle=writer.ring_buffer.handle(),
            serde_class=serde, reader_lock=lock)
        reader = target.storage_cls.create_from_handle(handle)
        try:
            payload = bytes(range(256)) * 16
            address, monotonic_id = writer.put("a", payload)
            got = reader.get(address, monotonic_id, writer.get_signature("a"), "a")
            if serde_name == "keep":
                assert type(got) is memoryview and type(got.obj) is bytes
            else:
                assert type(got) is bytes
            assert got == payload
            for i in range(40):  # the ring reuses the slot many times over
                address, monotonic_id = writer.put(f"b{i}", bytes([i]) * len(payload))
                reader.get(address, monotonic_id, writer.get_signature(f"b{i}"), f"b{i}")
            assert got == payload
        finally:
            reader.close()
    finally:
        writer.close()


def test_store_bench_reader_malloc_retain(tmp_path):
    p, doc = _bench(tmp_path, "--sizes", "64KiB", "--stores", "impl,copy,physical", "--reader-malloc", "retain")
    assert p.returncode == 0, p.stdout + p.stderr
    _check_rows(doc, ["impl", "copy", "physical"], [64 * 1024])
    assert doc["store"]["reader_malloc"] == "retain"
    assert "reader malloc retain" in p.stdout


def test_paired_spread_and_ties():
    """impl/vLLM per round is vLLM's time over impl's; a median below 1.0
    whose upper quartile reaches 1.0 is reported as a tie, a clear loss is not."""
    from bench.store import paired_spread, ties

    assert paired_spread([10], [10]) is None
    s = paired_spread([100, 100, 100, 100, 100], [90, 95, 98, 105, 110])
    assert s == {"q1": 0.95, "median": 0.98, "q3": 1.05}
    row = {"size_label": "1 MiB", "readers": 2,
           "ratios": {"put": {"impl_vllm": 0.98, "impl_vllm_rounds": s},
                      "get": {"impl_vllm": 0.5, "impl_vllm_rounds": paired_spread([2, 2, 2], [1, 1, 1.1])}}}
    lines = ties({"rows": [row]})
    assert lines == ["1 MiB x2 put: impl/vLLM 0.98, per-round quartiles 0.95-1.05"]


def test_zero_copy_microbench_runs_and_checks_its_values():
    p = subprocess.run([sys.executable, "-m", "bench.zerocopy", "--mib", "1", "--gets", "5"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "get(copy=False)" in p.stdout and "ratio" in p.stdout


@pytest.mark.parametrize("malloc, interleaved", [("default", False), ("retain", True)])
def test_the_bound_shares_the_stores_rounds_when_the_readers_retain_memory(tmp_path, malloc, interleaved):
    p, doc = _bench(tmp_path, "--sizes", "64KiB", "--stores", "impl,copy,physical,zerocopy", "--reader-malloc", malloc)
    assert p.returncode == 0, p.stdout + p.stderr
    _check_rows(doc, ["impl", "copy", "physical", "zerocopy"], [64 * 1024])
    assert [r["interleaved"] for r in doc["store"]["rows"]] == [interleaved]


@pytest.mark.slow
def test_trace_bench_validates_a_recorded_free_run_per_seed(tmp_path, capsys):
    """``bench.trace --parts seeds``: one recorded free run of impl per seed,
    each checked by TLC (docs/trace-validation.md#free-runs)."""
    import shutil

    if shutil.which("java") is None:
        pytest.skip("TLC needs java")
    from bench import trace

    out = tmp_path / "t.json"
    assert trace.main(["--parts", "seeds", "--rounds", "2", "--seed", "3", "--free-seconds", "0.1",
                       "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["seeds"]
    assert [r["seed"] for r in rows] == [3, 4]
    assert all(r["verdict"] == "pass" and r["events"] > 100 and r["departure"] is None for r in rows), rows
    assert "recorded free runs of impl, validated" in capsys.readouterr().out
