"""``shmspec model`` / ``make check-model``: TLC on every config, the model's
state space beside TLC's, and each counterexample replayed and rendered.

For each config (``tla/MC*.cfg``, or ``tla/deep/MC*.cfg`` with ``deep``):

1. TLC checks the invariants that must hold, over the whole state space,
   dumping the states it reaches; then each invariant the config expects
   violated, alone, for its shortest counterexample.
2. (small configs) the Python model (:mod:`shmspec.model.atomic`) is
   enumerated breadth-first and its states compared with TLC's
   (:func:`.agreement.compare`).
3. Each counterexample is replayed on the model (:func:`.agreement.replay_trace`)
   and drawn by the gate's violation renderer, into ``model.html``; everything
   goes into ``model.json`` (schema ``shmspec.model/2``, reports/README.md).
4. With a ``target`` (``impl``, ``file:PATH``, ``vllm==X.Y.Z``), each
   counterexample is also run on that store's real processes as a controlled
   schedule (:func:`.spectrace.replay_on_target`), and the report says which
   of spec, model and target departs first (:func:`.agreement.departs_first`).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rich.console import Console
from rich.table import Table

from ..core.documents import header
from ..core.results import Violation
from ..reporting.report import record_html, verdict_line, violation_panel
from ..spec.agreement import Agreement, TraceReplay, compare, counterexample, departs_first, model_config, replay_trace
from ..spec.tlc import ConfigFile, ModelCheck, check_config, config_files, find_jar

if TYPE_CHECKING:  # the process harness is imported only when a target is replayed
    from ..spec.spectrace import TargetReplay

SCHEMA = "shmspec.model/2"


@dataclass
class ConfigOutcome:
    """One config: TLC's runs, the agreement (``None`` when not compared),
    and each counterexample with its replay on the model."""

    config: ConfigFile
    check: ModelCheck
    agreement: Agreement | None
    counterexamples: list[tuple[Violation, TraceReplay]] = field(default_factory=list)
    target: str | None = None
    """The target the counterexamples were replayed on (None: not replayed)."""
    target_replays: list["TargetReplay"] = field(default_factory=list)
    """One per counterexample, in order, when ``target`` is set."""
    traces: list = field(default_factory=list, repr=False)
    """TLC's trace of each counterexample, in order (what a target replays)."""

    @property
    def ok(self) -> bool:
        """TLC did what the config states, the state spaces agree (when
        compared) and the model followed every counterexample."""
        return (self.check.ok and (self.agreement is None or self.agreement.ok)
                and all(r.model_departs is None for _, r in self.counterexamples))


def run(tla_dir: Path | None = None, pattern: str = "MC*.cfg", deep: bool = False, agree: bool = True,
        on_config: Callable[[str], None] | None = None, target: str | None = None,
        workers: int = 1, jobs: int = 1) -> list[ConfigOutcome]:
    """Check every config; ``agree`` enumerates the model beside TLC;
    ``target`` (a target spec) replays every counterexample on that store;
    ``workers``: TLC workers of the runs that must hold
    (:func:`~shmspec.conformance.spec.tlc.check_config`); ``jobs``: configs
    checked at once, each in its own process (TLC's runs and the model's
    enumeration of one config stay in one process, in order, so the results
    do not depend on ``jobs``).  Outcomes are in file-name order.
    ``on_config(name)`` is called as each config starts (``jobs == 1``) or
    ends (``jobs > 1``, as ``"name (k/n done)"``).

    Raises:
        TlcError: no config, or TLC cannot run.
        TargetError: the target cannot be loaded.
        ValueError: ``jobs`` < 1.
    """
    from .. import protocols

    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, not {jobs}")
    tla_dir = tla_dir or protocols.get().tla_dir  # the ring-buffer protocol's spec (tla/)
    jar = find_jar()
    loaded = None
    if target is not None:
        from ..targets.loader import load_target  # noqa: PLC0415 - only with a target

        loaded = load_target(target)
    cfgs = config_files(tla_dir, pattern, deep)
    if jobs == 1 or len(cfgs) == 1:
        out = []
        for cf in cfgs:
            if on_config:
                on_config(cf.name)
            out.append(_check_one(cf, jar, agree, workers))
    else:
        import multiprocess  # noqa: PLC0415 - processes only with jobs > 1

        out_by_name: dict[str, tuple[ConfigOutcome, list]] = {}
        with multiprocess.get_context("fork").Pool(min(jobs, len(cfgs))) as pool:
            work = [(cf, jar, agree, workers) for cf in cfgs]
            for k, res in enumerate(pool.imap_unordered(_check_one_job, work), 1):
                out_by_name[res.config.name] = res
                if on_config:
                    on_config(f"{res.config.name} ({k}/{len(cfgs)} done)")
        out = [out_by_name[cf.name] for cf in cfgs]
    if loaded is not None:
        for outcome in out:
            cfg = model_config(outcome.config)
            outcome.target = loaded.spec
            pairs = [(t, r) for t, (_, r) in zip(outcome.traces, outcome.counterexamples)]
            outcome.target_replays = _on_target(cfg, pairs, loaded)
    return out


