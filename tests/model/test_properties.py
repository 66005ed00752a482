"""The property registry (``shmspec.model.properties.PROPERTIES``): every
list of properties is derived from it, and each checker claims exactly the
properties the registry says it does."""

from __future__ import annotations

import importlib
import re

import pytest

from shmspec.model import properties as P

from helpers import ROOT


def test_one_entry_per_property_and_every_list_derived():
    ids = [p.id for p in P.PROPERTIES]
    assert len(ids) == len(set(ids)) == 19
    assert ids[-1] == "CONFORMANCE"
    assert P.PROPERTY_IDS == tuple(ids[:-1])
    assert sorted(p.severity for p in P.PROPERTIES) == list(range(1, len(ids) + 1))
    assert set(P.SEVERITY) == set(ids) and P.SEVERITY[0] == "NRR"
    assert P.DESCRIPTIONS == {p.id: p.statement for p in P.PROPERTIES}
    from shmspec.conformance.commands.matrix import COLUMNS
    from shmspec.conformance.core.results import ALL_PROPERTIES
    from shmspec.conformance.lockstep.session import SEVERITY
    assert ALL_PROPERTIES == tuple(ids) == COLUMNS
    assert SEVERITY == P.SEVERITY
    for p in P.PROPERTIES:
        assert p.statement and "\n" not in p.statement
        assert p.kind in ("safety", "liveness", "refinement")
        assert p.checkers and p.checkers <= P.CHECKERS.keys(), p.id


def test_no_other_module_spells_out_the_property_list():
    """A tuple literal naming five or more property ids outside the registry
    is a second list that can drift (campaign claim sets are data checked
    below, not lists of every property)."""
    pat = re.compile(r"\(\s*(\"(?:%s)\",\s*){5,}" % "|".join(P.BY_ID))
    bad = [str(f.relative_to(ROOT)) for d in ("conformance", "model", "impl") for f in (ROOT / d).rglob("*.py")
           if f.name != "properties.py" and pat.search(f.read_text())]
    assert bad == []


def _claims() -> dict[str, set[str]]:
    from shmspec.conformance.lockstep.machine import CAMPAIGNS
    from shmspec.conformance.proofs.prove import OBLIGATIONS
    from shmspec.conformance.runner import gate
    tla = set()
    for cfg in list((ROOT / "tla").glob("*.cfg")) + list((ROOT / "tla" / "deep").glob("*.cfg")):
        for m in re.finditer(r"^(?:INVARIANTS?|PROPERTIES|PROPERTY)\s+(.*)$", cfg.read_text(), re.M):
            tla |= set(m.group(1).split())
    return {
        "lockstep": set().union(*(c.checks for c in CAMPAIGNS)),
        "boundary": set(gate.BOUNDARY.checks),
        "controlled": set(gate.PREEMPTION.checks | gate.CONTROLLED.checks),
        "free": set(gate.CONCURRENT_CAMPAIGNS["free"][0].checks),
        "faults": set(gate.FAULTS.checks),
        "threads": set(gate.SW_CAMPAIGN.checks),
        "z3": {o.property for o in OBLIGATIONS},
        "tla": {p.id for p in P.PROPERTIES if p.tla in tla},
    }


@pytest.mark.parametrize("checker", sorted(P.CHECKERS))
def test_each_checker_claims_what_the_registry_says(checker):
    declared = {p.id for p in P.PROPERTIES if checker in p.checkers}
    assert _claims()[checker] == declared


def test_tla_names_are_defined_in_the_spec():
    spec = (ROOT / "tla" / "ShmStore.tla").read_text()
    for p in P.PROPERTIES:
        if p.tla:
            assert re.search(rf"^{p.tla} ==", spec, re.M), p.id


@pytest.mark.parametrize("checker", sorted(P.CHECKERS))
def test_checker_sites_resolve(checker):
    site = P.CHECKERS[checker]
    if ":" not in site:
        assert (ROOT / site).is_file()
        return
    mod, qual = site.split(":")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    assert obj is not None


def test_contract_variants_are_the_model_profiles():
    from shmspec.model.profile import PROFILES
    assert {pr.clr for pr in PROFILES.values()} <= set(P.BY_ID["CLR"].contracts)
    assert {pr.sw for pr in PROFILES.values()} <= set(P.BY_ID["SW"].contracts)


def test_by_severity_orders_and_dedups():
    got = P.by_severity([("OOM", "a"), ("NRR", "b"), ("ZZZ", "c"), ("NRR", "b"), ("RC", "d")])
    assert got == [("NRR", "b"), ("RC", "d"), ("OOM", "a"), ("ZZZ", "c")]


