"""The TLA+ spec under TLC (tla/) and its agreement with the Python model
(model/atomic.py): what should hold holds, what should fail fails, both reach
the same states, counterexamples replay on the model, and the spec's actions
are the model's atomic steps."""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest

from shmspec.conformance.commands import modelcheck

from shmspec.conformance.spec import tlc
from shmspec.conformance.spec.agreement import compare, model_config, replay_trace
from shmspec.conformance.cli import main
from shmspec.conformance.spec.tlc import check_config, config_files, default_tla_dir, parse_output, read_config
from shmspec.impl import yieldpoints
from shmspec.model import atomic
from shmspec.model.steps import ATOMIC_STEPS, FAULT_STEPS, LOCK_STEPS

# one worker runs this module: its module-scoped fixture is built once (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_tla")

java = pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs java")


@pytest.fixture(scope="session")  # session: built once by the worker its xdist_group runs on
def outcomes():
    return {o.config.name: o for o in modelcheck.run()}


@pytest.mark.slow
@java
def test_every_small_config_does_what_it_states_and_agrees_with_the_model(outcomes):
    outcomes = {n: o for n, o in outcomes.items() if not o.config.properties}  # the safety configs
    assert set(outcomes) == {"MC_impl.cfg", "MC_impl_reread.cfg", "MC_impl_nofence.cfg", "MC_impl_noscan.cfg",
                             "MC_impl_writer_nofence.cfg", "MC_vllm.cfg", "MC_vllm_old.cfg", "MC_vllm_reread.cfg"}
    for name, o in outcomes.items():
        assert o.ok, (name, o.check.holds.status, o.check.holds.invariant, o.agreement)
        a = o.agreement
        # the same set of abstract states, so the same counts, and the same BFS depth
        assert a.ok and a.tlc_distinct == a.model_distinct > 1000
        assert a.tlc_depth == a.model_depth and a.tlc_generated == a.model_generated
        # the model finds violated exactly what the config expects TLC to find violated
        assert a.model_violated == sorted(o.check.expected), name
    assert outcomes["MC_impl.cfg"].agreement.model_violated == []
    assert outcomes["MC_impl_reread.cfg"].agreement.model_violated == []
    for name in ("MC_impl_nofence.cfg", "MC_impl_noscan.cfg"):
        assert outcomes[name].agreement.model_violated == ["CLR", "NRR", "PROM", "RC"]
    assert outcomes["MC_impl_writer_nofence.cfg"].agreement.model_violated == ["CLR", "NRR"]
    for name in ("MC_vllm.cfg", "MC_vllm_old.cfg", "MC_vllm_reread.cfg"):
        assert outcomes[name].agreement.model_violated == ["CLR", "NRR", "RC"]
    # the vLLM protocol's state space is the one it had before impl's protocol
    # changed (the new variables stay at their initial values under it)
    assert {n: (o.check.holds.distinct, o.check.holds.generated) for n, o in outcomes.items() if "vllm" in n} == {
        "MC_vllm.cfg": (42842, 136944), "MC_vllm_old.cfg": (49812, 158753), "MC_vllm_reread.cfg": (7713, 19547)}


@pytest.mark.slow
@java
def test_prog_holds_as_liveness_under_fairness_and_fails_for_an_unfair_reader(outcomes):
    """PROG as a TLA+ liveness property (PROGLive under FairSpec: weak
    fairness of the writer's steps and of every fair reader's): it holds for
    both protocols; with one reader's fairness taken away (it may stop
    mid-get, or never read) an allocation stays in the ring for ever."""
    live = {n: o for n, o in outcomes.items() if o.config.properties}
    assert set(live) == {"MC_impl_prog.cfg", "MC_impl_prog_unread.cfg", "MC_vllm_prog.cfg", "MC_vllm_prog_unread.cfg",
                         "MC_impl_prog_mortal.cfg", "MC_vllm_prog_mortal.cfg"}
    for name, o in live.items():
        assert o.ok and not o.config.symmetry and o.config.properties == ["PROGLive"], name
        a = o.agreement  # the same states up to symmetry; TLC, without it, counts every permutation
        assert a.ok and a.only_tlc == a.only_model == 0 and a.tlc_distinct > a.model_distinct, name
    for name in ("MC_impl_prog.cfg", "MC_vllm_prog.cfg"):
        assert live[name].check.holds.status == "ok" and live[name].check.found == {}
    # the summary table's "TLC found" column names the liveness violation it draws below
    from shmspec.conformance.reporting.report import record_text

    table = record_text(lambda rec: rec.print(modelcheck.summary_table(list(live.values()))), 200)
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in table.splitlines() if line.startswith("│")}
    for name in ("impl_prog_unread", "vllm_prog_unread"):
        assert rows[name][:2] == ["PROGLive", "PROGLive"] and rows[name][-1] == "pass", rows[name]
    for name in ("impl_prog", "vllm_prog"):
        assert rows[name][:2] == ["none", "none"], rows[name]
    for name in ("MC_impl_prog_unread.cfg", "MC_vllm_prog_unread.cfg"):
        found = live[name].check.found["PROGLive"]
        assert found.status == "liveness" and found.invariant == "PROGLive" and found.exit_code == 13
        [(v, replay)] = live[name].counterexamples
        assert replay.model_departs is None and v.property == "PROGLive"
        # the unfair reader never reads the allocation, or stops in its get
        assert "stays in the ring for ever" in v.message and ("never finishes" in v.message or
                                                             "never reads it" in v.message), v.message


