"""Helpers shared by the tests (import as ``from helpers import ...``;
conftest.py puts tests/ on sys.path).  Fixtures live in conftest.py."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from shmspec.conformance.core.config import SessionConfig
from shmspec.conformance.targets.loader import LoadedTarget, TargetError, load_target

TESTS = Path(__file__).resolve().parent
"""The tests' folder (``corpus/``, ``targets/``, ``toy_protocol.py``)."""
ROOT = TESTS.parent
"""The repository's root (``pyproject.toml``, ``conformance/``, ``tla/``, ``docs/``)."""


def load_or_skip(spec: str) -> LoadedTarget:
    """``load_target(spec)``, or skip the test when the target cannot be
    fetched (vLLM's files come from the package registry, cached after the
    first fetch).  A skip is reported as a skip, never as a pass."""
    try:
        return load_target(spec)
    except TargetError as exc:
        pytest.skip(f"registry unreachable: {exc}")


def smoke_shrink(monkeypatch) -> None:
    """The ci profile with the smoke tier's shrink budget, for a test of what
    the gate finds, not of how far it shrinks (shrinking starts after a
    finding; the finding, its property and its cause do not depend on it)."""
    from dataclasses import replace

    from shmspec.conformance.runner.gate import GATE_PROFILES

    monkeypatch.setitem(GATE_PROFILES, "ci", replace(GATE_PROFILES["ci"],
                                                     shrink_examples=GATE_PROFILES["smoke"].shrink_examples))


def run_campaign(spec: str, campaign, writer_lock: bool = False):
    """One gate campaign on ``spec`` at the ci profile, seed 0, in the
    construction ``writer_lock`` names (readers forked, two of them)."""
    from shmspec.conformance.runner import gate
    return gate._run_campaign(load_or_skip(spec), campaign, gate.GATE_PROFILES["ci"], 0,
                              SessionConfig(writer_lock=writer_lock))


class Dom(HTMLParser):
    """The page's title, its links, and the text under each element id."""

    def __init__(self, text: str):
        super().__init__()
        self.title, self.links, self.by_id, self._open, self._in_title = "", [], {}, [], False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "title":
            self._in_title = True
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if "id" in a:
            self.by_id[a["id"]] = ""
        self._open.append((tag, a.get("id")))

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        while self._open:
            t, _ = self._open.pop()
            if t == tag:
                break

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        for _, i in self._open:
            if i is not None:
                self.by_id[i] += data


def browser() -> str | None:
    """A headless browser on PATH (chromium, chromium-browser, google-chrome), or None."""
    import shutil

    return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def browser_dom(page: Path, screenshot: Path | None = None) -> str:
    """``page`` rendered by the headless browser: the DOM it built
    (``--dump-dom``), and a screenshot when asked."""
    import subprocess

    exe = browser()
    assert exe is not None
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1800"]
    if screenshot is not None:
        subprocess.run([exe, *flags, f"--screenshot={screenshot}", page.as_uri()], capture_output=True,
                       timeout=120, check=True)
    return subprocess.run([exe, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120,
                          check=True).stdout
