"""ITF (Apalache ADR-015) for TLC traces (issue 29 item 4): every value
kind round-trips with its TLA+ kind kept, the files `shmspec model` writes
for its counterexamples pass a JSON Schema check of the format and read
back to the values of TLC's trace."""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest

from shmspec.conformance.commands import modelcheck
from shmspec.conformance.spec.itf import ITF_SCHEMA, ItfError, trace_from_itf, trace_to_itf, value_to_itf
from shmspec.conformance.spec.tlavalue import FrozenDict, FrozenRecord, ModelValue, parse_state

STATE = """/\\ pc = (r1 :> "idle" @@ r2 :> "checked")
/\\ chunks = <<[abs |-> 0, addr |-> 0, size |-> 3, id |-> 0, key |-> k1]>>
/\\ issued = {[abs |-> 0, addr |-> 0, id |-> 0, obj |-> 1]}
/\\ mem = (0 :> [id |-> -1, size |-> 0, cnt |-> 0, obj |-> 0] @@ 1 :> [id |-> 2, size |-> 3, cnt |-> 1, obj |-> 5])
/\\ clearAt = 0
/\\ wwait = FALSE
/\\ floor = <<>>
/\\ verdict = {}
"""


def _kinds(v):
    if isinstance(v, (frozenset, tuple)):
        return (type(v).__name__, tuple(sorted(map(repr, map(_kinds, v)))))
    if isinstance(v, dict):
        return (type(v).__name__, tuple(sorted((repr(_kinds(k)), repr(_kinds(x))) for k, x in v.items())))
    return (type(v).__name__, v)


def test_a_tlc_state_round_trips_through_itf_with_every_kind_kept():
    state = parse_state(STATE)
    assert isinstance(state["chunks"][0], FrozenRecord) and type(state["pc"]) is FrozenDict
    assert type(state["chunks"][0]["key"]) is ModelValue and type(state["pc"]["r1"]) is str
    doc = trace_to_itf([state, state], ["Initial", "Put"], source="x.cfg", description="two states")
    jsonschema.validate(doc, ITF_SCHEMA)
    assert doc["vars"] == sorted(state) and doc["#meta"]["model-values"] == ["k1", "r1", "r2"]
    assert doc["states"][1]["#meta"] == {"index": 1, "action": "Put"}
    assert doc["states"][0]["clearAt"] == {"#bigint": "0"} and doc["states"][0]["wwait"] is False
    assert doc["states"][0]["verdict"] == {"#set": []} and doc["states"][0]["floor"] == []
    back = trace_from_itf(json.loads(json.dumps(doc)))
    assert back == [state, state] and [_kinds(s) for s in back] == [_kinds(state)] * 2
    assert trace_to_itf(back, ["Initial", "Put"], source="x.cfg", description="two states") == doc  # one file


def test_bad_input_is_one_clear_error():
    with pytest.raises(ItfError, match="needs a list 'vars'"):
        trace_from_itf({"states": []})
    with pytest.raises(ItfError, match="lacks the variables"):
        trace_from_itf({"vars": ["x"], "states": [{"y": 1}]})
    with pytest.raises(ItfError, match="#unserializable"):
        trace_from_itf({"vars": ["x"], "states": [{"x": {"#unserializable": "Nat"}}]})
    with pytest.raises(ItfError, match="no ITF form for a float"):
        value_to_itf(1.5)
    with pytest.raises(ItfError, match="has the variables"):
        trace_to_itf([{"x": 1}, {"y": 1}])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"vars": ["x"], "states": [{"x": {"#bigint": "1e3"}}]}, ITF_SCHEMA)


@pytest.mark.skipif(shutil.which("java") is None, reason="TLC needs java")
def test_shmspec_model_writes_each_counterexample_as_itf(tmp_path):
    outcomes = modelcheck.run(pattern="MC_impl_writer_nofence.cfg")
    modelcheck.write(outcomes, tmp_path)
    (o,) = outcomes
    cexs = json.loads((tmp_path / "model.json").read_text())["configs"][0]["counterexamples"]
    assert [c["itf"] for c in cexs] == [f"itf/MC_impl_writer_nofence.{v.property}.itf.json"
                                        for v, _ in o.counterexamples] and len(cexs) == 2
    for c, trace in zip(cexs, o.traces):
        doc = json.loads((tmp_path / c["itf"]).read_text())
        jsonschema.validate(doc, ITF_SCHEMA)
        assert [s["#meta"]["action"] for s in doc["states"]] == [ts.action for ts in trace]
        assert trace_from_itf(doc) == [ts.values() for ts in trace]
