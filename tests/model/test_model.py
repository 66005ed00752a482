"""Unit tests of the reference model; expected values worked out by hand from SEMANTICS.md."""

from dataclasses import replace

import pytest

from shmspec.model import FORGED, IMPL, Action, Sig, initial, step
from shmspec.model import ring as R
from shmspec.model.errors import OutOfSpace
from shmspec.model.profile import IMPL_STRICT, VLLM_0_11, VLLM_0_12, VLLM_0_32, profile_for_vllm
from shmspec.model.properties import check_state, check_transition, protocol_kept


def test_ring_100_bytes_by_hand():
    r = R.Ring(100)
    r, c0 = R.allocate(r, 20, 0)
    assert c0.handle == (0, 0) and r.end == 28
    r, c1 = R.allocate(r, 30, 1)
    assert c1.handle == (28, 1) and r.end == 66
    # free both: nothing left, so start = end = 0 (vLLM >= 0.12)
    r, freed = R.free(r, lambda c: True)
    assert [c.id for c in freed] == [0, 1]
    assert (r.start, r.end, r.id_start, r.id_end) == (0, 0, 2, 2)
    r, c2 = R.allocate(r, 40, 2)
    assert c2.handle == (0, 2) and r.end == 48
    r, c3 = R.allocate(r, 40, 3)
    assert c3.handle == (48, 3) and r.end == 96
    # 20 more: 96 % 100 + 28 > 100 -> jump to 100; 100 + 28 - 0 > 100 -> MemoryError, nothing changes
    with pytest.raises(OutOfSpace):
        R.allocate(r, 20, 4)
    assert r.end == 96
    # free the oldest only: start moves to the next live chunk (48)
    r, freed = R.free(r, lambda c: True, nbytes=1)
    assert [c.id for c in freed] == [2] and r.start == 48
    # now the wrap fits: 100 + 28 - 48 = 80 <= 100
    r, c4 = R.allocate(r, 20, 4)
    assert c4.handle == (100, 4) and r.end == 128
    # free id 3: start = 48 + (100 - 48) % 100 = 100 >= B -> both drop by B
    r, freed = R.free(r, lambda c: c.id == 3)
    assert [c.id for c in freed] == [3]
    assert (r.start, r.end) == (0, 28)


def test_vllm_docstring_scenario_after_freeing_only_the_first():
    r = R.Ring(100)
    r, _ = R.allocate(r, 20, 0)
    r, _ = R.allocate(r, 30, 1)
    r, _ = R.free(r, lambda c: c.id == 0)
    assert (r.start, r.end) == (28, 66)
    # 40 bytes: 66 + 48 > 100 -> jump to 100; 100 + 48 - 28 = 120 > 100 -> MemoryError
    with pytest.raises(OutOfSpace):
        R.allocate(r, 40, 2)


def test_busy_oldest_blocks_fifo():
    r = R.Ring(100)
    for i in range(3):
        r, _ = R.allocate(r, 10, i)
    r, freed = R.free(r, lambda c: c.id != 0)
    assert freed == () and r.id_start == 0


def test_exact_fit_and_one_byte_over():
    r = R.Ring(64)
    r, c = R.allocate(r, 56, 0)  # 56 + 8 == 64 fits exactly
    assert c.handle == (0, 0) and r.end == 64
    with pytest.raises(OutOfSpace):
        R.allocate(R.Ring(64), 57, 0)


def test_ids_wrap_modulo_2_31():
    r = R.Ring(100, id_start=2**31 - 1, id_end=2**31 - 1)
    r, a = R.allocate(r, 10, 0)
    r, b = R.allocate(r, 10, 1)
    assert (a.id, b.id, r.id_end) == (2**31 - 1, 0, 1)
    r, freed = R.free(r, lambda c: True)
    assert [c.id for c in freed] == [2**31 - 1, 0]


def _store(profile=IMPL, B=100, max_obj=40, n=2):
    s = initial(profile, B, max_obj, n)
    for r in ("r1", "r2")[: n if profile.per_reader else 2]:
        s, o = step(s, Action.of("attach_reader", r, lock=True))
        assert o.ok
    return s


