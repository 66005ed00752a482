"""z3 obligations (conformance/proofs/prove.py) and ``shmspec prove``."""

from __future__ import annotations

import json
import random
import time

import pytest
import z3

from shmspec.conformance.proofs import prove as P
from shmspec.conformance.cli import main
from shmspec.conformance.proofs.z3ops import Z3_OPS
from shmspec.model import ring as R
from shmspec.model.errors import OutOfSpace
from shmspec.model.profile import IMPL, PROFILES, VLLM_0_11
from shmspec.model.properties import disj
from shmspec.model.store import reads_complete


def _ob(name: str) -> P.Obligation:
    return next(o for o in P.OBLIGATIONS if o.name == name)


def _z(t):
    v = z3.simplify(t)
    return v.as_long() if z3.is_int_value(v) else z3.is_true(v)


def test_z3_ops_compute_what_the_model_computes():
    """The same functions over z3 constants and over Python ints agree, so a
    proof about the z3 terms is a proof about what the model runs."""
    rnd = random.Random(5)
    for _ in range(300):
        B = rnd.randint(1, 300)
        start = rnd.randrange(B)
        end = start + rnd.randint(0, B)
        n = rnd.randint(1, 2 * B + 9)
        nxt = rnd.randint(0, 3 * B)
        i = rnd.randrange(R.ID_MAX)
        Z = z3.IntVal  # noqa: N806
        assert _z(R.placement(Z(end), Z(B), Z(n), Z3_OPS)) == R.placement(end, B, n)
        assert _z(R.fits(Z(end), Z(n), Z(start), Z(B))) == R.fits(end, n, start, B)
        assert _z(R.next_id(Z(i), Z3_OPS)) == R.next_id(i)
        for has in (True, False):
            zs, ze = R.free_step(Z(start), Z(end), z3.BoolVal(has), Z(nxt), Z(B), Z3_OPS)
            assert (_z(zs), _z(ze)) == R.free_step(start, end, has, nxt, B)
            assert _z(R.ids_after_clear(Z(i), z3.BoolVal(has), Z3_OPS)) == R.ids_after_clear(i, has)
        zs, ze = R.renormalise(Z(start + B), Z(end + B), Z(B), Z3_OPS)
        assert (_z(zs), _z(ze)) == R.renormalise(start + B, end + B, B) == (start, end)
        assert _z(reads_complete(Z(start), Z(n), Z(B))) == reads_complete(start, n, B)


def test_every_obligation_is_proven_for_impl_in_seconds():
    t0 = time.monotonic()
    results = P.prove_all(chunks=3)
    assert {r.name: r.verdict for r in results} == {o.name: "proven" for o in P.OBLIGATIONS}
    assert time.monotonic() - t0 < 30
    assert {r.property for r in results} >= {"DISJ", "WRAP", "RC", "SIZE", "CLR"}
    chunked = [r for r in results if _ob(r.name).chunked]
    assert chunked and all(max(r.checked) == 3 for r in chunked)


def test_a_model_without_the_wrap_jump_is_refuted_with_a_real_counterexample(monkeypatch):
    """Break the model's wrap jump: the allocate obligation is refuted, and its
    counterexample, run through the (broken) Python model, really breaks DISJ."""
    monkeypatch.setattr(R, "placement", lambda end, B, n, ops=R.INT_OPS: end)
    res = P.check(_ob("alloc-inv"), chunks=2)
    assert res.verdict == "refuted" and res.step["action"] == "allocate"
    m = res.model
    chunks = tuple(R.Chunk(id=c[2], abs_id=i, address=c[0], size=c[1]) for i, c in enumerate(
        m[f"chunk{j}"] for j in range(4) if f"chunk{j}" in m))
    ring = R.Ring(m["B"], m["start"], m["end"], m["id_start"], m["id_end"], chunks)
    after, chunk = R.allocate(ring, m["size"], len(chunks))
    assert chunk.address == m["address"]
    assert disj(after.chunks, ring.size) or not (after.start <= after.end <= after.start + ring.size)


def test_an_undecided_obligation_is_unknown_never_proven(monkeypatch):
    class Undecided(z3.Solver):
        def check(self, *a):
            return z3.unknown

        def reason_unknown(self):
            return "timeout"

    monkeypatch.setattr(P.z3, "Solver", Undecided)
    res = P.check(_ob("alloc-bounds"))
    assert (res.verdict, res.reason) == ("unknown", "timeout")
    witness = P.check(_ob("size-bound"))
    assert witness.verdict == "unknown"