@pytest.mark.slow
@java
def test_a_dead_reader_never_stops_impls_writer_and_pins_vllms_fifo_head(outcomes):
    """Issue 28 in the spec (``Mortal``: a reader whose process may die
    anywhere, the step ``die``): impl's writer forfeits a dead reader's
    promised reads and ends its wait for the dead reader's pin, so PROGLive
    and every invariant hold with the death at each point; vLLM's in-band
    count never gets the dead reader's read, so its allocation pins the FIFO
    head for ever, and the counterexample says it is the store's doing, not
    a client rule broken."""
    impl, vllm = outcomes["MC_impl_prog_mortal.cfg"], outcomes["MC_vllm_prog_mortal.cfg"]
    assert impl.ok and impl.check.holds.status == "ok" and impl.check.found == {}
    assert {"NRR", "PROM", "RC"} <= set(impl.config.invariants) and impl.agreement.ok
    assert impl.agreement.model_violated == []
    found = vllm.check.found["PROGLive"]
    assert vllm.ok and found.status == "liveness"
    [(v, replay)] = vllm.counterexamples
    assert replay.model_departs is None and any(st["action"] == "die" for st in v.steps)
    assert "died before its read of it counted" in v.message and "client rule" not in v.message, v.message
    # the same configs without the death: both hold (tla/MC_impl_prog.cfg, tla/MC_vllm_prog.cfg)
    assert outcomes["MC_vllm_prog.cfg"].check.found == {} and outcomes["MC_impl_prog.cfg"].check.found == {}


@pytest.mark.slow
@java
def test_impl_faults_break_nrr_where_the_pin_protocol_says(outcomes):
    """The must-fail configs: without the reader's fence, or without the
    writer's pin scan, a drain read deserializes the next object put into its
    slot, and a late ack lands on the allocation that took its word over."""
    for name in ("MC_impl_nofence.cfg", "MC_impl_noscan.cfg"):
        o = outcomes[name]
        cex = {v.property: (v, r) for v, r in o.counterexamples}
        assert set(cex) == {"NRR", "CLR", "RC", "PROM"} and all(r.model_departs is None for _, r in cex.values())
        v, _ = cex["NRR"]
        actions = [(s["action"], s["process"]) for s in v.steps[1:]]
        assert ("clear", "writer") in actions and actions[-1] == ("deserialize", "r1")
        assert "deserialized o2 for handle h1(0,0), which holds o1" in v.message
        # the reader validated its pin before the writer's scan could see it
        # (no fence), or the writer never looked (no scan): no pin_wait
        assert ("pin_wait", "writer") not in actions
        i_pin, i_check = actions.index(("pin", "r1")), actions.index(("reader_check", "r1"))
        i_scan = max(i for i, a in enumerate(actions) if a == ("pin_scan", "writer"))
        assert i_pin < i_scan and (i_check > i_scan if "nofence" in name else i_check < i_scan)
        assert "an ack landed on another allocation" in cex["RC"][0].message
        assert "never started one" in cex["PROM"][0].message