def test_put_get_and_reclaim_threshold():
    s = _store()
    s, o = step(s, Action.of("put", key="a", value="A", nbytes=20))
    assert o.value == (0, 0)
    s, sig = step(s, Action.of("get_signature", key="a"))
    assert sig.value == Sig("a", 0, 0, 0)
    s, o = step(s, Action.of("get", "r1", address=0, id=0, signature=sig.value, key="a"))
    assert o.value == "A"
    # one of two readers has read: not free, so FIFO free reclaims nothing
    s2, _ = step(s, Action.of("free_unused"))
    assert len(s2.ring.chunks) == 1
    s, o = step(s, Action.of("get", "r2", address=0, id=0, signature=sig.value, key="a"))
    s, _ = step(s, Action.of("free_unused"))
    assert s.ring.chunks == ()
    s, o = step(s, Action.of("get", "r1", address=0, id=0, signature=sig.value, key="a"))
    assert o.error == "StaleHandle" and not o.stale_may_return


def test_duplicate_oversize_unknown_and_lock():
    s = _store()
    s, _ = step(s, Action.of("put", key="a", value="A", nbytes=20))
    s2, o = step(s, Action.of("put", key="a", value="B", nbytes=20))
    assert o.error == "DuplicateKey" and s2 == s
    s2, o = step(s, Action.of("put", key="b", value="B", nbytes=41))
    assert o.error == "ObjectTooLarge" and s2 == s
    _, o = step(s, Action.of("get_cached", key="zz"))
    assert o.error == "UnknownKey"
    _, o = step(s, Action.of("attach_reader", "r3", lock=False))
    assert o.error == "MissingReaderLock"


def test_put_frees_then_retries_and_oom_keeps_the_free():
    s = _store(n=1)
    s, _ = step(s, Action.of("put", key="a", value="A", nbytes=40))  # (0,0) end 48
    s, _ = step(s, Action.of("put", key="b", value="B", nbytes=40))  # (48,1) end 96
    s, o = step(s, Action.of("put", key="c", value="C", nbytes=20))
    assert o.error == "OutOfSpace"  # nothing read yet: nothing can be freed
    sig = Sig("a", 0, 0, 0)
    s, _ = step(s, Action.of("get", "r1", address=0, id=0, signature=sig, key="a"))
    s, o = step(s, Action.of("put", key="c", value="C", nbytes=20))
    assert o.value == (100, 2)  # a freed by the retry; c wraps
    assert [c.key for c in s.ring.chunks] == ["b", "c"]


def test_signatures_forged_missing_and_fields():
    s = _store()
    s, _ = step(s, Action.of("put", key="a", value="A", nbytes=20))
    good = Sig("a", 0, 0, 0)
    for kw, kind in [
        (dict(signature=FORGED, key="a"), "BadSignature"),
        (dict(signature=good, key="b"), "BadSignature"),
        (dict(signature=None, key="a"), "MissingSignature"),
        (dict(signature=[1, 2], key="a"), "BadHandleFields"),
    ]:
        _, o = step(s, Action.of("get", "r1", address=0, id=0, **kw))
        assert o.error == kind
    _, o = step(s, Action.of("get", "r1", address=-1, id=0, signature=good, key="a"))
    assert o.error == "BadHandleFields"
    _, o = step(s, Action.of("get", "r1", address=100, id=0, signature=good, key="a"))
    assert o.error == "BadSignature"  # altered address, signature binds it


def test_clear_keeps_or_resets_ids():
    for profile, expected in ((VLLM_0_32, (0, 1)), (VLLM_0_11, (0, 0))):
        s = _store(profile)
        s, _ = step(s, Action.of("put", key="a", value="A", nbytes=20))
        s, _ = step(s, Action.of("clear"))
        s, o = step(s, Action.of("put", key="b", value="B", nbytes=20))
        assert o.value == expected
    # older profile: the pre-clear handle (0, 0) resolves to the new object: CLR broken by design
    _, o = step(s, Action.of("get", "r1", address=0, id=0))
    assert o.value == "B"


def test_protecting_touch_and_counting_touch():
    s = _store(n=1)
    s, _ = step(s, Action.of("put", key="a", value="A", nbytes=20))
    s, _ = step(s, Action.of("get", "r1", address=0, id=0, signature=Sig("a", 0, 0, 0), key="a"))
    s, _ = step(s, Action.of("touch", key="a"))
    s2, _ = step(s, Action.of("free_unused"))
    assert len(s2.ring.chunks) == 1  # protected
    s, _ = step(s, Action.of("release_touches"))
    s, _ = step(s, Action.of("free_unused"))
    assert s.ring.chunks == ()
    c = _store(VLLM_0_12, n=1)
    c, _ = step(c, Action.of("put", key="a", value="A", nbytes=20))
    c, _ = step(c, Action.of("touch", key="a"))
    assert c.ring.chunks[0].writer_count == 2


