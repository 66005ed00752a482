"""The code examples of the docs run as written (a claim in the docs is
backed by a test): each ```python block of docs/impl.md, in a fresh
interpreter."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "impl.md").read_text(), re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"impl.md-{i}" for i in range(len(BLOCKS))])
def test_a_docs_example_runs(code):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "leaked" not in done.stderr, done.stderr[-2000:]  # the example cleans up after itself


def test_there_is_an_example():
    assert BLOCKS
