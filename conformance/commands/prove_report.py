"""``shmspec prove``: run the z3 obligations, print them, write ``prove.json``.

``prove.json`` (schema ``shmspec.prove/1``) is documented in
``reports/README.md``.  A refuted obligation's counterexample (or a witness
obligation's witness) is drawn like any other violation: a panel with the
state and the step that breaks the claim.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from shmspec.model.profile import PROFILES

from ..core.documents import header
from ..core.errors import ExitCode
from ..core.results import Violation
from ..proofs.prove import DEFAULT_CHUNKS, OBLIGATIONS, ObligationResult, prove_all

SCHEMA = "shmspec.prove/1"
STYLE = {"proven": "bold green", "refuted": "bold red", "unknown": "bold yellow"}


def results_table(results: list[ObligationResult], statements: bool = True) -> Table:
    t = Table(title="Obligations (z3)", box=box.SIMPLE_HEAVY)
    t.add_column("obligation", no_wrap=True)
    t.add_column("property", no_wrap=True)
    t.add_column("kind", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    t.add_column("chunks", no_wrap=True, justify="right")
    t.add_column("time", no_wrap=True, justify="right")
    if statements:
        t.add_column("statement", overflow="fold")
    for r in results:
        ks = f"≤{max(r.checked)}" if len(r.checked) > 1 else "any"
        row = [r.name, r.property, r.kind, Text(r.verdict, style=STYLE[r.verdict]), ks, f"{r.seconds:.2f}s"]
        t.add_row(*row, *([r.statement] if statements else []))
    return t


def as_violation(r: ObligationResult) -> Violation:
    """A refuted obligation as a report violation (campaign ``prove``)."""
    state = ", ".join(f"{k}={v}" for k, v in (r.model or {}).items())
    msg = f"obligation {r.name} refuted: {r.statement}. Counterexample: {state}"
    if r.reason:
        msg += f". Explained: {r.reason}"
    return Violation(r.property, msg, "prove", 0, [r.step] if r.step else [], {"model": r.model})


def run(console: Console, err: Console, report_dir: Path, chunks: int = DEFAULT_CHUNKS,
        profile: str = "impl") -> int:
    """Check every obligation, print the table (and a panel per refuted one),
    write ``report_dir/prove.json``.  Returns 0 iff every obligation is proven, else 1."""
    from ..reporting.report import verdict_line, violation_panel

    t0 = time.monotonic()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    with err.status("proving") as status:
        def progress(r: ObligationResult) -> None:
            status.update(f"proving: {r.name} {r.verdict}")
        results = prove_all(chunks, OBLIGATIONS, progress, PROFILES[profile])
    seconds = time.monotonic() - t0
    console.print(results_table(results, statements=console.width >= 110))
    bad = [r for r in results if r.verdict != "proven"]
    for i, r in enumerate(bad, 1):
        if r.verdict == "refuted":
            console.print(violation_panel(i, as_violation(r)))
        else:
            console.print(f"[yellow]{r.name}: unknown ({r.reason})[/]")
    for r in results:
        if r.kind == "witness" and r.verdict == "proven":
            console.print(f"[dim]{r.name}: witness {r.model}[/]")
    verdict = "pass" if not bad else "fail"
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "prove.json").write_text(json.dumps({
        **header(SCHEMA, "prove"),
        "model_profile": profile,
        "chunks": chunks,
        "started": started,
        "seconds": round(seconds, 3),
        "verdict": verdict,
        "obligations": [r.to_json() for r in results],
    }, indent=2, default=str) + "\n")
    console.print(verdict_line(verdict, f"{len(results) - len(bad)}/{len(results)} proven, {seconds:.1f}s",
                               report_dir / "prove.json"), soft_wrap=True)
    return ExitCode.PASS if not bad else ExitCode.FAIL
