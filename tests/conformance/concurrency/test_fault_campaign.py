"""The faults campaign (LIVE): processes SIGKILLed at fixed points, on impl,
on vLLM's store and on a seeded fault; every finding re-runs from its config."""

from __future__ import annotations

import pytest

from shmspec.conformance.runner import gate
from shmspec.conformance.concurrency.faults import LIVE_BOUND, SCENARIOS, replay_fault, run_scenario
from shmspec.conformance.mutants import MUTANTS_DIR
from helpers import load_or_skip, run_campaign


def _campaign(spec, writer_lock=False):
    return run_campaign(spec, gate.FAULTS, writer_lock)


@pytest.mark.parametrize("writer_lock", [False, True], ids=["vllm-construction", "writer-lock"])
def test_impl_survives_every_process_fault(writer_lock):
    res = _campaign("impl", writer_lock)
    assert res.completed and res.error is None and res.violations == [], [v.message for v in res.violations]
    scen = res.rates["scenarios"]
    assert set(scen) == set(SCENARIOS)
    assert scen["reader_killed_in_lock"]["reachable"] is False  # impl's get takes no lock
    assert scen["reader_killed_mid_get"]["reachable"] and scen["writer_killed_mid_put"]["reachable"]
    assert all(s["longest_step_seconds"] < LIVE_BOUND for s in scen.values())


def test_mid_get_kill_reaches_the_pin_the_writer_must_pass():
    """impl: r1 dies at deserialize holding its hazard pin on h1; the writer's
    puts wrap onto h1's bytes (0 mod B) and r2 reads every one.  Every put
    after the kill succeeds: the dead r1's reads are forfeited (LEASE)."""
    res = run_scenario(load_or_skip("impl"), "reader_killed_mid_get")
    kill = [s for s in res.steps if s["action"] == "SIGKILL"]
    assert kill and kill[0]["args"] == {"at": "deserialize"}
    after = res.steps[res.steps.index(kill[0]):]
    puts = [s["observed"] for s in after if s["action"] == "put" and s["process"] == "writer"]
    assert len(puts) == 6 and all(o.startswith("handle (") for o in puts), puts
    handles = [tuple(map(int, o[len("handle ("):-1].split(", "))) for o in puts]
    assert any(a % 256 == 0 and i > 0 for a, i in handles), handles  # over h1's bytes
    assert res.findings == []


@pytest.mark.slow
def test_vllm_reader_killed_in_the_lock_hangs_the_others():
    res = _campaign("vllm==0.33.0")
    assert res.completed
    live = [v for v in res.violations if v.property == "LIVE"]
    assert len(live) == 1 and live[0].config["scenario"] == "reader_killed_in_lock"
    assert "reader r2's get did not return within 5 s" in live[0].message
    assert "killed holding the reader lock" in live[0].message and "lock_acquire" in live[0].message
    assert live[0].calls() == [] and live[0].steps[-1]["violations"]
    assert replay_fault("vllm==0.33.0", live[0].config, "LIVE").startswith("LIVE: reader r2's get")


@pytest.mark.slow
def test_seeded_fault_dead_pin_waited_is_caught():
    res = _campaign(f"file:{MUTANTS_DIR / 'dead_pin_waited.py'}")
    live = [v for v in res.violations if v.property == "LIVE"]
    assert live and live[0].config["scenario"] == "reader_killed_mid_get"
    assert "the writer's put did not return within 5 s" in live[0].message and "pin_wait" in live[0].message


def test_unknown_scenario_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown fault scenario 'nope'"):
        run_scenario(load_or_skip("impl"), "nope")


