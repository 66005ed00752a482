"""Seeded faults of impl's slot-flag stores (:mod:`shmspec.impl.slots`):
the fault library of ``shmspec mutants --protocol arena|queue``.

Each ``arena_*.py`` / ``queue_*.py`` here is a module file that subclasses
``SlotArena`` or ``SlotQueue`` with one realistic bug (impl's source is never
edited), loaded as an ``arena:impl-file:`` / ``queue:impl-file:`` target;
its docstring states the bug and, on a ``Must be caught by: <PROPERTY>``
line, the property whose violation must detect it.  The control is impl
itself (``arena:impl``, ``queue:impl``), which the gate must pass.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .. import Fault, _read

SLOT_MUTANTS_DIR = Path(__file__).resolve().parent


def faults(only: list[str] | None = None, protocol: str | None = None) -> list[Fault]:
    """The seeded faults of ``protocol`` (``arena`` or ``queue``; None:
    both), by name, or only those named in ``only`` (in that order).

    Raises:
        KeyError: a name in ``only`` that is no fault here (message lists them).
        ValueError: a fault file without a ``Must be caught by:`` line."""
    found = {p.stem: p for p in sorted(SLOT_MUTANTS_DIR.glob("*.py"))
             if p.stem != "__init__" and (protocol is None or p.stem.startswith(f"{protocol}_"))}
    names = list(found) if only is None else only
    unknown = [n for n in names if n not in found]
    if unknown:
        raise KeyError(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(found)}")
    return [replace(_read(found[n]), kind=n.split("_", 1)[0]) for n in names]


__all__ = ["SLOT_MUTANTS_DIR", "faults"]