def test_generation_binding_rejects_pre_wrap_signatures():
    s = _store()
    s = s.__class__(**{**s.__dict__, "abs_end": 2**31 + 5})
    assert s.generation_of(3) == 1 and s.generation_of(7) == 0


def test_properties_hold_on_a_model_run_and_protocol_predicate():
    s = _store(n=1)
    steps = [
        Action.of("put", key="a", value="A", nbytes=30),
        Action.of("get", "r1", address=0, id=0, signature=Sig("a", 0, 0, 0), key="a"),
        Action.of("put", key="b", value="B", nbytes=30),
        Action.of("put", key="c", value="C", nbytes=30),
    ]
    for a in steps:
        s2, o = step(s, a)
        assert not any(check_state(s2).values())
        assert not any(check_transition(s, a, s2, o).values())
        s = s2
    assert protocol_kept(s)
    s, _ = step(s, Action.of("get", "r1", address=38, id=1, signature=Sig("b", 38, 1, 0), key="b"))
    s, _ = step(s, Action.of("get", "r1", address=38, id=1, signature=Sig("b", 38, 1, 0), key="b"))
    assert not protocol_kept(s)


def test_step_rejects_bad_input_without_changing_state():
    s = _store()
    with pytest.raises(ValueError):
        step(s, Action.of("frobnicate"))
    with pytest.raises(ValueError):
        step(s, Action.of("get", "r9", address=0, id=0))


def test_profile_for_vllm():
    assert profile_for_vllm("0.33.0") is VLLM_0_32
    assert profile_for_vllm("0.11.0") is VLLM_0_11
    with pytest.raises(ValueError):
        profile_for_vllm("0.10.2")


# ------------------------------------------------ impl's contract (segment v2)
def _put(s, key, nbytes=20):
    s, o = step(s, Action.of("put", key=key, value=key.upper(), nbytes=nbytes))
    assert o.ok, o
    return s, o.value


def _get(s, reader, handle, key):
    address, id_ = handle
    sig = Sig(key, address, id_, s.generation_of(id_))
    return step(s, Action.of("get", reader, address=address, id=id_, signature=sig, key=key))


def test_per_reader_counting_a_reread_never_stands_in_for_another_reader():
    """RC per reader (impl): r1 reading twice leaves the chunk busy until r2
    has read it; vLLM's aggregate count frees it after r1's second read."""
    for profile, freed_after_reread in ((IMPL, False), (VLLM_0_32, True)):
        s = _store(profile)
        s, h = _put(s, "a")
        s, _ = _get(s, "r1", h, "a")
        s, _ = _get(s, "r1", h, "a")
        s2, _ = step(s, Action.of("free_unused"))
        assert (s2.ring.chunks == ()) is freed_after_reread, profile.name
        if not freed_after_reread:
            s, o = _get(s2, "r2", h, "a")
            assert o.value == "A"  # PROM: r2's promised read still succeeds
            s, _ = step(s, Action.of("free_unused"))
            assert s.ring.chunks == ()


def test_more_readers_than_slots_are_refused_per_reader_only():
    s = _store(IMPL)
    s, o = step(s, Action.of("attach_reader", "r3", lock=True))
    assert o.error == "TooManyReaders" and s.readers == ("r1", "r2")
    s = _store(VLLM_0_32)
    s, o = step(s, Action.of("attach_reader", "r3", lock=True))
    assert o.ok and s.readers == ("r1", "r2", "r3")


