"""``shmspec validate TRACE...``: recorded runs checked against ShmStore.tla by TLC.

Each trace (the JSON of :mod:`..concurrency.record`, written by
``ScheduledSession(record=True)`` or by a store's own test) is checked with
:func:`..spec.validate.validate`.  The console gets one line per trace and,
for a trace TLC rejects, the recorded step where the run departs from the
spec with the spec state(s) reached just before it; ``validate.json`` and
``validate.html`` go to the report folder (with ``--itf``, each trace as
ITF JSON too: ``itf/<trace stem>.itf.json``, :func:`..spec.validate.trace_to_itf`,
its path in the trace's ``itf`` entry of ``validate.json``; with
``--coverage``, the spec coverage of :func:`..spec.validate.spec_coverage`
on the console and in ``validate.json``'s ``coverage``).  Exit codes: 0 every trace
validates, 1 one does not, 2 a file is not a trace or TLC cannot run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..core.documents import header
from ..core.errors import ExitCode
from ..reporting.report import record_html, verdict_line
from ..spec.tlc import TlcError
from ..spec.validate import (TraceFormatError, Validation, load_trace, shown, trace_to_itf, validate,
                              validate_with_coverage)

SCHEMA = "shmspec.validate/1"
"""``validate.json``'s schema (docs/report-schemas.md)."""


def run(paths: list[Path], timeout: float = 600.0) -> list[tuple[Path, dict[str, Any], Validation]]:
    """Load every trace first (a bad file stops the run before TLC starts),
    then validate each.

    Raises:
        TraceFormatError: a file is not a trace this version reads.
        TlcError: TLC could not run.
    """
    docs = [(p, load_trace(p)) for p in paths]
    return [(p, doc, validate(doc, timeout=timeout)) for p, doc in docs]


def run_with_coverage(paths: list[Path], timeout: float = 600.0) -> tuple[list[tuple[Path, dict[str, Any], Validation]], Any]:
    """:func:`run` and the traces' spec coverage, from the same TLC runs
    (:func:`..spec.validate.validate_with_coverage`): ``(results, Coverage)``.

    Raises:
        TraceFormatError: a file is not a trace this version reads.
        TlcError: TLC could not run.
    """
    docs = [(p, load_trace(p)) for p in paths]
    results, cov = validate_with_coverage([doc for _, doc in docs], timeout=timeout)
    return [(p, doc, v) for (p, doc), v in zip(docs, results)], cov


def render(console: Console, results: list[tuple[Path, dict[str, Any], Validation]]) -> None:
    table = Table(title="recorded runs against ShmStore.tla")
    for col in ("trace", "target", "events", "spec steps", "TLC states", "verdict"):
        table.add_column(col)
    for path, doc, v in results:
        verdict = "[green]validates[/]" if v.verdict == "pass" else "[red]departs[/]"
        if v.unmodelled:
            verdict += f" (up to event {v.unmodelled['event']}: {v.unmodelled['op']} is not in the spec)"
        table.add_row(str(path), str(doc.get("target", "?")), str(v.events), str(v.steps), str(v.distinct), verdict)
    console.print(table)
    for path, _doc, v in results:
        d = v.departure
        if d is None:
            continue
        console.print(f"[bold]{path}[/]: {d.describe()}", soft_wrap=True)
        console.print(f"  recorded: {json.dumps(d.recorded)}", markup=False, soft_wrap=True)
        for i, s in enumerate(d.states[:3]):
            console.print(f"  spec state {i + 1} before it: {json.dumps(shown(s))}", markup=False, soft_wrap=True)
        lines = d.overlap_lines()
        for line in lines[:12]:
            console.print(f"  ran while it did: {line}", markup=False, soft_wrap=True)
        if len(lines) > 12:
            console.print(f"  ... and {len(lines) - 12} more (validate.json: the departure's overlapping)",
                          markup=False, soft_wrap=True)


def to_json(results: list[tuple[Path, dict[str, Any], Validation]], itf: list[str] | None = None) -> dict[str, Any]:
    traces = [{"path": str(p), "target": doc.get("target"), "construction": doc.get("construction"), **v.to_json()}
              for p, doc, v in results]
    for t, name in zip(traces, itf or ()):
        t["itf"] = name
    return {**header(SCHEMA, "shmspec validate"),
            "verdict": "pass" if all(v.verdict == "pass" for *_, v in results) else "fail", "traces": traces}


def write_itf(results: list[tuple[Path, dict[str, Any], Validation]], report_dir: Path) -> list[str]:
    """Each trace as ITF in ``report_dir/itf``; the paths written, relative to ``report_dir``."""
    (report_dir / "itf").mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    for path, doc, _ in results:
        stem = path.name.removesuffix(".json")
        name = f"itf/{stem}.itf.json"
        n = 1
        while name in names:
            n += 1
            name = f"itf/{stem}-{n}.itf.json"
        names.append(name)
        (report_dir / name).write_text(json.dumps(trace_to_itf(doc, source=str(path)), indent=1) + "\n")
    return names


def render_coverage(console: Console, cov: Any) -> None:
    """The parts of ShmStore.tla's steps the model reaches, how many of them the
    traces reach, and each one they do not (:mod:`..spec.coverage`)."""
    j = cov.to_json()
    table = Table(title=f"spec coverage: the traces against the model ({j['model_config']})")
    for col in ("definition", "model parts", "reached by the traces", "not reached (line: expression)"):
        table.add_column(col)
    for d in cov.definitions:
        gaps = escape("; ".join(f"{g['line']}: {g['text']}" for g in d.gaps))
        table.add_row(d.name, str(d.model), str(d.runs), gaps or "-")
    console.print(table)
    console.print(f"coverage: {j['run_parts']} of {j['model_parts']} parts the model reaches; spec actions no trace "
                  f"took: {', '.join(cov.unreached_actions) or 'none'}", soft_wrap=True)


def main(args: argparse.Namespace, console: Console, err: Console, report_dir: Path) -> int:
    cov = None
    try:
        with err.status("TLC on the recorded runs"):
            if getattr(args, "coverage", False):
                results, cov = run_with_coverage(args.traces, timeout=args.timeout)
            else:
                results = run(args.traces, timeout=args.timeout)
    except (TraceFormatError, TlcError) as exc:
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return ExitCode.ERROR
    report_dir.mkdir(parents=True, exist_ok=True)
    doc = to_json(results, write_itf(results, report_dir) if getattr(args, "itf", False) else None)
    if cov is not None:
        doc["coverage"] = cov.to_json()

    def show(c: Console) -> None:
        render(c, results)
        if cov is not None:
            render_coverage(c, cov)

    (report_dir / "validate.json").write_text(json.dumps(doc, indent=2) + "\n")
    (report_dir / "validate.html").write_text(record_html(show))
    show(console)
    bad = sum(1 for *_, v in results if v.verdict != "pass")
    detail = (f"{len(results) - bad} of {len(results)} trace{'s' if len(results) != 1 else ''} validate"
              f"{'s' if len(results) == 1 else ''}, {sum(v.seconds for *_, v in results):.1f} s of TLC")
    console.print(verdict_line(doc["verdict"], detail, report_dir), soft_wrap=True)
    return ExitCode.PASS if not bad else ExitCode.FAIL


__all__ = ["SCHEMA", "main", "render", "render_coverage", "run", "run_with_coverage", "to_json", "write_itf"]
