"""The conformance gate against deliberately broken variants of our store.

Each file listed here, from the fault library ``conformance/mutants/`` (shipped
in the package, run in full by ``shmspec mutants``), is ``shmspec.impl`` with one realistic bug (its
docstring says which, and which property must catch it).  The ``ci`` gate must
fail it *on that property*, with a counterexample whose last step carries the
violation; and the unmodified impl must pass the same gate.  A variant the gate
does not catch is a gap in the harness: fix the harness, not this test.

Every gate run is timed; the seconds are printed (``pytest -s``) and recorded
as the ``gate_seconds`` property of each test (``--junitxml``).  The full ``ci``
gate shrinks every finding, so writer-side bugs (found by all seven campaigns,
four rounds each) take minutes: the gate tests are marked ``slow``.
"""

from __future__ import annotations

import time

import pytest

from shmspec.conformance.core.config import SessionConfig
from shmspec.conformance.core.results import ALL_PROPERTIES
from shmspec.conformance.runner.gate import run_gate
from shmspec.conformance.targets.loader import load_file, load_target
from shmspec.conformance.mutants import MUTANTS_DIR
from shmspec.conformance.lockstep.machine import CAMPAIGNS

VARIANTS_DIR = MUTANTS_DIR  # the seeded faults ship in the package

# file name -> (property that must fail, substring one of its violation messages
# must contain, or None)
VARIANTS: dict[str, tuple[str, str | None]] = {
    "early_free.py": ("RC", None),
    # The recycled read must be the adversarial one: a fake chunk planted in a
    # new payload (b"FORGED..." -> hex 464f52474544) returned for a stale handle.
    "inband_only.py": ("NRR", b"FORGED".hex()),
    "dup_overwrite.py": ("DUP", None),
    "clear_resets_ids.py": ("CLR", None),
    "lockless_reader.py": ("LOCK", None),
    "leaky_close.py": ("LEAK", None),
    "size_off_by_one.py": ("SIZE", None),
    "oom_no_reclaim.py": ("OOM", None),
    "auth_late_check.py": ("AUTH", None),
    "disj_overlap.py": ("DISJ", None),
}

# Every property of SEMANTICS.md but WRAP (these campaigns never reach id
# wraparound; the boundary campaign does: tests/conformance/proofs/test_boundary.py).
IMPL_MUST_PASS = ("NRR", "DUP", "LOCK", "SIZE", "OOM", "FIFO", "RC", "DISJ", "CLR", "AUTH", "LEAK", "EXC")


# The campaign of the ci gate aimed at each property.  Running that campaign
# alone keeps this file to minutes; the whole gate runs on impl here and on the
# vLLM releases in test_gate_vllm.py.
AIMED = {
    "RC": "core", "DUP": "core", "SIZE": "core", "OOM": "core", "LEAK": "core", "DISJ": "core",
    "NRR": "adversarial", "CLR": "stale", "AUTH": "auth", "LOCK": "lock", "EXC": "exc",
}


def _gate(target, record_property, label, prop=None):
    t0 = time.monotonic()
    campaigns = CAMPAIGNS if prop is None else tuple(c for c in CAMPAIGNS if c.name == AIMED[prop])
    # A variant: its aimed campaign with every other property excused and the
    # state comparison with the model off (what the gate's final round does),
    # stopped at its first finding: the property it names must catch the
    # fault by itself, with a shrunk trace.  The whole gate, model comparison
    # included, runs on every variant in `shmspec mutants` (docs/mutants.md).
    config = None if prop is None else SessionConfig(
        compare_state=False, excused=frozenset(p for p in ALL_PROPERTIES if p != prop))
    result = run_gate(target, "ci", campaigns=campaigns, concurrency="off", first_finding_only=prop is not None,
                      config=config)
    seconds = time.monotonic() - t0
    record_property("gate_seconds", round(seconds, 2))
    print(f"\n[gate] {label}: verdict={result.verdict} {seconds:.1f}s "
          f"failed={sorted(p for p, v in result.properties.items() if v == 'fail')}")
    return result


def _describe(result) -> str:
    lines = [f"verdict={result.verdict} properties={result.properties}"]
    for c in result.campaigns:
        lines.append(f"  campaign {c.name}: completed={c.completed} skipped={c.skipped} error={c.error} "
                     f"violations={[v.property for v in c.violations]}")
    for v in result.violations:
        lines.append(f"  [{v.property}] {v.campaign} round {v.round}: {v.message}")
    return "\n".join(lines)


CONTROL = "control_unmodified.py"
"""impl re-exported through a variant-shaped file (subclasses, reader views
re-classed): must pass, so a variant's failure is its bug, not the wrapping."""


# Read-path races: caught by the controlled campaign (tests/conformance/runner/test_gate_concurrency.py)
# and, for deserialize_in_place, by the free-running one (tests/conformance/concurrency/test_freerun.py).
RACE_VARIANTS = {"count_before_validate.py", "deserialize_in_place.py"}


def test_every_variant_file_is_listed():
    on_disk = {p.name for p in VARIANTS_DIR.glob("*.py")}
    listed = set(VARIANTS) | {CONTROL} | RACE_VARIANTS
    assert listed <= on_disk, f"listed variants missing from conformance/mutants/: {sorted(listed - on_disk)}"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_gate_catches_variant(name, record_property):
    prop, evidence = VARIANTS[name]
    path = VARIANTS_DIR / name
    target = load_file(path)
    assert target.profile.name == "impl", "variants declare SHMSPEC_PROFILE = 'impl'"
    assert f"Must be caught by: {prop}" in (target.module.__doc__ or ""), \
        "the variant's docstring must name the property that catches it"

    result = _gate(target, record_property, name, prop)
    info = _describe(result)

    assert result.verdict == "fail", info
    assert result.properties[prop] == "fail", f"{name}: {prop} not caught\n{info}"
    caught = [v for v in result.violations if v.property == prop]
    assert caught, info
    for v in caught:
        assert v.steps, f"{name}: {prop} violation without steps\n{info}"
        last = v.steps[-1]
        named = [e for e in last["violations"] if e["property"] == prop]
        assert named, f"{name}: last step of the {prop} counterexample does not name {prop}: {last}"
    if evidence is not None:
        assert any(evidence in v.message for v in caught), \
            f"{name}: no {prop} violation shows {evidence!r}\n{info}"


@pytest.mark.slow
@pytest.mark.parametrize("spec", [CONTROL])  # impl itself: test_determinism.py (twice) and test_cli.py's whole gate
def test_impl_passes_gate(spec, record_property):
    target = load_target("impl") if spec == "impl" else load_file(VARIANTS_DIR / spec)
    assert target.profile.name == "impl"
    result = _gate(target, record_property, spec)
    info = _describe(result)
    assert result.verdict == "pass", info
    assert not result.violations, info
    for prop in IMPL_MUST_PASS:
        assert result.properties[prop] == "pass", f"impl: {prop} is {result.properties[prop]}\n{info}"
