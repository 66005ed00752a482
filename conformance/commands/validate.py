"""``shmspec validate TRACE...``: recorded runs checked against ShmStore.tla by TLC.

Each trace (the JSON of :mod:`..concurrency.record`, written by
``ScheduledSession(record=True)`` or by a store's own test) is checked with
:func:`..spec.validate.validate`.  The console gets one line per trace and,
for a trace TLC rejects, the recorded step where the run departs from the
spec with the spec state(s) reached just before it; ``validate.json`` and
``validate.html`` go to the report folder.  Exit codes: 0 every trace
validates, 1 one does not, 2 a file is not a trace or TLC cannot run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..core.errors import ExitCode
from ..reporting.report import record_html, verdict_line
from ..spec.tlc import TlcError
from ..spec.validate import TraceFormatError, Validation, load_trace, shown, validate


def run(paths: list[Path], timeout: float = 600.0) -> list[tuple[Path, dict[str, Any], Validation]]:
    """Load every trace first (a bad file stops the run before TLC starts),
    then validate each.

    Raises:
        TraceFormatError: a file is not a trace this version reads.
        TlcError: TLC could not run.
    """
    docs = [(p, load_trace(p)) for p in paths]
    return [(p, doc, validate(doc, timeout=timeout)) for p, doc in docs]


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


def to_json(results: list[tuple[Path, dict[str, Any], Validation]]) -> dict[str, Any]:
    return {"verdict": "pass" if all(v.verdict == "pass" for *_, v in results) else "fail",
            "traces": [{"path": str(p), "target": doc.get("target"), "construction": doc.get("construction"),
                        **v.to_json()} for p, doc, v in results]}


def main(args: argparse.Namespace, console: Console, err: Console, report_dir: Path) -> int:
    try:
        with err.status("TLC on the recorded runs"):
            results = run(args.traces, timeout=args.timeout)
    except (TraceFormatError, TlcError) as exc:
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return ExitCode.ERROR
    report_dir.mkdir(parents=True, exist_ok=True)
    doc = to_json(results)
    (report_dir / "validate.json").write_text(json.dumps(doc, indent=2) + "\n")
    (report_dir / "validate.html").write_text(record_html(lambda rec: render(rec, results)))
    render(console, results)
    bad = sum(1 for *_, v in results if v.verdict != "pass")
    detail = (f"{len(results) - bad} of {len(results)} trace{'s' if len(results) != 1 else ''} validate"
              f"{'s' if len(results) == 1 else ''}, {sum(v.seconds for *_, v in results):.1f} s of TLC")
    console.print(verdict_line(doc["verdict"], detail, report_dir), soft_wrap=True)
    return ExitCode.PASS if not bad else ExitCode.FAIL


__all__ = ["main", "render", "run", "to_json"]
