"""The header every JSON document shmspec writes starts with (report.json,
model.json, prove.json, mutants.json, matrix.json): ``schema`` (a name and a
major version, ``shmspec.report/1``: a reader refuses a major it does not
know), ``tool`` (name and version) and ``command``.  docs/report-schemas.md
describes each document."""

from __future__ import annotations

from typing import Any

import shmspec


def header(schema: str, command: str) -> dict[str, Any]:
    """``{"schema": schema, "tool": {"name": "shmspec", "version": ...}, "command": command}``."""
    return {"schema": schema, "tool": {"name": "shmspec", "version": shmspec.__version__}, "command": command}


__all__ = ["header"]
