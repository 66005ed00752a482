"""z3 boundary programs (conformance/proofs/boundary.py), the warp hooks, and the
gate's boundary campaign.  Each program is a regression test for impl."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shmspec.conformance.targets import adapter
from shmspec.conformance.proofs.boundary import EDGES, programs, run_program, run_program_scheduled
from shmspec.conformance.mutants import MUTANTS_DIR
from shmspec.conformance.runner.gate import BOUNDARY, run_gate
from shmspec.conformance.targets.loader import load_file, load_target
from shmspec.conformance.concurrency.procs import ProcessPool
from shmspec.conformance.runner.replay import replay
from shmspec.conformance.core.serde import object_nbytes
from shmspec.conformance.lockstep.session import SessionConfig
from shmspec.impl import SingleWriterShmRingBuffer
from shmspec.model.ring import HEADER_BYTES, ID_MAX, fits, placement

# one worker runs this module: its module-scoped fixture is built once (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_boundary")

VARIANTS = MUTANTS_DIR  # the seeded faults ship in the package
CFG = SessionConfig()
B = CFG.data_buffer_size


@pytest.fixture(scope="session")  # built once by the worker its xdist_group runs on
def impl():
    return load_target("impl")


def _walk(session):
    """(step, model start and end before it, after it) along a trace, from the steps' ``changed``."""
    start = end = 0
    for st in session.trace:
        before = (start, end)
        start = st.changed.get("start", [start, start])[1]
        end = st.changed.get("end", [end, end])[1]
        yield st, before, (start, end)


def _n(step) -> int:
    return object_nbytes(bytes.fromhex(step.args["data"])) + HEADER_BYTES


def _handle(step):
    return eval(step.observed)  # noqa: S307 - a tuple repr the session rendered


