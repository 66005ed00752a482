"""pytest plugin: the conformance gate as pytest items (entry point
``pytest11``: ``shmspec``; inert unless ``--shmspec-target`` is given).

``pytest --shmspec-target=SPEC [--shmspec-profile ci|dev|deep]
[--shmspec-concurrency controlled|free|off] [--shmspec-seed N]
[--shmspec-writer-lock] [--shmspec-baseline FILE] [--shmspec-report-dir DIR]``

collects, beside the project's own tests, one item per property of the
target's store protocol (``shmspec/SPEC::NRR``, in the registry's order)
and one per campaign the profile runs (``shmspec/SPEC::campaign::core``).
The gate runs once, when the first of them runs (``--collect-only`` runs
nothing), with the options ``shmspec check`` takes, and writes its report
(``report.json``, ``report.html``, ``repro_test.py``) as ``shmspec check``
does.  Then:

* a property item **fails** with its violations drawn as text (the shrunk
  trace, the lanes of a controlled schedule) when the property is violated
  and not a known finding; **xfails** when the baseline knows it (reported,
  the run stays green); **passes** when it holds (a baseline's finding that
  no longer fails is reported as fixed in the terminal summary); **fails**
  when a budget ran out (unknown: never a pass); is **skipped** when the
  target's contract does not claim it or the profile does not check it;
* a campaign item fails when the campaign crashed or ran out of budget, is
  skipped when the campaign was skipped, and passes otherwise (what it
  found is on the property items).

It works with pytest's own ``--junitxml``, ``-k`` (``-k NRR``), ``-x`` and
pytest-xdist: under xdist the first worker to need the result runs the gate
and the others wait for it (a lock file under the run's shared temporary
folder), so the gate runs once per pytest run, not once per worker.
Outcomes are those of :mod:`shmspec.conformance.reporting.outcomes`; the
exit status is pytest's (1 when an item failed).  docs/ci.md has recipes.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

_RESULT = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("shmspec", "shmspec conformance gate (docs/ci.md)")
    g.addoption("--shmspec-target", default=None, metavar="SPEC",
                help="run the gate on this target as pytest items: impl, file:PATH, vllm==X.Y.Z")
    g.addoption("--shmspec-profile", default="ci", choices=("smoke", "ci", "dev", "deep"), help="gate profile (default ci)")
    g.addoption("--shmspec-concurrency", default=None, choices=("controlled", "free", "off"),
                help="the concurrency campaigns (default: the profile's)")
    g.addoption("--shmspec-seed", type=int, default=None, help="Hypothesis seed (default: 0 for ci)")
    g.addoption("--shmspec-writer-lock", action="store_true",
                help="build the writer with the readers' lock (default: without, as vLLM builds it)")
    g.addoption("--shmspec-baseline", default=None, metavar="FILE",
                help="known findings (a report.json or a baseline file): they xfail instead of failing")
    g.addoption("--shmspec-report-dir", default=None, metavar="DIR",
                help="where the gate's report goes (default <reports>/<time>-<target>, as shmspec check)")
    g.addoption("--shmspec-contract", default=None, metavar="FILE",
                help="the contract to judge by (TOML or JSON, as shmspec check --contract)")
    g.addoption("--shmspec-seeds", type=int, default=None, metavar="K",
                help="seed units (as shmspec check --seeds; default the profile's)")
    g.addoption("--shmspec-workers", type=int, default=1, metavar="N",
                help="worker processes for the seed units (as shmspec check --workers)")
    g.addoption("--shmspec-shard", default=None, metavar="I/N", help="this job's shard of the seed units")
    g.addoption("--shmspec-example-db", default=None, metavar="DB",
                help="Hypothesis example database (as shmspec check --example-db)")


def _options(config: pytest.Config) -> dict[str, Any]:
    spec = config.getoption("shmspec_target")
    if spec and spec.startswith("file:"):
        spec = "file:" + os.path.abspath(spec[5:])
    return {"target": spec, "profile": config.getoption("shmspec_profile"),
            "concurrency": config.getoption("shmspec_concurrency"), "seed": config.getoption("shmspec_seed"),
            "writer_lock": bool(config.getoption("shmspec_writer_lock")),
            "baseline": config.getoption("shmspec_baseline"), "report_dir": config.getoption("shmspec_report_dir"),
            "contract": config.getoption("shmspec_contract"), "seeds": config.getoption("shmspec_seeds"),
            "workers": config.getoption("shmspec_workers"), "shard": config.getoption("shmspec_shard"),
            "example_db": config.getoption("shmspec_example_db")}


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    opts = _options(config)
    if not opts["target"]:
        return
    from . import protocols
    from .core.errors import ShmspecError
    from .runner.gate import concurrency_for

    try:
        name, _ = protocols.split_spec(opts["target"])
        protocol = protocols.get(name)
    except ShmspecError as exc:
        raise pytest.UsageError(f"--shmspec-target: {exc}") from None
    try:
        mode = concurrency_for(protocol, opts["profile"], opts["concurrency"])
    except ValueError as exc:
        raise pytest.UsageError(f"--shmspec-concurrency: {exc} for the {protocol.name} protocol") from None
    if opts["baseline"]:  # a bad baseline is a usage error now, not after minutes of work
        from .reporting.outcomes import Baseline

        try:
            Baseline.load(opts["baseline"])
        except ShmspecError as exc:
            raise pytest.UsageError(f"--shmspec-baseline: {exc}") from None
    from shmspec.api import validate_units

    try:  # the seed-unit settings and the contract file, before any work
        validate_units(opts["profile"], opts["seed"], opts["seeds"], opts["workers"], opts["shard"],
                       opts["example_db"], opts["contract"])
    except ShmspecError as exc:
        raise pytest.UsageError(f"shmspec: {exc}") from None
    name = f"shmspec/{opts['target']}"  # JUnit: classname shmspec.<target>, name the property
    gate = GateCollector.from_parent(session, name=name, nodeid=name)
    gate.property_ids = protocol.property_ids
    gate.campaign_names = [c.name for c in protocol.campaigns(mode)]
    new = gate.collect()
    items.extend(new)
    # counted as collected ("collected N items", --collect-only): the report a collector's run would give
    config.hook.pytest_collectreport(report=pytest.CollectReport(gate.nodeid, "passed", None, new))


class GateCollector(pytest.Collector):
    """``shmspec/SPEC``: the gate on one target."""

    property_ids: tuple[str, ...] = ()
    campaign_names: list[str] = []

    def collect(self) -> list[pytest.Item]:
        out: list[pytest.Item] = [PropertyItem.from_parent(self, name=pid) for pid in self.property_ids]
        out += [CampaignItem.from_parent(self, name=f"campaign::{n}") for n in self.campaign_names]
        return out


class _GateItem(pytest.Item):
    def reportinfo(self) -> tuple[str, int | None, str]:
        return "shmspec", None, self.nodeid

    def _outcome(self) -> dict[str, Any]:
        data = gate_outcome(self.config)
        if data.get("error"):
            pytest.fail(f"shmspec: {data['error']}", pytrace=False)
        self.user_properties.append(("shmspec_report_dir", data["report_dir"]))
        return data


class PropertyItem(_GateItem):
    """One property's outcome (see the module docstring)."""

    def runtest(self) -> None:
        data = self._outcome()
        o = data["outcomes"][self.name]
        self.user_properties.append(("shmspec_status", o["status"]))
        where = (f"\n(report: {data['report_dir']}; replay: {shlex.quote(sys.executable)} -m pytest "
                 f"{shlex.quote(data['report_dir'] + '/repro_test.py')})")
        if o["status"] == "failed":
            pytest.fail(f"{self.name} violated on {data['target']}: {o['statement']}\n{o['text']}{where}",
                        pytrace=False)
        if o["status"] == "known":
            pytest.xfail(f"known finding (baseline {data['baseline']}): {', '.join(o['violations'])}")
        if o["status"] == "unknown":
            pytest.fail(f"{self.name} unknown: {o['text']}", pytrace=False)
        if o["status"] == "skipped":
            pytest.skip(o["text"])


