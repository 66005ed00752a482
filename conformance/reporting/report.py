"""Reports of a gate run: rich console output, ``report.json``, ``report.html``
and ``repro_test.py``.

The JSON schema is documented in ``reports/README.md`` (``schema`` key
``shmspec.report/1``); documented keys are a public interface and stay stable.
All terminal and HTML rendering is rich's.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from pathlib import Path
from typing import Any, Callable

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from shmspec.model.properties import DESCRIPTIONS

from ..core import paths
from ..core.documents import header
from ..core.results import GateResult, Violation
from ..spec.validate import SPEC_ACTIONS

SCHEMA = "shmspec.report/1"
VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "not-checked": "yellow", "error": "bold magenta",
                 "unknown": "bold yellow", "not-claimed": "cyan"}
VERDICTS = ("pass", "fail", "unknown", "error", "not-checked", "not-claimed")
"""The one verdict vocabulary of every command (``check``, ``model``,
``prove``, ``mutants``, ``matrix``): what its last line says, upper-cased."""


def verdict_line(verdict: str, detail: str = "", report: Any = None) -> Text:
    """The line every command ends with: ``verdict: PASS  (detail)  report: PATH``.

    ``verdict`` is one of :data:`VERDICTS`; ``detail`` (counts, seconds) is
    put in parentheses; ``report`` (a path, or None) is the command's report.

    Raises:
        ValueError: ``verdict`` is not one of :data:`VERDICTS`.
    """
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    line = Text.assemble(("verdict: ", "bold"), (verdict.upper(), VERDICT_STYLE[verdict]))
    if detail:
        line.append(f"  ({detail})")
    if report is not None:
        line.append(f"  report: {report}")
    return line


def report_json(result: GateResult, started: str, target_source: str | None = None,
                baseline: dict[str, Any] | None = None) -> dict[str, Any]:
    """``report.json`` (schema ``shmspec.report/1``, reports/README.md);
    ``baseline``: the ``baseline`` block (:func:`.outcomes.summary_json`),
    None when the run was judged without one."""
    stats = result.property_counts()
    standing = standings(baseline)
    return {
        **header(SCHEMA, "check"),
        "target": result.target,
        "target_source": target_source,
        "stand_ins": list(result.stand_ins),
        "protocol": result.protocol,
        "model_profile": result.model_profile,
        "contract": result.contract.to_json() if result.contract is not None else None,
        "profile": result.profile,
        "concurrency": result.concurrency,
        "construction": result.construction.to_json(),
        "constructions": result.constructions,
        "seed": result.seed,
        "seeds": list(result.seeds) or [result.seed],
        "units": result.units,
        "shard": f"{result.shard[0]}/{result.shard[1]}" if result.shard else None,
        "workers": result.workers,
        "executor": result.executor,
        "verdict": result.verdict,
        "started": started,
        "seconds": round(result.seconds, 3),
        "properties": result.properties,
        "property_stats": {
            pid: {"examples": e, "steps": s, "seconds": round(t, 3)} for pid, (e, s, t) in stats.items()
        },
        "campaigns": [
            {
                "name": c.name,
                "checks": c.checks,
                "examples": c.examples,
                "steps": c.steps,
                "seconds": round(c.seconds, 3),
                "completed": c.completed,
                "skipped": c.skipped,
                "error": c.error,
                "mode": c.mode,
                "unknown": c.unknown,
                "rates": c.rates,
                "not_claimed": c.not_claimed,
                "violations": [f"V{result.violations.index(v) + 1}" for v in c.violations],
            }
            for c in result.campaigns
        ],
        "errors": [f"{c.name}: {c.error}" for c in result.campaigns if c.error],
        "violations": [{"id": f"V{i}", **v.to_json(),
                        **({"baseline": standing[f"V{i}"]} if f"V{i}" in standing else {})}
                       for i, v in enumerate(result.violations, 1)],
        "repro": "repro_test.py" if result.violations else None,
        "baseline": baseline,
    }


def standings(baseline: dict[str, Any] | None) -> dict[str, str]:
    """Violation id (``V1``) -> ``new`` or ``known``, from a run's
    ``baseline`` block (:func:`.outcomes.summary_json`); empty without one.
    report.json's ``violations[].baseline`` and report.html's marks."""
    found = (baseline or {}).get("findings") or {}
    return {f["violation"]: status for status in ("new", "known") for f in found.get(status, ())}


def summary_table(result: GateResult, statements: bool = True) -> Table:
    t = Table(title="Properties", box=box.SIMPLE_HEAVY, show_lines=False)
    fixed = {"no_wrap": True, "min_width": 6}
    cols = [("property", {**fixed, "min_width": 11}), ("verdict", {**fixed, "min_width": 11}),
            ("examples", {**fixed, "justify": "right"}), ("steps", {**fixed, "justify": "right"}),
            ("time", {**fixed, "justify": "right"})]
    if statements:
        cols.append(("statement", {"overflow": "fold"}))
    for col, kw in cols:
        t.add_column(col, **kw)
    stats = result.property_counts()
    props = result.properties
    statement = result.descriptions
    for pid in result.property_ids:
        e, s, sec = stats[pid]
        v = props[pid]
        row = [pid, Text(v, style=VERDICT_STYLE[v]), str(e), str(s), f"{sec:.1f}s"]
        t.add_row(*row, *([statement[pid]] if statements else []))
    return t


def _broken(s: dict[str, Any]) -> str:
    """The properties a step broke (``NRR, RC``), or ""."""
    return ", ".join(dict.fromkeys(e["property"] for e in s.get("violations") or ()))


def _mark(index: Any, s: dict[str, Any]) -> str:
    """The ``#`` cell: ``✗ 11`` on a step that broke a property, so that the
    step is marked without colour too (logs, plain text, screen readers)."""
    return f"✗ {index}" if s.get("violations") else str(index)


def steps_table(v: Violation) -> Table:
    t = Table(box=box.MINIMAL, show_edge=False, expand=False)
    for col in ("#", "process", "action", "args", "expected", "observed", "changed"):
        t.add_column(col, overflow="fold")
    last = len(v.steps) - 1
    for i, s in enumerate(v.steps):
        bad = bool(s["violations"]) or i == last
        observed = s["observed"] + (f"  ✗ breaks {_broken(s)}" if s["violations"] else "")
        t.add_row(
            _mark(s["index"], s), s["process"], s["action"], _short_args(s["args"]), s["expected"], observed,
            _short_changed(s["changed"]), style="bold red" if bad and s["violations"] else None,
        )
    return t


def _lane_table(v: Violation, first: str, skip: tuple[str, ...] = ()) -> tuple[Table, list[str]]:
    """A table with a ``first`` column and one lane per process of ``v``'s
    steps (the writer first, then readers by name); returns it and the lanes."""
    procs = sorted({s["process"] for s in v.steps} - set(skip), key=lambda p: (p != "writer", p))
    t = Table(box=box.MINIMAL, show_edge=False, expand=False)
    t.add_column(first, justify="right", no_wrap=True)
    for p in procs:
        t.add_column(p, overflow="fold", min_width=14)
    return t, procs


def lanes_table(v: Violation) -> Table:
    """One lane (column) per process, one row per scheduled step, the ring's
    live chunks (``id@address:reader_count/writer_count``) beside each step;
    the step that broke a property in bold red."""
    t, procs = _lane_table(v, "#")
    t.add_column("ring", overflow="fold")
    stopped_at: dict[str, str] = {}  # process -> the yield point it stopped before (the step it runs next)
    for s in v.steps:
        ran = stopped_at.pop(s["process"], None) if s["kind"] != "start" else None
        if s["yield_point"]:
            stopped_at[s["process"]] = s["yield_point"]
        if s["kind"] == "start":
            cell = f"{s['action']} {_short_args(s['args'])}".strip()
        else:
            cell = "…"
        cell += f" ▸ {s['yield_point']}" if s["yield_point"] else f" ⇒ {s['observed']}"
        bad = bool(s["violations"])
        if bad:  # the harm happened in the atomic step(s) this row ran: name them
            cell += f"  ✗ breaks {_broken(s)}" + (f" in its {ran} step" if ran else " in its first step")
        row = ["" for _ in procs]
        row[procs.index(s["process"])] = cell
        t.add_row(_mark(s["index"], s), *row, " ".join(s["ring"]) or "(empty)", style="bold red" if bad else None)
    return t


def history_table(v: Violation) -> Table:
    """A free-running finding: one lane per process, one row per operation of
    the handle's sub-history, with invoke and return times (µs)."""
    t, procs = _lane_table(v, "invoke→return µs")
    for s in v.steps:
        cell = f"{s['action']} {_short_args(s['args'])} ⇒ {s['observed']}"
        if s.get("freed"):
            cell += f" freed {','.join(s['freed'])}"
        bad_des = [d for d in s.get("deserialized", []) if d != s["observed"]]
        if bad_des:
            cell += f" (deserialized {', '.join(bad_des)})"
        row = ["" for _ in procs]
        row[procs.index(s["process"])] = cell
        if s["violations"]:
            row[procs.index(s["process"])] += f"  ✗ breaks {_broken(s)}"
        t.add_row(f"{s['invoke_us']}→{s['return_us']}", *row, style="bold red" if s["violations"] else None)
    return t