@pytest.mark.slow
@java
def test_an_unfenced_writer_breaks_nrr_for_a_drain_read(outcomes):
    """Without the writer's fence between its drain store and its pin scan
    (the reader fenced), the scan reads the pins before the drain store is
    visible: a reader pins a pre-clear handle just after the scan and its
    check still finds the chunk draining; the writer then writes the next
    object into the slot the reader deserializes (NRR, CLR).  Acks are
    untouched (a drain read is never acknowledged): RC and PROM hold."""
    o = outcomes["MC_impl_writer_nofence.cfg"]
    assert o.ok and sorted(o.check.expected) == ["CLR", "NRR"]
    cex = {v.property: (v, r) for v, r in o.counterexamples}
    assert set(cex) == {"NRR", "CLR"} and all(r.model_departs is None for _, r in cex.values())
    v, _ = cex["NRR"]
    actions = [(s["action"], s["process"]) for s in v.steps[1:]]
    assert "deserialized o2 for handle h1(0,0), which holds o1" in v.message
    i_clear = actions.index(("clear", "writer"))
    i_scan = max(i for i, a in enumerate(actions) if a == ("pin_scan", "writer"))
    i_pin, i_check = actions.index(("pin", "r1")), actions.index(("reader_check", "r1"))
    i_header = max(i for i, a in enumerate(actions) if a == ("header_write", "writer"))
    # the scan came first (it saw no pin), the check before the drain store showed (at header_write)
    assert i_clear < i_scan < i_pin < i_check < i_header and actions[-1] == ("deserialize", "r1")
    assert ("pin_wait", "writer") not in actions
    # the writer-fenced model cannot follow the trace
    fenced = atomic.Config(**{**model_config(o.config).__dict__, "writer_fenced": True})
    assert replay_trace(fenced, o.check.found["NRR"].trace).model_departs is not None


@pytest.mark.slow
@java
def test_counterexamples_replay_on_the_model_and_render_as_lanes(outcomes, tmp_path):
    o = outcomes["MC_vllm_old.cfg"]
    (v, replay), = [(v, r) for v, r in o.counterexamples if v.property == "NRR"]
    assert replay.model_departs is None
    actions = [s["action"] for s in v.steps]
    # vLLM < 0.32: a clear resets ids, so a new chunk at the same address has the handle's id
    assert actions[0] == "Initial" and "clear" in actions and actions[-1] == "payload_read"
    assert v.steps[-1]["process"] == "r1" and v.steps[-1]["violations"][0]["property"] == "NRR"
    assert "deserialized o2 for handle h1(0,0), which holds o1" in v.message
    assert v.steps[-1]["args"] == {} and any(s["args"].get("handle") == "h1(0,0)" for s in v.steps)
    modelcheck.write([o], tmp_path)
    data = json.loads((tmp_path / "model.json").read_text())
    assert data["schema"] == "shmspec.model/2" and data["ok"] is True
    cex = data["configs"][0]["counterexamples"]
    assert {c["property"] for c in cex} == {"NRR", "CLR", "RC"} and all(c["model_departs"] is None for c in cex)
    html = (tmp_path / "model.html").read_text()
    assert "payload_read" in html and "reader_check" in html and "spec steps" in html


@pytest.mark.slow
@java
def test_a_model_that_departs_is_named(outcomes):
    """Replaying a trace on a model with a different protocol: the first step
    it cannot take is reported."""
    o = outcomes["MC_vllm.cfg"]
    _, res = next((inv, r) for inv, r in o.check.found.items() if inv == "NRR")
    hardened = atomic.Config(**{**model_config(o.config).__dict__, "hardened": True})
    replay = replay_trace(hardened, res.trace)
    # impl's put starts with its pin scan: vLLM's header_write (the allocation) is not its first step
    assert replay.model_departs == 1 and res.trace[1].action == "header_write"
    # and with the fence taken away, impl's own NRR trace is one the fenced model cannot follow
    o = outcomes["MC_impl_nofence.cfg"]
    fenced = atomic.Config(**{**model_config(o.config).__dict__, "fenced": True})
    replay = replay_trace(fenced, o.check.found["NRR"].trace)
    assert replay.model_departs is not None


@pytest.mark.slow
@java
def test_a_wrong_expectation_fails(tmp_path):
    """A config that claims NRR holds for the vLLM protocol makes `shmspec model` exit 1."""
    shutil.copy(default_tla_dir() / "ShmStore.tla", tmp_path / "ShmStore.tla")
    cfg = (default_tla_dir() / "MC_vllm_reread.cfg").read_text()
    (tmp_path / "MC_vllm_reread.cfg").write_text(cfg.replace("Expected: NRR, CLR, RC violated",
                                                              "Expected: CLR, RC violated"))
    assert main(["model", "--tla-dir", str(tmp_path), "--report-dir", str(tmp_path / "r"), "--no-agreement"]) == 1
    data = json.loads((tmp_path / "r" / "model.json").read_text())
    assert data["configs"][0]["status"] == "violation"


