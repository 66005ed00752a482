"""``shmspec properties [ID ...] [--json] [--protocol NAME]``: a store
protocol's property registry (default the ring buffer's,
:data:`shmspec.model.properties.PROPERTIES`) as a table, or for the ids
given, each one's statement, severity, kind, contract variants, TLA+ name and
every checker that claims it with that checker's entry point
(``module:qualname`` or a file: the property is judged in what it calls), and
where its findings are rendered.  Exit 0; 2 for an unknown id or protocol."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from shmspec.model.properties import Property

from .. import protocols
from ..core.errors import ExitCode, UsageError

RENDERED_BY = "shmspec.conformance.reporting.report:violation_panel"
"""Where every checker's findings of a property are rendered (console and report.html)."""
STATED_IN = "shmspec.model.properties:PROPERTIES"
"""The ring-buffer protocol's registry (its ``stated_in``)."""


def as_json(p: Property, protocol=None) -> dict[str, Any]:
    protocol = protocol or protocols.get()
    return {"id": p.id, "statement": p.statement, "severity": p.severity, "kind": p.kind,
            "contracts": list(p.contracts), "tla": p.tla, "stated_in": protocol.stated_in,
            "checked_by": {c: protocol.checkers.get(c, "?") for c in sorted(p.checkers)},
            "rendered_by": RENDERED_BY}


def main(ids: list[str], as_json_out: bool, out: Console, err: Console, protocol: str = protocols.DEFAULT) -> int:
    def fail(msg: str) -> int:
        err.print(f"shmspec: error: {msg}", markup=False, highlight=False, soft_wrap=True)
        return ExitCode.ERROR

    try:
        proto = protocols.get(protocol)
    except UsageError as exc:
        return fail(str(exc))
    by_id = {p.id: p for p in proto.properties}
    unknown = [i for i in ids if i.upper() not in by_id]
    if unknown:
        return fail(f"unknown property {', '.join(unknown)} (known: {', '.join(by_id)})")
    chosen = [by_id[i.upper()] for i in ids] if ids else list(proto.properties)
    if as_json_out:
        out.print_json(json.dumps([as_json(p, proto) for p in chosen]))
        return ExitCode.PASS
    if not ids:
        t = Table("id", "severity", "kind", "contracts", "checkers", "statement",
                  title=f"{len(chosen)} properties ({proto.stated_in})", title_justify="left")
        for p in chosen:
            t.add_row(p.id, str(p.severity), p.kind, " / ".join(p.contracts), " ".join(sorted(p.checkers)),
                      p.statement)
        out.print(t)
        return ExitCode.PASS
    for p in chosen:
        t = Table(show_header=False, title=f"{p.id}: {p.statement}", title_justify="left")
        t.add_column(no_wrap=True)
        t.add_column(overflow="fold")
        t.add_row("stated in", proto.stated_in)
        t.add_row("severity / kind", f"{p.severity} / {p.kind}")
        if p.contracts:
            t.add_row("contracts", " / ".join(p.contracts) + " (a store's model profile names one)")
        if p.tla:
            t.add_row("TLA+", f"{proto.tla_dir.name if proto.tla_dir else 'tla'}/ShmStore.tla: {p.tla}")
        for c in sorted(p.checkers):
            t.add_row(f"checked by {c}", f"{proto.checkers.get(c, '?')} (entry point)")
        t.add_row("rendered by", RENDERED_BY)
        out.print(t)
    return ExitCode.PASS
