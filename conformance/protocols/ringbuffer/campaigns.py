"""The ring-buffer protocol's campaigns and how each runs: lockstep
(:mod:`~shmspec.conformance.lockstep.machine`), z3 boundary programs,
the preemption sweep, drawn schedules, process faults, two writer threads,
the free-running load and the other constructions.

The gate (:mod:`shmspec.conformance.runner.gate`) calls :func:`run_campaign`
through :class:`~shmspec.conformance.protocols.ringbuffer.RingBufferProtocol`;
these moved here from the gate's module (2026-12-02) and the gate re-exports
the campaign constants under their old names.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable

from ...concurrency.freerun import FreeLoad, free_config, run_free
from ...concurrency.history import LIN_PROPERTIES
from ...concurrency.procs import ProcessPool, ScheduleError
from ...concurrency.schedule import CHECKS as SCHEDULED_CHECKS
from ...concurrency.schedule import CONTROLLED_CHECKS, scheduled_machine
from ...core import interrupt
from ...core.config import SessionConfig, config_to_json
from ...core.constructions import Construction, others
from ...core.protocol import CampaignContext
from ...core.results import CampaignResult, Violation
from ...lockstep.machine import CAMPAIGNS, Campaign, machine_for
from ...targets.loader import LoadedTarget
from . import CONCURRENCY_MODES  # noqa: F401 - re-exported

BOUNDARY = Campaign("boundary", frozenset(), frozenset({"DISJ", "OOM", "FIFO", "RC", "NRR", "WRAP", "CLR", "LEAK",
                                                       "CONFORMANCE"}), mode="program")
"""z3-generated boundary programs (conformance/proofs/boundary.py), run in lockstep; WRAP
is claimed only when the target has a warp hook (id wraparound reached)."""
DEFAULT_CAMPAIGNS: tuple[Campaign, ...] = CAMPAIGNS + (BOUNDARY,)

PREEMPTION = Campaign("preemption", frozenset(), SCHEDULED_CHECKS, mode="preemption")
"""Every yield point of a get (and of the writer's operations) preempted once
against an opposing operation (conformance/concurrency/races.py); runs before the
Hypothesis-drawn schedules, so a one-preemption race is found whatever the seed."""
CONTROLLED = Campaign("controlled", frozenset(), CONTROLLED_CHECKS, mode="controlled")
"""Writer and reader processes under schedules Hypothesis draws (conformance/concurrency/schedule.py)."""
FAULTS = Campaign("faults", frozenset(), frozenset({"LEASE", "LIVE", "NRR", "PROG"}), mode="faults")
"""Process faults (conformance/concurrency/faults.py): a reader SIGKILLed in the reader
lock and mid-get, the writer mid-put; LIVE and NRR for the survivors."""
SW_CAMPAIGN = Campaign("sw", frozenset(), frozenset({"SW"}), mode="threads")
"""Two threads on one writer (conformance/concurrency/sw.py): each pair of writer
operations under a preemption sweep of the first one's yield points."""
CONSTRUCTIONS_CAMPAIGN = Campaign("constructions", frozenset(), SCHEDULED_CHECKS | frozenset(LIN_PROPERTIES) | {"LEAK"},
                                  mode="constructions")
"""The gate's other constructions (conformance/core/constructions.py: readers
spawned, one reader, the other writer construction): in each, the preemption
sweep and a free-running load of ``GateProfile.construction_seconds``."""
CONCURRENT_CAMPAIGNS: dict[str, tuple[Campaign, ...]] = {
    "controlled": (PREEMPTION, CONTROLLED, FAULTS, SW_CAMPAIGN, CONSTRUCTIONS_CAMPAIGN),
    "free": (Campaign("free-running", frozenset(), frozenset(LIN_PROPERTIES) | {"LEAK"}, mode="free"), FAULTS,
             SW_CAMPAIGN, CONSTRUCTIONS_CAMPAIGN),
    "off": (),
}



def run_campaign(ctx: CampaignContext, campaign: Campaign, res: CampaignResult) -> CampaignResult:
    """Run one campaign of this protocol (by its ``mode``) and fill ``res``."""
    target, gp, seed, base = ctx.target, ctx.profile, ctx.seed, ctx.config
    if campaign.mode == "free":
        return _run_free(target, gp, seed, base, res)
    if campaign.mode == "faults":
        return _run_faults(target, base, res)
    if campaign.mode == "threads":
        return _run_sw(target, base, res)
    if campaign.mode == "constructions":
        return _run_constructions(target, gp, seed, base, res, ctx.failed)
    if campaign.mode == "program":
        return _run_programs(target, gp, base, res, scheduled=ctx.concurrency == "controlled", found=ctx.found)
    if campaign.mode in ("controlled", "preemption"):
        # Races are findings of their own: only CONFORMANCE excusals carry
        # over, what the preemption sweep found (``raced``), and PROM and PROG
        # once found (the client's account, which needs no interleaving: a
        # lockstep finding of either has the same cause).
        base = replace(base, excused=frozenset(e for e in base.excused if e.startswith("CONFORMANCE"))
                       | set(ctx.raced) | (ctx.failed & {"PROM", "PROG"}))
        if campaign.mode == "preemption":
            return _run_preemption(target, base, res)
        try:
            traces: list | None = [] if campaign.mode == "controlled" and base.record else None
            with ProcessPool(target, base.readers, start_method=base.start_method) as pool:
                ctx.run_rounds(res, lambda config: scheduled_machine(target, config, pool, traces),
                               gp.scheduled_examples, gp.scheduled_steps, base=base, fresh_findings=True)
                if pool.started["keep_get"]:  # a store whose get takes copy=False (schedule.py)
                    res.rates["zero_copy_reads"] = pool.started["keep_get"]
            if traces is not None:  # the campaign's seconds include TLC's (rates.spec_validation.seconds)
                t1 = time.monotonic()
                _validate_traces(traces, res, base, campaign.name)
                res.seconds += time.monotonic() - t1
            return res
        except ScheduleError as exc:
            res.error = f"ScheduleError: {exc}"
            return res
    if not campaign.applies_to(target):
        res.skipped = f"profile {target.profile.name} has no {'signed handles' if campaign.needs_signed else 'touch'}"
        return res
    return ctx.run_rounds(res, lambda config: machine_for(target, campaign, config), gp.max_examples,
                          gp.step_count)


VALIDATE_TIMEOUT = 120.0
"""Seconds TLC may take on one batch of recorded runs (past it the campaign
errs: a run of a faulty store can give TLC a state space that does not end
soon, 2026-12-07: dup_overwrite)."""


def _validate_traces(traces: list[tuple[dict[str, Any], list[dict[str, Any]]]], res: CampaignResult,
                     base: SessionConfig, campaign: str, concurrency: str = "controlled") -> None:
    """The controlled campaign's recorded sessions (or the free-running
    campaign's recorded run, ``concurrency="free"``: no lanes) checked against
    tla/ShmStore.tla (:func:`~shmspec.conformance.spec.validate.validate_with_coverage`,
    docs/trace-validation.md): ``res.rates["spec_validation"]``, and a
    CONFORMANCE finding for the first run TLC rejects, its lanes marked at
    the step where it departs (a replay records and validates it again).
    When every run validates, ``rates["spec_validation"]["coverage"]``: the
    parts of ShmStore.tla's steps the model reaches and the runs do not
    (from the same TLC runs as the verdicts)."""
    from types import SimpleNamespace

    from ...concurrency.schedule import DEPARTS
    from ...spec.tlc import TlcError
    from ...spec.validate import TraceFormatError, validate_with_coverage

    t0 = time.monotonic()
    try:
        results, coverage = validate_with_coverage([doc for doc, _ in traces], timeout=VALIDATE_TIMEOUT)
    except (TlcError, TraceFormatError) as exc:
        res.error = f"trace validation could not run: {str(exc).splitlines()[0]}"
        return
    actions: dict[str, int] = {}
    for v in results:
        for a, n in v.actions.items():
            actions[a] = actions.get(a, 0) + n
    departed = [(i, v) for i, v in enumerate(results) if v.departure is not None]
    unmodelled = [v.unmodelled["op"] for v in results if v.unmodelled]
    res.rates["spec_validation"] = {
        "traces": len(results), "validated": len(results) - len(departed),
        "whole": sum(1 for v in results if v.departure is None and not v.unmodelled),
        "stopped_at": {op: unmodelled.count(op) for op in sorted(set(unmodelled))},
        "events": sum(v.events for v in results), "spec_steps": sum(v.steps for v in results),
        "actions": dict(sorted(actions.items())), "seconds": round(time.monotonic() - t0, 2),
        "departures": [{"trace": i, "event": v.departure.event, "act": v.departure.act,
                        "describe": v.departure.describe()} for i, v in departed[:5]]}
    if not departed:  # coverage is of runs that validate
        cov = coverage.to_json()
        res.rates["spec_validation"]["coverage"] = {
            "model_config": cov["model_config"], "model_parts": cov["model_parts"], "run_parts": cov["run_parts"],
            "unreached_actions": cov["unreached_actions"],
            "gaps": [{"definition": d["definition"], **g} for d in cov["definitions"] for g in d["gaps"]]}
    if departed:
        i, v = departed[0]
        msg = DEPARTS + v.departure.describe()
        steps = traces[i][1] or _departure_steps(v.departure, msg)
        if concurrency != "free" and v.departure.event < len(steps):
            steps[v.departure.event]["violations"].append({"property": "CONFORMANCE", "message": msg})
        exc = SimpleNamespace(prop="CONFORMANCE", cause=f"spec/{v.departure.act}", action=v.departure.recorded["op"],
                              message=msg)
        res.violations.append(Violation("CONFORMANCE", msg, campaign, 0, steps,
                                        {**config_to_json(base), "promises": True}, exc, concurrency=concurrency,
                                        trace=traces[i][0]))


def _departure_steps(dep: Any, message: str) -> list[dict[str, Any]]:
    """A free run's departure as report steps (:func:`history_steps`' form):
    the departing recorded event and the other processes' events that ran
    while it did, by start time (µs from the first of them); the departing
    one carries the CONFORMANCE finding."""
    from ...concurrency.record import result_text

    evs = sorted([(dep.event, dep.recorded), *dep.overlapping], key=lambda p: (p[1]["lo"], p[0]))
    base = min(e["lo"] for _, e in evs)
    out = []
    for k, (j, e) in enumerate(evs):
        ended = f" ({result_text(e.get('result'))})" if e["to"] is None else ""
        out.append({"index": k, "process": e["process"], "action": e["op"], "args": {"event": j},
                    "invoke_us": round((e["lo"] - base) / 1000, 1), "return_us": round((e["hi"] - base) / 1000, 1),
                    "observed": f"{e['at'] or 'start'} -> {e['to'] or 'end'}{ended}", "freed": [], "deserialized": [],
                    "violations": [{"property": "CONFORMANCE", "message": message}] if j == dep.event else []})
    return out


def _run_faults(target: LoadedTarget, base: SessionConfig, res: CampaignResult) -> CampaignResult:
    """Every process-fault scenario once (fixed programs: no seed, no
    shrinking); a scenario's first finding of each property becomes a
    violation whose config names the scenario (:func:`.faults.replay_fault`)."""
    from ...concurrency.faults import DATA_BUFFER_SIZE, LIVE_BOUND, MAX_OBJECT_SIZE, READERS, SCENARIOS, run_scenario

    t0 = time.monotonic()
    res.rates = {"live_bound_seconds": LIVE_BOUND, "scenarios": {}}
    if not target.profile.leases and "LEASE" in res.checks:
        res.checks.remove("LEASE")
        res.not_claimed["LEASE"] = (f"profile {target.profile.name} declares no reader leases: a dead reader's "
                                    "promised reads stay owed (SEMANTICS LEASE is for stores that declare them)")
    for name in SCENARIOS:
        try:
            sr = run_scenario(target, name, base.writer_lock, base.start_method)
        except ScheduleError as exc:
            res.error = f"{name}: ScheduleError: {exc}"
            break
        res.examples += 1
        res.steps += len(sr.steps)
        res.rates["scenarios"][name] = {"reachable": sr.reachable, "seconds": round(sr.seconds, 2),
                                        "longest_step_seconds": round(sr.longest_step, 3),
                                        "findings": [f.property for f in sr.findings]}
        seen = set()
        for f in sr.findings:
            if f.property in seen or f.property in base.excused:
                continue
            seen.add(f.property)
            cfg = {"scenario": name, "data_buffer_size": DATA_BUFFER_SIZE, "max_object_size": MAX_OBJECT_SIZE,
                   "readers": list(READERS), "n_readers": len(READERS), "writer_lock": base.writer_lock,
                   "start_method": base.start_method, "live_bound_seconds": LIVE_BOUND}
            res.violations.append(Violation(f.property, f"{name}: {f.message}", "faults", 0, f.steps, cfg,
                                            concurrency="faults", detected_seconds=time.monotonic(),
                                            detected_steps=res.steps))
    else:
        res.completed = True
    res.seconds = time.monotonic() - t0
    return res


def _run_sw(target: LoadedTarget, base: SessionConfig, res: CampaignResult) -> CampaignResult:
    """Every SW scenario's preemption sweep, in a forked child (fixed
    programs: no seed, no shrinking); a scenario's finding becomes a violation
    whose config names the scenario and the preemption point
    (:func:`.sw.replay_sw`).  On a target whose contract confines its writer
    to one thread the findings go to ``rates["not_claimed"]`` instead."""
    from ...concurrency.sw import DATA_BUFFER_SIZE, MAX_OBJECT_SIZE, run_all

    t0 = time.monotonic()
    results, error = run_all(target, base.writer_lock)
    claimed = target.profile.sw == "threads"
    res.rates = {"contract": target.profile.sw, "scenarios": {}}
    unclaimed = []
    for r in results:
        res.examples += 1
        res.steps += r.schedules
        res.rates["scenarios"][r.scenario] = {"schedules": r.schedules, "seconds": round(r.seconds, 2),
                                              "findings": [f.message for f in r.findings], "note": r.note}
        for f in r.findings:
            cfg = {"scenario": r.scenario, "k": f.k, "data_buffer_size": DATA_BUFFER_SIZE,
                   "max_object_size": MAX_OBJECT_SIZE, "writer_lock": base.writer_lock}
            if not claimed:
                unclaimed.append({"scenario": r.scenario, "k": f.k, "message": f.message})
            elif f.property not in base.excused:
                res.violations.append(Violation(f.property, f"{r.scenario} (A preempted at its yield point {f.k}): "
                                                f"{f.message}", "sw", 0, f.steps, cfg, concurrency="threads",
                                                detected_seconds=time.monotonic(), detected_steps=res.steps))
    if not claimed:
        res.checks = []
        res.not_claimed = {"SW": "the target's contract confines its writer to one thread"
                                 + (f" ({len(unclaimed)} scenario(s) corrupt it when two threads share it)"
                                    if unclaimed else "")}
        res.rates["not_claimed"] = unclaimed
    if error:
        res.error = error
    else:
        res.completed = True
    res.seconds = time.monotonic() - t0
    return res


def _run_free(target: LoadedTarget, gp: Any, seed: int, base: SessionConfig,
              res: CampaignResult) -> CampaignResult:
    """The free-running campaign: one load of ``gp.free_seconds``, its history
    checked per handle; the first finding of each property becomes a violation
    whose steps are that handle's sub-history."""
    t0 = time.monotonic()
    n = len(base.readers)
    config = free_config(n_readers=n, writer_lock=base.writer_lock, start_method=base.start_method)
    excused = {e for e in base.excused if e.startswith("CONFORMANCE@")}
    try:
        res.rates = _free_load(target, config, gp.free_seconds, seed, res, "free-running", excused)
        if base.record:
            _record_free(target, base, seed, res, excused)
    except ScheduleError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    res.seconds = time.monotonic() - t0
    return res


RECORDED_FREE_OPS = 600
"""Writer operations of the free-running campaign's recorded run (work, not
time; on impl 8,612 events, TLC 18.6 s, 2026-12-07: docs/trace-validation.md)."""
RECORDED_FREE_SECONDS = 10.0
"""The recorded run's bound in seconds, should its operations take longer."""


def _record_free(target: LoadedTarget, base: SessionConfig, seed: int, res: CampaignResult,
                 excused: set[str]) -> None:
    """With ``base.record`` (``--validate-traces``): one more free-running
    load, recorded (:func:`.freerun.run_free`), of :data:`RECORDED_FREE_OPS`
    writer operations in a 512-byte ring with objects of at most 96 bytes
    (it wraps and reclaims), no zero-copy reads (ShmStore.tla has no
    lease); its history's findings as the campaign's (their messages start
    "recorded run: "), and the run checked against ShmStore.tla
    (:func:`_validate_traces`): ``res.rates["recorded_run"]`` and
    ``res.rates["spec_validation"]``."""
    n = len(base.readers)
    config = free_config(n_readers=n, data_buffer_size=512, max_object_size=96, writer_lock=base.writer_lock,
                         start_method=base.start_method)
    rec = _free_load(target, config, RECORDED_FREE_SECONDS, seed, res, "free-running", excused, "recorded run: ",
                     FreeLoad(p_zero_copy=0.0, max_ops=RECORDED_FREE_OPS), record=True)
    trace = rec.pop("trace")
    res.rates["recorded_run"] = rec
    _validate_traces([(trace, [])], res, config, "free-running", concurrency="free")


def _free_load(target: LoadedTarget, config: SessionConfig, seconds: float, seed: int, res: CampaignResult,
               campaign: str, excused: set[str] | frozenset[str], prefix: str = "", load: FreeLoad | None = None,
               record: bool = False) -> dict[str, Any]:
    """One free-running load: its findings (the first of each property not
    in ``excused``; ``prefix`` starts their messages) appended to ``res.violations``, ``res`` marked completed
    or unknown, its examples and steps added; returns its rates (with
    ``record``, and ``"trace"``: the run's trace document).

    Raises:
        ScheduleError: a process did not start, finish or report in time.
    """
    n = config.n_readers
    fr = run_free(target, config, seconds, n, seed, load=load or FreeLoad(), record=record)
    res.examples += 1
    res.steps += fr.ops
    cfg = {**config_to_json(config), "free_seconds": seconds, "seed": seed}
    for prop, findings in fr.check.by_property().items():
        if prop in excused:
            continue
        f = findings[0]
        more = f" (and {len(findings) - 1} more {prop} finding(s) in this run)" if len(findings) > 1 else ""
        res.violations.append(Violation(prop, prefix + f.message + more, campaign, 0,
                                        history_steps(f.ops, prop, f.message, f.culprit), cfg, concurrency="free",
                                        detected_seconds=time.monotonic(), detected_steps=res.steps))
    if fr.leak == "fail" and "LEAK" not in excused:
        res.violations.append(Violation("LEAK", f"{prefix}the segment was still there after the writer closed", campaign,
                                        0, [], cfg, concurrency="free", detected_seconds=time.monotonic(),
                                        detected_steps=res.steps))
    if fr.check.verdict == "unknown":
        res.unknown = (f"{len(fr.check.unknown)} of {fr.check.partitions} handle histories ran out of the "
                       f"linearizability search budget")
    else:
        res.completed = res.unknown is None
    return {"ops": fr.ops, "ops_per_second": round(fr.ops_per_second, 1), "puts": fr.puts,
            "out_of_space": fr.out_of_space, "partitions": fr.check.partitions, "search_nodes": fr.check.nodes,
            "zero_copy_values": sum(1 for o in fr.history if o.action == "kept"),
            "per_process": {p: {k: round(v, 1) for k, v in d.items()} for p, d in fr.per_process.items()},
            **({"trace": fr.trace} if record else {})}


def _run_constructions(target: LoadedTarget, gp: Any, seed: int, base: SessionConfig, res: CampaignResult,
                       failed: frozenset[str]) -> CampaignResult:
    """The ``constructions`` campaign: in each construction other than the
    gate's primary one (``base``'s), the preemption sweep on a process pool
    built that way, then a free-running load of ``gp.construction_seconds``.
    A property the gate already failed (``failed``) is not reported again;
    within a construction, one finding per property (the sweep's first).
    ``res.rates["constructions"]`` lists what ran in each."""
    from ...concurrency.races import sweep

    t0 = time.monotonic()
    runs = []
    completed = True
    for c in others(Construction.of(base)):
        interrupt.check()
        config = replace(c.config(base), excused=frozenset(e for e in base.excused if e.startswith("CONFORMANCE"))
                         | failed)
        row: dict[str, Any] = {**c.to_json(), "violations": 0}
        before = len(res.violations)
        try:
            with ProcessPool(target, config.readers, start_method=c.start_method) as pool:
                record = _sweep_recorder(res, "constructions", config, f"{c.name}: ", res.steps)
                schedules, steps = sweep(target, config, pool, record)
            res.examples += schedules
            res.steps += steps
            row["preemption"] = {"schedules": schedules, "steps": steps}
            free = free_config(n_readers=c.n_readers, writer_lock=c.writer_lock, start_method=c.start_method)
            found = {v.property for v in res.violations[before:]}
            row["free_running"] = _free_load(target, free, gp.construction_seconds, seed, res, "constructions",
                                             config.excused | found, f"{c.name}: free-running: ")
        except ScheduleError as exc:
            res.error = f"{c.name}: {type(exc).__name__}: {exc}"
            completed = False
        except Exception as exc:  # noqa: BLE001 - a harness or target crash, reported
            res.error = f"{c.name}: {type(exc).__name__}: {exc}"
            completed = False
        row["violations"] = len(res.violations) - before
        runs.append(row)
        if res.error:
            break
    res.rates["constructions"] = runs
    res.completed = completed and res.unknown is None
    res.seconds = time.monotonic() - t0
    return res


def _run_programs(target: LoadedTarget, gp: Any, base: SessionConfig, res: CampaignResult,
                  scheduled: bool, found: Any) -> CampaignResult:
    """The boundary campaign: every z3-generated program (conformance/proofs/boundary.py)
    on a fresh session.  A program that breaks a property is rerun with it
    excused (as campaigns are, up to ``gp.rounds`` times), so later findings
    surface; programs that need the warp hook are skipped on targets without one.
    ``scheduled`` (gate concurrency ``controlled``): each program then also runs
    on real writer and reader processes, every reader's get lagging across the
    writer's next operation (:func:`~.boundary.run_program_scheduled`)."""
    from ...targets.adapter import can_warp
    from ...proofs.boundary import programs, run_program, run_program_scheduled

    t0 = time.monotonic()
    config = base
    warped = False
    try:
        everything = programs(base, include_unreachable=True)
        progs = [p for p in everything if p.unreachable is None]
        if len(progs) < len(everything):
            res.rates["unreachable"] = [p.name for p in everything if p.unreachable]
        has_warp = False
        if any(p.needs_warp for p in progs):
            from ...targets.adapter import StoreAdapter

            probe = StoreAdapter(target, base.data_buffer_size, base.max_object_size, base.n_readers)
            probe.open()
            try:
                has_warp = can_warp(probe.writer)
            finally:
                probe.close()
        for prog in progs:
            if prog.needs_warp and not has_warp:
                res.rates.setdefault("no_warp_hook", []).append(prog.name)
                continue
            res.examples += 1
            for round_ in range(gp.rounds + 1):
                session, exc = run_program(target, prog, config)
                res.steps += len(session.trace)
                if session.stopped_early is not None:
                    res.rates.setdefault("stopped_early", []).append(prog.name)
                if exc is None:
                    break
                res.violations.append(Violation(exc.prop, f"program {prog.name} ({prog.edge}): {exc.message}",
                                                "boundary", round_, [s.to_json() for s in exc.steps],
                                                config_to_json(config), exc, detected_seconds=time.monotonic(),
                                                detected_steps=res.steps, occurrence=found.record(exc)))
                config = found.excuse(config, exc)
            warped = warped or prog.needs_warp
        if scheduled:
            _run_programs_scheduled(target, [p for p in progs if has_warp or not p.needs_warp], base, res,
                                    run_program_scheduled)
        res.completed = True
    except Exception as exc:  # noqa: BLE001 - a harness or target crash, reported
        res.error = f"{type(exc).__name__}: {exc}"
    if not warped:
        res.checks = [c for c in res.checks if c != "WRAP"]
    res.seconds = time.monotonic() - t0
    return res


def _run_programs_scheduled(target: LoadedTarget, progs: list, base: SessionConfig, res: CampaignResult,
                            run: Callable) -> None:
    """The boundary programs on a process pool; races are findings of their own,
    so only CONFORMANCE excusals carry over (as for the controlled campaign).
    A finding is recorded once per property (concurrency ``controlled``)."""
    config = replace(base, excused=frozenset(e for e in base.excused if e.startswith("CONFORMANCE")))
    with ProcessPool(target, base.readers, start_method=base.start_method) as pool:
        for prog in progs:
            session, exc = run(target, prog, config, pool)
            res.steps += len(session.trace)
            if exc is not None:
                res.violations.append(Violation(exc.prop, f"program {prog.name} ({prog.edge}), readers lagging: "
                                                f"{exc.message}", "boundary", 0, [s.to_json() for s in exc.steps],
                                                config_to_json(config), exc, concurrency="controlled",
                                                detected_seconds=time.monotonic(), detected_steps=res.steps))
                config = replace(config, excused=config.excused | {exc.prop})


def _sweep_recorder(res: CampaignResult, campaign: str, config: SessionConfig, prefix: str = "",
                    steps_before: int = 0) -> Callable:
    """The ``on_violation`` callback of :func:`~.races.sweep`: each finding
    becomes a violation of ``campaign`` (concurrency ``controlled``: its steps
    are the exact schedule; ``prefix`` starts its message) and its property
    is excused for the schedules after it."""
    current = [config]

    def record(race, point, exc, steps) -> SessionConfig:
        at = f" at {point}" if point else ""
        res.violations.append(Violation(exc.prop, f"{prefix}preemption: {race.name}{at}: {exc.message}", campaign, 0,
                                        [s.to_json() for s in exc.steps], config_to_json(current[0]), exc,
                                        concurrency="controlled", detected_seconds=time.monotonic(),
                                        detected_steps=steps_before + steps))
        current[0] = replace(current[0], excused=current[0].excused | {exc.prop})
        return current[0]

    return record


def _run_preemption(target: LoadedTarget, base: SessionConfig, res: CampaignResult) -> CampaignResult:
    """The preemption-bounded sweep (:func:`~.races.sweep`) on one process
    pool; a finding is recorded once per property (concurrency ``controlled``:
    its steps are the exact schedule) and excused for the schedules after it."""
    from ...concurrency.races import sweep

    t0 = time.monotonic()
    try:
        with ProcessPool(target, base.readers, start_method=base.start_method) as pool:
            res.examples, res.steps = sweep(target, base, pool, _sweep_recorder(res, "preemption", base))
        res.completed = True
    except ScheduleError as exc:
        res.error = f"ScheduleError: {exc}"
    except Exception as exc:  # noqa: BLE001 - a harness or target crash, reported
        res.error = f"{type(exc).__name__}: {exc}"
    res.seconds = time.monotonic() - t0
    return res


def history_steps(ops: list, prop: str, message: str, culprit: Any = None) -> list[dict[str, Any]]:
    """A finding's sub-history as report steps (times in µs from its first
    invoke); the violation is attached to ``culprit`` (else the last step)."""
    base = min((o.invoke_ns for o in ops), default=0)
    steps = []
    for i, o in enumerate(ops):
        observed = o.error if o.error is not None else (o.result if isinstance(o.result, str) else repr(o.result))
        steps.append({
            "index": i, "process": o.process, "action": o.action,
            "args": {k: (v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)) for k, v in o.args.items()},
            "invoke_us": round((o.invoke_ns - base) / 1000, 1), "return_us": round((o.return_ns - base) / 1000, 1),
            "observed": observed, "freed": sorted(o.freed),
            "deserialized": [d if isinstance(d, str) else repr(d) for d in o.deserialized],
            "violations": [],
        })
    if steps:
        at = next((i for i, o in enumerate(ops) if o is culprit), len(steps) - 1)
        steps[at]["violations"] = [{"property": prop, "message": message}]
    return steps

