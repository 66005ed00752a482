"""Where shmspec reads its data and writes its reports (conformance/core/paths.py)."""

from __future__ import annotations

from pathlib import Path

from shmspec.conformance.core import paths
from shmspec.conformance.reporting.report import default_report_dir

from helpers import ROOT


def test_the_spec_is_the_installed_shmspec_tla_package():
    assert paths.tla_dir() == ROOT / "tla"  # an editable install maps shmspec.tla onto tla/
    assert (paths.tla_dir() / "ShmStore.tla").is_file() and list((paths.tla_dir() / "deep").glob("MC*.cfg"))


def test_reports_go_to_the_checkout_wherever_the_command_runs(monkeypatch, tmp_path):
    monkeypatch.delenv("SHMSPEC_REPORT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert paths.checkout_root() == ROOT
    assert paths.report_root() == ROOT / "reports"
    d = default_report_dir("vllm==0.33.0")
    assert d.parent == ROOT / "reports" and d.name.endswith("-vllm==0.33.0") and not d.exists()


def test_the_environment_overrides_and_outside_a_checkout_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SHMSPEC_REPORT_DIR", str(tmp_path / "mine"))
    assert paths.report_root() == tmp_path / "mine"
    monkeypatch.delenv("SHMSPEC_REPORT_DIR")
    monkeypatch.setattr(paths, "checkout_root", lambda: None)  # as from a wheel
    monkeypatch.delenv("SHMSPEC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.report_root() == tmp_path / "xdg" / "shmspec" / "reports"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert paths.cache_dir() == Path.home() / ".cache" / "shmspec"
    monkeypatch.setenv("SHMSPEC_CACHE_DIR", str(tmp_path / "c"))
    assert paths.report_root() == tmp_path / "c" / "reports"
