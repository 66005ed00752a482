"""Spec coverage of recorded runs (issue 29 item 3): which parts of
tla/ShmStore.tla's actions real runs reached, against what TLC reaches in the
model.

TLC's ``-coverage`` counts, for every expression it evaluated, how often:
:func:`locations` reads those counts off its output.  A *part* is one such
expression of ShmStore.tla (a location ``(line, col, line, col)``) inside
the definitions of the protocol's steps (from ``Phys`` to ``Next``: the
actions and the helpers they call; :func:`step_definitions`).  A part the
model reaches (MC_impl_reread.cfg, whose constants are the recorded impl
runs': ``Hardened``, re-reads allowed) and that no real run's trace check
evaluates is a gap: a behaviour of the spec no real run has shown.
:func:`coverage` gives both sides and the gaps, per definition.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import paths
from .tlc import TlcError, default_tla_dir, find_jar, run_tlc

MODEL_CONFIG = "MC_impl_reread.cfg"
"""The model config whose constants a recorded impl run's trace check uses."""

_LOC = re.compile(r"^[ |]*line (\d+), col (\d+) to line (\d+), col (\d+) of module (\w+): (\d+)\s*$", re.M)
_DEF = re.compile(r"^([A-Za-z_]\w*)(?:\([^)]*\))?\s*==", re.M)

Location = tuple[int, int, int, int]
"""``(first line, first column, last line, last column)`` in ShmStore.tla (1-based)."""


def locations(output: str, module: str = "ShmStore") -> dict[Location, int]:
    """Every expression of ``module`` TLC's coverage report lists, and the
    most times it was evaluated in any of the contexts it is listed in."""
    out: dict[Location, int] = {}
    for m in _LOC.finditer(output):
        if m.group(5) != module:
            continue
        loc = (int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)))
        out[loc] = max(out.get(loc, 0), int(m.group(6)))
    return out


def step_definitions(text: str) -> list[tuple[str, int, int]]:
    """``(name, first line, last line)`` of each definition from ``Phys`` up to
    (not including) ``Next`` in ShmStore.tla's text."""
    defs = [(m.group(1), text.count("\n", 0, m.start()) + 1) for m in _DEF.finditer(text)]
    names = [n for n, _ in defs]
    lo, hi = names.index("Phys"), names.index("Next")
    return [(n, first, defs[i + 1][1] - 1) for i, (n, first) in enumerate(defs[lo:hi], start=lo)]


@dataclass
class DefinitionCoverage:
    """One definition's parts: how many the model reaches, how many real runs
    reach, and the parts the model reaches and no run does (with their text)."""

    name: str
    model: int
    runs: int
    gaps: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"definition": self.name, "model_parts": self.model, "run_parts": self.runs, "gaps": self.gaps}


@dataclass
class Coverage:
    definitions: list[DefinitionCoverage]
    unreached_actions: list[str]
    """Spec actions (``SPEC_ACTIONS``) no recorded run took."""

    @property
    def gaps(self) -> int:
        return sum(len(d.gaps) for d in self.definitions)

    def to_json(self) -> dict[str, Any]:
        return {"model_config": MODEL_CONFIG, "unreached_actions": self.unreached_actions,
                "model_parts": sum(d.model for d in self.definitions),
                "run_parts": sum(d.runs for d in self.definitions), "gaps": self.gaps,
                "definitions": [d.to_json() for d in self.definitions]}


def _snippet(lines: list[str], loc: Location) -> str:
    l1, c1, l2, c2 = loc
    if l1 == l2:
        return lines[l1 - 1][c1 - 1:c2].strip()
    return (lines[l1 - 1][c1 - 1:].strip() + " ...")[:100]


def compare(model: dict[Location, int], runs: dict[Location, int], text: str,
            unreached_actions: list[str]) -> Coverage:
    """The coverage of ``runs``' expression counts against ``model``'s, per
    step definition of ShmStore.tla's ``text``."""
    lines = text.splitlines()
    out = []
    for name, first, last in step_definitions(text):
        mine = [loc for loc, n in model.items() if n > 0 and first <= loc[0] <= last]
        if not mine:
            continue
        reached = [loc for loc in mine if runs.get(loc, 0) > 0]
        gaps = [{"line": loc[0], "col": loc[1], "text": _snippet(lines, loc)}
                for loc in sorted(set(mine) - set(reached))]
        out.append(DefinitionCoverage(name, len(mine), len(reached), gaps))
    return Coverage(out, unreached_actions)


def model_locations(timeout: float = 600.0, tla_dir: Path | None = None) -> dict[Location, int]:
    """TLC's expression counts on :data:`MODEL_CONFIG` (its whole state space,
    no invariants).  The counts are kept in ``cache_dir()/tlc/coverage-<key>.json``,
    ``key`` a hash of ShmStore.tla's and the config's texts and the jar's name:
    TLC runs again only when one of them changed.

    Raises:
        TlcError: TLC could not run, or its run did not end ``ok``.
    """
    folder = tla_dir or default_tla_dir()
    cfg = folder / MODEL_CONFIG
    key = hashlib.sha256("\0".join([(folder / "ShmStore.tla").read_text(), cfg.read_text(),
                                     find_jar().name]).encode()).hexdigest()[:16]
    cached = paths.cache_dir() / "tlc" / f"coverage-{key}.json"
    try:
        return {tuple(loc): n for *loc, n in json.loads(cached.read_text())}  # type: ignore[misc]
    except (OSError, ValueError, TypeError):
        pass
    res = run_tlc(cfg, spec=folder / "ShmStore.tla", timeout=timeout, invariants=[], properties=[], workers=2,
                  coverage=True)
    if res.status != "ok":
        raise TlcError(f"TLC's coverage run of {MODEL_CONFIG} ended {res.status} (exit {res.exit_code})")
    out = locations(res.output)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps([[*loc, n] for loc, n in sorted(out.items())]))
    tmp.replace(cached)  # atomic: a concurrent reader sees the old file or the whole new one
    return out


__all__ = ["Coverage", "DefinitionCoverage", "Location", "MODEL_CONFIG", "compare", "locations", "model_locations",
           "step_definitions"]
