"""What a gate run means for a CI job: each property's outcome, judged
against an optional baseline of known findings, and the same outcomes as
JUnit XML (``shmspec check --junit``), as a GitHub step summary (markdown,
when ``$GITHUB_STEP_SUMMARY`` is set) and as pytest items (the plugin,
:mod:`shmspec.conformance.pytest_plugin`).

A property's **status** (one per property of the target's protocol, in the
registry's order):

* ``passed``: the gate's verdict is pass;
* ``failed``: violated, and not a known finding: **fails the job**;
* ``known``: violated, and the baseline already had it violated (reported,
  does not fail the job);
* ``fixed``: the baseline had it violated, this run has it pass;
* ``unknown``: a check ran out of its budget: **fails the job** (never a pass);
* ``skipped``: not claimed by the target's contract, or not checked by the
  profile's campaigns (the reason says which).

A **baseline** is a ``report.json`` of an earlier run (its failing
properties are the known findings) or a baseline file
(``shmspec.baseline/1``: ``{"protocol": ..., "target": ..., "known": [ids]}``,
written by ``shmspec check --write-baseline``).  Findings are matched by
property id within one store protocol: a new finding of an already known
property is not told apart (docs/ci.md says why and what that costs).

Imports no Hypothesis, no multiprocess.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.documents import header
from ..core.errors import UsageError
from ..core.results import GateResult

BASELINE_SCHEMA = "shmspec.baseline/1"
FAILING = ("failed", "unknown")
"""The statuses that fail a CI job."""


@dataclass(frozen=True)
class Baseline:
    """Known findings: the property ids a baseline run had violated."""

    source: str
    """Where it was read from (a path), for the report."""
    protocol: str
    known: frozenset[str]
    target: str | None = None
    """The target the baseline run judged (informative: a baseline may be
    applied to a patched store)."""

    @classmethod
    def load(cls, path: str | Path) -> "Baseline":
        """Read a ``report.json`` (schema ``shmspec.report/1``) or a baseline
        file (``shmspec.baseline/1``).

        Raises:
            UsageError: the file is missing, is not JSON, or is neither document.
        """
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except OSError as exc:
            raise UsageError(f"cannot read the baseline {p}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise UsageError(f"the baseline {p} is not JSON: {exc}") from None
        schema = data.get("schema") if isinstance(data, dict) else None
        if schema == BASELINE_SCHEMA and isinstance(data.get("known"), list):
            return cls(str(p), data.get("protocol", "ringbuffer"), frozenset(map(str, data["known"])),
                       data.get("target"))
        if schema == "shmspec.report/1" and isinstance(data.get("properties"), dict):
            known = frozenset(pid for pid, verdict in data["properties"].items() if verdict == "fail")
            return cls(str(p), data.get("protocol", "ringbuffer"), known, data.get("target"))
        raise UsageError(f"the baseline {p} is neither a report.json (shmspec.report/1) nor a baseline file "
                         f"({BASELINE_SCHEMA}); its schema is {schema!r}")

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "protocol": self.protocol, "target": self.target, "known": sorted(self.known)}


def baseline_json(result: GateResult) -> dict[str, Any]:
    """A baseline file (``shmspec.baseline/1``) whose known findings are the
    properties ``result`` has violated."""
    return {**header(BASELINE_SCHEMA, "check"), "protocol": result.protocol, "target": result.target,
            "known": [pid for pid, verdict in result.properties.items() if verdict == "fail"]}


@dataclass
class PropertyOutcome:
    """One property of a run, as a CI job sees it (see the module docstring)."""

    id: str
    statement: str
    verdict: str
    """The gate's verdict: pass, fail, unknown, not-claimed, not-checked."""
    status: str
    """passed, failed, known, fixed, unknown or skipped."""
    violations: list[str] = field(default_factory=list)
    """Its violations' ids in the report (``V1``, ...)."""
    text: str = ""
    """Why: the violations drawn as plain text (trace and lanes), the budget
    that ran out, or why it was skipped."""
    seconds: float = 0.0
    """Seconds of the campaigns that check it (summed)."""

    @property
    def failing(self) -> bool:
        return self.status in FAILING

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "verdict": self.verdict, "status": self.status, "violations": self.violations}


def judge(result: GateResult, baseline: Baseline | None = None, width: int = 120) -> list[PropertyOutcome]:
    """Each property's outcome, in the registry's order.

    Raises:
        UsageError: the baseline is of another store protocol.
    """
    from .report import violation_text  # noqa: PLC0415 - rich, only when judged

    if baseline is not None and baseline.protocol != result.protocol:
        raise UsageError(f"the baseline {baseline.source} is of protocol {baseline.protocol!r}, "
                         f"the target of {result.protocol!r}")
    known = baseline.known if baseline is not None else frozenset()
    ids = {id(v): f"V{i}" for i, v in enumerate(result.violations, 1)}
    counts = result.property_counts()
    out = []
    for p in result.registry:
        verdict = result.properties[p.id]
        mine = [v for v in result.violations if v.property == p.id]
        if verdict == "fail":
            status = "known" if p.id in known else "failed"
            text = "\n".join(violation_text(int(ids[id(v)][1:]), v, result.descriptions, width) for v in mine)
        elif verdict == "pass":
            status, text = ("fixed" if p.id in known else "passed"), ""
        elif verdict == "unknown":
            status = "unknown"
            text = "; ".join(f"campaign {c.name}: {c.unknown}" for c in result.campaigns
                             if c.unknown and p.id in c.checks) + " (a budget ran out: not a pass)"
        elif verdict == "not-claimed":
            status = "skipped"
            declared = result.contract.not_claimed if result.contract is not None else {}
            text = "; ".join([f"not claimed by the contract {result.contract_name}: {declared[p.id]}"]
                             if p.id in declared else
                             [f"not claimed by the target's contract: {c.not_claimed[p.id]}" for c in result.campaigns
                              if p.id in c.not_claimed])
        else:
            status, text = "skipped", (f"not checked by this run's campaigns (gate profile {result.profile}, "
                                       f"concurrency {result.concurrency})")
        out.append(PropertyOutcome(p.id, p.statement, verdict, status, [ids[id(v)] for v in mine], text,
                                   counts[p.id][2]))
    return out


