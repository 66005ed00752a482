"""Trace validation (issue 29): recorded runs of real stores checked against
ShmStore.tla by TLC (``shmspec validate``).

Construction: vLLM's (the writer without the readers' lock, 2 forked
readers), each schedule run step by step as a controlled schedule
(:class:`ScheduledSession` with ``record=True``).  impl's runs must validate;
a seeded fault that changes the protocol must give a run TLC rejects, at the
step where it departs; so must a recorded run with one observation altered.
"""

from __future__ import annotations

import copy
import io
import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest

from rich.console import Console

from shmspec.conformance.cli import main
from shmspec.conformance.commands.validate import render_coverage
from shmspec.conformance.concurrency.procs import ProcessPool
from shmspec.conformance.concurrency.record import FORMAT, VERSION, free_trace, op_events
from shmspec.conformance.concurrency.schedule import ScheduledSession, payload, run_whole
from shmspec.conformance.core.config import SessionConfig
from shmspec.conformance.lockstep.session import PropertyViolation
from shmspec.conformance.mutants import MUTANTS_DIR
from shmspec.conformance.spec.itf import ITF_SCHEMA, ItfError
from shmspec.conformance.spec.tlc import default_tla_dir
from shmspec.conformance.spec.validate import (
    ITF_VARS,
    TraceFormatError,
    check_trace,
    load_trace,
    spec_coverage,
    spec_steps,
    steps_from_itf,
    trace_to_itf,
    validate,
    validate_many,
    validate_with_coverage,
)
from shmspec.conformance.targets.loader import load_target