def _check_one_job(job: tuple) -> ConfigOutcome:
    return _check_one(*job)


def _check_one(cf: ConfigFile, jar: Path, agree: bool, workers: int) -> ConfigOutcome:
    """TLC's runs of one config, the model's agreement and every
    counterexample replayed on the model."""
    with tempfile.TemporaryDirectory(prefix="shmspec-dump-") as tmp:
        dump = Path(tmp) / "states" if agree else None
        check = check_config(cf, jar=jar, dump=dump, workers=workers)
        agreement = None
        if agree and check.holds.status == "ok":
            agreement = compare(cf, check.holds, Path(f"{dump}.dump"))
    cexs, traces = [], []
    cfg = model_config(cf)
    for inv, res in check.found.items():
        if res.status in ("violation", "liveness") and res.trace:
            replay = replay_trace(cfg, res.trace)
            cexs.append((counterexample(cf, inv, res, replay), replay))
            traces.append(res.trace)
    outcome = ConfigOutcome(cf, check, agreement, cexs)
    outcome.traces = traces
    return outcome


def _on_target(cfg: Any, cexs: list[tuple[list, TraceReplay]], loaded: Any) -> list["TargetReplay"]:
    """Every counterexample (TLC trace, its replay on the model) run on the
    target, over one process pool."""
    from ..concurrency.procs import ProcessPool  # noqa: PLC0415 - processes only with a target
    from ..spec.spectrace import behaviour_of, replay_on_target  # noqa: PLC0415

    if not cexs:
        return []
    with ProcessPool(loaded, tuple(cfg.readers)) as pool:
        return [replay_on_target(cfg, behaviour_of(cfg, r, [s.action for s in t]), loaded, pool) for t, r in cexs]


def summary_table(outcomes: list[ConfigOutcome]) -> Table:
    """Config, expectation, what TLC found, distinct states of TLC and the
    model side by side, depth, time, verdict."""
    t = Table(title="TLC and the model (distinct states side by side)", show_lines=False)
    for col in ("config", "must fail", "TLC found", "TLC", "model", "depth", "time", "verdict"):
        num = col in ("TLC", "model", "depth", "time")
        t.add_column(col, justify="right" if num else "left", no_wrap=num or col in ("config", "verdict"),
                     overflow="fold")
    for o in outcomes:
        c = o.check
        found = [inv for inv, r in c.found.items()  # an invariant's violation, or a liveness property's
                 if (r.status == "violation" and r.invariant == inv) or (r.status == "liveness" and r.trace)]
        extra = "" if c.holds.status == "ok" else f" {c.holds.invariant or c.holds.status}!"
        a = o.agreement
        model = "-" if a is None else f"{a.model_distinct:,}" + ("" if a.ok else " ≠")
        depth = str(c.holds.depth) + ("" if a is None or a.model_depth == c.holds.depth else f"/{a.model_depth}")
        t.add_row(c.config.removesuffix(".cfg").replace("MC_", ""), " ".join(c.expected) or "none",
                  (" ".join(found) or "none") + extra, f"{c.holds.distinct:,}", model, depth, f"{c.seconds:.1f}s",
                  "[green]pass[/]" if o.ok else "[bold red]FAIL[/]")
    return t


def model_verdict(ok: bool) -> str:
    """``pass`` when every config did what its ``Expected:`` line states, else ``fail``."""
    return "pass" if ok else "fail"


