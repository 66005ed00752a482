"""The linearizability checker on hand-built histories.

Times are small integers (nanoseconds in a real history).  Each history is a
handful of ops on one or two handles; the expected verdict is worked out by
hand from the per-handle model (unborn -> live -> dead).
"""

from __future__ import annotations

from shmspec.conformance.concurrency.history import Op, check_history, linearizable, partition, render
from shmspec.model.profile import IMPL, VLLM_0_32


def put(ref, value, t0, t1, freed=()):
    return Op("writer", "put", {"key": f"k-{ref}", "value": value}, ref, None, t0, t1, frozenset(freed))


def free(t0, t1, freed):
    return Op("writer", "free_unused", {}, None, None, t0, t1, frozenset(freed))


def clear(t0, t1, freed):
    return Op("writer", "clear", {}, None, None, t0, t1, frozenset(freed))


def get(reader, ref, t0, t1, value=None, error=None, mode="once", deserialized=None):
    if deserialized is None:
        deserialized = () if error is not None else (value,)
    return Op(reader, "get", {"ref": ref, "mode": mode}, value, error, t0, t1, frozenset(), tuple(deserialized))


def props(result):
    return sorted({f.property for f in result.findings})


def test_linearizable_history_passes():
    h = [
        put("h1", "A", 0, 10),
        put("h2", "B", 11, 20),
        get("r1", "h1", 21, 30, "A"),
        get("r2", "h1", 22, 35, "A"),
        get("r1", "h2", 31, 40, "B"),
        free(41, 50, {"h1"}),
        get("r2", "h2", 36, 45, "B"),
        get("r1", "h1", 60, 70, error="StaleHandle", mode="reread"),
    ]
    res = check_history(h, IMPL)
    assert res.verdict == "pass", [render(f) for f in res.findings]
    assert res.properties == {"NRR": "pass", "RC": "pass", "CLR": "pass", "CONFORMANCE": "pass"}
    assert res.partitions == 2 and res.nodes > 0 and not res.unknown


def test_wrong_object_is_nrr():
    h = [
        put("h1", "A", 0, 10),
        free(11, 20, {"h1"}),
        put("h2", "B", 21, 30),
        get("r1", "h1", 25, 40, "B", mode="reread"),  # the recycled slot's object
    ]
    res = check_history(h, VLLM_0_32)  # even a lenient profile never allows another object
    assert res.verdict == "fail"
    nrr = res.by_property()["NRR"]
    assert len(nrr) == 1 and nrr[0].ref == "h1" and "'B'" in nrr[0].message
    assert [o.action for o in nrr[0].ops] == ["put", "free_unused", "get"]  # the partition of h1


def test_foreign_bytes_deserialized_is_nrr_even_when_the_get_raises():
    h = [
        put("h1", "A", 0, 10),
        get("r1", "h1", 11, 20, "A"),
        free(21, 40, {"h1"}),
        put("h2", "B", 41, 50),
        get("r1", "h1", 30, 60, error="StaleHandle", mode="reread", deserialized=["Garbage(ab)"]),
    ]
    res = check_history(h, IMPL)
    assert props(res) == ["NRR"] and "deserialized" in res.findings[0].message


def test_get_overlapping_the_free_may_linearize_before_it():
    # r1's get overlaps the free: it may take effect before it (returns A) ...
    h = [
        put("h1", "A", 0, 10),
        get("r1", "h1", 15, 40, "A"),
        free(20, 30, {"h1"}),
        # ... and r2's, also overlapping, after it (StaleHandle): both are fine.
        get("r2", "h1", 18, 35, error="StaleHandle", mode="reread"),
    ]
    res = check_history(h, IMPL)
    assert res.verdict == "pass", [render(f) for f in res.findings]


def test_object_from_a_handle_freed_before_the_get_fails_on_a_strict_profile():
    h = [
        put("h1", "A", 0, 10),
        free(20, 30, {"h1"}),
        get("r1", "h1", 31, 40, "A", mode="reread"),  # fully after the free
    ]
    strict = check_history(h, IMPL)
    assert strict.verdict == "fail" and props(strict) == ["CONFORMANCE"]
    assert "freed before the get" in strict.findings[0].message
    # vLLM's lenient profile lets a freed, not yet reused chunk return its own object.
    assert check_history(h, VLLM_0_32).verdict == "pass"


def test_stale_handle_while_live_is_conformance():
    h = [
        put("h1", "A", 0, 10),
        get("r1", "h1", 11, 20, error="StaleHandle"),
        free(30, 40, {"h1"}),  # freed only after the get returned
    ]
    res = check_history(h, IMPL)
    assert props(res) == ["CONFORMANCE"] and "live throughout" in res.findings[0].message