def spec_table(v: Violation) -> Table:
    """A TLC counterexample: one lane per process, one row per spec action
    (its arguments recovered by the model), what it changed for its process,
    the live chunks (``id@address:reader_count``, addresses in spec units)
    and whether the model took the same step."""
    t, procs = _lane_table(v, "#", skip=("-", "?"))
    t.add_column("ring", overflow="fold")
    t.add_column("model", no_wrap=True)
    for s in v.steps[1:]:
        row = ["" for _ in procs]
        cell = f"{s['action']} {_short_args(s['args'])}".strip() + (f" ⇒ {s['observed']}" if s["observed"] else "")
        if s["process"] in procs:
            row[procs.index(s["process"])] = cell
        if s["violations"] and s["process"] in procs:
            row[procs.index(s["process"])] += f"  ✗ breaks {_broken(s)}"
        t.add_row(_mark(s["index"], s), *row, " ".join(s["ring"]) or "(empty)", s.get("model", ""),
                  style="bold red" if s["violations"] or s.get("model") == "departs" else None)
    return t


LANES_LEGEND = ("▸ P: the process stopped just before atomic step P   … resumed   ⇒ R: the operation returned R   "
                "✗ breaks X in its S step: the atomic step S this row ran broke property X   "
                "ring: live chunks id@address:reads/promised (reader_count/writer_count)")