def render(console: Console, outcomes: list[ConfigOutcome], report_dir: Path | None, panels: bool = True) -> None:
    """The summary table, any disagreement, and every counterexample: drawn
    as the gate draws a violation (``panels``), else one line each."""
    console.print(summary_table(outcomes))
    n = 0
    for o in outcomes:
        a = o.agreement
        if a is not None and not a.ok:
            console.print(f"[red]{a.config}: the model and TLC reach different states[/] "
                          f"(TLC {a.tlc_distinct:,}, model {a.model_distinct:,}; only TLC {a.only_tlc}, "
                          f"only model {a.only_model})")
            for s in a.sample_only_tlc:
                console.print(f"  only TLC:   {tuple(s)}", markup=False)
            for s in a.sample_only_model:
                console.print(f"  only model: {tuple(s)}", markup=False)
        for j, (v, replay) in enumerate(o.counterexamples):
            n += 1
            if panels:
                console.print(violation_panel(n, v, expected=v.property in o.check.expected))
            else:
                label = "expected: " if v.property in o.check.expected else "[red]UNEXPECTED[/] "
                console.print(f"[bold]{o.check.config}[/] {label}{v.property}: {v.message}\n  "
                              + " → ".join(f"{s['action']}({s['process']})" for s in v.steps[1:]), soft_wrap=True)
            if replay.model_departs is not None:
                console.print(f"[red]the model departs from TLC's trace at step {replay.model_departs}[/]")
            if j < len(o.target_replays):
                tr = o.target_replays[j]
                first = departs_first(replay.model_departs, tr.departs)
                console.print(f"  target {tr.summary()}; first to depart: {first or 'none'}", markup=False,
                              soft_wrap=True)
    n_ok = sum(o.ok for o in outcomes)
    detail = f"{n_ok}/{len(outcomes)} configs as their Expected: line states"
    line = verdict_line(model_verdict(n_ok == len(outcomes)), detail, report_dir)
    if report_dir is not None and not panels and any(o.counterexamples for o in outcomes):
        line.append(" (model.html draws each counterexample in lanes)")
    console.print(line, soft_wrap=True)


def to_json(outcomes: list[ConfigOutcome]) -> dict[str, Any]:
    """``model.json``'s content (schema ``shmspec.model/2``)."""
    configs = []
    n = 0  # counterexamples are numbered across configs, as render() numbers the panels
    for o in outcomes:
        c = o.check
        configs.append({
            "config": c.config, "expected": c.expected, "ok": o.ok, "verdict": model_verdict(o.ok), "tlc_ok": c.ok,
            "status": c.holds.status, "exit_code": c.holds.exit_code,
            "generated": c.holds.generated, "distinct": c.holds.distinct, "depth": c.holds.depth,
            "seconds": round(c.seconds, 3),
            "found": {inv: {"status": r.status, "invariant": r.invariant, "distinct": r.distinct,
                            "seconds": round(r.seconds, 3), "trace_length": len(r.trace)}
                      for inv, r in c.found.items()},
            "agreement": o.agreement.to_json() if o.agreement else None,
            "counterexamples": [dict(id=f"V{n + j + 1}", **_cex_json(o, j, v, r))
                                for j, (v, r) in enumerate(o.counterexamples)],
        })
        n += len(o.counterexamples)
    ok = all(o.ok for o in outcomes)
    return {**header(SCHEMA, "model"), "ok": ok, "verdict": model_verdict(ok), "configs": configs}


def itf_name(o: ConfigOutcome, v: Violation) -> str:
    """The ITF file of counterexample ``v`` of ``o``, relative to the report
    folder: ``itf/<config stem>.<property>.itf.json``."""
    return f"itf/{Path(o.check.config).stem}.{v.property}.itf.json"


def _cex_json(o: ConfigOutcome, j: int, v: Violation, r: TraceReplay) -> dict[str, Any]:
    d = dict(v.to_json(), model_departs=r.model_departs)
    if j < len(o.traces):
        d["itf"] = itf_name(o, v)
    tr = o.target_replays[j] if j < len(o.target_replays) else None
    d.update(target=o.target, target_departs=tr.departs if tr else None,
             departs_first=departs_first(r.model_departs, tr.departs) if tr else None,
             target_replay=tr.to_json() if tr else None)
    return d


def write(outcomes: list[ConfigOutcome], report_dir: Path) -> None:
    """``model.json`` and ``model.html`` into ``report_dir`` (created), and
    each counterexample's TLC trace as ITF (:func:`itf_name`; :mod:`..spec.itf`)."""
    from ..spec.itf import trace_to_itf  # noqa: PLC0415 - only when writing

    report_dir.mkdir(parents=True, exist_ok=True)
    for o in outcomes:
        for trace, (v, _) in zip(o.traces, o.counterexamples):
            path = report_dir / itf_name(o, v)
            path.parent.mkdir(exist_ok=True)
            doc = trace_to_itf([ts.values() for ts in trace], [ts.action for ts in trace],
                               source=Path(o.check.config).name,
                               description=f"TLC's counterexample to {v.property}: {v.message}"[:400])
            path.write_text(json.dumps(doc, indent=1) + "\n")
    (report_dir / "model.json").write_text(json.dumps(to_json(outcomes), indent=2, default=str) + "\n")
    (report_dir / "model.html").write_text(record_html(lambda rec: render(rec, outcomes, report_dir)))


