"""How this suite runs pytest (pyproject.toml's addopts): plugins named, not
auto-loaded, so that pytest does not rewrite the asserts of hypothesis's
whole package (it does so for every distribution declaring a plugin entry
point).  Rewritten, hypothesis's internals made a smoke gate on a seeded
fault 17.4 s instead of 10.3 s (2026-12-07)."""

from __future__ import annotations

import sys


def test_hypothesis_runs_as_installed_and_the_named_plugins_are_loaded(pytestconfig):
    import hypothesis.internal.conjecture.data  # noqa: F401 - the module the shrinker spends its time in

    loader = sys.modules["hypothesis.internal.conjecture.data"].__loader__
    assert type(loader).__name__ == "SourceFileLoader", type(loader)  # not pytest's AssertionRewritingHook
    plugins = pytestconfig.pluginmanager
    for name in ("xdist.plugin", "_hypothesis_pytestplugin", "shmspec.conformance.pytest_plugin"):
        assert plugins.has_plugin(name), name