def violation_panel(n: int, v: Violation, descriptions: dict[str, str] | None = None,
                    expected: bool = False) -> Panel:
    """Violation ``V{n}``: its property (``descriptions``: id -> statement,
    default the ring-buffer registry's), message, construction and trace.
    ``expected``: a counterexample that was asked for (a TLC config that must
    fail, ``shmspec model``), drawn in yellow and titled so, not in the red of
    a failure."""
    descriptions = DESCRIPTIONS if descriptions is None else descriptions
    mode = f", concurrency {v.concurrency}" if v.concurrency != "off" else ""
    cause = getattr(v.exc, "cause", None)
    again = (f"  (finding {v.occurrence} of {v.property}: it fails at another step kind"
             + (f", {cause}," if cause else "") + " than the earlier ones)" if v.occurrence > 1 else "")
    colour = "yellow" if expected else "red"
    head = Text.assemble((f"{v.property}", f"bold {colour}"), f"  {descriptions.get(v.property, '')}{again}\n",
                         (v.message, colour),
                         f"\nconstruction: {v.construction.name}; campaign {v.campaign}{mode}, round {v.round}, "
                         + (f"{len(v.steps)} recorded steps: the one where the run departs from the spec and "
                            "those of other processes that ran while it did (the whole run is kept as its trace "
                            f"file, traces/V{n}.json: shmspec validate on it gives the same departure)"
                            if v.concurrency == "free" and v.trace is not None
                            else f"{len(v.steps)} operations of the handle's history (the interleaving was the "
                            "operating system's: a re-run of the same seed and load may not recur, and is not "
                            "shrunk)" if v.concurrency == "free"
                            else "the z3 counterexample's step" if v.campaign == "prove"
                            else f"{len(v.steps)} steps of a fixed fault scenario" if v.concurrency == "faults"
                            else f"{len(v.steps)} steps of a fixed two-thread schedule" if v.concurrency == "threads"
                            else f"{len(v.steps) - 1} spec steps (TLC's shortest counterexample)"
                            if v.concurrency == "spec"
                            else f"{len(v.steps)} steps after shrinking"
                            + (" (shrinking cut by the profile's example budget: a shorter trace may exist)"
                               if v.shrink_complete is False else "")))
    table = {"controlled": lanes_table, "free": history_table, "spec": spec_table}.get(v.concurrency, steps_table)(v)
    parts = [head, table] + ([Text(LANES_LEGEND, style="dim")] if v.concurrency == "controlled" else [])
    title = f"V{n} · expected counterexample (this config must fail {v.property})" if expected else f"V{n}"
    return Panel(Group(*parts), title=title, border_style=colour)


