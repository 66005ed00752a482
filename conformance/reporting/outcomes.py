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

A **baseline** is a ``report.json`` of an earlier run or a baseline file
(``shmspec.baseline/2``, written by ``shmspec check --write-baseline``).
Findings are matched by **fingerprint**
(:func:`~shmspec.conformance.core.results.finding_fingerprint`: property,
campaign, the kind of step that broke, construction; never the seed or a
step number): a property fails the job when any of its findings is new, even
when the baseline knows the property by another finding (since 2026-12-03;
before, by property id alone, a regression of an already-red property exited
0).  A baseline file of schema ``shmspec.baseline/1`` (property ids only) still
loads and is matched by property id, with a one-line notice; so is a
report.json whose violations predate the ``cause`` field.

Imports no Hypothesis, no multiprocess.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.documents import header
from ..core.errors import UsageError
from ..core.results import GateResult

BASELINE_SCHEMA = "shmspec.baseline/2"
OLD_BASELINE_SCHEMA = "shmspec.baseline/1"
"""Property ids only (before 2026-12-03): still read, matched by property."""
FAILING = ("failed", "unknown")
"""The statuses that fail a CI job."""


@dataclass(frozen=True)
class Baseline:
    """Known findings: their fingerprints (and the property ids they violate)."""

    source: str
    """Where it was read from (a path), for the report."""
    protocol: str
    known: frozenset[str]
    """The property ids the baseline run violated."""
    target: str | None = None
    """The target the baseline run judged (a baseline may be applied to a
    patched store; the run then says so, :meth:`notices`)."""
    findings: dict[str, dict[str, Any]] | None = None
    """Fingerprint -> what the baseline recorded of it (property, campaign,
    cause, message); None for a property-level baseline (matched by id)."""
    old: str = ""
    """Why this baseline is matched by property id (empty: by fingerprint)."""

    @classmethod
    def load(cls, path: str | Path) -> "Baseline":
        """Read a ``report.json`` (schema ``shmspec.report/1``) or a baseline
        file (``shmspec.baseline/2``, or ``/1`` matched by property id).

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
        protocol = data.get("protocol", "ringbuffer") if isinstance(data, dict) else "ringbuffer"
        if schema == BASELINE_SCHEMA and isinstance(data.get("findings"), list):
            found = {str(f["fingerprint"]): dict(f) for f in data["findings"]
                     if isinstance(f, dict) and f.get("fingerprint")}
            known = frozenset(map(str, data.get("known") or {f.get("property") for f in found.values()}))
            return cls(str(p), protocol, known, data.get("target"), found)
        if schema == OLD_BASELINE_SCHEMA and isinstance(data.get("known"), list):
            return cls(str(p), protocol, frozenset(map(str, data["known"])), data.get("target"), None,
                       f"a {OLD_BASELINE_SCHEMA} file (property ids only)")
        if schema == "shmspec.report/1" and isinstance(data.get("properties"), dict):
            known = frozenset(pid for pid, verdict in data["properties"].items() if verdict == "fail")
            entries = [v for v in data.get("violations") or () if isinstance(v, dict)]
            if any("cause" not in v for v in entries):
                return cls(str(p), protocol, known, data.get("target"), None,
                           "a report.json from before findings had causes")
            return cls(str(p), protocol, known, data.get("target"), _findings_of(entries, protocol))
        raise UsageError(f"the baseline {p} is neither a report.json (shmspec.report/1) nor a baseline file "
                         f"({BASELINE_SCHEMA}); its schema is {schema!r}")

    def is_known(self, v: Any) -> bool:
        """Whether the violation ``v`` is a known finding: its fingerprint is
        in the baseline (a property-level baseline: its property is)."""
        if self.findings is None:
            return v.property in self.known
        return v.fingerprint in self.findings

    def notices(self, result: GateResult) -> list[str]:
        """One line each: how this baseline is matched, when that is by
        property id, and that it was recorded on another target."""
        out = []
        if self.old:
            out.append(f"baseline {self.source} is {self.old}: its findings are matched by property id, so a new "
                       f"finding of a known property does not fail the run; rewrite it with --write-baseline")
        if self.target and self.target != result.target:
            out.append(f"baseline {self.source} was recorded on {self.target}, not on {result.target}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "protocol": self.protocol, "target": self.target, "known": sorted(self.known),
                "matched_by": "property" if self.findings is None else "fingerprint"}


def _findings_of(entries: list[dict[str, Any]], protocol: str) -> dict[str, dict[str, Any]]:
    """Fingerprint -> finding, from report.json violation entries (computed
    for reports written before report.json carried ``fingerprint``)."""
    from ..core.results import finding_fingerprint  # noqa: PLC0415

    out: dict[str, dict[str, Any]] = {}
    for v in entries:
        fp = v.get("fingerprint") or finding_fingerprint(v.get("protocol", protocol), v["property"], v["campaign"],
                                                         v.get("cause"), v.get("construction") or {})
        out.setdefault(fp, {"fingerprint": fp, "property": v["property"], "campaign": v["campaign"],
                            "cause": v.get("cause"), "message": v.get("message", "")})
    return out


def baseline_json(result: GateResult) -> dict[str, Any]:
    """A baseline file (``shmspec.baseline/2``): the properties ``result``
    has violated (``known``) and each finding by fingerprint (``findings``)."""
    found = _findings_of([v.to_json() for v in result.violations], result.protocol)
    return {**header(BASELINE_SCHEMA, "check"), "protocol": result.protocol, "target": result.target,
            "known": [pid for pid, verdict in result.properties.items() if verdict == "fail"],
            "findings": list(found.values())}


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
    findings: list[dict[str, str]] = field(default_factory=list)
    """Its violations as findings: ``{"violation": "V1", "fingerprint": ...,
    "status": "new" | "known" | "excused"}`` (``new`` too when judged without
    a baseline; ``excused``: by the contract, with its ``reason``)."""

    @property
    def failing(self) -> bool:
        return self.status in FAILING

    @property
    def new(self) -> list[dict[str, str]]:
        return [f for f in self.findings if f["status"] == "new"]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "verdict": self.verdict, "status": self.status, "violations": self.violations,
                "findings": self.findings}


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
    is_known = baseline.is_known if baseline is not None else (lambda v: False)
    excused = result.contract.excused if result.contract is not None else {}

    def standing(v: Any) -> str:
        return "excused" if v.fingerprint in excused else "known" if is_known(v) else "new"

    counts = result.property_counts()
    out = []
    for p in result.registry:
        verdict = result.properties[p.id]
        mine = [v for v in result.violations if v.property == p.id]
        findings = [{"violation": ids[id(v)], "fingerprint": v.fingerprint, "status": standing(v),
                     **({"reason": excused[v.fingerprint]} if v.fingerprint in excused else {})} for v in mine]
        if verdict == "fail":
            # one new finding fails the property, however many of its others are known
            if mine:
                status = "failed" if any(f["status"] == "new" for f in findings) else "known"
            else:
                status = "known" if p.id in known else "failed"
            text = "\n".join(("[new finding] " if f["status"] == "new" and (baseline is not None or excused) else
                              "[known finding] " if f["status"] == "known" else
                              f"[excused by the contract: {f.get('reason')}] " if f["status"] == "excused" else "")
                             + violation_text(int(ids[id(v)][1:]), v, result.descriptions, width)
                             for v, f in zip(mine, findings))
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
                                   counts[p.id][2], findings))
    return out


def summary_json(outcomes: list[PropertyOutcome], baseline: Baseline | None,
                 result: GateResult | None = None) -> dict[str, Any]:
    """``report.json``'s ``baseline`` block: the baseline and what it made of
    the run, by property (``new``: failing with a finding not known;
    ``still``; ``fixed``) and by finding (``findings``: ``new`` and ``known``,
    this run's fingerprints; ``fixed``, the baseline's fingerprints this run
    did not find), and ``notices`` (:meth:`Baseline.notices`)."""
    found = [f for o in outcomes for f in o.findings]
    seen = {f["fingerprint"] for f in found}
    fixed = sorted(fp for fp in (baseline.findings or {}) if fp not in seen) if baseline else []
    return {**(baseline.to_json() if baseline else {"source": None, "known": []}),
            "new": [o.id for o in outcomes if o.status == "failed"],
            "still": [o.id for o in outcomes if o.status == "known"],
            "fixed": [o.id for o in outcomes if o.status == "fixed"],
            "findings": {"new": [f for f in found if f["status"] == "new"],
                         "known": [f for f in found if f["status"] == "known"],
                         "excused": [f for f in found if f["status"] == "excused"],
                         "fixed": [{"fingerprint": fp, **{k: (baseline.findings or {})[fp].get(k)
                                                          for k in ("property", "campaign", "cause", "message")}}
                                   for fp in fixed]},
            "notices": baseline.notices(result) if baseline is not None and result is not None else []}


def baseline_lines(block: dict[str, Any], result: GateResult) -> list[str]:
    """The console's account of a run against its baseline (``block``:
    :func:`summary_json`): its notices, each finding new or known, the
    baseline's findings not found, and what that does to the exit status."""
    found = block["findings"]
    lines = list(block.get("notices", ()))
    lines.append(f"baseline {block['source']}: {len(found['new'])} new finding{'s' * (len(found['new']) != 1)} "
                 f"(failing the run), {len(found['known'])} known, {len(found['fixed'])} fixed"
                 + (f", {len(found['excused'])} excused by the contract" if found.get("excused") else ""))
    for status in ("new", "known"):
        for f in found[status]:
            v = result.violations[int(f["violation"][1:]) - 1]
            lines.append(f"  {status:5} {f['violation']} {f['fingerprint']}: {v.message}")
    lines += [f"  fixed {f['fingerprint']} (not found this run)" for f in found["fixed"]]
    if not block["new"] and block["still"]:
        lines.append("every violation above is a known finding: exit status 0 (the verdict stays FAIL in "
                     "report.json)")
    return lines


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
                 summary_json(outcomes, baseline, result) if baseline is not None else None)
    return outcomes