def test_clear_ids_depends_on_the_profile_and_is_explained():
    ob = _ob("clear-ids")
    assert P.check(ob, profile=IMPL).verdict == "proven"
    old = P.check(ob, profile=VLLM_0_11)
    assert old.verdict == "refuted" and "resets ids to 0" in old.reason
    # the counterexample on the Python model: the first id after clear() is the pre-clear handle's
    ring, c = R.allocate(R.Ring(100, id_start=old.model["id_start"], id_end=old.model["id_start"]), 10, 0)
    cleared = R.clear(ring, keep_ids=False)
    _, c2 = R.allocate(cleared, 10, 1)
    assert (c2.id, c2.address % 100) == (old.model["new_id"], 0) == (c.id, c.address % 100)


def test_witness_obligations_state_the_bounds():
    by = {r.name: r for r in P.prove_all(chunks=1, obligations=tuple(o for o in P.OBLIGATIONS if o.kind == "witness"))}
    assert by["size-bound"].model["chunk_size"] == 2**31
    t = by["threshold-bound"].model
    assert t["writer_count"] * t["n_readers"] > 2**31 - 1 >= (t["writer_count"] - 1) * t["n_readers"]
    w = by["ids-bound"].model
    assert w["live_chunks"] == 2**31 and w["B"] >= 9 * 2**31


def test_cli_prove_writes_prove_json_and_exit_status(tmp_path, capsys):
    assert main(["prove", "--chunks", "2", "--report-dir", str(tmp_path / "a")]) == 0
    data = json.loads((tmp_path / "a" / "prove.json").read_text())
    assert data["schema"] == "shmspec.prove/1" and data["verdict"] == "pass" and data["chunks"] == 2
    assert [o["name"] for o in data["obligations"]] == [o.name for o in P.OBLIGATIONS]
    assert all(o["verdict"] == "proven" and o["property"] for o in data["obligations"])
    out = capsys.readouterr().out
    assert "alloc-inv" in out and "proven" in out
    assert main(["prove", "--chunks", "1", "--profile", "vllm-0.11", "--report-dir", str(tmp_path / "b")]) == 1
    data = json.loads((tmp_path / "b" / "prove.json").read_text())
    bad = [o for o in data["obligations"] if o["verdict"] != "proven"]
    assert [o["name"] for o in bad] == ["clear-ids"] and bad[0]["step"]["violations"][0]["property"] == "CLR"
    assert "CLR" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_ring_obligations_do_not_depend_on_the_profile(name):
    res = P.check(_ob("free-step"), chunks=2, profile=PROFILES[name])
    assert res.verdict == "proven"


def test_plan_allocation_still_raises_out_of_space():
    with pytest.raises(OutOfSpace):
        R.plan_allocation(R.Ring(100, start=0, end=96), 20)


def test_ids_wrapping_at_2_32_overflow_the_int32_header(monkeypatch):
    """A model whose ids wrap at 2**32 instead of 2**31: the header obligation
    is refuted at an id of 2**31 or more (what int2byte cannot encode)."""
    monkeypatch.setattr(R, "next_id", lambda i, ops=R.INT_OPS: ops.mod(i + 1, 2**32))
    res = P.check(_ob("header-fields"))
    assert res.verdict == "refuted" and res.model["id_end"] >= 2**31
    with pytest.raises(OverflowError):
        res.model["id_end"].to_bytes(4, "little", signed=True)


def test_drain_prefix_needs_its_invariant():
    """The drain obligations are not vacuous: their hypotheses are satisfiable,
    and without the drain invariant ``end % B <= drain_hw`` an allocation can
    start beyond the covered prefix (a hole impl's ``address % B >=
    drain_hw`` check would misjudge)."""
    import z3

    from shmspec.conformance.proofs import prove as P

    for build in (P._ob_drain_alloc, P._ob_drain_free):
        p = build(0)
        s = z3.Solver()
        s.add(*p.hyps)
        assert s.check() == z3.sat
    p = P._ob_drain_alloc(0)
    s = z3.Solver()
    s.add(*[h for h in p.hyps if not z3.eq(h, p.hyps[-2])])  # drop J (the hypothesis before ``fits``)
    s.add(z3.Not(p.claim))
    assert s.check() == z3.sat