@pytest.mark.slow
@java
def test_agreement_catches_a_spec_that_differs_from_the_model(tmp_path):
    """A spec whose clear() forgets to reset start: TLC's states and the model's differ."""
    src = (default_tla_dir() / "ShmStore.tla").read_text()
    broken = src.replace("chunks' = <<>> /\\ start' = 0 /\\ end' = 0", "chunks' = <<>> /\\ end' = 0 /\\ start' = start")
    assert broken != src
    (tmp_path / "ShmStore.tla").write_text(broken)
    shutil.copy(default_tla_dir() / "MC_impl_reread.cfg", tmp_path / "MC_impl_reread.cfg")
    cf = read_config(tmp_path / "MC_impl_reread.cfg")
    dump = tmp_path / "states"
    check = check_config(cf, spec=tmp_path / "ShmStore.tla", dump=dump)
    a = compare(cf, check.holds, tmp_path / "states.dump")
    assert not a.ok and (a.only_tlc or a.only_model) and (a.sample_only_tlc or a.sample_only_model)


def test_read_config_parses_constants_and_expectations():
    cf = read_config(default_tla_dir() / "MC_vllm.cfg")
    assert cf.expected == ["NRR", "CLR", "RC"]
    assert {"TypeOK", "NRR", "CLR", "DISJ", "FIFO", "WRAP", "DUP", "RC"} == set(cf.invariants)
    cfg = model_config(cf)
    assert cfg.readers == ("r1", "r2") and cfg.ring_units == 5 and not cfg.hardened and cfg.read_once
    assert [c.name for c in config_files(deep=True)] == [f"deep/{c.path.name}" for c in config_files()]


def test_parse_output_reads_counts_and_trace():
    out = ("Error: Invariant NRR is violated.\nError: The behavior up to this point is:\n"
           "State 1: <Initial predicate>\n/\\ x = 0\n/\\ y = ( 0 :> 1 @@\n  1 :> 2 )\n\n"
           "State 2: <publish line 70, col 5 to line 76, col 62 of module ShmStore>\n/\\ x = 1\n/\\ y = 0\n\n"
           "State 3: <PinnedCheck line 80, col 5 to line 81, col 62 of module ShmStore>\n/\\ x = 2\n/\\ y = 0\n\n"
           "150 states generated, 81 distinct states found, 47 states left on queue.\n"
           "The depth of the complete state graph search is 7.\n")
    r = parse_output("MC.cfg", 12, out, 1.0)
    assert (r.status, r.invariant, r.generated, r.distinct, r.depth) == ("violation", "NRR", 150, 81, 7)
    # TLC labels a step by its innermost named action; PinnedCheck is the spec's reader_check
    assert [(s.index, s.action) for s in r.trace] == [(1, "Initial"), (2, "publish"), (3, "reader_check")]
    assert r.trace[0].variables == {"x": "0", "y": "( 0 :> 1 @@ 1 :> 2 )"}


def _actions(cfg: atomic.Config) -> set[str]:
    """The step names a model config reaches."""
    actions, frontier, seen = set(), [atomic.initial(cfg)], set()
    while frontier:
        s = frontier.pop()
        for step, t in atomic.successors(cfg, s):
            actions.add(step.name)
            if t not in seen:
                seen.add(t)
                frontier.append(t)
    return actions