def render_console(console: Console, result: GateResult, report_dir: Path | None, verdict: bool = True) -> None:
    """The gate's console report: header, properties, campaigns, every
    violation's panel and (``verdict``) the verdict line; ``shmspec check``
    prints its own verdict line last, after the baseline's lines."""
    console.print(
        Panel.fit(
            Text.assemble(
                ("shmspec check", "bold"), f"  target {result.target}  model profile {result.model_profile}  ",
                f"gate profile {result.profile}  concurrency {result.concurrency}  seed {result.seed_text}\n",
                f"construction {result.construction.name}  contract {result.contract_name}"
                + (f" ({result.contract.source})" if result.contract is not None and result.contract.source else "")
                + (f"\nstood in for the file's own imports: {', '.join(result.stand_ins)}" if result.stand_ins
                   else "")
                + (f"\nalso run in: {'; '.join(others)}" if (others := list(dict.fromkeys(
                    c["name"] for c in result.constructions if not c.get("primary")))) else ""),
            )
        )
    )
    console.print(summary_table(result, statements=console.width >= 100))
    for pid, why in (result.contract.not_claimed.items() if result.contract is not None else ()):
        console.print(f"[cyan]{pid} not claimed by the contract: {why}[/]", highlight=False)
    skipped = [c for c in result.campaigns if c.skipped]
    for c in skipped:
        console.print(f"[yellow]campaign {c.name} skipped: {c.skipped}[/]")
    for c in result.campaigns:
        if c.error:
            console.print(f"[magenta]campaign {c.name} errored: {c.error}[/]")
        if c.unknown:
            console.print(f"[yellow]campaign {c.name}: unknown: {c.unknown}[/]")
        if c.mode == "controlled" and c.steps and not c.skipped:
            console.print(f"campaign {c.name}: {c.examples} examples, {c.steps} scheduled steps "
                          f"({c.steps / max(c.seconds, 1e-9):.0f} steps/s, shrinking included)")
        if c.rates.get("spec_validation"):
            sv = c.rates["spec_validation"]
            stopped = "".join(f", {n} up to a {op} (not in the spec)" for op, n in sv["stopped_at"].items())
            reached = ", ".join(f"{a} {sv['actions'][a]}" for a in SPEC_ACTIONS if a in sv["actions"])
            missing = [a for a in SPEC_ACTIONS if a not in sv["actions"]]
            colour = "red" if sv["departures"] else "green"
            console.print(f"campaign {c.name}: [{colour}]{sv['validated']} of {sv['traces']} recorded runs are "
                          f"behaviours of tla/ShmStore.tla[/] (TLC, {sv['seconds']:.1f} s; {sv['whole']} whole"
                          f"{stopped}); spec steps taken: {reached}; never taken: {', '.join(missing) or 'none'}",
                          soft_wrap=True)
            if sv.get("coverage"):
                cv = sv["coverage"]
                gaps = "; ".join(f"{g['definition']} line {g['line']}: {g['text']}" for g in cv["gaps"])
                console.print(f"campaign {c.name}: spec coverage: the runs reach {cv['run_parts']} of the "
                              f"{cv['model_parts']} parts of the spec's steps the model reaches ({cv['model_config']})"
                              f"; not reached: {escape(gaps) or 'none'} (docs/trace-validation.md#coverage)",
                              soft_wrap=True)
        if c.mode == "preemption" and not c.error:
            console.print(f"campaign {c.name}: {c.examples} schedules, each preempting one operation at one yield "
                          f"point (bound 1), {c.steps} scheduled steps")
        if c.mode == "program" and not c.error:
            wrap = "with" if "WRAP" in c.checks else "without (no warp hook)"
            early = f"; stopped early (target diverged): {', '.join(c.rates['stopped_early'])}" \
                if c.rates.get("stopped_early") else ""
            console.print(f"campaign {c.name}: {c.examples} z3 boundary programs, {c.steps} steps, {wrap} id "
                          f"wraparound{early}")
        if c.mode == "threads" and not c.error:
            n = sum(d["schedules"] for d in c.rates.get("scenarios", {}).values())
            console.print(f"campaign {c.name}: {c.examples} scenarios of two threads on one writer, {n} schedules "
                          f"(contract: {c.rates.get('contract')})")
            for pid, why in c.not_claimed.items():
                console.print(f"[cyan]campaign {c.name}: {pid} not claimed: {why}[/]")
                for f in c.rates.get("not_claimed", []):
                    console.print(f"[cyan]  {f['scenario']} (A preempted at its yield point {f['k']}): "
                                  f"{f['message']}[/]")
        if c.mode == "constructions" and c.rates.get("constructions"):
            for row in c.rates["constructions"]:
                pre, free = row.get("preemption"), row.get("free_running")
                what = ", ".join(x for x in (
                    f"{pre['schedules']} preemption schedules" if pre else "",
                    f"{free['ops']} free-running operations ({free['ops_per_second']:.0f} ops/s)" if free else "")
                    if x) or "did not run"
                found = f", [red]{row['violations']} violation(s)[/]" if row["violations"] else ""
                console.print(f"campaign {c.name}: {row['name']}: {what}{found}")
        for rule, d in c.rates.get("client_deviations", {}).items():
            console.print(f"[cyan]campaign {c.name}: client deviation, reported, not failed ({d['property']} does "
                          f"not hold the store to it): {rule}, {d['count']} time(s); first: {d['first']}[/]")
        if c.rates.get("ops_per_second"):
            console.print(f"campaign {c.name}: {c.rates['ops']} operations, {c.rates['ops_per_second']:.0f} ops/s, "
                          f"{c.rates['partitions']} handle histories checked")
    for i, v in enumerate(result.violations, 1):
        console.print(violation_panel(i, v, result.descriptions))
    if verdict:
        console.print(verdict_line(result.verdict, f"{len(result.violations)} violation(s), {result.seconds:.1f}s",
                                   report_dir), soft_wrap=True)


