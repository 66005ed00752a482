"""PROM and PROG: the client's account of the read-once protocol in the
lockstep session, on known sequences (vLLM 0.33.0's over-read eviction,
vLLM 0.31.0's counting-touch leak) and on impl, which keeps both."""

from __future__ import annotations


from shmspec.conformance.core.serde import object_nbytes
from shmspec.conformance.lockstep.session import Call, PropertyViolation, Session, SessionConfig
from helpers import load_or_skip


def _put(s, key, tag, n=40):
    s.execute(Call("writer", "put", {"key": key, "data": (bytes([tag, 0, 0, 0]) + b"b" * n).hex()}))
    return s.refs[-1].ref


def over_read(s):
    """r1 reads h1 twice, r2 never; then eleven read-once puts reuse the ring; then r2's promised read."""
    h1 = _put(s, "k0", 0, 20)
    s.execute(Call("r1", "get", {"ref": h1}))
    s.execute(Call("r1", "get", {"ref": h1}))
    s.execute(Call("writer", "free_unused"))
    for i in range(1, 12):
        h = _put(s, f"k{i}", i)
        for reader in ("r1", "r2"):
            s.execute(Call(reader, "get", {"ref": h}))
    assert [(r.ref, reader) for r, reader in s.owed_reads()] == [(h1, "r2")]
    s.execute(Call("r2", "get", {"ref": h1}))


def counting_touch(s):
    """vLLM 0.12 - 0.31's receiver protocol for a cache hit: the writer
    touches, each reader touches after its own get; r1's touch comes before
    r2's first get.  Then every read owed, free_unused until empty, a put."""
    h1 = _put(s, "k0", 0, 20)
    s.execute(Call("writer", "touch", {"key": "k0"}))
    s.execute(Call("r1", "get", {"ref": h1}))
    s.execute(Call("r1", "touch", {"ref": h1}))
    s.execute(Call("r2", "get", {"ref": h1}))
    assert [(r.ref, reader) for r, reader in s.owed_reads()] == [(h1, "r2")]
    for r, reader in s.owed_reads():
        s.execute(Call(reader, "get", {"ref": r.ref}))
    assert s.owed_reads() == []
    for _ in range(3):
        s.execute(Call("writer", "free_unused"))
    n = s.config.max_object_size - object_nbytes(b"")
    s.execute(Call("writer", "put", {"key": "p0", "data": (b"\x09\0\0\0" + b"c" * (n - 4)).hex(), "progress": True}))


def _violation(spec, sequence):
    s = Session(load_or_skip(spec), SessionConfig())
    try:
        sequence(s)
        return None
    except PropertyViolation as exc:
        return exc
    finally:
        s.close()


def test_over_read_eviction_breaks_prom_on_vllm_033():
    exc = _violation("vllm==0.33.0", over_read)
    assert exc is not None and exc.prop == "PROM", exc
    assert "r2's promised read of h1" in str(exc) and "r1 2 of 1, r2 0 of 1" in str(exc)
    assert "r1 read it 1 more time(s) than promised" in str(exc)
    assert "The client broke the read-once rule (a handle read twice); PROM still holds the store" in str(exc)


def test_impl_keeps_prom_under_over_reads():
    assert _violation("impl", over_read) is None


def test_counting_touch_leak_breaks_prog_on_vllm_031():
    exc = _violation("vllm==0.31.0", counting_touch)
    assert exc is not None and exc.prop == "PROG", exc
    assert "chunk id 0 at 0, h1 (key 'k0'), is still live" in str(exc)
    assert "reader_count 3 < writer_count 2 x n_readers 2" in str(exc) and "r1 2 of 2, r2 2 of 2" in str(exc)


def test_owed_read_accounting():
    """A put and each get_cached promise one read per reader; a read made
    counts only when it returned the object; a clear forgives the rest."""
    s = Session(load_or_skip("impl"), SessionConfig())
    try:
        h1 = _put(s, "k0", 0, 8)
        s.execute(Call("writer", "get_cached", {"key": "k0"}))
        assert [(r.key, reader) for r, reader in s.owed_reads()] == [("k0", "r1")] * 2 + [("k0", "r2")] * 2
        s.execute(Call("r1", "get", {"ref": h1}))
        s.execute(Call("r2", "get", {"ref": h1, "forge": "wrong_key"}))  # rejected: not a read
        assert [reader for _, reader in s.owed_reads()] == ["r1", "r2", "r2"]
        s.execute(Call("writer", "clear"))
        assert s.owed_reads() == []
    finally:
        s.close()


def test_prog_is_the_clients_fault_when_a_read_is_owed():
    """A reference never read pins the FIFO head by design: no PROG finding."""
    s = Session(load_or_skip("impl"), SessionConfig())
    try:
        _put(s, "k0", 0, 20)
        n = s.config.max_object_size - object_nbytes(b"")
        s.execute(Call("writer", "put", {"key": "p0", "data": (b"\x09\0\0\0" + b"c" * (n - 4)).hex(),
                                         "progress": True}))
        assert not [v for st in s.trace for v in st.violations if v[0] == "PROG"]
        # ... and reported as data: which client rule, which property it excuses
        [d] = s.deviations
        assert d["rule"] == "a reference never read" and d["property"] == "PROG"
        assert "h1 (key 'k0'), stays live after the drain: r1, r2 never made the read(s)" in d["message"]
    finally:
        s.close()


def test_a_kept_touch_is_the_clients_fault_too():
    """vLLM 0.33.0's protecting touch, never followed by get_cached or
    release_touches: the chunk stays protected, reported as the client's."""
    s = Session(load_or_skip("vllm==0.33.0"), SessionConfig())
    try:
        h1 = _put(s, "k0", 0, 20)
        for reader in ("r1", "r2"):
            s.execute(Call(reader, "get", {"ref": h1}))
        s.execute(Call("writer", "touch", {"key": "k0"}))
        for _ in range(3):
            s.execute(Call("writer", "free_unused"))
        n = s.config.max_object_size - object_nbytes(b"")
        s.execute(Call("writer", "put", {"key": "p0", "data": (b"\x09\0\0\0" + b"c" * (n - 4)).hex(),
                                         "progress": True, "deviation": "touch_kept"}))
        [d] = s.deviations
        assert d["rule"] == "a touch without a later get_cached or release_touches" and "touch still protects" in d["message"]
    finally:
        s.close()


def test_the_protocol_campaign_reports_client_deviations_without_failing():
    """The drawn deviations of drain_then_put: on impl the protocol campaign
    passes and lists what the client broke (a reference never read)."""
    from shmspec.conformance.runner import gate
    from shmspec.conformance.lockstep.machine import CAMPAIGNS

    protocol = next(c for c in CAMPAIGNS if c.name == "protocol")
    res = gate._run_campaign(load_or_skip("impl"), protocol, gate.GATE_PROFILES["ci"], 0, SessionConfig())
    assert res.completed and res.violations == [], [v.message for v in res.violations]
    dev = res.rates["client_deviations"]
    assert dev["a reference never read"]["count"] > 0 and dev["a reference never read"]["property"] == "PROG"
