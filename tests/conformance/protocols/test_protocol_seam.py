"""The protocol seam (conformance/core/protocol.py): a second store protocol
(tests/toy_protocol.py, registered here, in no module of the package) runs
through the gate, the report and ``shmspec.replay`` with no edit to any of
them, and the ring-buffer protocol answers the same interface."""

from __future__ import annotations

import json

import pytest

import shmspec
from shmspec.conformance import protocols
from shmspec.conformance.core.protocol import StoreProtocol
from shmspec.conformance.runner.gate import run_gate


@pytest.fixture
def toy(second_protocol):
    return second_protocol


def test_the_ring_buffer_protocol_is_the_default_and_answers_the_interface():
    rb = protocols.get()
    assert isinstance(rb, StoreProtocol) and rb.name == protocols.DEFAULT == "ringbuffer"
    from shmspec.conformance.core.results import ALL_PROPERTIES
    from shmspec.conformance.spec.tlc import default_tla_dir
    from shmspec.model.store import ACTIONS

    assert rb.property_ids == ALL_PROPERTIES and rb.actions == ACTIONS
    assert rb.tla_dir == default_tla_dir() and (rb.tla_dir / "ShmStore.tla").is_file()
    import importlib

    assert len(importlib.import_module(rb.mutants).faults()) >= 30
    names = [c.name for c in rb.campaigns("controlled")]
    assert names[:2] == ["core", "stale"] and names[-1] == "constructions" and "boundary" in names
    assert [c.name for c in rb.campaigns("off")] == [c.name for c in rb.base_campaigns()]
    assert protocols.protocol_of(protocols.load("impl")) is rb


def test_target_strings_go_to_their_protocol(toy):
    assert protocols.split_spec("toy:good") == ("toy", "good")
    for ring in ("impl", "file:/x/y.py", "vllm==0.33.0", "ringbuffer:impl", "nosuch:impl"):
        assert protocols.split_spec(ring) == ("ringbuffer", ring)
    assert protocols.names() == ("ringbuffer", "arena", "queue", "toy")
    assert protocols.split_spec("vllm-arena==0.33.0") == ("arena", "vllm==0.33.0")
    assert protocols.split_spec("impl-queue") == ("queue", "impl")
    assert protocols.split_spec("arena:file:/x/shm_tensor_arena.py") == ("arena", "file:/x/shm_tensor_arena.py")
    with pytest.raises(shmspec.UsageError, match="unknown store protocol 'nosuch'"):
        protocols.get("nosuch")
    with pytest.raises(shmspec.TargetError, match="unknown toy target"):
        protocols.load("toy:missing")
    with pytest.raises(shmspec.UsageError, match="needs a name and properties"):
        protocols.register(StoreProtocol())


def test_a_correct_store_of_another_protocol_passes_its_own_properties(toy, tmp_path):
    result = shmspec.check("toy:good", report_dir=tmp_path)
    assert result.verdict == "pass" and result.concurrency == "off"  # the profile's controlled: not a toy mode
    assert result.properties == {"READ": "pass", "ONCE": "pass"}
    assert [c.name for c in result.campaigns] == ["registers"] and result.campaigns[0].examples == 100
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["protocol"] == "toy" and list(data["properties"]) == ["READ", "ONCE"]
    assert "a get returns the value its key was first put with" in (tmp_path / "report.html").read_text()
    assert not (tmp_path / "repro_test.py").exists()


def test_a_broken_store_of_another_protocol_is_found_rendered_and_replayed(toy, tmp_path):
    result = shmspec.check("toy:stale", report_dir=tmp_path)
    assert result.verdict == "fail" and result.properties["READ"] == "fail"
    v = result.violations[0]
    assert v.property == "READ" and v.protocol == "toy" and v.campaign == "registers"
    # shrunk to the two puts of one key and the get that reads the refused value
    assert [s["action"] for s in v.steps] == ["put", "put", "get"]
    data = json.loads((tmp_path / "report.json").read_text())
    case = data["violations"][0]
    assert case["protocol"] == "toy" and case["property"] == "READ"
    repro = (tmp_path / "repro_test.py").read_text()
    assert '"protocol": "toy"' in repro
    assert shmspec.replay("toy:stale", case).startswith("READ: step 2 (writer get)")
    assert shmspec.replay("toy:good", case) is None  # the same calls on the fixed store
    assert shmspec.replay("toy:stale", v) == shmspec.replay("toy:stale", case)


def test_the_gate_carries_excusals_across_another_protocols_findings(toy):
    result = run_gate(protocols.load("toy:dup"), "ci")
    assert result.properties == {"READ": "fail", "ONCE": "fail"}
    assert [v.property for v in result.violations] == ["ONCE", "READ"]  # the more severe one excused, then READ


def test_a_mode_the_protocol_has_not_is_a_usage_error(toy):
    with pytest.raises(shmspec.UsageError, match=r"unknown concurrency 'controlled' \(choose from off\)"):
        shmspec.check("toy:good", concurrency="controlled")
    with pytest.raises(shmspec.UsageError, match="no concurrency 'free'"):
        shmspec.replay("toy:good", {"protocol": "toy", "concurrency": "free", "config": {}})


def test_the_properties_command_shows_another_protocols_registry(toy, capsys):
    from rich.console import Console

    from shmspec.conformance.commands.properties import main

    out, err = Console(width=200), Console(stderr=True)
    assert main(["read"], True, out, err, "toy") == 0
    entry = json.loads(capsys.readouterr().out)[0]
    assert entry["id"] == "READ" and entry["stated_in"] == "toy_protocol:PROPERTIES"
    assert entry["checked_by"] == {"toy": "toy_protocol:ToySession.execute"}
    assert main(["NRR"], False, out, err, "toy") == 2  # not a toy property
    assert "unknown property NRR (known: READ, ONCE)" in capsys.readouterr().err
    assert main([], False, out, err, "nosuch") == 2
    assert "unknown store protocol 'nosuch'" in capsys.readouterr().err