def save_console_html(path: Path, renderables: list[Any], width: int) -> Path:
    """Print ``renderables`` on a recording console ``width`` columns wide and
    save rich's HTML export of it at ``path`` (``mutants.html``,
    ``matrix.html``); return ``path``."""
    path.write_text(record_html(lambda rec: [rec.print(r) for r in renderables], width, inline_styles=False))
    return path


def record_html(render: Callable[[Console], Any], width: int = 140, inline_styles: bool = True,
                code_format: str | None = None) -> str:
    """The one recording console: ``render(console)`` on a console ``width``
    columns wide that writes nothing, and rich's HTML export of what it
    printed (report.html, model.html, matrix.html, mutants.html);
    ``code_format``: rich's template for the export (default: a whole page)."""
    rec = _recording(render, width)
    if code_format is not None:
        return rec.export_html(inline_styles=inline_styles, code_format=code_format)
    return rec.export_html(inline_styles=inline_styles)


def record_text(render: Callable[[Console], Any], width: int = 120) -> str:
    """The same recording console as :func:`record_html`, exported as plain
    text (no colour): pytest failures, JUnit, logs."""
    return _recording(render, width).export_text(styles=False)


def _recording(render: Callable[[Console], Any], width: int) -> Console:
    """A console ``width`` columns wide that records and writes nothing,
    after ``render(console)``."""
    import io

    rec = Console(record=True, width=width, file=io.StringIO(), force_terminal=False)
    render(rec)
    return rec


def violation_text(n: int, v: Violation, descriptions: dict[str, str] | None = None, width: int = 120) -> str:
    """:func:`violation_panel` as plain text ``width`` columns wide."""
    return record_text(lambda rec: rec.print(violation_panel(n, v, descriptions)), width)