def test_the_properties_command_shows_where_a_property_is_checked(capsys):
    from shmspec.conformance.cli import main
    assert main(["properties", "--json", "NRR"]) == 0
    import json
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["id"] == "NRR" and entry["tla"] == "NRR"
    assert entry["checked_by"]["lockstep"] == P.CHECKERS["lockstep"]
    assert set(entry["checked_by"]) == set(P.BY_ID["NRR"].checkers)
    assert entry["rendered_by"].endswith(":violation_panel")
    assert main(["properties"]) == 0
    assert "19 properties" in capsys.readouterr().out
    assert main(["properties", "NOPE"]) == 2
    assert "unknown property NOPE" in capsys.readouterr().err


def test_the_readme_table_states_each_property_as_the_registry_does():
    """README's property table: one row per property, each starting with the
    registry's statement (backticks aside, after an optional name such as
    "no recycled read: "); a note may follow."""
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        m = re.match(r"\| ([A-Z]+) \| (.*) \|$", line.strip())
        if m and m.group(1) in P.BY_ID:
            rows[m.group(1)] = m.group(2).replace("`", "")
    assert list(rows) == [p.id for p in P.PROPERTIES]
    for p in P.PROPERTIES:
        row = rows[p.id]
        assert row.startswith(p.statement) or re.sub(r"^[a-z ]+: ", "", row).startswith(p.statement), p.id


def test_nrr_has_one_wording_for_every_checker():
    """The lockstep and scheduled sessions, the history check, the fault
    scenarios and TLC trace replay word an NRR finding through
    ``nrr_message``; no checker spells the sentence itself."""
    assert P.nrr_message("reader r1", "returned", "b'x'", "h1 (0, 0)", "b'y'", " (diff)") == \
        "reader r1 returned b'x' for handle h1 (0, 0), which holds b'y' (diff)"
    assert P.nrr_error_message("reader r1's get", "h1 (0, 0)", "KeyError (k)", " (diff)") == \
        "reader r1's get of h1 (0, 0) raised KeyError (k), neither its object nor the store's stale-handle error (diff)"
    users = []
    for f in (ROOT / "conformance").rglob("*.py"):
        if "slots" in f.relative_to(ROOT).parts:  # the slot protocols' NRR is another property (docs/slots.md)
            continue
        src = f.read_text()
        assert "which holds" not in src and "put under it was" not in src, f
        # ("NRR", "RC", ...) is a list of ids; ("NRR", "<message>") or ("NRR", f"...") a message
        assert not re.search(r'\("NRR", *f?"(?![A-Z]+")', src), f"{f}: an NRR message not worded by nrr_message"
        if "nrr_message(" in src:
            users.append(f.stem)
    assert sorted(users) == ["agreement", "faults", "history", "schedule", "session"]


def test_the_targets_own_state_is_judged_in_one_place_for_both_sessions():
    """DISJ, FIFO and RC of a target's snapshots: ``target_state_checks``,
    called by the lockstep and the scheduled session alike (no copy of it)."""
    import inspect

    from shmspec.conformance.concurrency.schedule import ScheduledSession
    from shmspec.conformance.lockstep.session import Session
    from shmspec.conformance.targets.adapter import SnapChunk, Snapshot, target_state_checks

    for cls in (Session, ScheduledSession):
        src = inspect.getsource(cls._state_checks)
        assert "target_state_checks(" in src and "fifo(" not in src and "disj(" not in src
    a, b, c = SnapChunk(0, 0, 64, 1, 1), SnapChunk(1, 64, 64, 0, 1), SnapChunk(2, 128, 64, 2, 1)
    before = Snapshot(0, 192, 0, 3, [a, b, c], {}, 256)
    after = Snapshot(128, 192, 2, 3, [c], {}, 256)  # ids 0 and 1 freed; id 1 was never read
    got = target_state_checks(before, after, 2)
    assert got == [("RC", "target: reclaimed id 0 with reader_count 1 < writer_count 1 x n_readers 2"),
                   ("RC", "target: reclaimed id 1 with reader_count 0 < writer_count 1 x n_readers 2")]
    assert target_state_checks(before, after, 2, reclaimed=False) == []  # across a clear
    done = Snapshot(0, 192, 0, 3, [SnapChunk(0, 0, 64, 2, 1), b, c], {}, 256)
    gone = Snapshot(64, 192, 1, 3, [b, c], {}, 256)
    assert target_state_checks(done, gone, 2) == []
    assert target_state_checks(done, gone, 2, protected={0}) == [("RC", "target: reclaimed id 0 while protected by touch")]
    skipped = Snapshot(0, 192, 0, 3, [a, c], {}, 256)  # id 1 freed ahead of id 0
    assert ("FIFO", "target: freed ids [1] are not the oldest 1 live ids [0]") in target_state_checks(before, skipped, 1)
    overlap = Snapshot(0, 192, 0, 3, [SnapChunk(0, 0, 100, 0, 1), b], {}, 256)
    assert [p for p, _ in target_state_checks(None, overlap, 2)] == ["DISJ"]