def test_spec_actions_model_steps_and_impl_yield_points_are_one_set():
    src = (default_tla_dir() / "ShmStore.tla").read_text()
    nxt = src[src.index("Next =="):src.index("Spec ==")]
    spec_actions = set(re.findall(r"\b([a-z_]+)\s*(?:\(\w+(?:, \w+)*\))?\s*(?:\\/|$)", nxt, re.M))
    hardened = _actions(atomic.Config(("r1",), 5, (2,), ("k1",), 3, 2, 2, True, False, False))
    vllm = _actions(atomic.Config(("r1",), 5, (2,), ("k1",), 3, 2, 2, False, False, False))
    # impl's protocol takes every step but vLLM's in-place payload_read; vLLM's
    # none of impl's pin steps; together they are the vocabulary
    assert hardened == set(ATOMIC_STEPS) - set(LOCK_STEPS) - {"payload_read"}
    assert vllm == {"reader_check", "payload_read", "counter_increment", "header_write", "payload_write", "publish",
                    "free_step", "clear"}
    assert hardened | vllm == set(ATOMIC_STEPS) - set(LOCK_STEPS)
    # a mortal reader's death is a step of spec and model, and no store's
    mortal = _actions(atomic.Config(("r1",), 5, (2,), ("k1",), 3, 2, 2, True, False, False, mortal=("r1",)))
    assert mortal - hardened == set(FAULT_STEPS) == {"die"}
    assert spec_actions == hardened | vllm | set(FAULT_STEPS)
    # impl's yield points: its read and write steps, payload_read only for a serde that keeps its buffer
    assert set(yieldpoints.READ_POINTS) | set(yieldpoints.WRITE_POINTS) == spec_actions - set(FAULT_STEPS)


def test_tla_values_parse_into_python():
    from shmspec.conformance.spec.tlavalue import TlaParseError, parse_value

    v = parse_value('[a |-> -1, b |-> <<1, "x">>, c |-> {[k |-> r1]}, d |-> (r1 :> TRUE @@ r2 :> FALSE), e |-> <<>>]')
    assert v == {"a": -1, "b": (1, "x"), "c": frozenset({parse_value("[k |-> r1]")}),
                 "d": {"r1": True, "r2": False}, "e": ()}
    assert hash(v) == hash(parse_value(str(
        '[a |-> -1, b |-> <<1, "x">>, c |-> {[k |-> r1]}, d |-> (r1 :> TRUE @@ r2 :> FALSE), e |-> <<>>]')))
    for bad in ("[a |-> ]", "<<1, 2", "1 2", "(a :> )"):
        with pytest.raises(TlaParseError):
            parse_value(bad)


@pytest.mark.slow
def test_the_model_alone_finds_the_vllm_race_and_not_impls():
    """Without TLC: the atomic model's own search breaks NRR under vLLM's
    reader protocol with a re-reading client, and nothing under impl's."""
    base = dict(readers=("r1",), ring_units=5, sizes=(2,), keys=("k1", "k2"), id_mod=3, max_puts=3, max_reads=2,
                read_once=False, clear_resets=False)
    vllm = atomic.explore(atomic.Config(**base, hardened=False))
    hard = atomic.explore(atomic.Config(**base, hardened=True))
    assert {"NRR", "RC", "CLR"} <= set(vllm.violated) and hard.violated == {}
    s = vllm.violated["NRR"]
    assert s.got[0] not in (atomic.NO_OBJ, s.hd[0][3])


@pytest.mark.slow
@java
def test_run_tlc_times_the_search_and_stops_at_its_timeout():
    res = tlc.run_tlc(tlc.default_tla_dir() / "MC_impl_reread.cfg")
    assert res.status == "ok" and 0 < res.search_seconds < res.seconds
    t0 = time.monotonic()
    with pytest.raises(tlc.TlcError, match="ran past 0.5 s"):
        tlc.run_tlc(tlc.default_tla_dir() / "MC_impl.cfg", timeout=0.5)
    assert time.monotonic() - t0 < 10  # killed, not waited for


@pytest.mark.slow
@java
@pytest.mark.skipif(shutil.which("javac") is None, reason="the one-line printer is compiled by javac")
def test_a_dump_printed_on_one_line_holds_the_states_tlcs_printer_gives(tmp_path, monkeypatch):
    """tlc.FLAT_PRINTER: a dump run's states, printed without TLC's
    pretty-printer, parse to the states of TLC's own dump, in its order."""
    from shmspec.conformance.spec.tlavalue import parse_dump

    cfg = tlc.default_tla_dir() / "MC_vllm_reread.cfg"
    flat = tlc.run_tlc(cfg, dump=tmp_path / "flat", invariants=[], properties=[])  # the whole state space
    assert tlc._flat_printer() is not None
    monkeypatch.setattr(tlc, "_flat_printer", lambda: None)
    pretty = tlc.run_tlc(cfg, dump=tmp_path / "pretty", invariants=[], properties=[])
    assert flat.status == pretty.status == "ok" and flat.distinct == pretty.distinct > 1000
    flat_text, pretty_text = (tmp_path / "flat.dump").read_text(), (tmp_path / "pretty.dump").read_text()
    assert flat_text != pretty_text  # laid out otherwise: pretty-printed values span lines
    states = parse_dump(flat_text)
    assert len(states) == flat.distinct and states == parse_dump(pretty_text)


