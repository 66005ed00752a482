"""The end of a gate run, shared by ``shmspec check`` and ``shmspec merge``:
the report directory prepared before the work, then the report written,
judged (baseline, contract), printed, and the exit status."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from ..core.errors import ExitCode, UsageError

EXIT_PASS, EXIT_FAIL, EXIT_ERROR, EXIT_UNKNOWN = ExitCode.PASS, ExitCode.FAIL, ExitCode.ERROR, ExitCode.UNKNOWN


def prepare_report_dir(path: Path) -> str | None:
    """Create ``path`` before the run (an unusable directory is found before
    minutes of work, not after) and drop a previous run's files (its
    report, repro and findings' recorded runs, ``traces/V<n>.json``).
    Returns an error message or None."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        for name in ("report.json", "report.html", "repro_test.py"):
            (path / name).unlink(missing_ok=True)
        for old in path.glob("traces/V*.json"):  # a finding's recorded run (report.write_report)
            old.unlink()
        probe = path / ".shmspec-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        return f"cannot write the report to {path}: {exc.strerror or exc}"
    return None


def report_and_judge(console: Console, err: Console, result: Any, report_dir: Path, started: str,
                     source: str | None, baseline: Any, junit: Path | None = None,
                     write_baseline: Path | None = None) -> int:
    """Write the report (and ``junit``, ``write_baseline``, the GitHub step
    summary), print the console report, the baseline's lines and the
    verdict line last; return the exit status (``check`` and ``merge``)."""
    from ..reporting import outcomes as judged
    from ..reporting.report import render_console, verdict_line

    try:
        outcomes = judged.judge_and_report(result, report_dir, started, source, baseline)
        if junit is not None:
            junit.write_text(judged.junit_xml(result, outcomes, report_dir,
                                                   baseline.source if baseline else None))
        if write_baseline is not None:
            write_baseline.write_text(json.dumps(judged.baseline_json(result), indent=2) + "\n")
        if os.environ.get("GITHUB_STEP_SUMMARY"):  # a GitHub Actions job: its summary page
            with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as f:
                f.write(judged.step_summary(result, outcomes, report_dir))
    except UsageError as exc:  # a baseline of another protocol
        err.print(f"shmspec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    except OSError as exc:
        err.print(f"shmspec: error: cannot write the report: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    block = judged.summary_json(outcomes, baseline, result) if baseline is not None else None
    render_console(console, result, report_dir, verdict=False)
    if block is not None:
        for line in judged.baseline_lines(block, result):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    for o in outcomes:
        for f in o.findings:
            if f["status"] == "excused":
                console.print(f"excused by the contract: {f['violation']} {f['fingerprint']} ({f['reason']})",
                              markup=False, highlight=False, soft_wrap=True)
    for flag, path in (("junit", junit), ("baseline", write_baseline)):
        if path is not None:
            console.print(f"wrote {flag}: {path}", markup=False, highlight=False)
    status = _check_status(result, outcomes)
    verdict = result.verdict if status == EXIT_PASS and result.verdict != "fail" else _STATUS_VERDICT[status]
    detail = f"{len(result.violations)} violation(s)"
    if block is not None and result.violations:
        n_new = len(block["findings"]["new"])
        detail += f", {n_new} new to the baseline" if n_new else ", none new to the baseline"
    elif any(f["status"] == "excused" for o in outcomes for f in o.findings) and status != EXIT_FAIL:
        detail += ", excused by the contract"
    console.print(verdict_line(verdict, f"{detail}, {result.seconds:.1f}s", report_dir), soft_wrap=True)
    return status


_STATUS_VERDICT = {EXIT_PASS: "pass", EXIT_FAIL: "fail", EXIT_ERROR: "error", EXIT_UNKNOWN: "unknown"}


def _check_status(result: Any, outcomes: list) -> int:
    """The exit status, as the verdict (GateResult.verdict), known findings
    aside: a new one, then a crashed campaign, then a budget that ran out."""
    if any(o.status == "failed" for o in outcomes):
        return EXIT_FAIL
    if any(c.error for c in result.campaigns):
        return EXIT_ERROR
    if any(c.unknown for c in result.campaigns):
        return EXIT_UNKNOWN
    return EXIT_PASS