def _edge_hit(name: str, session) -> bool:
    steps = list(_walk(session))
    puts = [(s, b, a) for s, b, a in steps if s.action == "put"]
    if name == "tail-exact":
        return any(s.observed.startswith("(") and b[1] % B + _n(s) == B and _handle(s)[0] == b[1] for s, b, a in puts)
    if name == "tail-miss-by-one":
        return any(b[1] % B + _n(s) == B + 1 and _handle(s)[0] == (b[1] // B + 1) * B for s, b, a in puts)
    if name == "wrap-end-behind-start":
        return any(a[1] >= B and a[1] % B < a[0] for s, b, a in steps)
    if name == "wrap-start-renormalised":
        return any(s.action == "free_unused" and a[1] == b[1] - B and a[0] < b[0] for s, b, a in steps)
    if name == "full-ring":
        return any(a[1] - a[0] == B for s, b, a in steps) and any(s.observed == "OutOfSpace" for s, _, _ in puts)
    if name == "oom-by-one":
        return any(s.observed == "OutOfSpace" and b[1] + _n(s) - b[0] == B + 1 for s, b, a in puts)
    if name == "reclaim-past-max":
        # a reclaim that stops once max_object_size bytes are freed leaves no room for the last put
        *olds, (last, before, _) = puts
        freed, start = 0, before[0]
        for i, (s, _, _) in enumerate(olds):
            freed += _n(s)
            start = _handle(olds[i + 1][0])[0] if i + 1 < len(olds) else None
            if freed >= CFG.max_object_size:
                break
        address = placement(before[1], B, _n(last))
        return last.observed.startswith("(") and start is not None and not fits(address, _n(last), start, B)
    if name == "id-wrap":
        ids = [_handle(s)[1] for s, _, _ in puts]
        reads = [s for s in session.trace if s.action == "get" and s.args["ref"] == "h4"]
        return ids == [ID_MAX - 2, ID_MAX - 1, 0, 1] and reads and reads[0].observed.startswith("Blob")
    if name == "id-wrap-clear":
        h1 = [s for s in session.trace if s.action == "get" and s.args["ref"] == "h1"]
        return _handle(puts[0][0]) == (0, ID_MAX - 1) and _handle(puts[1][0])[0] == 0 and h1[0].observed == "StaleHandle"
    if name == "counts-at-limit":
        warp = next(s for s in session.trace if s.action == "warp_counts")
        freed = [s for s in session.trace if s.action == "free_unused" and s.changed.get("live") == []]
        return warp.args["writer_count"] * CFG.n_readers == warp.args["reader_count"] + len(CFG.readers) \
            > 2**31 - 1 - CFG.n_readers and bool(freed)
    raise AssertionError(f"no edge check for {name}")


def test_one_program_per_edge_and_deterministic():
    ps = programs()
    assert [p.name for p in ps] == [e[0] for e in EDGES]
    assert [p.calls for p in ps] == [p.calls for p in programs(SessionConfig())]
    assert {p.name for p in ps if p.needs_warp} == {"tail-exact", "tail-miss-by-one", "id-wrap", "id-wrap-clear",
                                                   "counts-at-limit"}


@pytest.mark.parametrize("name", [e[0] for e in EDGES])
def test_program_hits_its_edge_and_passes_on_impl(impl, name):
    prog = next(p for p in programs() if p.name == name)
    session, violation = run_program(impl, prog)
    assert violation is None, f"{violation.prop}: {violation.message}"
    assert session.stopped_early is None and session.closed
    assert _edge_hit(name, session), [(s.action, s.args.get("ref"), s.observed, s.changed) for s in session.trace]


@pytest.mark.parametrize("lag", [False, True])
def test_programs_on_real_processes_pass_on_impl(impl, lag):
    """The same programs on a writer and two reader processes (the scheduled
    session's checks after every step); lagging readers stay paused in their
    get while the writer's next operation runs."""
    with ProcessPool(impl, CFG.readers) as pool:
        for prog in programs():
            session, violation = run_program_scheduled(impl, prog, CFG, pool, lag)
            assert violation is None, f"{prog.name}: {violation.prop}: {violation.message}"
            assert session.stopped_early is None
            if prog.name == "id-wrap":
                assert [r.id for r in session.refs] == [ID_MAX - 2, ID_MAX - 1, 0, 1]
            procs = [c["process"] for c in prog.calls]
            read_then_write = any(p != "writer" and "writer" in procs[i + 1:] for i, p in enumerate(procs))
            assert _writer_ran_during_a_read(session.trace) == (lag and read_then_write), prog.name


def _writer_ran_during_a_read(trace) -> bool:
    """Whether some writer step ran while a reader's get was in flight."""
    in_flight: set[str] = set()
    overlapped = False
    for st in trace:
        if st.process != "writer":
            if st.kind == "start":
                in_flight.add(st.process)
            if st.observed is not None:
                in_flight.discard(st.process)
        elif in_flight:
            overlapped = True
    return overlapped


def test_programs_follow_the_geometry():
    cfg = SessionConfig(data_buffer_size=300, max_object_size=120)
    ps = programs(cfg)
    assert len(ps) == len(EDGES)
    lengths = [len(bytes.fromhex(c["args"]["data"])) for p in ps for c in p.calls if c["action"] == "put"]
    assert max(lengths) <= 120 - object_nbytes(b"") and min(lengths) >= 4
    tail = next(p for p in ps if p.name == "tail-exact")
    assert 300 - 128 <= tail.values["warp_start"] < 300


def test_edges_out_of_reach_of_a_geometry_are_named_not_run():
    # three chunks of at most 128 bytes never reach past a 400-byte ring's end
    cfg = SessionConfig(data_buffer_size=400, max_object_size=120)
    everything = programs(cfg, include_unreachable=True)
    out = {p.name for p in everything if p.unreachable}
    assert {"wrap-end-behind-start", "wrap-start-renormalised", "full-ring"} <= out
    assert all(not p.calls for p in everything if p.unreachable)
    assert {p.name for p in programs(cfg)} == {p.name for p in everything} - out


def test_impl_ring_warp_hook():
    ring = SingleWriterShmRingBuffer(100, None, True)
    try:
        ring.warp(90, ID_MAX - 1)
        assert (ring.data_buffer_start, ring.data_buffer_end, ring.monotonic_id_end) == (90, 90, ID_MAX - 1)
        assert ring.allocate_buf(2) == (90, ID_MAX - 1)  # 10 bytes fill the tail exactly
        assert ring.allocate_buf(2) == (100, 0)
        with pytest.raises(ValueError, match="empty"):
            ring.warp(0, 5)
        list(ring.free_buf(lambda i, v: True))
        with pytest.raises(ValueError):
            ring.warp(100, 5)  # start must be < B
        with pytest.raises(ValueError):
            ring.warp(0, ID_MAX)
    finally:
        ring.close()


def test_adapter_warp_needs_a_hook_or_vllm_counters():
    assert not adapter.can_warp(SimpleNamespace(ring_buffer=SimpleNamespace()))
    with pytest.raises(TypeError):
        adapter.warp(SimpleNamespace(ring_buffer=SimpleNamespace()), 0, 0)
    rb = SimpleNamespace(data_buffer_start=0, data_buffer_end=0, monotonic_id_start=0, monotonic_id_end=0,
                         metadata={0: 0}, data_buffer_size=64)  # vLLM 0.11's fresh ring (phantom entry)
    w = SimpleNamespace(ring_buffer=rb, key_index={})
    assert adapter.can_warp(w)
    adapter.warp(w, 60, ID_MAX - 2)
    assert (rb.data_buffer_start, rb.data_buffer_end, rb.monotonic_id_start, rb.monotonic_id_end, rb.metadata) \
        == (60, 60, ID_MAX - 2, ID_MAX - 2, {})
    rb.metadata[ID_MAX - 2] = 60
    with pytest.raises(ValueError, match="empty"):
        adapter.warp(w, 0, 0)


def test_boundary_campaign_claims_wrap_on_impl(impl):
    result = run_gate(impl, "ci", campaigns=(BOUNDARY,), concurrency="off")
    assert result.verdict == "pass", [v.message for v in result.violations]
    assert result.properties["WRAP"] == "pass"
    c = result.campaigns[0]
    assert c.mode == "program" and c.examples == len(EDGES) and c.completed


def test_without_a_warp_hook_wrap_stays_not_checked(impl, monkeypatch):
    monkeypatch.setattr(adapter, "can_warp", lambda writer: False)
    result = run_gate(impl, "ci", campaigns=(BOUNDARY,), concurrency="off")
    assert result.properties["WRAP"] == "not-checked" and result.verdict == "pass"
    assert result.campaigns[0].examples == sum(1 for p in programs() if not p.needs_warp)


def test_boundary_campaign_catches_a_wraparound_bug():
    """conformance/mutants/wrap_window.py: readers check an id window that ignores
    wraparound; only the id-wrap program reaches it."""
    result = run_gate(load_file(VARIANTS / "wrap_window.py"), "ci", campaigns=(BOUNDARY,), concurrency="off")
    assert result.verdict == "fail"
    v = result.violations[0]
    # a promised first read refused as stale: PROM (ranked before the model's CONFORMANCE)
    assert v.property == "PROM" and "program id-wrap" in v.message and "StaleHandle" in v.message
    assert "CONFORMANCE" in {p for p, verdict in result.properties.items() if verdict == "fail"}
    assert v.steps[-1]["violations"] and any(s["action"] == "warp" for s in v.steps)
    # the report's steps replay (what repro_test.py does): the warp is a call like any other
    spec = f"file:{VARIANTS / 'wrap_window.py'}"
    assert replay(spec, v.calls(), v.config).startswith("PROM")
    assert replay("impl", v.calls(), v.config) is None


@pytest.mark.network
@pytest.mark.parametrize("version", ["0.33.0", "0.11.0"])
def test_boundary_programs_on_vllm(version):
    """What the boundary programs find on vLLM releases (recorded in the closing note)."""
    result = run_gate(load_target(f"vllm=={version}"), "ci", campaigns=(BOUNDARY,), concurrency="off")
    assert result.properties["WRAP"] == "pass"
    if version == "0.33.0":
        assert result.verdict == "pass", [v.message for v in result.violations]
    else:  # 0.11's free leaves start at the freed chunk (state differs from the model) ...
        assert {v.property for v in result.violations} == {"CONFORMANCE", "OOM"}
        assert "state differs from the model" in result.violations[0].message
        # ... so once every chunk is reclaimed, start still points at the last one freed, and a put
        # that fits the empty ring raises MemoryError
        oom = next(v for v in result.violations if v.property == "OOM")
        assert "program reclaim-past-max" in oom.message and "leaves room" in oom.message
