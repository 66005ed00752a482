"""Layers import one way only: ``model/`` imports nothing of ours but itself;
``impl/`` imports ``model/`` and itself, never the harness (``conformance/``)
or the benchmarks.  Read from the source, every ``import`` and ``from``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "model": ("shmspec.model",),
    "impl": ("shmspec.impl", "shmspec.model"),
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
    return out


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_layers_below(layer):
    bad = []
    for f in sorted((ROOT / layer).glob("*.py")):
        for name in _imports(f):
            ours = name == "shmspec" or name.startswith("shmspec.") or name.split(".")[0] in ("conformance", "bench")
            if ours and not any(name == a or name.startswith(a + ".") for a in ALLOWED[layer]):
                bad.append(f"{f.relative_to(ROOT)} imports {name}")
    assert bad == []
