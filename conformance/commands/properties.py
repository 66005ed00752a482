"""``shmspec properties [ID ...] [--json]``: the property registry
(:data:`shmspec.model.properties.PROPERTIES`) as a table, or for the ids
given, each one's statement, severity, kind, contract variants, TLA+ name and
every checker that claims it with where that checker judges it (``module:qualname``
or a file), and where its findings are rendered.  Exit 0; 2 for an unknown id."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from shmspec.model.properties import BY_ID, CHECKERS, PROPERTIES, Property

from ..core.errors import ExitCode

RENDERED_BY = "shmspec.conformance.reporting.report:violation_panel"
"""Where every checker's findings of a property are rendered (console and report.html)."""
STATED_IN = "shmspec.model.properties:PROPERTIES"


def as_json(p: Property) -> dict[str, Any]:
    return {"id": p.id, "statement": p.statement, "severity": p.severity, "kind": p.kind,
            "contracts": list(p.contracts), "tla": p.tla, "stated_in": STATED_IN,
            "checked_by": {c: CHECKERS[c] for c in sorted(p.checkers)}, "rendered_by": RENDERED_BY}


def main(ids: list[str], as_json_out: bool, out: Console, err: Console) -> int:
    unknown = [i for i in ids if i.upper() not in BY_ID]
    if unknown:
        err.print(f"shmspec: error: unknown property {', '.join(unknown)} (known: {', '.join(BY_ID)})",
                  markup=False, highlight=False, soft_wrap=True)
        return ExitCode.ERROR
    chosen = [BY_ID[i.upper()] for i in ids] if ids else list(PROPERTIES)
    if as_json_out:
        out.print_json(json.dumps([as_json(p) for p in chosen]))
        return ExitCode.PASS
    if not ids:
        t = Table("id", "severity", "kind", "contracts", "checkers", "statement",
                  title=f"{len(chosen)} properties ({STATED_IN})", title_justify="left")
        for p in chosen:
            t.add_row(p.id, str(p.severity), p.kind, " / ".join(p.contracts), " ".join(sorted(p.checkers)),
                      p.statement)
        out.print(t)
        return ExitCode.PASS
    for p in chosen:
        t = Table(show_header=False, title=f"{p.id}: {p.statement}", title_justify="left")
        t.add_column(no_wrap=True)
        t.add_column(overflow="fold")
        t.add_row("stated in", STATED_IN)
        t.add_row("severity / kind", f"{p.severity} / {p.kind}")
        if p.contracts:
            t.add_row("contracts", " / ".join(p.contracts) + " (a store's model profile names one)")
        if p.tla:
            t.add_row("TLA+", f"tla/ShmStore.tla: {p.tla}")
        for c in sorted(p.checkers):
            t.add_row(f"checked by {c}", CHECKERS[c])
        t.add_row("rendered by", RENDERED_BY)
        out.print(t)
    return ExitCode.PASS