__all__ = ["SCHEMA", "ConfigOutcome", "render", "run", "summary_table", "to_json", "write"]


# ---- the slot-flag protocols' spec (tla/slots/) -----------------------------------------

SLOTS_SCHEMA = "shmspec.model-slots/1"


@dataclass
class SlotConfigOutcome:
    """One ``tla/slots/MC_slots*.cfg``: TLC's result, the model's BFS on the
    same constants (:func:`shmspec.model.slots.explore`), and whether they
    agree with each other and with the config's ``Expected:`` line."""

    config: ConfigFile
    status: str
    distinct: int | None
    invariant: str | None
    tlc_trace_states: int
    model_states: int
    model_violation: tuple[str, str, list[str]] | None
    error: str = ""

    @property
    def ok(self) -> bool:
        if self.config.expected:  # must fail: TLC and the model fail the stated invariant, traces as long
            return (self.status == "violation" and [self.invariant] == self.config.expected
                    and self.model_violation is not None and self.model_violation[0] == self.invariant
                    and self.tlc_trace_states == len(self.model_violation[2]) + 1)
        return self.status == "ok" and self.model_violation is None and self.distinct == self.model_states

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config.name, "expected": self.config.expected, "tlc": self.status,
                "distinct": self.distinct, "invariant": self.invariant, "tlc_trace_states": self.tlc_trace_states,
                "model_states": self.model_states, "ok": self.ok, "verdict": model_verdict(self.ok),
                "error": self.error or None,
                "model_trace": self.model_violation[2] if self.model_violation else None}


def slot_model_config(cf: ConfigFile) -> Any:
    """The :class:`shmspec.model.slots.Config` a ``tla/slots`` config's CONSTANTS state."""
    import re

    from shmspec.model.slots import Config

    c = cf.constants
    names = lambda text: frozenset(re.findall(r'"([^"]+)"', text))  # noqa: E731 - a TLA+ set of strings
    return Config(int(c["R"]), int(c["S"]), int(c["M"]), names(c.get("Faults", "{}")),
                  c.get("Memory", '"sc"').strip('"'), names(c.get("Fences", '{"publish"}')))


def run_slots(pattern: str = "MC_slots*.cfg", on_config: Callable[[str], None] | None = None,
              workers: int = 1) -> list[SlotConfigOutcome]:
    """TLC and the model's BFS on every slot config (``tla/slots/``).

    Raises:
        TlcError: no config, or TLC cannot run."""
    from shmspec.model.slots import explore

    from ..core import paths
    from ..spec.tlc import run_tlc

    folder = paths.tla_dir() / "slots"
    out = []
    for cf in config_files(folder, pattern):
        if on_config:
            on_config(cf.name)
        res = run_tlc(cf.path, spec=folder / "Slots.tla", workers=1 if cf.expected else workers)
        found = explore(slot_model_config(cf))
        out.append(SlotConfigOutcome(cf, res.status, res.distinct, getattr(res, "invariant", None),
                                     len(res.trace or []), found.states, found.violation,
                                     getattr(res, "error", "") or ""))
    return out


def slots_table(outcomes: list[SlotConfigOutcome]) -> Table:
    t = Table("config", "expected violated", "TLC", "TLC states", "model states", "trace (steps)", "verdict",
              title="TLC and the model on tla/slots (the slot-flag protocol)", title_justify="left")
    for o in outcomes:
        steps = "-" if not o.model_violation else f"{len(o.model_violation[2])} (TLC {o.tlc_trace_states - 1})"
        t.add_row(o.config.name.removesuffix(".cfg"), " ".join(o.config.expected) or "none",
                  o.status + (f" {o.invariant}" if o.invariant else ""), str(o.distinct if o.distinct is not None
                                                                        else "-"),
                  str(o.model_states), steps, "[green]pass[/]" if o.ok else "[bold red]FAIL[/]")
    return t


def write_slots(outcomes: list[SlotConfigOutcome], report_dir: Path) -> Path:
    path = report_dir / "model-slots.json"
    ok = all(o.ok for o in outcomes)
    path.write_text(json.dumps({**header(SLOTS_SCHEMA, "model"), "ok": ok, "verdict": model_verdict(ok),
                                "configs": [o.to_json() for o in outcomes]}, indent=1) + "\n")
    return path