def junit_classname(target: str) -> str:
    """The JUnit ``classname`` of a target's property cases: what pytest's
    ``--junitxml`` makes of the plugin's items (``shmspec/<target>``: each
    ``/`` a ``.``, a final ``.py`` dropped), so that ``shmspec check --junit``
    and the plugin name them alike (``shmspec.impl``,
    ``shmspec.file:src.store`` for ``file:src/store.py``; until 2026-12-03
    ``check`` kept the slashes and the suffix)."""
    return re.sub(r"\.py$", "", f"shmspec/{target}".replace("/", "."))


def junit_xml(result: GateResult, outcomes: list[PropertyOutcome], report_dir: Path | None = None,
              baseline_source: str | None = None) -> str:
    """JUnit XML: one ``testsuite`` per run, one ``testcase`` per property
    (``classname`` :func:`junit_classname`, as the pytest plugin's items,
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
        case = ET.SubElement(suite, "testcase", classname=junit_classname(result.target), name=o.id,
                             time=f"{o.seconds:.3f}")
        if o.status == "failed":
            new = {f["violation"] for f in o.new}
            first = next((v for i, v in enumerate(result.violations, 1) if v.property == o.id and f"V{i}" in new),
                         next((v for v in result.violations if v.property == o.id), None))
            known = [f["violation"] for f in o.findings if f["status"] == "known"]
            message = (f"{o.id}: {first.message}" if first is not None else o.id) + (
                f" (new finding {first.fingerprint}; known: {', '.join(known)})" if known and first else "")
            ET.SubElement(case, "failure", message=message, type=o.id).text = o.text
        elif o.status == "unknown":
            ET.SubElement(case, "error", message=o.text, type="unknown").text = o.text
        elif o.status == "known":
            why = (f"baseline {baseline_source}" if baseline_source else
                   f"excused by the contract {result.contract_name}")
            ET.SubElement(case, "skipped", message=f"known finding ({why}): "
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
    findings = [(f, result.violations[int(f["violation"][1:]) - 1]) for o in outcomes for f in o.findings]
    if any(f["status"] == "known" for f, _ in findings):  # judged against a baseline: each finding's standing
        lines += ["", "| finding | fingerprint | standing |", "| --- | --- | --- |"]
        lines += [f"| {f['violation']} {v.property} | `{f['fingerprint']}` | "
                  f"{'**new**' if f['status'] == 'new' else 'known'} |" for f, v in findings]
    new = [(f, v) for f, v in findings if f["status"] == "new"]
    if new and any(o.status == "failed" for o in outcomes):
        lines += ["", "New findings:", ""]
        for f, v in new:
            lines.append(f"- **{v.property}** ({v.campaign}, `{f['fingerprint']}`): {v.message}")
    if report_dir is not None:
        lines += ["", f"Report: `{report_dir}` (report.html, report.json"
                  + (", repro_test.py: `python -m pytest repro_test.py`)" if result.violations else ")")]
    return "\n".join(lines) + "\n"


__all__ = ["BASELINE_SCHEMA", "Baseline", "FAILING", "OLD_BASELINE_SCHEMA", "baseline_lines", "PropertyOutcome", "baseline_json", "judge", "judge_and_report",
           "junit_xml",
           "step_summary", "summary_json"]
