"""report.html as a page (conformance/reporting/page.py): a title, the list
of violations linking to one section each, the breaking step marked and
named, printable payloads decoded, the replay command; read back with the
standard library's HTML parser.  The page of a controlled-schedule finding
(lanes) is checked in tests/conformance/runner/test_gate_concurrency.py."""

from __future__ import annotations

import sys

import pytest

import shmspec
from shmspec.conformance.reporting.page import decoded_payloads

from helpers import Dom


@pytest.fixture(scope="module")
def stale_page(tmp_path_factory):
    import toy_protocol

    from shmspec.conformance import protocols

    protocols.register(toy_protocol.PROTOCOL)
    try:
        d = tmp_path_factory.mktemp("page")
        shmspec.check("toy:stale", report_dir=d)
        yield d, Dom((d / "report.html").read_text())
    finally:
        protocols.unregister("toy")


def test_the_page_has_a_title_a_violation_list_and_a_section_per_violation(stale_page):
    d, dom = stale_page
    assert dom.title == "shmspec check toy:stale: FAIL"
    assert "#V1" in dom.links and "V1" in dom.by_id and "violations" in dom.by_id and "properties" in dom.by_id
    section = dom.by_id["V1"]
    assert "READ: a get returns the value its key was first put with" in section
    assert "Broken at step 2 (writer get)" in section and "✗ 2" in section and "✗ breaks READ" in section
    assert f'{sys.executable} -m pytest {d}/repro_test.py -k "V1-READ"' in section  # the interpreter with shmspec
    assert "contract toy," in dom.by_id["run"] and "seed 0" in dom.by_id["run"]
    assert "verdict: FAIL" in dom.by_id["console"]  # the whole console report follows


def test_the_page_of_a_passing_run_says_so(tmp_path):
    from shmspec.conformance.core.results import GateResult
    from shmspec.conformance.reporting.report import write_report

    write_report(GateResult("impl", "impl", "ci", 0, [], 1.0), tmp_path)
    dom = Dom((tmp_path / "report.html").read_text())
    assert dom.title == "shmspec check impl: PASS" and "none" in dom.by_id["violations"]
    assert not [link for link in dom.links if link.startswith("#V")]


def test_printable_payloads_are_decoded_and_others_left():
    text = "returned Blob(464f524745446833, 8 B) for h3, which holds Blob(03000000a5a5a5a5a5a5a5a5..., 84 B)"
    assert decoded_payloads(text) == [("Blob(464f524745446833, 8 B)", "FORGEDh3")]
    assert decoded_payloads("Blob(6869..., 40 B)") == [("Blob(6869..., 40 B)", "hi...")]


def test_the_trace_is_drawn_as_lanes_with_the_breaking_step_marked(stale_page):
    _, dom = stale_page
    assert dom.by_id["V1-lanes"].startswith("stepwriter")  # one lane: the toy store has only a writer
    assert dom.by_id["V1-harmful"].startswith("✗ breaks READ: get(key=")


def test_every_ring_buffer_property_says_how_a_store_comes_to_allow_it():
    from shmspec.conformance.reporting.page import WHY, why_text
    from shmspec.model.properties import PROPERTIES

    assert set(WHY) == {p.id for p in PROPERTIES}
    assert why_text("READ") is None  # another protocol's property: no text rather than a wrong one
