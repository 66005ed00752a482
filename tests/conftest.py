"""Shared fixtures.  The tests mirror the packages (``tests/model/``,
``tests/impl/``, ``tests/conformance/<layer>/``); cross-cutting ones (the API,
the layer rule, regressions) sit here at the top, with ``helpers.py`` (plain
functions: ``from helpers import ...``) and the data folders ``corpus/`` and
``targets/``.

Pytest imports each test folder's modules with that folder first on
``sys.path`` (``rootdir``/prepend mode, no ``__init__.py``), and this file's
folder with it (made sure of below), so ``helpers`` and ``toy_protocol``
import by name from anywhere under ``tests/``.

Markers: ``slow`` (a gate run, a process campaign, a vLLM release, TLC: over
about 1.5 s); ``make test-fast`` leaves them out.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # helpers.py, whatever folder a test runs from
    sys.path.insert(0, str(TESTS))

from helpers import ROOT, load_or_skip  # noqa: E402


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's root folder (``pyproject.toml``, ``tla/``, ``docs/``)."""
    return ROOT


@pytest.fixture(scope="session")
def impl_target():
    """``shmspec.impl`` loaded as a target (``load_target("impl")``), once per session."""
    return load_or_skip("impl")


@pytest.fixture(scope="session")
def vllm_target():
    """``vllm_target("0.33.0")``: that release's store file loaded as a
    target, fetched once per session (skips when the registry is unreachable)."""
    cache: dict[str, object] = {}

    def load(version: str):
        if version not in cache:
            cache[version] = load_or_skip(f"vllm=={version}")
        return cache[version]

    return load


@pytest.fixture
def second_protocol():
    """A second store protocol (``tests/toy_protocol.py``: a register store),
    registered for one test, then forgotten."""
    import toy_protocol as toy

    from shmspec.conformance import protocols

    protocols.register(toy.PROTOCOL)
    yield toy.PROTOCOL
    protocols.unregister(toy.PROTOCOL.name)
