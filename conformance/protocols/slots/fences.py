"""Memory order per release (docs/slots.md#memory-order-per-release): the
fences a store file places between the writer's flag stores, read from its
code, and the model's verdict for that placement under TSO (x86) and PSO
(the weaker store order of ARM servers such as Grace, and POWER).

:func:`writer_fences` reads the writer's function (the queue's
``acquire_write``, the arena's ``write_tensor``) in source order and finds
its three flag stores and its fences:

* the *claim* (``written := 0``), the *reset* of every reader's flag (a
  store inside a loop, or one per reader) and the *publish*
  (``written := 1``), as stores into the slot's metadata row;
* a fence (a call whose name ends in ``fence``, vLLM's ``memory_fence()``)
  between the claim and the next store is the model's ``claim`` fence; one
  between the last reset and the publish is its ``publish`` fence
  (:data:`shmspec.model.slots.FENCES`).  Fences elsewhere (before the free
  check, after the publish) order nothing the model's stores race on.

:func:`verdicts` explores the model (:func:`shmspec.model.slots.explore`,
:data:`SIZES`) with those fences under each order.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WRITER_FUNCTIONS = {"queue": ("acquire_write",), "arena": ("write_tensor",)}
ORDERS = ("tso", "pso")


@dataclass(frozen=True)
class Placement:
    """What :func:`writer_fences` read: the model's ``fences``, the writer's
    events in source order (``claim``, ``reset``, ``publish``, ``fence``),
    and the function read (``Class.function``), or ``found`` None."""

    fences: frozenset[str]
    events: tuple[str, ...]
    found: str | None

    def to_json(self) -> dict[str, Any]:
        return {"fences": sorted(self.fences), "events": list(self.events), "function": self.found}


def _row_store(node: ast.AST) -> str | None:
    """``claim``/``publish``/``reset`` for a store into a metadata row
    (``metadata_buffer[0] = 0``, ``metadata_buffer[i] = 0``), else None."""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return None
    t = node.targets[0]
    if not isinstance(t, ast.Subscript) or "meta" not in ast.unparse(t.value).lower():
        return None
    value = node.value.value if isinstance(node.value, ast.Constant) else None
    index = t.slice.value if isinstance(t.slice, ast.Constant) else None
    if index == 0:
        return "claim" if value == 0 else "publish" if value == 1 else None
    return "reset" if value == 0 else None


def _is_fence(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    f = node.value.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    return name.lower().endswith("fence")


def _events(node: ast.AST, out: list[str]) -> None:
    """The writer's events in source order (nested functions, such as
    vLLM's ``check()`` closure, are not the writer's stores)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        kind = _row_store(child)
        if kind is not None:
            out.append(kind)
        elif _is_fence(child):
            out.append("fence")
        else:
            _events(child, out)


def writer_fences(path: Path, kind: str = "queue") -> Placement:
    """Read the writer's fences from a store file (see the module docstring).

    Raises:
        OSError / SyntaxError: the file cannot be read or parsed."""
    tree = ast.parse(Path(path).read_text())
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name in WRITER_FUNCTIONS[kind]:
                events: list[str] = []
                _events(fn, events)
                if "publish" not in events:
                    continue
                fences = set()
                for i, e in enumerate(events):
                    if e == "claim" and "fence" in events[i + 1:i + 2]:
                        fences.add("claim")
                    if e == "publish" and i and events[i - 1] == "fence" and "reset" in events[:i]:
                        fences.add("publish")
                return Placement(frozenset(fences), tuple(events), f"{cls.name}.{fn.name}")
    return Placement(frozenset(), (), None)


SIZES = ((1, 1, 2), (2, 2, 3))
"""(readers, slots, messages) explored in turn: the smallest first (its
counterexample is the shortest), then the one the TLA+ configs hold at."""


def verdicts(fences: frozenset[str]) -> dict[str, dict]:
    """Per store order: ``{"verdict": "holds" | "fails", "property", "steps",
    "trace", "states", "size"}`` from the model's BFS with the writer's
    ``fences``: the first of :data:`SIZES` that fails, else holds at the last."""
    from shmspec.model.slots import Config, explore

    out = {}
    for order in ORDERS:
        for r, s, m in SIZES:
            x = explore(Config(readers=r, slots=s, messages=m, memory=order, fences=frozenset(fences)))
            out[order] = {"verdict": "holds", "states": x.states, "size": [r, s, m]}
            if x.violation is not None:
                prop, message, trace = x.violation
                out[order] = {"verdict": "fails", "property": prop, "message": message, "steps": len(trace),
                              "trace": trace, "states": x.states, "size": [r, s, m]}
                break
    return out


def memory_order(path: Path | None, kind: str = "queue", fences: frozenset[str] | None = None) -> dict[str, Any]:
    """A matrix row's memory-order entry: the placement read from ``path``
    (or the given ``fences``, impl's) and the model's verdicts."""
    placement = writer_fences(path, kind) if fences is None else Placement(frozenset(fences), (), "impl")
    if placement.found is None:
        return {**placement.to_json(), "tso": None, "pso": None}
    return {**placement.to_json(), **verdicts(placement.fences)}


def cell(entry: dict[str, Any] | None, order: str) -> str:
    """``holds`` or ``FIFO (22 steps)``: a matrix cell."""
    v = (entry or {}).get(order)
    if not v:
        return "-"
    return "holds" if v["verdict"] == "holds" else f"{v['property']} ({v['steps']} steps)"


IMPL_FENCES = frozenset({"claim", "publish"})
"""impl's writer fences (``SlotQueue._claim``: after the claim; ``_publish``:
before ``written``; tests/impl read them from impl/slots.py)."""

__all__ = ["IMPL_FENCES", "ORDERS", "Placement", "cell", "memory_order", "verdicts", "writer_fences"]