def write_report(result: GateResult, report_dir: Path, started: str | None = None,
                 target_source: str | None = None, baseline: dict[str, Any] | None = None) -> Path:
    """Write report.json, report.html and (when there are violations)
    repro_test.py into ``report_dir`` (created), and ``traces/V<n>.json``
    for each finding that carries a recorded run (:attr:`Violation.trace`).
    Returns the directory."""
    report_dir.mkdir(parents=True, exist_ok=True)
    started = started or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    data = report_json(result, started, target_source, baseline)
    for i, v in enumerate(result.violations, 1):
        if v.trace is not None:  # a recorded run that departs: shmspec validate reads the file
            (report_dir / "traces").mkdir(exist_ok=True)
            (report_dir / "traces" / f"V{i}.json").write_text(json.dumps(v.trace) + "\n")
            data["violations"][i - 1]["trace_file"] = f"traces/V{i}.json"
    (report_dir / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    from .page import page  # noqa: PLC0415

    console = record_html(lambda rec: render_console(rec, result, report_dir))
    panels = [record_html(lambda rec, i=i, v=v: rec.print(violation_panel(i, v, result.descriptions)),
                          code_format="<pre class='rich'>{code}</pre>")
              for i, v in enumerate(result.violations, 1)]
    (report_dir / "report.html").write_text(page(result, report_dir, console, panels, started, baseline))
    if result.violations:
        (report_dir / "repro_test.py").write_text(repro_source(result, target_source))
    return report_dir


def default_report_dir(target: str, root: Path | None = None) -> Path:
    """``<root>/<time>-<target slug>`` (a suffix ``-2``, ``-3`` ... when it
    exists); ``root`` defaults to :func:`..core.paths.report_root` (the
    checkout's ``reports/``, ``$SHMSPEC_REPORT_DIR`` or the user cache)."""
    root = paths.report_root() if root is None else root
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9.=_-]+", "_", target.rsplit("/", 1)[-1])[:60]
    path = root / f"{stamp}-{slug}"
    n = 1
    while path.exists():
        n += 1
        path = root / f"{stamp}-{slug}-{n}"
    return path


def repro_source(result: GateResult, target_source: str | None) -> str:
    cases = [
        {"id": f"V{i}", "property": v.property, "message": v.message, "config": v.config,
         "concurrency": v.concurrency, "calls": v.calls(),
         **({"protocol": v.protocol} if v.protocol != "ringbuffer" else {})}
        for i, v in enumerate(result.violations, 1)
    ]
    target = result.target
    other = "file:patched_store.py" if result.protocol == "ringbuffer" else f"{result.protocol}:file:patched_store.py"
    return f'''"""Replays the shrunk counterexamples of a shmspec gate run.

Target: {target}   model profile: {result.model_profile}   gate profile: {result.profile}   seed: {result.seed_text}
Run:    python -m pytest repro_test.py   (any Python with shmspec installed)
        SHMSPEC_TARGET={other} python -m pytest repro_test.py
        (another target: a patched store, or the same file on another machine)
Each test replays one violation's steps against the target (lockstep calls on
the model and the target, or the exact schedule of writer and reader
processes) and fails while any property is still violated.
"""

import json
import os

import pytest

import shmspec

RECORDED_TARGET = {target!r}
TARGET = os.environ.get("SHMSPEC_TARGET") or RECORDED_TARGET
CASES = json.loads(r"""
{json.dumps(cases, indent=1)}
""")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] + "-" + c["property"] for c in CASES])
def test_counterexample_no_longer_violates(case):
    # shmspec.replay (docs/api.md): lockstep calls on the model and the target;
    # controlled, the exact schedule; free, the same load re-run (the OS
    # interleaving is not replayed); faults and threads, the named scenario
    found = shmspec.replay(TARGET, case)
    assert found is None, f"{{case['property']}} still violated on {{TARGET}}: {{found}}"
'''


def _short_args(args: dict[str, Any]) -> str:
    parts = []
    for k, v in args.items():
        if k == "data" and isinstance(v, str):
            b = bytes.fromhex(v)
            parts.append(f"data={b[:8].hex()}{'...' if len(b) > 8 else ''}({len(b)}B)")
        else:
            parts.append(f"{k}={v}")
    return " ".join(parts)


def _short_changed(changed: dict[str, Any]) -> str:
    return " ".join(f"{k}:{v[0]}->{v[1]}" if isinstance(v, list) and len(v) == 2 and k != "live" else f"{k}={v}"
                    for k, v in changed.items())
