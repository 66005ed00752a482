"""Seeded faults (mutants) of impl: the fault library of ``shmspec mutants``.

Each ``<name>.py`` here is a module file that is ``shmspec.impl`` with one
realistic bug, made by subclassing impl's classes (impl's source is never
edited).  It is loaded as a ``file:`` target (conformance/targets/loader.py) and
declares ``SHMSPEC_PROFILE = "impl"``; its docstring states the bug and, on a
``Must be caught by: <PROPERTY>`` line, the property whose violation must
detect it.  The files ship inside the package, so ``shmspec mutants`` works
from an installed copy; they are never imported as part of this package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MUTANTS_DIR = Path(__file__).resolve().parent
"""Folder holding the fault module files."""

CONTROL = "control_unmodified"
"""impl wrapped exactly like a fault, with no bug: the gate must pass it."""

RING_CONSTRUCTIONS: dict[str, dict] = {
    "writer-lock": {"writer_lock": True},
    "spawn": {"start_method": "spawn"},
    "one-reader": {"n_readers": 1},
}
"""A ring-buffer fault's ``Construction:`` names -> the fields of the
:class:`~shmspec.conformance.core.constructions.Construction` its gate
runs as primary (``shmspec mutants``)."""

_EXPECTED = re.compile(r"^Must be caught by: ([A-Z]+)\b", re.MULTILINE)
_SUMMARY = re.compile(r"^(?:Fault|Variant) \w+: (.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Fault:
    """One seeded fault: ``name`` (the file's stem), ``path`` (load it as
    ``file:<path>``), ``expected`` (the property id that must detect it) and
    ``summary`` (the docstring's first line, after the name)."""

    name: str
    path: Path
    expected: str
    summary: str
    kind: str = ""
    """The slot protocol it belongs to (``arena``/``queue``, :mod:`.slots`); "" for the ring buffer's."""
    construction: str = ""
    """Where it shows (a ``Construction: <name>`` line): ``deployed`` for a
    fault of the slot queue's deployed paths, which only the deployed
    construction's campaigns run (docs/slots.md); for a ring-buffer fault a
    key of :data:`RING_CONSTRUCTIONS` (``writer-lock``: the gate runs with
    the writer given the readers' lock as its primary construction, so that
    its lockstep campaign drives the writer's counted gets); "" for any."""

    @property
    def target(self) -> str:
        return f"{self.kind}:impl-file:{self.path}" if self.kind else f"file:{self.path}"


def _read(path: Path) -> Fault:
    text = path.read_text()
    doc = re.match(r'\s*"""(.*?)"""', text, re.DOTALL)
    body = doc.group(1) if doc else ""
    m = _EXPECTED.search(body)
    if m is None:
        raise ValueError(f"{path.name}: no 'Must be caught by: <PROPERTY>' line in its docstring")
    s = _SUMMARY.search(body)
    c = re.search(r"^Construction:\s*(\S+)", body, re.MULTILINE)
    return Fault(path.stem, path, m.group(1), s.group(1).replace("``", "") if s else "",
                 construction=c.group(1) if c else "")


def faults(only: list[str] | None = None) -> list[Fault]:
    """Every seeded fault in this folder, by name (the control excluded), or
    only those named in ``only`` (in that order).

    Raises:
        KeyError: a name in ``only`` that is no fault here (message lists them).
        ValueError: a fault file without a ``Must be caught by:`` line.
    """
    found = {p.stem: p for p in sorted(MUTANTS_DIR.glob("*.py")) if p.stem not in ("__init__", CONTROL)}
    # (the slot protocols' faults live in slots/, listed by slots.faults)
    if only is None:
        return [_read(p) for p in found.values()]
    unknown = [n for n in only if n not in found]
    if unknown:
        raise KeyError(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(found)}")
    return [_read(found[n]) for n in only]


def control() -> Fault:
    """The unmodified control, shaped like a fault (``expected`` is ``""``: nothing may catch it)."""
    return Fault(CONTROL, MUTANTS_DIR / f"{CONTROL}.py", "", "impl unmodified")


__all__ = ["CONTROL", "MUTANTS_DIR", "Fault", "control", "faults"]