@pytest.mark.slow
@java
def test_tlc_workers_explore_the_same_state_space(capsys, tmp_path):
    """``shmspec model --workers 2``: the runs that must hold use two TLC
    workers and reach the same states as one (counts compared); the CLI
    refuses a bad count before any TLC run."""
    from shmspec.conformance.cli import main

    cfg = tlc.default_tla_dir() / "MC_impl_reread.cfg"
    one, two = tlc.run_tlc(cfg), tlc.run_tlc(cfg, workers=2)
    assert one.status == two.status == "ok"
    assert (one.distinct, one.generated) == (two.distinct, two.generated) and one.distinct > 0
    assert main(["model", "--workers", "none", "--report-dir", str(tmp_path / "m")]) == 2
    assert "--workers takes N >= 1 or auto" in capsys.readouterr().err and not (tmp_path / "m").exists()


@pytest.mark.slow
@java
def test_model_html_tells_expected_counterexamples_from_failures(outcomes):
    """model.html: a counterexample a config asks for (``must fail``) is drawn
    as expected, in yellow and titled so, not as a failure; the one-line form
    says ``expected:`` too; a counterexample nobody asked for would be red."""
    from shmspec.conformance.reporting.report import record_html, record_text, violation_panel

    asked = [(o, v) for o in outcomes.values() for v, _ in o.counterexamples]
    assert asked and all(v.property in o.check.expected for o, v in asked)
    html = record_html(lambda rec: modelcheck.render(rec, list(outcomes.values()), None))
    assert html.count("expected counterexample (this config must fail") == len(asked)
    assert "UNEXPECTED" not in html
    lines = record_text(lambda rec: modelcheck.render(rec, list(outcomes.values()), None, panels=False), 200)
    assert lines.count(" expected: ") == len(asked) and "UNEXPECTED" not in lines
    _, v = asked[0]
    assert "expected counterexample" not in record_text(lambda rec: rec.print(violation_panel(1, v)))


@pytest.mark.slow
@java
def test_configs_checked_at_once_give_the_outcomes_of_one_at_a_time(outcomes, tmp_path, monkeypatch):
    """``modelcheck.run(jobs=2)`` (``shmspec model --jobs``, one process per
    config) gives the one-at-a-time outcomes, in file order; a quick JVM
    (``QUICK_JVM``, the class-data archive) finds the same counterexample."""
    monkeypatch.setenv("SHMSPEC_CACHE_DIR", str(tmp_path / "cache"))
    pattern = "MC_*_reread.cfg"
    two = modelcheck.run(pattern=pattern, jobs=2)
    one = [outcomes[o.config.name] for o in two]  # the session's run, one config at a time
    assert [o.config.name for o in two] == [o.config.name for o in one] == ["MC_impl_reread.cfg",
                                                                          "MC_vllm_reread.cfg"]
    for a, b in zip(one, two):
        assert a.ok and b.ok
        ja, jb = modelcheck.to_json([a])["configs"][0], modelcheck.to_json([b])["configs"][0]
        assert ja["distinct"] == jb["distinct"] and ja["agreement"]["model"]["distinct"] == jb["agreement"]["model"][
            "distinct"] and ja["agreement"]["agree"] is jb["agreement"]["agree"] is True
        assert [c["steps"] for c in ja["counterexamples"]] == [c["steps"] for c in jb["counterexamples"]]
        assert len(ja["counterexamples"]) == len(a.check.expected)
    assert list((tmp_path / "cache" / "tlc").glob("*.jsa")), "the first run leaves the class archive"
    cfg = tlc.default_tla_dir() / "MC_vllm_reread.cfg"
    slow, quick = tlc.run_tlc(cfg, invariants=["NRR"]), tlc.run_tlc(cfg, invariants=["NRR"], quick=True)
    assert slow.status == quick.status == "violation" and slow.invariant == quick.invariant == "NRR"
    assert [(s.action, s.values()) for s in slow.trace] == [(s.action, s.values()) for s in quick.trace]
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        modelcheck.run(pattern=pattern, jobs=0)
