"""``shmspec merge REPORT...``: one report from the shards of a run.

A deep run split over CI jobs (``shmspec check --seeds K --shard i/n``)
leaves ``n`` report directories; this command loads each ``report.json``
(:meth:`~shmspec.conformance.core.results.GateResult.from_report`), merges
the shards' units in unit order
(:func:`~shmspec.conformance.runner.units.merge_shards`: the result one
unsharded run of the same seeds gives), and writes and prints what ``shmspec
check`` would have: ``report.json``, ``report.html``, ``repro_test.py``,
``--junit``, the GitHub step summary, the baseline's lines, and the verdict
line last.  Exit status as ``check``'s; 2, with one line on stderr, when a
report cannot be read, the reports are of different runs (target, protocol,
profiles, contract, concurrency, construction, seeds, shard count) or
harness versions, or a shard is missing or given twice.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from ..core.errors import ExitCode, UsageError
from .finish import prepare_report_dir, report_and_judge

SCHEMA = "shmspec.report/1"


def load_shard(path: Path) -> tuple[dict[str, Any], Any]:
    """``(report.json's document, its GateResult)`` of a report file or a
    report directory.

    Raises:
        UsageError: the file cannot be read, or is not a gate report (one line).
    """
    from .. import protocols
    from ..core.contract import Contract
    from ..core.results import GateResult

    file = path / "report.json" if path.is_dir() else path
    try:
        doc = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{file}: cannot read a report ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise UsageError(f"{file}: not a gate report (schema {got!r}, expected {SCHEMA!r})")
    try:
        registry = protocols.get(doc.get("protocol", "ringbuffer")).properties
    except UsageError as exc:
        raise UsageError(f"{file}: {exc}") from None
    try:
        contract = Contract.from_json(doc["contract"]) if doc.get("contract") else None
        return doc, GateResult.from_report(doc, registry, contract)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{file}: a gate report with a missing or malformed key ({type(exc).__name__}: {exc})") \
            from None


def merge_reports(paths: list[Path]) -> tuple[Any, str | None, str | None]:
    """``(merged GateResult, target_source, started)`` of the shards' reports.

    Raises:
        UsageError: a report cannot be read, the reports are of different
            harness versions or runs, or a shard is missing or given twice.
    """
    from ..runner.units import merge_shards

    loaded = [load_shard(p) for p in paths]
    versions = {json.dumps(d.get("tool", {}).get("version")) for d, _ in loaded}
    if len(versions) > 1:
        raise UsageError(f"the reports are of different shmspec versions: {', '.join(sorted(versions))}")
    try:
        merged = merge_shards([r for _, r in loaded])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    starts = sorted(d["started"] for d, _ in loaded if d.get("started"))
    return merged, loaded[0][0].get("target_source"), starts[0] if starts else None


def main(args: Any, console: Console, err: Console) -> int:
    """The ``shmspec merge`` command (``args`` from cli.py's parser)."""
    from ..reporting import outcomes as judged
    from ..reporting.report import default_report_dir

    try:
        baseline = judged.Baseline.load(args.baseline) if args.baseline is not None else None
        result, source, started = merge_reports(list(args.reports))
    except UsageError as exc:
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return ExitCode.ERROR
    report_dir = args.report_dir or default_report_dir("merge-" + result.target.rsplit("/", 1)[-1])
    problem = prepare_report_dir(report_dir)
    if problem:
        err.print(f"shmspec: error: {problem}", markup=False, highlight=False, soft_wrap=True)
        return ExitCode.ERROR
    started = started or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    console.print(f"merged {len(args.reports)} shard report(s) of {result.target}: seed units "
                  f"{result.units}, seeds {', '.join(map(str, result.seeds or (result.seed,)))}",
                  markup=False, highlight=False, soft_wrap=True)
    return report_and_judge(console, err, result, report_dir, started, source, baseline, junit=args.junit,
                            write_baseline=args.write_baseline)


__all__ = ["load_shard", "main", "merge_reports"]