pytestmark = [pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs java"), pytest.mark.slow]


class Script:
    """Drives a recorded :class:`ScheduledSession` one step at a time."""

    def __init__(self, session: ScheduledSession, config: SessionConfig):
        self.s, self.config, self.n = session, config, 0

    def put(self, key: str, fill: int = 50, whole: bool = True) -> None:
        self.n += 1
        self.s.execute({"process": "writer", "kind": "start", "action": "put",
                        "args": {"key": key, "data": payload(self.config, self.n, fill).hex()}})
        if whole:
            run_whole(self.s, "writer")

    def get(self, reader: str, ref: str, whole: bool = True) -> None:
        self.s.execute({"process": reader, "kind": "start", "action": "get", "args": {"ref": ref}})
        if whole:
            run_whole(self.s, reader)

    def advance(self, proc: str, times: int = 1) -> None:
        for _ in range(times):
            if proc in self.s.runnable():
                self.s.execute({"process": proc, "kind": "advance"})

    def writer(self, op: str) -> None:
        self.s.execute({"process": "writer", "kind": "start", "action": op, "args": {}})
        run_whole(self.s, "writer")

    def whole(self, proc: str) -> None:
        run_whole(self.s, proc)


def record(spec: str, script) -> tuple[dict, str | None]:
    """Run ``script(Script)`` on ``spec`` recorded; the trace and the property the harness found, if any."""
    target = load_target(spec)
    config = SessionConfig()
    found = None
    with ProcessPool(target, config.readers) as pool:
        session = ScheduledSession(pool, target, config, promises=True, record=True)
        try:
            script(Script(session, config))
            session.finish()
        except PropertyViolation as exc:
            found = exc.prop
            session.finish_quietly()
        return session.recorder.doc, found


def rich(x: Script) -> None:
    """Every step of impl's protocol: a put while a reader is pinned, a reclaim, a
    clear with a drain read after it, a refused put, and the PROG drain at the end."""
    x.put("k0")
    x.put("k1")
    x.get("r1", "h1")
    x.get("r2", "h1", whole=False)
    x.advance("r2")  # pinned
    x.put("k2", 100, whole=False)
    x.advance("writer", 3)
    x.whole("r2")
    x.whole("writer")
    x.writer("free_unused")
    x.get("r1", "h2")
    x.get("r2", "h2")
    x.get("r1", "h3")
    x.writer("clear")
    x.get("r2", "h3")  # pre-clear handle: a drain read
    x.put("k4", 100)
    x.put("k5", 100)
    x.put("k5", 10)  # DuplicateKey


@pytest.fixture(scope="module")
def impl_trace():
    doc, found = record("impl", rich)
    assert found is None
    return doc


def test_a_recorded_impl_run_validates_and_reaches_every_step_of_the_protocol(impl_trace):
    assert impl_trace["format"] == FORMAT and impl_trace["version"] == VERSION
    assert impl_trace["construction"] == "writer unlocked, 2 forked readers"
    v = validate(impl_trace)
    assert v.verdict == "pass", v.departure and v.departure.describe()
    assert v.departure is None and v.unmodelled is None
    for act in ("pin_scan", "header_write", "payload_write", "publish", "free_step", "retire", "clear", "refused",
                "pin", "reader_check", "deserialize", "counter_increment", "unpin"):
        assert v.actions.get(act, 0) >= 1, act
    # the drain read ends at deserialize: one get fewer acknowledged than deserialized
    assert v.actions["deserialize"] == v.actions["counter_increment"] + 1 == v.actions["unpin"] + 1


def _fault(name: str) -> str:
    return f"file:{MUTANTS_DIR / (name + '.py')}"


def early_free(x: Script) -> None:
    x.put("k0")
    x.get("r1", "h1")
    x.get("r1", "h1")
    x.writer("free_unused")
    x.get("r2", "h1")


def duplicate(x: Script) -> None:
    x.put("k0")
    x.put("k0", 25)


def out_of_order(x: Script) -> None:
    x.put("k0")
    x.put("k1")
    x.get("r1", "h2")
    x.get("r2", "h2")
    x.writer("free_unused")
    x.get("r1", "h1")
    x.get("r2", "h1")


def reuse_under_pin(x: Script) -> None:
    x.put("k0")
    x.get("r1", "h1")
    x.get("r2", "h1")
    x.get("r1", "h1", whole=False)
    x.advance("r1")  # r1 pins h1 again, which both readers read: reclaimable
    x.writer("free_unused")
    x.put("k1", 100, whole=False)
    x.whole("writer")  # impl waits at pin_wait for r1's pin
    x.advance("r1", 5)
    x.whole("writer")


def stale_reread(x: Script) -> None:
    x.put("k0")
    x.get("r1", "h1")
    x.get("r2", "h1")
    x.writer("free_unused")
    x.put("k1", 100)
    x.get("r1", "h1")


FAULTS = [
    # fault, schedule, (event index, spec step) where TLC says the run departs
    ("early_free", early_free, (18, "free_step")),  # freed with r2's read owed: Reclaimable(1) is false
    ("aggregate_reads", early_free, (18, "free_step")),
    ("dup_overwrite", duplicate, (6, "scan")),  # a put of a live key: the spec's pin_scan needs a new one
    ("dup_check_late", duplicate, (6, "scan")),
    ("free_out_of_order", out_of_order, (22, "none")),  # the second chunk freed, not the oldest
    ("writer_unfenced", reuse_under_pin, (1, "header_write")),  # no pin scan at all
    ("count_before_validate", stale_reread, (6, "pin")),  # its first get acknowledges before it checks
]


@pytest.mark.parametrize("fault,script,where", FAULTS, ids=[f[0] for f in FAULTS])
def test_a_seeded_fault_gives_a_run_tlc_rejects_at_the_step_it_changes(fault, script, where):
    ok, _ = record("impl", script)
    assert validate(ok).verdict == "pass"
    doc, _ = record(_fault(fault), script)
    v = validate(doc)
    assert v.verdict == "fail"
    d = v.departure
    assert (d.event, d.act) == where, d.describe()
    assert d.recorded == doc["events"][d.event]
    assert d.states and all("wpc" in s and "chunks" in s for s in d.states)
    assert f"event {d.event}: " in d.describe()


def test_a_run_with_one_observation_altered_departs_there(impl_trace):
    doc = copy.deepcopy(impl_trace)
    i = next(i for i, e in enumerate(doc["events"]) if e.get("got") == "own")
    doc["events"][i]["got"] = "other"
    v = validate(doc)
    assert v.verdict == "fail" and v.departure.event == i and v.departure.act == "deserialize"
    doc = copy.deepcopy(impl_trace)
    j = next(i for i, e in enumerate(doc["events"]) if e["op"] == "free_unused" and e["at"] == "retire")
    doc["events"][j]["ring"] = doc["events"][j - 1]["ring"]  # as if nothing had been freed
    assert validate(doc).departure.event == j


def test_a_run_validates_after_another_exactly_as_alone(impl_trace):
    """NextRun's Fresh store is Init's: a batch gives each run the verdict, and
    a departing run the step, it has alone (runs before and after it)."""
    bad = copy.deepcopy(impl_trace)
    i = next(i for i, e in enumerate(bad["events"]) if e.get("got") == "own")
    bad["events"][i]["got"] = "other"
    alone = validate(bad).departure.event
    assert alone == i
    first, second = validate_many([impl_trace, bad])
    assert first.verdict == "pass" and second.verdict == "fail" and second.departure.event == alone
    first, second, third = validate_many([bad, impl_trace, impl_trace])
    assert first.departure.event == alone and second.verdict == third.verdict == "pass"


def many_keys(x: Script) -> None:
    x.put("k0", 100)
    x.put("k1", 100)  # the ring is full and nothing is read: every put after these is refused
    for n in range(2, 1000):
        x.put(f"k{n}", 100)


def test_a_run_of_a_thousand_keys_validates_in_seconds():
    """ShmStore.tla's Symmetry (Permutations(Keys)), which a trace check does not
    use, is not computed: TLC computes every constant definition before it
    starts, and with the 446 keys of a random run that took 26 s of a 32 s
    check (2026-12-07; 300 keys: 10 s; here 1,000)."""
    doc, found = record("impl", many_keys)
    assert found is None
    v = validate(doc, timeout=60.0)
    assert v.verdict == "pass" and v.actions["refused"] >= 990, v.actions


def _names(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]\w*", re.sub(r"\\\*[^\n]*", "", text))


def test_the_trace_specs_hand_copies_of_the_variables_are_complete():
    """Fresh (Init, primed) and StateRec name ShmStore.tla's VARIABLES one by one:
    a variable added to the spec and not to them fails here."""
    store = (default_tla_dir() / "ShmStore.tla").read_text()
    trace = (default_tla_dir() / "ShmStoreTrace.tla").read_text()
    block = re.search(r"^VARIABLES\n(.*?)\n\n", store, re.S | re.M).group(1)
    variables = _names(block)
    assert len(variables) > 20 and "acks" in variables
    fresh = re.search(r"^Fresh ==\n(.*?)\n\n", trace, re.S | re.M).group(1)
    assert sorted(re.findall(r"(\w+)' =", fresh)) == sorted(variables)
    rec = re.search(r"^StateRec == \[(.*?)\]\n", trace, re.S | re.M).group(1)
    assert re.findall(r"(\w+) \|->", rec) == variables  # in order
    init = re.search(r"^Init ==\n(.*?)\n\n", store, re.S | re.M).group(1)
    assert sorted(re.findall(r"/\\ (\w+) =", init)) == sorted(variables)
    assert re.sub(r"(\w+) = ", r"\1' = ", init) == fresh  # the same values


def test_a_trace_a_store_test_writes_by_hand_validates():
    """The documented format, written without the harness: one put, one get by each reader."""
    doc = _hand_trace()
    events, ring = doc["events"], doc["events"][4]["ring"]
    assert validate(doc).verdict == "pass"
    # the chunk freed without its reads: departs at the free
    doc["events"] = events[:5] + [{"process": "writer", "op": "free_unused", "kind": "start", "at": None,
                                   "to": "free_step", "ring": ring},
                                  {"process": "writer", "op": "free_unused", "kind": "advance", "at": "free_step",
                                   "to": None, "ring": [], "result": {"value": "ok"}}]
    v = validate(doc)
    assert v.verdict == "fail" and (v.departure.event, v.departure.act) == (6, "free_step")


@pytest.mark.parametrize("change,message", [
    ({"format": "other"}, "is not a shmspec trace"),
    ({"version": 9}, "trace version 9"),
    ({"constants": {"readers": ["r1"]}}, "needs readers, ring_bytes"),
    ({"constants": {"readers": ["r1"], "ring_bytes": 256, "max_chunks": 1, "hardened": False}}, "vLLM's read path"),
    ({"events": [{"process": "writer"}]}, "event 0 needs"),
])
def test_a_file_that_is_not_a_trace_is_refused_with_one_line(impl_trace, tmp_path, capsys, change, message):
    doc = {**impl_trace, **change}
    with pytest.raises(TraceFormatError, match=message):
        check_trace(doc)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert main(["validate", str(path), "--report-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_an_event_off_impls_read_path_is_refused():
    doc = {"format": FORMAT, "version": VERSION, "spec": "ShmStore",
           "constants": {"readers": ["r1"], "ring_bytes": 256, "max_chunks": 4, "hardened": True},
           "events": [{"process": "r1", "op": "get", "kind": "start", "at": None, "to": "payload_read",
                       "args": {"ref": "h1", "abs": 0}}]}
    with pytest.raises(TraceFormatError, match="event 0: r1's get started and reached 'payload_read'"):
        spec_steps(doc)


def test_the_command_validates_reports_and_exits_by_verdict(impl_trace, tmp_path, capsys):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(impl_trace))
    altered = copy.deepcopy(impl_trace)
    i = next(i for i, e in enumerate(altered["events"]) if e.get("got") == "own")
    altered["events"][i]["got"] = "other"
    bad.write_text(json.dumps(altered))
    assert main(["validate", str(good), "--report-dir", str(tmp_path / "r1")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("verdict: PASS") and str(tmp_path / "r1") in out[-1]
    assert main(["validate", str(good), str(bad), "--report-dir", str(tmp_path / "r2")]) == 1
    out = capsys.readouterr().out
    assert f"event {i}: r" in out and "spec state 1 before it" in out
    assert out.strip().splitlines()[-1].startswith("verdict: FAIL")
    rep = json.loads((tmp_path / "r2" / "validate.json").read_text())
    assert rep["verdict"] == "fail" and [t["verdict"] for t in rep["traces"]] == ["pass", "fail"]
    assert rep["traces"][1]["departure"]["event"] == i
    assert (tmp_path / "r2" / "validate.html").read_text().count("departs") >= 1


def test_recording_is_off_by_default(impl_target):
    config = SessionConfig()
    with ProcessPool(impl_target, config.readers) as pool:
        session = ScheduledSession(pool, impl_target, config)
        assert session.recorder is None
        session.finish()


def test_a_recorded_run_exports_as_itf_that_passes_the_schema_and_reads_back(impl_trace, tmp_path):
    """Issue 29 item 4: ``shmspec validate --itf`` writes each trace as ITF; the
    file passes the format's JSON Schema, and our reader gives back the steps
    TLC checked (every field, its TLA+ kind, and the event each came from)."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps(impl_trace))
    assert main(["validate", str(path), str(path), "--itf", "--report-dir", str(tmp_path / "r")]) == 0
    rep = json.loads((tmp_path / "r" / "validate.json").read_text())
    assert rep["schema"] == "shmspec.validate/1" and rep["command"] == "shmspec validate"
    assert [t["itf"] for t in rep["traces"]] == ["itf/run.itf.json", "itf/run-2.itf.json"]
    doc = json.loads((tmp_path / "r" / "itf" / "run.itf.json").read_text())
    jsonschema.validate(doc, ITF_SCHEMA)
    steps, origin = spec_steps(impl_trace)
    assert doc["vars"] == sorted(ITF_VARS) and len(doc["states"]) == len(steps) > 50
    assert [s["#meta"]["action"] for s in doc["states"]] == [s["act"] for s in steps]
    assert doc["#meta"]["constants"] == impl_trace["constants"] and doc["#meta"]["source"] == str(path)
    ring = next(s for s in doc["states"] if s["ring"])["ring"]
    assert isinstance(ring[0], list) and set(ring[0][0]) == {"#bigint"}  # a sequence of <<address, size, id>>
    assert steps_from_itf(doc) == (steps, origin)
    assert trace_to_itf(impl_trace, source=str(path)) == doc  # one run, one file
    with pytest.raises(ItfError, match="lacks the variables"):
        steps_from_itf({"vars": ["pc"], "states": []})


def _hand_trace() -> dict:
    """One put and one get by each reader, written without the harness."""
    ring = [[0, 64, 0]]
    put = [("start", None, "pin_scan", []), ("advance", "pin_scan", "header_write", []),
           ("advance", "header_write", "payload_write", []), ("advance", "payload_write", "publish", ring),
           ("advance", "publish", None, ring)]
    events = [{"process": "writer", "op": "put", "kind": k, "at": a, "to": t, "args": {"key": "k", "size": 64},
               "ring": r} for k, a, t, r in put]
    events[-1]["result"] = {"handle": [0, 0], "abs": 0}
    for r in ("r1", "r2"):
        for k, a, t in (("start", None, "pin"), ("advance", "pin", "reader_check"),
                        ("advance", "reader_check", "deserialize"), ("advance", "deserialize", "counter_increment"),
                        ("advance", "counter_increment", None)):
            events.append({"process": r, "op": "get", "kind": k, "at": a, "to": t, "args": {"ref": "h1", "abs": 0},
                           **({"got": "own"} if a == "deserialize" else {})})
    events[-1]["result"] = {"value": "ok"}
    return {"format": FORMAT, "version": VERSION, "spec": "ShmStore", "target": "my store",
            "constants": {"readers": ["r1", "r2"], "ring_bytes": 256, "max_chunks": 1024, "hardened": True},
            "events": events}


def test_coverage_names_the_spec_parts_the_runs_do_not_reach(impl_trace, tmp_path, capsys):
    """Issue 29 item 3: ``--coverage`` compares the expressions of ShmStore.tla's
    steps TLC evaluates on the recorded runs with those it evaluates on the
    model, and names each one no run reaches."""
    path = tmp_path / "rich.json"
    path.write_text(json.dumps(impl_trace))
    assert main(["validate", str(path), "--coverage", "--report-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "spec coverage" in out and "spec actions no trace took: pin_wait" in out
    cov = json.loads((tmp_path / "r" / "validate.json").read_text())["coverage"]
    assert cov["unreached_actions"] == ["pin_wait"]  # rich() has no put that waits on a pin
    assert cov["model_config"] == "MC_impl_reread.cfg" and 200 < cov["run_parts"] < cov["model_parts"]
    by = {d["definition"]: d for d in cov["definitions"]}
    assert by["publish"]["run_parts"] == by["publish"]["model_parts"] > 5
    assert by["free_step"]["run_parts"] == by["free_step"]["model_parts"] > 15 and by["retire"]["run_parts"] > 10
    assert by["unpin"]["run_parts"] == by["unpin"]["model_parts"] > 0
    # vLLM's read path is the model's too, never impl's; the trace takes PinOf, never pin's \E
    assert by["payload_read"]["run_parts"] == 0 and "~Hardened" in by["payload_read"]["gaps"][0]["text"]
    assert by["pin"]["run_parts"] == 0 and by["PinOf"]["run_parts"] == by["PinOf"]["model_parts"]
    assert all({"line", "col", "text"} <= set(g) for d in cov["definitions"] for g in d["gaps"])
    wide = Console(width=2000, file=io.StringIO())
    render_coverage(wide, spec_coverage([impl_trace]))
    for g in (g for d in cov["definitions"] for g in d["gaps"]):
        assert f"{g['line']}: {g['text']}" in wide.file.getvalue()  # TLA+'s brackets shown, not read as markup
    # a run with no clear and no free: both actions named, none of their parts reached
    small = spec_coverage([_hand_trace()])
    assert {"clear", "free_step"} <= set(small.unreached_actions)
    clear = next(d for d in small.definitions if d.name == "clear")
    assert clear.runs == 0 and len(clear.gaps) == clear.model > 0
    assert small.gaps > cov["gaps"]


def test_coverage_reuses_the_checks_tlc_ran_and_the_models_cached_counts(tmp_path, monkeypatch):
    """Review of 3f0d50f: a gate that validated its runs ran TLC on them a
    second time for their coverage, and TLC on the model every time.  Now
    one check per batch gives both, and the model's counts are cached under
    a key of the spec's text: a changed spec runs TLC on it again."""
    from shmspec.conformance.spec import coverage as cov_mod
    from shmspec.conformance.spec import validate as val_mod

    monkeypatch.setenv("SHMSPEC_CACHE_DIR", str(tmp_path / "cache"))
    checks, models = [], []
    real_tlc, real_run = val_mod._tlc, cov_mod.run_tlc
    monkeypatch.setattr(val_mod, "_tlc", lambda *a, **k: checks.append(k.get("coverage")) or real_tlc(*a, **k))
    monkeypatch.setattr(cov_mod, "run_tlc", lambda *a, **k: models.append(a[0]) or real_run(*a, **k))
    results, cov = validate_with_coverage([_hand_trace(), _hand_trace()])
    assert [v.verdict for v in results] == ["pass", "pass"] and checks == [True] and len(models) == 1
    assert cov.to_json() == spec_coverage([_hand_trace(), _hand_trace()]).to_json()
    assert checks == [True, True] and len(models) == 1  # the second run read the model's counts from the cache
    spec = tmp_path / "tla"
    spec.mkdir()
    for f in ("ShmStore.tla", cov_mod.MODEL_CONFIG):
        (spec / f).write_text((cov_mod.default_tla_dir() / f).read_text())
    assert cov_mod.model_locations(tla_dir=spec) == cov_mod.model_locations()
    assert len(models) == 1  # the same texts: the same key
    (spec / "ShmStore.tla").write_text((spec / "ShmStore.tla").read_text() + "\n\\* changed\n")
    cov_mod.model_locations(tla_dir=spec)
    assert len(models) == 2


def _free_trace(ack_at: int) -> dict:
    """A free run written without the harness: the writer puts ``k``, both
    readers read it, and the writer's ``free_unused`` reclaims it in a step
    from time 100 to 200 (ns); ``r2`` acknowledges its read at ``ack_at``
    to ``ack_at + 10``, and the events are in the order of their start."""
    events = []

    def op(process: str, name: str, args: dict, marks: list[tuple[int, str]], t0: int, t1: int, result: dict,
           **kw) -> None:
        events.extend(op_events(process, name, args, t0, marks, t1, result, **kw))

    op("writer", "put", {"key": "k", "size": 64}, [(2, "pin_scan"), (3, "header_write"), (4, "payload_write"),
                                                    (5, "publish")], 1, 6, {"handle": [0, 0], "abs": 0},
       ring=[[0, 64, 0]])
    read = [(11, "pin"), (12, "reader_check"), (13, "deserialize"), (14, "counter_increment")]
    op("r1", "get", {"ref": "h1", "abs": 0}, read, 10, 15, {"value": "ok"}, got="own")
    read = [(21, "pin"), (22, "reader_check"), (23, "deserialize"), (ack_at, "counter_increment")]
    op("r2", "get", {"ref": "h1", "abs": 0}, read, 20, ack_at + 10, {"value": "ok"}, got="own")
    op("writer", "free_unused", {}, [(100, "free_step")], 90, 200, {"value": "ok"}, ring=[])
    return free_trace("my store", "free", ("r1", "r2"), 256, True, 1024, 256, events)


def test_a_free_runs_overlapping_steps_are_tried_in_each_order():
    """Issue 29: a free run's steps are ordered only where one ended before
    the other began.  ``r2``'s acknowledgement (150-160 ns) overlaps the
    writer's reclaim (100-200 ns) and is listed after it: TLC takes it first,
    the only order in which the chunk is reclaimable.  The same
    acknowledgement after the reclaim ended (210-220 ns) leaves no such
    order: the run departs at the reclaim."""
    doc = _free_trace(150)
    acts = [(e["process"], e["at"]) for e in doc["events"]]
    assert acts.index(("writer", "free_step")) < acts.index(("r2", "counter_increment"))  # listed by start
    assert all(a["lo"] <= b["lo"] for a, b in zip(doc["events"], doc["events"][1:]))
    v = validate(doc)
    assert v.verdict == "pass" and v.actions["free_step"] == 1 and v.actions["counter_increment"] == 2
    late = validate(_free_trace(210))
    assert late.verdict == "fail" and late.departure.act == "free_step"
    assert late.departure.recorded["op"] == "free_unused" and late.departure.recorded["at"] == "free_step"
    assert [s["pc"] for s in late.departure.states] == [{"r1": "idle", "r2": "read"}]  # r2 has not acknowledged


def test_a_free_runs_times_become_ranks_and_each_process_keeps_its_order():
    """spec_steps turns a free run's ns into ranks (TLC's integers stop at
    2**31; a 5 s run has 5e9 ns), keeping every comparison; ``nxt`` links
    each process's steps in its own order."""
    doc = _free_trace(150)
    for e in doc["events"]:
        e["lo"], e["hi"] = e["lo"] * 10**8, e["hi"] * 10**8
    steps, origin = spec_steps(doc)
    assert max(s["hi"] for s in steps) < 2**31
    for a, b in ((a, b) for a in doc["events"] for b in doc["events"]):
        i, j = origin.index(doc["events"].index(a)), origin.index(doc["events"].index(b))
        assert (a["hi"] < b["lo"]) == (steps[i]["hi"] < steps[j]["lo"])
    for j, s in enumerate(steps, start=1):
        later = [k for k in range(j + 1, len(steps) + 1) if steps[k - 1]["p"] == s["p"]]
        assert s["nxt"] == (later[0] if later else len(steps) + 1)
    assert validate(doc).verdict == "pass"
    # a reader's name need not be a TLA+ identifier
    for e in doc["events"]:
        e["process"] = {"r1": "reader-1", "r2": "reader 2"}.get(e["process"], e["process"])
    doc["constants"]["readers"] = ["reader-1", "reader 2"]
    assert validate(doc).verdict == "pass"


def test_a_free_run_that_departed_where_shmstore_tla_reclaimed_in_one_step_validates_once_it_takes_two():
    """Issue 29, found by the first free-run traces (2026-12-07, docs/trace-validation.md#free-runs):
    the first 268 events of a recorded 0.5 s free run of impl (vLLM's
    construction, a 512-byte ring), recorded before impl had its ``retire``
    and ``unpin`` yield points.  The writer's put ``k16`` reclaims: its last
    ``free_step`` step (event 236) checks the next chunk (abs 12: not yet
    acknowledged by r1) and then retires the planned ones (publishes
    abs_start).  Between the two, r1 acknowledges abs 12 and pins and checks
    abs 11, which is being retired, and reads it (its pin makes the writer's
    pin_scan wait: safe).  ShmStore.tla's last free_step checked and retired
    at once, and the run departed at event 236.  The spec now takes the two
    as ``free_step`` (which decides to retire) and ``retire``: the old
    trace's step becomes both, in its interval, and TLC puts r1's ack and
    pin between them."""
    doc = load_trace(Path(__file__).parent / "traces" / "free_reclaim_window.json")
    assert doc["schedule"] == "free" and doc["constants"]["ring_bytes"] == 512
    e = doc["events"][236]
    assert (e["process"], e["op"], e["at"], e["to"]) == ("writer", "put", "free_step", "pin_scan")
    assert not any(x["at"] in ("retire", "unpin") for x in doc["events"])  # recorded before the split
    steps, origin = spec_steps(doc)
    two = [s for s, o in zip(steps, origin) if o == 236]
    assert [(s["act"], s["wpc"]) for s in two] == [("free_step", "retire"), ("retire", "idle")]
    assert two[0]["lo"] == two[1]["lo"] and two[0]["hi"] == two[1]["hi"]
    v = validate(doc)
    assert v.verdict == "pass", v.departure and v.departure.describe()
    assert v.actions["retire"] >= 1 and v.actions["unpin"] == v.actions["counter_increment"]


def test_a_short_free_run_of_impl_without_reclaims_validates():
    """A recorded free run of impl (vLLM's construction: writer without the
    readers' lock, 2 forked readers; an 8 KiB ring the run never fills, no
    free_unused, no clear: no reclaim, test above) validates: each reader's steps and the writer's
    interleave as they ran, ordered by their times."""
    from shmspec.conformance.concurrency.freerun import FreeLoad, free_config, run_free

    target = load_target("impl")
    r = run_free(target, free_config(2, data_buffer_size=8192, max_object_size=64), 10.0, 2, 0,
                 load=FreeLoad(p_free=0, p_clear=0, max_ops=40), record=True)
    doc = r.trace
    assert doc["schedule"] == "free" and doc["construction"] == "writer unlocked, 2 forked readers"
    assert r.out_of_space == 0 and r.puts == 40  # 40 puts of at most 64 bytes: the ring never fills
    ev = doc["events"]
    assert {e["process"] for e in ev} == {"writer", "r1", "r2"}
    assert all(a["lo"] <= b["lo"] for a, b in zip(ev, ev[1:])) and all(e["lo"] <= e["hi"] for e in ev)
    for p in ("writer", "r1", "r2"):
        mine = [e for e in ev if e["process"] == p]
        assert all(a["hi"] <= b["lo"] for a, b in zip(mine, mine[1:]))  # a process's steps follow each other
    v = validate(doc)
    assert v.verdict == "pass", v.departure and v.departure.describe()
    assert v.actions["publish"] == r.puts and v.actions["counter_increment"] > 0


def test_a_free_run_exports_as_itf_with_its_order_and_reads_back():
    """A free run's ITF keeps what orders its steps (``p``, ``lo``, ``hi`` as
    ranks, ``nxt``), passes the schema and reads back as the steps TLC checked."""
    doc = _free_trace(150)
    itf = trace_to_itf(doc)
    jsonschema.validate(itf, ITF_SCHEMA)
    steps, origin = spec_steps(doc)
    assert {"p", "lo", "hi", "nxt"} <= set(itf["vars"]) and steps_from_itf(itf) == (steps, origin)
    assert [st["p"] for st in steps] == [e["process"] for e in (doc["events"][i] for i in origin)]


def test_a_departing_recorded_run_is_a_finding_whose_trace_the_report_keeps(tmp_path, capsys):
    """A CONFORMANCE finding of ``--validate-traces`` carries the recorded run
    (``Violation.trace``): report.json keeps it and names ``traces/V<n>.json``,
    which ``shmspec validate`` checks to the same departure, so the finding
    is reproducible from the report alone; ``shmspec merge`` reads it back."""
    from shmspec.conformance.core.results import CampaignResult, GateResult, Violation
    from shmspec.conformance.protocols.ringbuffer.campaigns import _validate_traces
    from shmspec.conformance.reporting.report import write_report

    target, config = load_target("impl"), SessionConfig()
    with ProcessPool(target, config.readers) as pool:
        session = ScheduledSession(pool, target, config, promises=True, record=True)
        rich(Script(session, config))
        session.finish()
        doc, lanes = session.recorder.doc, [st.to_json() for st in session.trace]
    i = next(i for i, e in enumerate(doc["events"]) if e.get("got") == "own")
    doc["events"][i]["got"] = "other"  # as if the bytes had been another object's
    res = CampaignResult("controlled", ["CONFORMANCE"], mode="controlled")
    _validate_traces([(doc, lanes)], res, config, "controlled")
    (v,) = res.violations
    assert v.property == "CONFORMANCE" and v.trace is doc and f"event {i}:" in v.message
    write_report(GateResult("impl", "impl", "ci", 0, [res], 1.0, concurrency="controlled"), tmp_path)
    rep = json.loads((tmp_path / "report.json").read_text())
    (found,) = rep["violations"]
    assert found["trace_file"] == "traces/V1.json" and found["trace"] == doc
    assert Violation.from_json(found).trace == doc
    capsys.readouterr()
    assert main(["validate", str(tmp_path / "traces" / "V1.json"), "--report-dir", str(tmp_path / "v")]) == 1
    again = json.loads((tmp_path / "v" / "validate.json").read_text())["traces"][0]["departure"]
    assert again["event"] == i and again["act"] == "deserialize"


def test_a_report_folder_reused_loses_the_last_runs_recorded_findings(tmp_path):
    """A run into a report folder another run wrote drops that run's
    ``traces/V<n>.json`` with its report: a passing run leaves no departing
    trace of an earlier one beside its own report."""
    from shmspec.conformance.commands.finish import prepare_report_dir

    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "V1.json").write_text("{}")
    (tmp_path / "traces" / "mine.json").write_text("{}")  # not the report's: kept
    (tmp_path / "report.json").write_text("{}")
    assert prepare_report_dir(tmp_path) is None
    assert not (tmp_path / "traces" / "V1.json").exists() and not (tmp_path / "report.json").exists()
    assert (tmp_path / "traces" / "mine.json").exists()