class CampaignItem(_GateItem):
    """One campaign: crashed or out of budget fails, skipped skips."""

    def runtest(self) -> None:
        data = self._outcome()
        name = self.name.removeprefix("campaign::")
        c = data["campaigns"].get(name)
        if c is None:
            pytest.fail(f"campaign {name} did not run", pytrace=False)
        if c["error"]:
            pytest.fail(f"campaign {name} crashed: {c['error']}", pytrace=False)
        if c["unknown"]:
            pytest.fail(f"campaign {name} ran out of its budget: {c['unknown']} (not a pass)", pytrace=False)
        if c["skipped"]:
            pytest.skip(f"campaign {name} skipped: {c['skipped']}")


def gate_outcome(config: pytest.Config) -> dict[str, Any]:
    """The gate's outcome for this pytest run (JSON-able: target, report
    directory, baseline, ``outcomes`` by property id, ``campaigns`` by
    name), computed once: in this process, or under xdist by whichever
    worker takes the shared lock first."""
    if _RESULT in config.stash:
        return config.stash[_RESULT]
    opts = _options(config)
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        data = _run(opts)
    else:
        key = hashlib.sha256(json.dumps(opts, sort_keys=True).encode()).hexdigest()[:16]
        shared = Path(tempfile.gettempdir()) / f"shmspec-pytest-{run_id}-{key}"
        shared.mkdir(exist_ok=True)
        with open(shared / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # held while the gate runs: the other workers wait here
            done = shared / "outcome.json"
            if done.exists():
                data = json.loads(done.read_text())
            else:
                data = _run(opts)
                done.write_text(json.dumps(data))
    config.stash[_RESULT] = data
    return data


def _run(opts: dict[str, Any]) -> dict[str, Any]:
    """Run the gate, write its report, judge it.  A target that cannot be
    loaded (or an unusable option) gives ``{"error": message}``: every item
    fails with that one line, and the gate is not retried per item."""
    import datetime as dt

    from shmspec import api

    from . import protocols
    from .core.errors import ShmspecError
    from .reporting import outcomes as judged
    from .reporting.report import default_report_dir

    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    try:
        baseline = judged.Baseline.load(opts["baseline"]) if opts["baseline"] else None
        target = protocols.load(opts["target"])
        result = api.check(target, profile=opts["profile"], seed=opts["seed"], concurrency=opts["concurrency"],
                           writer_lock=opts["writer_lock"], contract=opts["contract"], seeds=opts["seeds"],
                           workers=opts["workers"], shard=opts["shard"], example_db=opts["example_db"])
    except ShmspecError as exc:
        return {"error": str(exc)}
    report_dir = Path(opts["report_dir"]) if opts["report_dir"] else default_report_dir(opts["target"])
    judged_ = judged.judge_and_report(result, report_dir, started,
                                      str(target.source) if getattr(target, "source", None) else None, baseline)
    return {
        "target": result.target, "report_dir": str(report_dir), "verdict": result.verdict,
        "baseline": baseline.source if baseline else None,
        "outcomes": {o.id: {"status": o.status, "text": o.text, "statement": o.statement,
                            "violations": o.violations} for o in judged_},
        "campaigns": {c.name: {"error": c.error, "unknown": c.unknown, "skipped": c.skipped}
                      for c in result.campaigns},
    }


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The report's folder and, with a baseline, which findings are new,
    known and fixed (read from the items' reports, so under xdist too)."""
    if not config.getoption("shmspec_target"):
        return
    status: dict[str, str] = {}
    report_dir = None
    for key in ("passed", "failed", "xfailed", "skipped"):
        for rep in terminalreporter.stats.get(key, []):
            props = dict(getattr(rep, "user_properties", ()))
            report_dir = props.get("shmspec_report_dir", report_dir)
            if "shmspec_status" in props:
                status[rep.nodeid.rsplit("::", 1)[-1]] = props["shmspec_status"]
    if report_dir is None:
        return
    tr = terminalreporter
    tr.section("shmspec")
    tr.write_line(f"report: {report_dir}")
    if config.getoption("shmspec_baseline"):
        for label, st in (("new", "failed"), ("known (not failing)", "known"), ("fixed", "fixed")):
            tr.write_line(f"{label}: {', '.join(p for p, s in status.items() if s == st) or 'none'}")