def test_reads_out_of_order_admit_no_linearization():
    # r2 saw the handle dead (returned at 28), r1 later (invoked at 29) saw it live.
    h = [
        put("h1", "A", 0, 10),
        free(20, 40, {"h1"}),
        get("r2", "h1", 21, 28, error="StaleHandle", mode="reread"),
        get("r1", "h1", 29, 35, "A", mode="reread"),
    ]
    res = check_history(h, IMPL)
    assert props(res) == ["CONFORMANCE"] and "no single order" in res.findings[0].message
    assert check_history(h, VLLM_0_32).verdict == "pass"  # lenient: dead may return A


def test_stale_first_read_after_an_early_free_is_rc():
    h = [
        put("h1", "A", 0, 10),
        get("r1", "h1", 11, 20, "A"),
        free(21, 30, {"h1"}),  # r2 has not read it yet
        get("r2", "h1", 25, 40, error="StaleHandle"),
    ]
    res = check_history(h, IMPL)
    assert props(res) == ["RC"]
    # A counted re-read before the free broke read-once: RC is not judged.
    h2 = h[:2] + [get("r1", "h1", 20, 21, "A", mode="reread")] + h[2:]
    res2 = check_history(h2, IMPL)
    assert res2.verdict == "pass" and res2.rc_unjudged == 1


def test_after_a_clear_a_handle_drains_its_own_object_under_the_drain_contract_only():
    """CLR as SEMANTICS.md states it (vLLM's drain contract, the default of
    every profile): after clear() a pre-clear handle may still return its own
    object, then StaleHandle for good; the strict contract (impl-strict)
    refuses any resolution."""
    from shmspec.model.profile import IMPL_STRICT

    stale = [
        put("h1", "A", 0, 10),
        clear(21, 30, {"h1"}),
        get("r1", "h1", 31, 40, error="StaleHandle"),
    ]
    assert check_history(stale, IMPL).verdict == "pass"
    drained = stale[:2] + [get("r1", "h1", 31, 40, "A")]
    for profile in (IMPL, VLLM_0_32):
        assert check_history(drained, profile).verdict == "pass", profile.name
    res = check_history(drained, IMPL_STRICT)
    assert props(res) == ["CLR", "CONFORMANCE"]  # it resolved, and the strict model never lets it
    assert [o.action for o in res.findings[0].ops] == ["put", "clear", "get"]
    # once stale, a drained handle stays stale: resolving again is not linearizable
    resurrected = stale + [get("r2", "h1", 41, 50, "A")]
    assert props(check_history(resurrected, IMPL)) == ["CONFORMANCE"]


def test_tiny_budget_gives_unknown_never_pass():
    h = [put("h1", "A", 0, 10)] + [get(f"r{i}", "h1", 11 + i, 50, "A") for i in range(6)]
    assert check_history(h, IMPL).verdict == "pass"
    res = check_history(h, IMPL, max_nodes=2)
    assert res.verdict == "unknown" and res.unknown == ["h1"]
    assert res.properties["CONFORMANCE"] == "unknown"
    # A failure found elsewhere still fails the whole history.
    bad = h + [put("h2", "B", 60, 70), get("r1", "h2", 71, 80, "A")]
    assert check_history(bad, IMPL, max_nodes=2).verdict == "fail"


def test_time_budget_gives_unknown():
    h = [put("h1", "A", 0, 10), get("r1", "h1", 11, 20, "A")]
    res = check_history(h, IMPL, max_seconds=0.0)
    assert res.verdict == "unknown"


def test_search_explores_and_backtracks():
    h = [
        put("h1", "A", 0, 10),
        free(20, 40, {"h1"}),
        get("r1", "h1", 15, 45, "A"),
        get("r2", "h1", 15, 45, error="StaleHandle", mode="reread"),
    ]
    part = partition(h)["h1"]
    ok, nodes = linearizable(part.ops(), part, False, 1000)
    assert ok is True and nodes >= 4


def kept(reader, ref, t, value):
    return Op(reader, "kept", {"ref": ref, "mode": "zero-copy"}, value, None, t, t)


def test_a_kept_zero_copy_value_must_read_as_its_object_after_the_writer_moved_on():
    """``kept`` ops (the free run's zero-copy values, issue 28 item 5): NRR
    whatever the writer did since, even after the handle was freed (the
    lease, not the handle, keeps the bytes); they never enter the search."""
    base = [put("h1", "A", 0, 10), get("r1", "h1", 11, 20, "A"), free(21, 30, {"h1"}), put("h2", "B", 31, 40)]
    ok = check_history(base + [kept("r1", "h1", 50, "A")], IMPL)
    assert ok.verdict == "pass", [render(f) for f in ok.findings]
    bad = check_history(base + [kept("r1", "h1", 50, "B")], IMPL)
    assert props(bad) == ["NRR"]
    f = bad.findings[0]
    assert f.message.startswith("r1's kept value of get(copy=False) now reads 'B' for handle h1, which holds 'A'")
    assert f.culprit.action == "kept" and f.ops[-1] is f.culprit
