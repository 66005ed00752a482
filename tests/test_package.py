"""shmspec as an installed package (issue 15): the wheel carries the TLA+
spec and configs, the seeded faults and the pytest plugin; installed into a
fresh virtual environment and run from an empty folder, the commands work
and write nothing there (reports go to the user cache)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile

import pytest

from helpers import ROOT

pytestmark = pytest.mark.xdist_group("test_package")


def _run(args, cwd, env, timeout=600):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from a copy of the checkout's packaged folders (setuptools
    writes build/ and *.egg-info beside the sources: not into the checkout)."""
    out, src = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("src") / "shmspec"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("shmspec", "model", "impl", "conformance", "tla"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    p = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(out)], cwd=src,
             env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    (whl,) = out.glob("shmspec-*.whl")
    return whl


@pytest.mark.slow  # builds a wheel: make test, not the edit loop
def test_the_wheel_carries_the_spec_the_faults_and_the_plugin(wheel):
    import shmspec

    names = zipfile.ZipFile(wheel).namelist()
    assert wheel.name == f"shmspec-{shmspec.__version__}-py3-none-any.whl"  # the version from one place
    assert "shmspec/tla/ShmStore.tla" in names
    assert {n for n in names if n.startswith("shmspec/tla/MC")} == {
        f"shmspec/tla/{p.name}" for p in (ROOT / "tla").glob("MC*.cfg")}
    assert len([n for n in names if n.startswith("shmspec/tla/deep/MC")]) == len(list((ROOT / "tla" / "deep").glob("MC*.cfg")))
    assert {n for n in names if n.startswith("shmspec/tla/slots/")} == {
        f"shmspec/tla/slots/{p.name}" for p in (ROOT / "tla" / "slots").iterdir() if p.suffix in (".tla", ".cfg")}
    assert len([n for n in names if n.startswith("shmspec/conformance/mutants/")]) == len(
        list((ROOT / "conformance" / "mutants").rglob("*.py")))  # the slot protocols' faults in mutants/slots/ too
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[pytest11]\nshmspec = shmspec.conformance.pytest_plugin" in entry


@pytest.mark.slow
def test_installed_in_a_fresh_venv_the_commands_run_from_an_empty_folder(wheel, tmp_path):
    venv, empty, cache = tmp_path / "venv", tmp_path / "empty", tmp_path / "cache"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHMSPEC_", "PYTEST_", "VIRTUAL_ENV"))}
    env.update(XDG_CACHE_HOME=str(cache), PIP_DISABLE_PIP_VERSION_CHECK="1")
    assert _run([sys.executable, "-m", "venv", str(venv)], empty, env).returncode == 0
    bin_ = venv / "bin"
    p = _run([str(bin_ / "python"), "-m", "pip", "install", "-q", str(wheel)], empty, env)
    assert p.returncode == 0, p.stderr[-3000:]

    def shmspec(*args):
        return _run([str(bin_ / "shmspec"), *args], empty, env)

    p = shmspec("mutants", "--list")
    assert p.returncode == 0 and "early_free" in p.stdout, p.stderr
    p = shmspec("prove")
    assert p.returncode == 0 and "verdict: PASS" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    if shutil.which("java"):
        p = shmspec("model", "--config", "MC_vllm_reread.cfg")  # the installed spec, TLC and the model
        assert p.returncode == 0 and "verdict: PASS" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    p = shmspec("check", "--concurrency", "off")
    assert p.returncode == 0 and "verdict: PASS" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    junit = tmp_path / "j.xml"
    p = _run([str(bin_ / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--shmspec-target=impl",
              "--shmspec-concurrency=off", f"--junitxml={junit}"], empty, env)
    assert p.returncode == 0 and " passed" in p.stdout, p.stdout[-3000:]
    cases = {c.get("name"): [k.tag for k in c] for c in ET.parse(junit).getroot().iter("testcase")
             if c.get("classname") == "shmspec.impl"}  # the property items, built as vLLM builds its writer
    assert "NRR" in cases and "DUP" in cases and not any("failure" in k or "error" in k for k in cases.values())
    assert list(empty.iterdir()) == []  # nothing written to the current folder
    reports = sorted(d.name.split("-", 2)[-1] for d in (cache / "shmspec" / "reports").iterdir())
    assert reports == (["impl", "impl", "model", "prove"] if shutil.which("java") else ["impl", "impl", "prove"])


def test_the_github_workflow_runs_commands_that_exist():
    """.github/workflows/shmspec.yml (a recipe; GitHub runs it, our CI does
    not): every ``shmspec`` command in it parses with the CLI's own parser,
    and each job uploads its reports."""
    import re
    import shlex

    from shmspec.conformance.cli import build_parser

    from shmspec.api import validate_units

    text = (ROOT / ".github" / "workflows" / "shmspec.yml").read_text()
    runs = [m.strip() for m in re.findall(r"^\s+(?:- )?run: (shmspec .+)$", text, flags=re.M)]
    # folded blocks (run: >-, then more-indented lines)
    runs += [" ".join(part.split()) for part in re.findall(r"run: >-\n((?:[ ]{10,}\S.*\n)+)", text)]
    assert len(runs) >= 5 and any("--shard" in r for r in runs), runs
    for line in runs:
        args = shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "1", line))[1:]
        ns = build_parser().parse_args(args)  # exits 2 (SystemExit) on an unknown flag or value
        if ns.command == "check":  # the unit settings a run would refuse, refused here
            validate_units(ns.profile, ns.seed, ns.seeds, ns.workers, ns.shard, ns.example_db)
        assert "--report-dir" in args, line  # reports where the artifact step finds them, never the cwd
    assert text.count("actions/upload-artifact@") == text.count("runs-on:")