def test_lease_is_checked_on_impl_found_on_a_writer_that_never_forfeits_and_not_claimed_by_vllm():
    impl = _campaign("impl")
    assert "LEASE" in impl.checks and impl.violations == [] and impl.completed
    owed = _campaign(f"file:{MUTANTS_DIR / 'dead_reader_owed.py'}")
    lease = [v for v in owed.violations if v.property == "LEASE"]
    assert lease and lease[0].config["scenario"] == "reader_killed_mid_get"
    assert "failed (OutOfSpace) after reader r1 was killed paused at deserialize" in lease[0].message
    assert replay_fault(f"file:{MUTANTS_DIR / 'dead_reader_owed.py'}", lease[0].config, "LEASE").startswith("LEASE")
    assert replay_fault("impl", lease[0].config, "LEASE") is None  # fixed: the same scenario holds on impl
    vllm = _campaign("vllm==0.33.0")
    assert "LEASE" not in vllm.checks and "declares no reader leases" in vllm.not_claimed["LEASE"]
    assert not [v for v in vllm.violations if v.property == "LEASE"]


@pytest.mark.slow  # two runs of the stopped reader's scenario: 10 s each (the lease time)
def test_a_stopped_reader_loses_its_lease_on_impl_leased_and_a_lease_without_copy_is_caught():
    """``reader_stopped_mid_get``: r1 left paused at deserialize (stopped);
    on impl with a lease time the writer's puts wrap the ring within the
    lease time and r1's resumed get raises the stale-handle error; on a
    lease time whose reads are not copied out, r1's resumed get returns the
    bytes of a later put (NRR), found again from the finding's config."""
    res = run_scenario(load_or_skip("impl-leased"), "reader_stopped_mid_get")
    assert res.reachable and res.findings == []
    assert [s["observed"] for s in res.steps if s["process"] == "r1"][-1] == "StaleHandle"
    spec = f"file:{MUTANTS_DIR / 'lease_without_copy.py'}"
    bad = run_scenario(load_or_skip(spec), "reader_stopped_mid_get")
    nrr = [f for f in bad.findings if f.property == "NRR"]
    assert nrr and "reader r1's resumed get returned" in nrr[0].message
    assert "stayed stopped past its 10 s lease" in nrr[0].message
    for plain in ("impl", "vllm==0.33.0"):  # no lease time declared: nothing to check
        assert run_scenario(load_or_skip(plain), "reader_stopped_mid_get").reachable is False


def test_zero_copy_scenario_holds_on_impl_and_is_not_reachable_on_vllm():
    """impl: r1 keeps a value of get(copy=False) over h1; the writer's put that
    needs its bytes is refused, the kept value still reads as put (NRR), the
    puts go on once r1 drops it (PROG) and once r1 is killed holding another
    (LEASE)."""
    res = run_scenario(load_or_skip("impl"), "reader_keeps_zero_copy")
    assert res.reachable and res.findings == [], [f.message for f in res.findings]
    actions = [(s["process"], s["action"]) for s in res.steps]
    assert ("r1", "keep_get") in actions and ("r1", "drop_kept") in actions and ("r1", "SIGKILL") in actions
    refused = [s for s in res.steps if s["action"] == "put" and not s["observed"].startswith("handle (")]
    assert refused and refused[0]["observed"] == "OutOfSpace"  # the lease held the writer back
    after_kill = res.steps[actions.index(("r1", "SIGKILL")):]
    assert [s["observed"][:8] for s in after_kill if s["action"] == "put"] == ["handle ("] * 6
    vllm = run_scenario(load_or_skip("vllm==0.33.0"), "reader_keeps_zero_copy")
    assert vllm.reachable is False and vllm.findings == []


@pytest.mark.parametrize("fault, prop, says", [
    ("zero_copy_unleased", "NRR", "reader r1's kept value of get(copy=False) now reads"),
    ("zero_copy_lease_leaks", "PROG", "is held by a zero-copy lease of reader slot 0"),
])
def test_zero_copy_seeded_faults_are_caught_and_replay(fault, prop, says):
    spec = f"file:{MUTANTS_DIR / f'{fault}.py'}"
    res = run_scenario(load_or_skip(spec), "reader_keeps_zero_copy")
    assert [f.property for f in res.findings] == [prop]
    assert says in res.findings[0].message
    config = {"scenario": "reader_keeps_zero_copy"}
    assert replay_fault(spec, config, prop).startswith(prop)
    assert replay_fault("impl", config, prop) is None