def summary_json(outcomes: list[PropertyOutcome], baseline: Baseline | None) -> dict[str, Any]:
    """``report.json``'s ``baseline`` block: the baseline and what it made of
    the run (``new``: failing, not known; ``known``; ``fixed``)."""
    return {**(baseline.to_json() if baseline else {"source": None, "known": []}),
            "new": [o.id for o in outcomes if o.status == "failed"],
            "still": [o.id for o in outcomes if o.status == "known"],
            "fixed": [o.id for o in outcomes if o.status == "fixed"]}


def judge_and_report(result: GateResult, report_dir: Path, started: str | None, target_source: str | None,
                     baseline: Baseline | None = None) -> list[PropertyOutcome]:
    """:func:`judge` the run, then write its report (report.json with the
    ``baseline`` block when judged against one): what ``shmspec check`` and
    the pytest plugin both do.

    Raises:
        UsageError: the baseline is of another store protocol (nothing written).
        OSError: the report cannot be written.
    """
    from .report import write_report  # noqa: PLC0415

    outcomes = judge(result, baseline)
    write_report(result, report_dir, started, target_source,
                 summary_json(outcomes, baseline) if baseline is not None else None)
    return outcomes


def junit_xml(result: GateResult, outcomes: list[PropertyOutcome], report_dir: Path | None = None,
              baseline_source: str | None = None) -> str:
    """JUnit XML: one ``testsuite`` per run, one ``testcase`` per property
    (``classname`` ``shmspec.<target>``, as the pytest plugin's items,
    ``name`` the property id).
    ``failed``: a ``failure`` with the drawn violations; ``unknown``: an
    ``error``; ``known`` and ``skipped``: ``skipped`` with the reason."""
    suite = ET.Element("testsuite", name=f"shmspec check {result.target}", tests=str(len(outcomes)),
                       failures=str(sum(o.status == "failed" for o in outcomes)),
                       errors=str(sum(o.status == "unknown" for o in outcomes)),
                       skipped=str(sum(o.status in ("known", "skipped") for o in outcomes)),
                       time=f"{result.seconds:.3f}")
    props = ET.SubElement(suite, "properties")
    for name, value in (("target", result.target), ("protocol", result.protocol), ("profile", result.profile),
                        ("seed", result.seed_text), ("construction", result.construction.name),
                        ("model_profile", result.model_profile), ("contract", result.contract_name),
                        ("verdict", result.verdict),
                        ("report_dir", str(report_dir) if report_dir else "")):
        ET.SubElement(props, "property", name=name, value=value)
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname=f"shmspec.{result.target}", name=o.id,
                             time=f"{o.seconds:.3f}")
        if o.status == "failed":
            first = next(v for v in result.violations if v.property == o.id)
            ET.SubElement(case, "failure", message=f"{o.id}: {first.message}", type=o.id).text = o.text
        elif o.status == "unknown":
            ET.SubElement(case, "error", message=o.text, type="unknown").text = o.text
        elif o.status == "known":
            ET.SubElement(case, "skipped", message=f"known finding (baseline {baseline_source}): "
                          f"{', '.join(o.violations)}", type="known").text = o.text
        elif o.status == "skipped":
            ET.SubElement(case, "skipped", message=o.text, type="skipped")
        ET.SubElement(case, "system-out").text = o.statement
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


_MARK = {"passed": "pass", "failed": "**FAIL (new)**", "known": "fail (known)", "fixed": "pass (fixed)",
         "unknown": "**UNKNOWN**", "skipped": "skipped"}


def step_summary(result: GateResult, outcomes: list[PropertyOutcome], report_dir: Path | None = None) -> str:
    """Markdown for a GitHub job summary: the run, a table of the
    properties, the new findings' first messages and the replay command."""
    failing = [o for o in outcomes if o.failing]
    lines = [f"### shmspec check `{result.target}`: {'FAIL' if failing else 'PASS'}", "",
             f"protocol {result.protocol}, gate profile {result.profile}, seed {result.seed_text}, construction "
             f"{result.construction.name}, contract {result.contract_name}, "
             f"{result.seconds:.0f} s", "", "| property | result | violations |", "| --- | --- | --- |"]
    lines += [f"| {o.id} | {_MARK[o.status]} | {', '.join(o.violations)} |" for o in outcomes]
    new = [o for o in outcomes if o.status == "failed"]
    if new:
        lines += ["", "New findings:", ""]
        for o in new:
            v = next(v for v in result.violations if v.property == o.id)
            lines.append(f"- **{o.id}** ({v.campaign}): {v.message}")
    if report_dir is not None:
        lines += ["", f"Report: `{report_dir}` (report.html, report.json"
                  + (", repro_test.py: `python -m pytest repro_test.py`)" if result.violations else ")")]
    return "\n".join(lines) + "\n"


__all__ = ["BASELINE_SCHEMA", "Baseline", "FAILING", "PropertyOutcome", "baseline_json", "judge", "judge_and_report",
           "junit_xml",
           "step_summary", "summary_json"]
