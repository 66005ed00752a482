"""``shmspec matrix`` and the range fetch under it, against a local index.

Nothing here talks to the real package index: a small HTTP server in a thread
serves a fake JSON API and wheels built in the test, with or without Range
support.  The end-to-end runs use real ``shmspec check`` subprocesses on
impl-based store files from ``conformance/mutants/`` posing as vLLM 0.32+
releases, through a reduced gate (:data:`TINY_GATE`: the ``ci`` profile with
fewer, shorter examples, the ``core`` campaign only, no processes), so each
cell takes seconds.
"""

from __future__ import annotations

import http.server
import io
import json
import re
import subprocess
import sys
import textwrap
import threading
import zipfile
from pathlib import Path

import pytest

from shmspec.conformance import cli

from shmspec.conformance.targets import loader

from shmspec.conformance.commands import matrix
from shmspec.conformance.targets.loader import (NoStoreFile, RangeUnsupported, STORE_FILE, TargetError, fetch_store,
                                        read_remote_member)
from shmspec.conformance.mutants import MUTANTS_DIR

CONTROL = (MUTANTS_DIR / "control_unmodified.py").read_bytes()
DUP_BUG = (MUTANTS_DIR / "dup_overwrite.py").read_bytes()


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):  # noqa: N802 - http.server's name
        srv = self.server
        body = srv.files.get(self.path.split("?")[0])
        if body is None:
            self.send_error(404)
            return
        rng = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng or "")
        if not srv.ranges or not m or not (m.group(1) or m.group(2)):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self._write(body)
            return
        size = len(body)
        if m.group(1):
            first, last = int(m.group(1)), min(int(m.group(2) or size - 1), size - 1)
        else:
            first, last = max(size - int(m.group(2)), 0), size - 1
        part = body[first:last + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        self._write(part)

    def _write(self, data: bytes) -> None:
        with self.server.lock:  # counted before the client can have it
            self.server.served[self.path] = self.server.served.get(self.path, 0) + len(data)
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass


class Index:
    """A fake index: ``files`` (path -> bytes) over HTTP, Range honoured
    unless ``ranges`` is false; ``served`` counts body bytes per path."""

    def __init__(self, ranges: bool = True):
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.srv.daemon_threads = True
        self.srv.files, self.srv.served, self.srv.ranges, self.srv.lock = {}, {}, ranges, threading.Lock()
        self.thread = threading.Thread(target=self.srv.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.srv.server_address[1]}"

    @property
    def url(self) -> str:
        """The JSON API base (``--index-url``)."""
        return f"{self.base}/pypi"

    def publish(self, releases: dict[str, dict[str, bytes]]) -> None:
        """``releases``: version -> {file name: bytes}.  Wheel URLs are given
        relative to the JSON page, as PyPI does."""
        doc: dict = {"info": {"name": "vllm"}, "releases": {}}
        for version, files in releases.items():
            entries = []
            for name, data in files.items():
                path = f"/packages/packages/ab/cd/{name}"
                self.srv.files[path] = data
                entries.append({"filename": name, "url": f"../../packages/packages/ab/cd/{name}", "size": len(data),
                                "packagetype": "bdist_wheel" if name.endswith(".whl") else "sdist",
                                "yanked": False})
            doc["releases"][version] = entries
        self.srv.files["/pypi/vllm/json"] = json.dumps(doc).encode()

    def served(self, path_part: str = "") -> int:
        return sum(n for p, n in self.srv.served.items() if path_part in p)

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def index():
    idx = Index()
    yield idx
    idx.close()


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """A fresh user cache, and pip never reached (no real registry in tests)."""
    monkeypatch.setenv("SHMSPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SHMSPEC_INDEX_URL", raising=False)

    def no_pip(version, member=None):
        raise TargetError(f"pip disabled in tests (vllm=={version})")

    monkeypatch.setattr(loader, "_pip_fetch", no_pip)
    return tmp_path / "cache"


def wheel(store: bytes | None, filler: int = 2 << 20, seed: int = 0) -> bytes:
    """A wheel-shaped zip: incompressible filler before and after the store
    member (so it is neither at the start nor in the archive's tail)."""
    rnd = __import__("random").Random(seed)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("vllm/_C.abi3.so", rnd.randbytes(filler), compress_type=zipfile.ZIP_STORED)
        for i in range(200):
            zf.writestr(f"vllm/pkg/mod_{i}.py", f"X = {i}\n" * 20)
        if store is not None:
            zf.writestr(STORE_FILE, store)
        zf.writestr("vllm/_moe_C.abi3.so", rnd.randbytes(filler), compress_type=zipfile.ZIP_STORED)
        zf.writestr("vllm-0.0.0.dist-info/RECORD", "\n".join(f"vllm/pkg/mod_{i}.py,," for i in range(200)))
    return buf.getvalue()


def whl(version: str) -> str:
    return f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"


# --- range fetch ---------------------------------------------------------------------------------

def test_range_fetch_reads_only_the_member(index):
    store = b"# a store file\n" + bytes(range(256)) * 40
    data = wheel(store)
    index.srv.files["/w.whl"] = data
    got, raw = read_remote_member(f"{index.base}/w.whl", STORE_FILE)
    assert got == store
    assert raw.size == len(data)
    assert raw.bytes_fetched == index.served("/w.whl")  # counted what the server sent
    assert raw.bytes_fetched < len(data) / 10, (raw.bytes_fetched, len(data))
    assert raw.requests <= 4


def test_range_fetch_member_missing_is_no_store_file(index):
    index.srv.files["/w.whl"] = wheel(None, filler=1 << 16)
    with pytest.raises(NoStoreFile, match="has no vllm/distributed"):
        read_remote_member(f"{index.base}/w.whl", STORE_FILE)


def test_server_without_range_support_is_refused_and_pip_is_the_fallback(monkeypatch):
    idx = Index(ranges=False)
    try:
        idx.publish({"0.33.0": {whl("0.33.0"): wheel(CONTROL)}})
        with pytest.raises(RangeUnsupported, match=r"range requests not supported \(HTTP 200\)"):
            read_remote_member(f"{idx.base}/packages/packages/ab/cd/{whl('0.33.0')}", STORE_FILE)
        # fetch_store: no pip either -> one TargetError naming both attempts
        with pytest.raises(TargetError) as ei:
            fetch_store("0.33.0", index=idx.url)
        msg = str(ei.value)
        assert "\n" not in msg and "range requests not supported" in msg and "pip fallback: pip disabled" in msg
        # with pip working, pip's bytes are used and the record says so
        monkeypatch.setattr(loader, "_pip_fetch", lambda v, member=None: (b"# via pip\n", whl(v), 123))
        path, record = fetch_store("0.33.0", index=idx.url)
        assert path.read_bytes() == b"# via pip\n"
        assert record["method"] == "pip" and "range requests not supported" in record["range_error"]
    finally:
        idx.close()


def test_fetch_vllm_uses_the_range_path_and_the_cache(index, cache, monkeypatch):
    index.publish({"0.33.0": {whl("0.33.0"): wheel(CONTROL), "vllm-0.33.0.tar.gz": b"sdist"}})
    monkeypatch.setenv("SHMSPEC_INDEX_URL", index.url)
    path = loader.fetch_vllm("0.33.0")
    assert path == cache / "vllm" / "0.33.0" / "shm_object_storage.py"
    assert path.read_bytes() == CONTROL
    record = json.loads((path.parent / "fetch.json").read_text())
    assert record["method"] == "range" and record["wheel"] == whl("0.33.0")
    assert 0 < record["bytes_fetched"] < record["wheel_bytes"] / 10
    before = index.served()
    assert loader.fetch_vllm("0.33.0") == path and index.served() == before  # cached: nothing fetched
    assert loader.load_target("vllm==0.33.0").profile.name == "vllm-0.32"
    with pytest.raises(TargetError, match="not on the index"):
        loader.fetch_vllm("0.34.0")


# --- listing and grouping ------------------------------------------------------------------------

STORE_A, STORE_B = b"# store A\n", b"# store B\n"


def _publish_mixed(index):
    index.publish({
        "0.10.2": {whl("0.10.2"): wheel(STORE_A, filler=1 << 12)},  # before the store: excluded
        "0.11.0": {whl("0.11.0"): wheel(STORE_A, filler=1 << 12)},
        "0.11.1": {whl("0.11.1"): wheel(STORE_A, filler=1 << 12, seed=1)},  # other wheel, same store file
        "0.12.0": {whl("0.12.0"): wheel(STORE_A, filler=1 << 12)},  # same bytes, profile vllm-0.12
        "0.12.1": {whl("0.12.1"): wheel(STORE_B, filler=1 << 12)},
        "0.12.2": {whl("0.12.2"): wheel(STORE_A, filler=1 << 12)},
        "0.13.0rc1": {whl("0.13.0rc1"): wheel(STORE_B, filler=1 << 12)},  # pre-release: excluded
        "0.13.0": {"vllm-0.13.0.tar.gz": b"sdist only"},
        "0.13.1": {whl("0.13.1"): wheel(None, filler=1 << 12)},
    })


def test_releases_grouped_by_store_file_and_profile(index):
    _publish_mixed(index)
    res = matrix.resolve("all", "0.11.0", index.url)
    assert res.versions == ["0.11.0", "0.11.1", "0.12.0", "0.12.1", "0.12.2", "0.13.0", "0.13.1"]
    assert [(g.versions, g.model_profile, g.label, g.target) for g in res.groups] == [
        (["0.11.0", "0.11.1"], "vllm-0.11", "0.11.0–0.11.1", "vllm==0.11.0"),
        (["0.12.0", "0.12.2"], "vllm-0.12", "0.12.0, 0.12.2", "vllm==0.12.0"),
        (["0.12.1"], "vllm-0.12", "0.12.1", "vllm==0.12.1"),
    ]
    assert res.groups[0].sha256 == res.groups[1].sha256 != res.groups[2].sha256
    assert [w["version"] for w in res.without_store] == ["0.13.0", "0.13.1"]
    assert "no wheel" in res.without_store[0]["reason"] and STORE_FILE in res.without_store[1]["reason"]
    assert res.errors == []
    assert {f["method"] for f in res.fetches} == {"range"} and not any(f["cached"] for f in res.fetches)
    assert index.served("0.10.2") == 0 and index.served("rc1") == 0
    # again: every store file from the cache, no byte of those wheels fetched
    # (a wheel without the store is looked into again: nothing is cached for it)
    fetched = {f["version"]: index.served(whl(f["version"])) for f in res.fetches}
    again = matrix.resolve("all", "0.11.0", index.url)
    assert [g.versions for g in again.groups] == [g.versions for g in res.groups]
    assert all(f["cached"] for f in again.fetches)
    assert {v: index.served(whl(v)) for v in fetched} == fetched and all(fetched.values())


def test_release_selection(index):
    _publish_mixed(index)
    releases = loader.index_releases(index.url)
    assert matrix.select_versions(releases, "newest") == ["0.13.1"]
    assert matrix.select_versions(releases, "all", "0.12.1") == ["0.12.1", "0.12.2", "0.13.0", "0.13.1"]
    assert matrix.select_versions(releases, "all", "0.1.0")[0] == "0.11.0"  # never before the store
    assert matrix.select_versions(releases, "0.12.1,0.11.0") == ["0.11.0", "0.12.1"]
    for bad, msg in (("0.10.2", "predates"), ("0.14.0", "not on the index"), ("x", "X.Y.Z")):
        with pytest.raises(ValueError, match=msg):
            matrix.select_versions(releases, bad)


def test_list_prints_groups_and_runs_no_gate(index, tmp_path, capsys, monkeypatch):
    _publish_mixed(index)
    monkeypatch.setattr(matrix, "GATE_COMMAND", ["false"])  # any gate run would be an error
    assert cli.main(["matrix", "--list", "--index-url", index.url, "--report-dir", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "0.11.0–0.11.1" in out and "0.12.0, 0.12.2" in out and "3 group(s)" in out
    assert "vllm 0.13.0: vllm==0.13.0 has no wheel on the index" in out
    assert not (tmp_path / "m").exists()


def test_unreachable_index_and_bad_release_exit_2(tmp_path, capsys):
    assert cli.main(["matrix", "--list", "--index-url", "http://127.0.0.1:9/pypi"]) == 2
    assert "shmspec: error: cannot reach http://127.0.0.1:9/pypi/vllm/json" in capsys.readouterr().err


@pytest.mark.parametrize("selection", [["--since", "0.40.0"], ["--releases", "newest", "--since", "0.40.0"],
                                       ["--releases", ","]])
def test_empty_selection_exits_2_with_one_line(index, tmp_path, capsys, monkeypatch, selection):
    _publish_mixed(index)
    monkeypatch.setattr(matrix, "GATE_COMMAND", ["false"])  # any gate run would be an error
    rep = tmp_path / "m"
    assert cli.main(["matrix", *selection, "--index-url", index.url, "--report-dir", str(rep)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shmspec: error: ") and len(err.splitlines()) == 1, repr(err)  # no blank line first
    assert ("no release selected" in err) if "--since" in selection else ("names no release" in err)
    assert not rep.exists()


def _previous_run(rep: Path, dirs: list[str]) -> None:
    rep.mkdir(parents=True, exist_ok=True)
    rows = [{"log": f"{d}/check.log", "report": f"{d}/report.html"} for d in dirs]
    (rep / "matrix.json").write_text(json.dumps({"schema": "shmspec.matrix/1", "rows": rows}))
    (rep / "matrix.html").write_text("<html></html>")
    for d in dirs:
        if "/" not in d and ".." not in d:
            (rep / d).mkdir(exist_ok=True)
            for name in matrix.GATE_FILES:
                (rep / d / name).write_text("old")


def test_clear_previous_removes_only_what_matrix_wrote(tmp_path):
    rep = tmp_path / "m"
    _previous_run(rep, ["vllm-0.20.0", "impl", "../outside", "notes"])
    (rep / "impl" / "mine.txt").write_text("a user's file")  # not a gate file: kept, and its folder
    (rep / "vllm-0.21.0").mkdir()  # not listed in matrix.json: kept
    (rep / "vllm-0.21.0" / "report.json").write_text("{}")
    # "notes" is listed and holds gate-named files, but is not a group folder name: kept
    (rep / "README.txt").write_text("unrelated")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "check.log").write_text("outside")
    assert matrix.clear_previous(rep) == ["vllm-0.20.0"]
    assert sorted(p.name for p in rep.iterdir()) == ["README.txt", "impl", "notes", "vllm-0.21.0"]
    assert [p.name for p in (rep / "impl").iterdir()] == ["mine.txt"]
    assert (rep / "vllm-0.21.0" / "report.json").is_file() and (rep / "notes" / "check.log").is_file()
    assert (tmp_path / "outside" / "check.log").is_file()
    assert matrix.clear_previous(rep) == []  # no matrix.json now: nothing more goes
    assert matrix.clear_previous(tmp_path / "empty") == []  # a folder that does not exist


def test_label_runs():
    order = ["0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0"]
    assert matrix.label_runs(["0.11.0", "0.11.1", "0.11.2", "0.13.0"], order) == "0.11.0–0.11.2, 0.13.0"
    assert matrix.label_runs(["0.12.0"], order) == "0.12.0"


def test_exit_status():
    def row(releases, verdict):
        return {"releases": releases, "verdict": verdict}

    vllm_fails = row(["0.33.0"], "fail")
    assert matrix.exit_status([vllm_fails, row(["impl"], "pass")], []) == 0
    assert matrix.exit_status([vllm_fails, row(["impl"], "fail")], []) == 1
    assert matrix.exit_status([row(["0.33.0"], "error"), row(["impl"], "pass")], []) == 2
    assert matrix.exit_status([vllm_fails, row(["impl"], "pass")], ["vllm 0.20.0: unreachable"]) == 2
    assert matrix.exit_status([vllm_fails, row(["impl"], "unknown")], []) == 3
    assert matrix.exit_status([row(["0.33.0"], "unknown")], []) == 0
    # either construction of impl failing fails the matrix
    assert matrix.exit_status([vllm_fails, row(["impl"], "pass"), row(["impl"], "fail")], []) == 1
    assert matrix.exit_status([vllm_fails, row(["impl"], "pass"), row(["impl"], "unknown")], []) == 3


# --- end to end ----------------------------------------------------------------------------------

TINY_GATE = textwrap.dedent('''
    """shmspec check with a reduced ci gate (core campaign, no processes);
    $MX_IMPL_AS replaces the impl target (to make impl's row fail or error)."""
    import os, sys
    from dataclasses import replace
    from shmspec.conformance import cli
    from shmspec.conformance.runner import gate
    from shmspec.conformance.lockstep.machine import CAMPAIGNS

    gate.GATE_PROFILES["ci"] = replace(gate.GATE_PROFILES["ci"], max_examples=30, step_count=20, rounds=1,
                                       shrink_examples=40)
    full = gate.run_gate
    core = tuple(c for c in CAMPAIGNS if c.name == "core")
    gate.run_gate = lambda target, profile, seed, on_progress=None, concurrency=None, **kw: full(
        target, profile, seed, on_progress=on_progress, campaigns=core, concurrency="off", **kw)
    argv = sys.argv[1:]
    if os.environ.get("MX_IMPL_AS") and "impl" in argv:
        argv[argv.index("impl")] = os.environ["MX_IMPL_AS"]
    sys.exit(cli.main(["check", *argv]))
''')


@pytest.fixture
def tiny_gate(tmp_path, monkeypatch):
    script = tmp_path / "tiny_gate.py"
    script.write_text(TINY_GATE)
    monkeypatch.setattr(matrix, "GATE_COMMAND", [sys.executable, str(script)])


@pytest.mark.slow
def test_matrix_end_to_end(index, tiny_gate, tmp_path, capsys):
    index.publish({
        "0.32.0": {whl("0.32.0"): wheel(CONTROL, filler=1 << 14)},
        "0.32.1": {whl("0.32.1"): wheel(CONTROL, filler=1 << 14, seed=3)},
        "0.33.0": {whl("0.33.0"): wheel(DUP_BUG, filler=1 << 14)},
        "0.33.1": {"vllm-0.33.1.tar.gz": b"sdist only"},
    })
    rep = tmp_path / "matrix"
    _previous_run(rep, ["vllm-0.20.0", "impl"])  # an earlier run's groups: a stale one, and impl
    code = cli.main(["matrix", "--index-url", index.url, "--report-dir", str(rep), "--seed", "0"])
    out = capsys.readouterr().out
    assert code == 0, out  # a vLLM release failing does not fail the matrix
    assert not (rep / "vllm-0.20.0").exists()  # stale group folder gone
    assert sorted(p.name for p in rep.iterdir()) == ["impl", "impl-writer-lock", "matrix.html", "matrix.json",
                                                      "vllm-0.32.0", "vllm-0.33.0"]
    data = json.loads((rep / "matrix.json").read_text())
    for key in ("schema", "tool", "started", "seconds", "profile", "seed", "properties", "rows",
                "releases_without_store", "fetches", "errors", "exit_status"):
        assert key in data, key
    assert data["schema"] == "shmspec.matrix/1" and data["profile"] == "ci" and data["seed"] == 0
    assert data["properties"] == list(matrix.COLUMNS) and data["exit_status"] == 0
    assert data["releases_without_store"] == [{"version": "0.33.1", "reason": "vllm==0.33.1 has no wheel on the index"}]
    rows = data["rows"]
    assert [r["releases"] for r in rows] == [["0.32.0", "0.32.1"], ["0.33.0"], ["impl"], ["impl"]]
    assert [r["label"] for r in rows] == ["0.32.0–0.32.1", "0.33.0", "impl", "impl +writer lock"]
    assert [r["target"] for r in rows] == ["vllm==0.32.0", "vllm==0.33.0", "impl", "impl"]
    assert [r["construction"]["writer_lock"] for r in rows] == [False, False, False, True]
    for r in rows:
        assert set(r) >= {"label", "releases", "target", "store_sha256", "model_profile", "verdict", "properties",
                          "report", "report_json", "seconds", "exit_code"}
        assert list(r["properties"]) == list(matrix.COLUMNS)
        assert set(r["properties"].values()) <= {"pass", "fail", "unknown", "not-checked"}
        assert (rep / r["report"]).is_file() and (rep / r["report_json"]).is_file()
        report = json.loads((rep / r["report_json"]).read_text())
        assert report["target"] == r["target"] and report["properties"] == r["properties"]
        assert r["seconds"] == report["seconds"]
        assert report["construction"] == r["construction"]  # the cell ran the construction it names
    good, bad, impl, impl_locked = rows
    assert impl_locked["verdict"] == "pass" and "fail" not in impl_locked["properties"].values()
    assert good["verdict"] == "pass" and good["exit_code"] == 0 and good["model_profile"] == "vllm-0.32"
    assert bad["verdict"] == "fail" and bad["exit_code"] == 1 and bad["properties"]["DUP"] == "fail"
    assert impl["verdict"] == "pass" and impl["exit_code"] == 0 and impl["store_sha256"] is None
    assert "fail" not in impl["properties"].values() and impl["properties"]["DUP"] == "pass"
    assert good["store_sha256"] != bad["store_sha256"]
    html = (rep / "matrix.html").read_text()
    assert 'href="vllm-0.33.0/report.html"' in html and 'href="impl/report.html"' in html
    assert "0.32.0–0.32.1" in out and "FAIL" in out and "impl: PASS" in out and "impl +writer lock: PASS" in out


@pytest.mark.parametrize("impl_as,expected,verdict", [
    ("file:" + str(MUTANTS_DIR / "dup_overwrite.py"), 1, "fail"),
    ("file:/nonexistent/store.py", 2, "error"),
])
@pytest.mark.slow
def test_matrix_exit_status_follows_impl(index, tiny_gate, tmp_path, monkeypatch, capsys, impl_as, expected, verdict):
    index.publish({"0.33.0": {whl("0.33.0"): wheel(CONTROL, filler=1 << 14)}})
    monkeypatch.setenv("MX_IMPL_AS", impl_as)
    rep = tmp_path / "matrix"
    assert cli.main(["matrix", "--index-url", index.url, "--report-dir", str(rep)]) == expected
    data = json.loads((rep / "matrix.json").read_text())
    assert data["exit_status"] == expected
    vllm_row, impl, impl_locked = data["rows"]
    assert vllm_row["verdict"] == "pass" and impl["verdict"] == verdict == impl_locked["verdict"]
    if verdict == "error":
        assert impl["report"] is None and impl["exit_code"] == 2 and "not found" in impl["error"]
        assert set(impl["properties"].values()) == {"not-checked"}
    else:
        assert impl["properties"]["DUP"] == "fail" and (rep / impl["report"]).is_file()
    capsys.readouterr()


def test_interrupted_cell_stops_its_gate(tmp_path, monkeypatch):
    """Ctrl-C during a cell: the gate process gets SIGTERM (so it can stop its
    workers), and the interrupt propagates; a gate that exits 130 does too.
    The Ctrl-C part runs in a fresh interpreter, so no signal disposition
    left by an earlier test can change what it sees."""
    marker = tmp_path / "terminated"
    child = tmp_path / "slow_gate.py"
    child.write_text(textwrap.dedent(f'''
        import signal, sys, time
        def stop(signum, frame):
            open({str(marker)!r}, "w").write("SIGTERM")
            sys.exit(130)
        signal.signal(signal.SIGTERM, stop)
        open({str(tmp_path / "started")!r}, "w").close()
        time.sleep(60)
    '''))
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f'''
        import os, signal, sys, threading, time
        from pathlib import Path
        from shmspec.conformance.commands import matrix
        tmp = Path({str(tmp_path)!r})
        matrix.GATE_COMMAND = [sys.executable, {str(child)!r}]
        # Ctrl-C as a terminal delivers it, whatever this process inherited: a shell
        # starting the suite in the background (`cmd &`) leaves SIGINT ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
        def interrupt_when_started():
            # only once the gate has its SIGTERM handler (a loaded machine can
            # be slow to start it); never otherwise, so the failure says so
            deadline = time.monotonic() + 60
            while not (tmp / "started").exists():
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt_when_started, daemon=True).start()
        t0 = time.monotonic()
        try:
            matrix.run_cell("impl", tmp / "cell", "ci", None, None)
        except KeyboardInterrupt:
            print(f"interrupted after {{time.monotonic() - t0:.1f}} s")
            sys.exit(0)
        print("not interrupted")
        sys.exit(1)
    '''))
    p = subprocess.run([sys.executable, str(driver)], capture_output=True, text=True, timeout=180)
    log = (tmp_path / "cell" / "check.log")
    assert p.returncode == 0 and "interrupted after" in p.stdout, (p.stdout, p.stderr)
    assert marker.exists(), f"the gate did not get SIGTERM: {p.stdout!r}; started: " \
                            f"{(tmp_path / 'started').exists()}; log: {log.read_text() if log.exists() else None!r}"
    assert marker.read_text() == "SIGTERM"
    exiting = tmp_path / "exit130.py"
    exiting.write_text("import sys; sys.exit(130)\n")
    monkeypatch.setattr(matrix, "GATE_COMMAND", [sys.executable, str(exiting)])
    with pytest.raises(KeyboardInterrupt):
        matrix.run_cell("impl", tmp_path / "cell2", "ci", None, None)


def test_an_interrupt_while_the_gate_starts_stops_it(tmp_path):
    """Regression (the CI run of 2026-12-04, under load): a Ctrl-C that lands
    while ``Popen`` is still returning must stop the gate too (it used to be
    left running, with no handle to SIGTERM it)."""
    driver = Path(__file__).with_name("interrupt_during_start.py")
    p = subprocess.run([sys.executable, str(driver), str(tmp_path / "run")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "interrupted; child got SIGTERM: True" in p.stdout, (p.stdout, p.stderr)


def _slot_wheel(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("vllm/_C.abi3.so", b"\0" * 4096, compress_type=zipfile.ZIP_STORED)
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_a_slot_protocol_matrix_fetches_its_files_and_groups_by_both(index):
    """``--protocol arena``: a release is its arena file and its shm_broadcast.py (the group key
    covers both); releases without the arena file are listed as such; targets are vllm-arena==X."""
    from shmspec.conformance.targets.slotfiles import ARENA_FILE, BROADCAST_FILE

    b1, b2, a1 = b"# broadcast 1\n", b"# broadcast 2\n", b"# arena 1\n"
    index.publish({
        "0.31.0": {whl("0.31.0"): _slot_wheel({BROADCAST_FILE: b1})},
        "0.32.0": {whl("0.32.0"): _slot_wheel({BROADCAST_FILE: b1, ARENA_FILE: a1})},
        "0.32.1": {whl("0.32.1"): _slot_wheel({BROADCAST_FILE: b1, ARENA_FILE: a1})},
        "0.33.0": {whl("0.33.0"): _slot_wheel({BROADCAST_FILE: b2, ARENA_FILE: a1})},
    })
    res = matrix.resolve("all", None, index.url, protocol="arena")
    assert res.versions == ["0.32.0", "0.32.1", "0.33.0"]  # the arena's first release is the floor
    assert [(g.versions, g.target, g.dirname, g.model_profile) for g in res.groups] == [
        (["0.32.0", "0.32.1"], "vllm-arena==0.32.0", "vllm-arena-0.32.0", "slots-0.33"),
        (["0.33.0"], "vllm-arena==0.33.0", "vllm-arena-0.33.0", "slots-0.33")]
    assert res.protocol.columns == ("NRR", "DISJ", "FIFO", "FALLBACK", "PROG", "LIVE", "CONFORMANCE")
    old = matrix.resolve("all", "0.31.0", index.url, protocol="queue")
    assert [g.versions for g in old.groups] == [["0.31.0", "0.32.0", "0.32.1"], ["0.33.0"]]
    assert old.groups[0].target == "vllm-queue==0.31.0" and old.protocol.impl_cells[0][1] == "impl-queue"
    listed = matrix.resolve("0.31.0", None, index.url, protocol="arena")
    assert listed.groups == [] and ARENA_FILE in listed.without_store[0]["reason"]
    with pytest.raises(ValueError, match="knows the protocols"):
        matrix.matrix_protocol("toy")


def test_a_failing_cell_whose_campaigns_did_not_all_run_says_so(index):
    _publish_mixed(index)
    res = matrix.MatrixResult("ci", 0, None, "", matrix.resolve("0.11.0", None, index.url), index.url)
    res.rows = [{"label": "0.11.0", "releases": ["0.11.0"], "verdict": "fail", "properties": {"NRR": "fail"},
                 "error": "deployed: RuntimeError: the writer did not build the queue"},
                {"label": "impl", "releases": ["impl"], "verdict": "pass", "properties": {"NRR": "pass"}, "error": None}]
    lines = matrix.summary_lines(res)
    assert "0.11.0: fail, and campaigns that did not run: deployed: RuntimeError: the writer did not build the queue" \
        in lines