def test_a_serde_that_keeps_its_view_is_refused_on_impl_and_caught_without_the_guard():
    """``reader_serde_keeps_view`` (ALIAS): r1's plain get goes through a
    serde that returns a Blob over the view it is handed.  impl raises
    BufferError (the read not acknowledged), r1's copied get then returns
    h1's object and every put succeeds; without the guard
    (``alias_unguarded``) the kept value reads the object the writer put
    over h1's bytes, NRR, found again from the finding's config."""
    res = run_scenario(load_or_skip("impl"), "reader_serde_keeps_view")
    assert res.reachable and res.findings == [], [f.message for f in res.findings]
    seen = [(s["process"], s["action"], s["observed"]) for s in res.steps]
    assert seen[1] == ("r1", "alias_get", "Crash:BufferError")
    assert seen[2] == ("r1", "get", "Blob(0000000041414141..., 40 B)")
    assert [o[:8] for p, a, o in seen if a == "put"] == ["handle ("] * 7
    assert seen[-2:] == [("r1", "check_kept", "{}"), ("r1", "drop_kept", "None")]
    spec = f"file:{MUTANTS_DIR / 'alias_unguarded.py'}"
    bad = run_scenario(load_or_skip(spec), "reader_serde_keeps_view")
    assert [f.property for f in bad.findings] == ["NRR"]
    assert ("reader r1's value of get, whose serde kept a view of its input, now reads Blob(04"
            in bad.findings[0].message) and "ALIAS" in bad.findings[0].message
    config = {"scenario": "reader_serde_keeps_view"}
    assert replay_fault(spec, config, "NRR").startswith("NRR")
    assert replay_fault("impl", config, "NRR") is None


@pytest.mark.slow  # fetches vLLM's store file when the cache has none
def test_vllm_readers_hand_out_a_value_over_the_view_a_serde_kept():
    res = run_scenario(load_or_skip("vllm==0.33.0"), "reader_serde_keeps_view")
    assert res.reachable and [f.property for f in res.findings] == ["NRR"]
    assert "reads Blob(04" in res.findings[0].message and "for handle k0 (0, 0)" in res.findings[0].message


@pytest.mark.slow  # two runs with a 10 s lease time: 10 s and 15 s
def test_a_reader_stopped_inside_a_zero_copy_get_holds_the_writer_one_lease_time_at_most():
    """``reader_stopped_mid_zero_copy_get`` (issue 28; found by a fresh-user
    trial, 2026-12-07): r1 is left paused inside ``get(copy=False)`` after
    its lease was taken.  On impl-leased the put that needs h1's bytes is
    refused for one lease time, then succeeds, r2 reads every object right
    and r1's resumed get raises StaleHandle.  With the stalled read's lease
    never revoked (``zero_copy_read_unrevoked``, impl before the fix) LIVE
    names the refusal and the zero-copy lease, found again from the
    finding's config.  Without a lease time, and on vLLM: not claimed."""
    res = run_scenario(load_or_skip("impl-leased"), "reader_stopped_mid_zero_copy_get")
    assert res.reachable and res.findings == [], [f.message for f in res.findings]
    seen = [(s["process"], s["action"], s["observed"]) for s in res.steps]
    assert ("r1", "SIGSTOP") in [(p, a) for p, a, _ in seen] and seen[-1] == ("r1", "keep_get", "StaleHandle")
    puts = [o for p, a, o in seen if a == "put"]
    assert "OutOfSpace" in puts and [o[:8] for o in puts if o != "OutOfSpace"] == ["handle ("] * 7
    assert 9.0 < res.seconds < 20.0  # the refused put waited for the lease time
    spec = f"file:{MUTANTS_DIR / 'zero_copy_read_unrevoked.py'}"
    bad = run_scenario(load_or_skip(spec), "reader_stopped_mid_zero_copy_get")
    assert [f.property for f in bad.findings] == ["LIVE"]
    assert "while reader r1 was stopped inside get(copy=False)" in bad.findings[0].message
    assert "held by a zero-copy lease of reader slot 0" in bad.findings[0].message
    assert replay_fault(spec, {"scenario": "reader_stopped_mid_zero_copy_get"}, "LIVE").startswith("LIVE")
    for plain in ("impl", "vllm==0.33.0"):
        assert run_scenario(load_or_skip(plain), "reader_stopped_mid_zero_copy_get").reachable is False