def test_drain_a_pre_clear_handle_reads_its_own_object_until_overlapped():
    """CLR, vLLM's drain contract, exactly (impl): after clear() a handle
    resolves to its own object, uncounted, until an allocation overlaps its
    bytes; the strict profile refuses it at once."""
    s = _store(IMPL)
    s, pad = _put(s, "pad", 20)  # chunk 28 at 0 (8 + 20)
    s, h = _put(s, "k", 10)  # chunk 18 at 28
    assert h == (28, 1)
    s, _ = step(s, Action.of("clear"))
    assert [c.key for c in s.drain] == ["pad", "k"]
    s2, o = _get(s, "r1", h, "k")
    assert o.value == "K" and s2 == s  # read, nothing counted
    strict = replace(s, profile=IMPL_STRICT, drain=())
    _, o = _get(strict, "r1", h, "k")
    assert o.error == "StaleHandle"
    s, _ = _put(s, "x", 20)  # [0, 28): overlaps pad only
    assert [c.key for c in s.drain] == ["k"]
    _, o = _get(s, "r1", pad, "pad")
    assert o.error == "StaleHandle"
    _, o = _get(s, "r1", h, "k")
    assert o.value == "K"
    s, _ = _put(s, "y", 4)  # [28, 40): reaches k
    assert s.drain == ()
    _, o = _get(s, "r1", h, "k")
    assert o.error == "StaleHandle"
    s, _ = step(s, Action.of("clear"))
    s, _ = step(s, Action.of("clear"))  # a second clear ends the first one's drain
    assert s.drain == ()


def test_chunk_cap_is_out_of_space_after_reclaim():
    s = replace(_store(IMPL, B=1000, max_obj=40, n=1), max_chunks=2)
    s, _ = _put(s, "a", 4)
    s, _ = _put(s, "b", 4)
    s2, o = step(s, Action.of("put", key="c", value="C", nbytes=4))
    assert o.error == "OutOfSpace" and len(s2.ring.chunks) == 2  # room, but two chunks are live
    s, _ = _get(s, "r1", s.ring.chunks[0].handle, "a")
    s, o = step(s, Action.of("put", key="c", value="C", nbytes=4))
    assert o.ok and [c.key for c in s.ring.chunks] == ["b", "c"]  # the retry's reclaim made room


def test_drain_outlives_the_reuse_of_its_ack_word():
    """A drain read is not counted, so a drain chunk lives while its bytes are
    intact, however many allocations (ack words) followed."""
    s = replace(_store(IMPL, B=1000, max_obj=40, n=1), max_chunks=2)
    s, _ = _put(s, "pad", 30)
    s, h = _put(s, "a", 4)  # abs 1 at 38
    s, _ = step(s, Action.of("clear"))
    for i in range(5):  # allocations 2..6 at address 0, each read and freed
        s, hb = _put(s, f"b{i}", 4)
        s, _ = _get(s, "r1", hb, f"b{i}")
        s, _ = step(s, Action.of("free_unused"))
    assert [c.key for c in s.drain] == ["a"]
    _, o = _get(s, "r1", h, "a")
    assert o.value == "A"


def _canonical_by_renaming(cfg, s):
    """The symmetry reduction as first written (``_replace`` per candidate):
    the oracle for :func:`shmspec.model.atomic.canonical`."""
    from itertools import permutations

    from shmspec.model import atomic

    best, n = None, len(cfg.readers)
    for rp in permutations(range(n)):
        per = s if rp == tuple(range(n)) else s._replace(
            **{f: tuple(getattr(s, f)[j] for j in rp) for f in atomic._PER_READER})
        for kp in permutations(cfg.keys):
            ren = dict(zip(cfg.keys, kp))
            cand = per._replace(chunks=tuple(c[:4] + (ren[c[4]],) for c in per.chunks),
                                pend=tuple(c[:4] + (ren[c[4]],) for c in per.pend))
            if best is None or cand < best:
                best = cand
    return best


@pytest.mark.parametrize("name", ["MC_impl_prog.cfg", "MC_vllm_reread.cfg"])
def test_canonical_picks_the_representative_renaming_does(name):
    """The fast symmetry reduction (2026-12-07) gives, for every successor
    of every state the model reaches, the state the renaming did, as a
    ``State``."""
    from shmspec.conformance import protocols
    from shmspec.conformance.spec.agreement import model_config
    from shmspec.conformance.spec.tlc import config_files
    from shmspec.model import atomic

    cfg = model_config(config_files(protocols.get().tla_dir, name, False)[0])
    ex = atomic.explore(cfg)
    checked = 0
    for s in ex.states:
        for _, t in atomic.successors(cfg, s):
            got = atomic.canonical(cfg, t)
            assert type(got) is atomic.State and got == _canonical_by_renaming(cfg, t), t
            checked += 1
    assert checked > 5000