@pytest.mark.slow  # two runs of the garbage-writing reader's scenario: 10 s and 20 s (the lease time)
def test_a_reader_writing_garbage_delays_the_writer_one_lease_time_and_an_unrevoked_pin_is_caught():
    """``reader_writes_garbage`` (issue 28 item 7): r1 pins h1 for ever and
    acknowledges everything, and lives on.  On impl with a lease time the
    put that wraps onto h1's bytes waits one lease time, r2 reads every
    object right and r1's own later get returns its object; on a pin wait
    that never revokes (``garbage_pin_unrevoked``) LIVE names the refused
    put, found again from the finding's config.  Without a lease time, and
    on vLLM, nothing is claimed."""
    res = run_scenario(load_or_skip("impl-leased"), "reader_writes_garbage")
    assert res.reachable and res.findings == [], [f.message for f in res.findings]
    actions = [(s["process"], s["action"]) for s in res.steps]
    assert ("r1", "scribble") in actions and actions[-1] == ("r1", "get")
    assert [s["observed"][:8] for s in res.steps if s["action"] == "put"] == ["handle ("] * 7
    assert 9.0 < res.longest_step < 15.0  # the one put that needed h1's bytes waited for the lease time
    spec = f"file:{MUTANTS_DIR / 'garbage_pin_unrevoked.py'}"
    bad = run_scenario(load_or_skip(spec), "reader_writes_garbage")
    assert [f.property for f in bad.findings] == ["LIVE"]
    assert "after reader r1 wrote garbage into its own words: ReaderStalled" in bad.findings[0].message
    assert replay_fault(spec, {"scenario": "reader_writes_garbage"}, "LIVE").startswith("LIVE")
    for plain in ("impl", "vllm==0.33.0"):
        assert run_scenario(load_or_skip(plain), "reader_writes_garbage").reachable is False


def test_a_close_from_another_thread_under_a_get_never_frees_its_bytes_and_the_fault_is_caught():
    """``reader_closed_mid_get`` (issue 28 items 4 and 7): r1's promised read
    of h1 is paused at deserialize while another thread of r1 closes its
    view.  impl's close returns after ``CLOSE_WAIT`` (2 s) leaving the close
    to the read; the put that needs h1's bytes is refused, r1's get returns
    h1's object, and the retried put succeeds once the close took effect.
    A close that gives the slot back at once (``close_under_get``) lets the
    writer wrap onto h1's bytes: NRR quotes the object r1 deserialized, and
    the finding replays from its config.  vLLM: not claimed."""
    res = run_scenario(load_or_skip("impl"), "reader_closed_mid_get")
    assert res.reachable and res.findings == [], [f.message for f in res.findings]
    seen = [(s["process"], s["action"], s["observed"]) for s in res.steps]
    assert ("r1", "close (another thread)") in [(p, a) for p, a, _ in seen]
    puts = [o for p, a, o in seen if a == "put"]
    assert puts[-2] == "OutOfSpace" and puts[-1].startswith("handle (0, ")  # refused, then over h1's bytes
    assert ("r1", "get", "Blob(0000000041414141..., 40 B)") in seen
    spec = f"file:{MUTANTS_DIR / 'close_under_get.py'}"
    bad = run_scenario(load_or_skip(spec), "reader_closed_mid_get")
    assert [f.property for f in bad.findings] == ["NRR"]
    assert "reader r1's get deserialized Blob(04" in bad.findings[0].message
    assert replay_fault(spec, {"scenario": "reader_closed_mid_get"}, "NRR").startswith("NRR")
    assert run_scenario(load_or_skip("vllm==0.33.0"), "reader_closed_mid_get").reachable is False
