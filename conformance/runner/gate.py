"""The conformance gate: run every campaign against one target, collect verdicts.

Gate profiles (``--profile``):

* ``ci``: deterministic (fixed seed 0 unless ``--seed``), under 2 minutes on
  a 2-core machine.  What it finds is fixed by the seed; shrinking each
  counterexample stops after 10 s, so on a much slower machine a shrunk trace
  can come out longer;
* ``dev``: a few times more examples, random seed (printed and recorded);
* ``deep``: nightly; many more examples and longer runs.

A property found by one campaign starts excused in the campaigns after it.
A campaign that finds a violation is run again with that property *excused*
(recorded, not raised) so that later, different violations are found too, up to
``rounds`` times; a campaign still failing then gets one last round with every
divergence from the model excused, so the properties' own verdicts are
established.  A divergence of internal state from the model is excused by
turning the state comparison (and with it every outcome comparison with the
model) off for the rerun, so the properties, judged on what the target itself
does, still surface on stores whose bookkeeping differs.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from hypothesis import HealthCheck, Verbosity, seed as hyp_seed, settings
from hypothesis.errors import Flaky
from hypothesis.internal.conjecture import engine as _engine
from hypothesis.stateful import run_state_machine_as_test

from shmspec.model.properties import DESCRIPTIONS, PROPERTY_IDS  # noqa: F401 - re-exported (old imports)

from ..targets.loader import LoadedTarget
from ..lockstep.machine import CAMPAIGNS, Campaign, machine_for
from ..core.constructions import Construction, others
from ..concurrency.freerun import free_config, run_free
from ..concurrency.history import LIN_PROPERTIES
from ..core import interrupt
from ..concurrency.procs import ProcessPool, ScheduleError
from ..concurrency.schedule import CHECKS as SCHEDULED_CHECKS
from ..concurrency.schedule import CONTROLLED_CHECKS
from ..concurrency.schedule import scheduled_machine
from ..core.config import SessionConfig, config_from_json, config_to_json
from ..core.results import ALL_PROPERTIES, CampaignResult, GateResult, Violation
from ..lockstep.session import Call, PropertyViolation


BOUNDARY = Campaign("boundary", frozenset(), frozenset({"DISJ", "OOM", "FIFO", "RC", "NRR", "WRAP", "CLR", "LEAK",
                                                       "CONFORMANCE"}), mode="program")
"""z3-generated boundary programs (conformance/proofs/boundary.py), run in lockstep; WRAP
is claimed only when the target has a warp hook (id wraparound reached)."""
DEFAULT_CAMPAIGNS: tuple[Campaign, ...] = CAMPAIGNS + (BOUNDARY,)

CONCURRENCY_MODES = ("controlled", "free", "off")
PREEMPTION = Campaign("preemption", frozenset(), SCHEDULED_CHECKS, mode="preemption")
"""Every yield point of a get (and of the writer's operations) preempted once
against an opposing operation (conformance/concurrency/races.py); runs before the
Hypothesis-drawn schedules, so a one-preemption race is found whatever the seed."""
CONTROLLED = Campaign("controlled", frozenset(), CONTROLLED_CHECKS, mode="controlled")
"""Writer and reader processes under schedules Hypothesis draws (conformance/concurrency/schedule.py)."""
FAULTS = Campaign("faults", frozenset(), frozenset({"LIVE", "NRR"}), mode="faults")
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


@dataclass(frozen=True)
class GateProfile:
    name: str
    max_examples: int
    step_count: int
    rounds: int
    deterministic: bool
    final_round: bool = True
    shrink_seconds: int = 300
    """Per counterexample: Hypothesis stops shrinking after this long."""
    concurrency: str = "controlled"
    """Default ``--concurrency``: ``controlled``, ``free`` or ``off``."""
    scheduled_examples: int = 60
    scheduled_steps: int = 40
    """Examples and scheduled steps per example of the controlled campaign."""
    free_seconds: float = 5.0
    """Length of the free-running load (seconds)."""
    construction_seconds: float = 2.0
    """Length of the free-running load in each other construction (seconds)."""
    distinct: int = 0
    """Distinct findings: how many violations beyond the first of each
    property the lockstep campaigns and boundary programs may report, gate-wide,
    each failing at another step kind than the earlier ones of its property
    (then every property found is excused outright)."""


GATE_PROFILES: dict[str, GateProfile] = {
    "ci": GateProfile("ci", max_examples=100, step_count=30, rounds=3, deterministic=True, shrink_seconds=10,
                      scheduled_examples=150, scheduled_steps=40, free_seconds=5.0, distinct=1,
                      construction_seconds=2.0),
    "dev": GateProfile("dev", max_examples=200, step_count=40, rounds=3, deterministic=False, shrink_seconds=60,
                       scheduled_examples=200, scheduled_steps=60, free_seconds=20.0, distinct=6,
                       construction_seconds=5.0),
    "deep": GateProfile("deep", max_examples=2000, step_count=80, rounds=5, deterministic=False, shrink_seconds=300,
                        scheduled_examples=2000, scheduled_steps=100, free_seconds=120.0, distinct=24,
                        construction_seconds=30.0),
}


@contextmanager
def seed_only():
    """Within the block, Hypothesis draws no constants from loaded local
    modules (its ``_get_local_constants`` returns an empty pool), so what a
    seed explores does not depend on what was imported before (Hypothesis
    >= 6.131 mixes literals of every loaded local module into its draws:
    under one seed two runs explored differently)."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # an older Hypothesis without the local-constants pool
        yield
        return
    saved = getattr(providers, "_get_local_constants", None)
    if saved is None:
        yield
        return
    empty = Constants()
    providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        providers._get_local_constants = saved


def run_gate(
    target: LoadedTarget,
    profile: str = "ci",
    seed: int | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
    campaigns: tuple[Campaign, ...] = DEFAULT_CAMPAIGNS,
    config: SessionConfig | None = None,
    first_finding_only: bool = False,
    concurrency: str | None = None,
) -> GateResult:
    """Run the gate.  ``on_progress(campaign, done, total)`` is called as it goes.
    ``campaigns`` and ``first_finding_only`` narrow the profile (tests use them
    to run only the campaigns that check one property, stopping each campaign
    at its first finding).  ``concurrency`` (default: the profile's) adds the
    ``controlled`` campaign (scheduled writer and reader processes) or the
    ``free-running`` one after the lockstep campaigns; ``off`` adds neither.

    Raises:
        KeyError: unknown gate profile.
        ValueError: unknown concurrency mode.
    """
    gp = GATE_PROFILES[profile]
    concurrency = concurrency or gp.concurrency
    if concurrency not in CONCURRENCY_MODES:
        raise ValueError(f"unknown concurrency mode {concurrency!r} (choose from {', '.join(CONCURRENCY_MODES)})")
    campaigns = tuple(campaigns) + CONCURRENT_CAMPAIGNS[concurrency]
    if first_finding_only:
        gp = replace(gp, rounds=1, final_round=False, distinct=0)
    if seed is None:
        seed = 0 if gp.deterministic else random.randrange(2**32)
    config = config or SessionConfig()
    t0 = time.monotonic()
    results = []
    raced: set[str] = set()  # found by the preemption sweep: the drawn schedules need not hunt them again
    saved_budget = getattr(_engine, "MAX_SHRINKING_SECONDS", None)
    try:
        if saved_budget is not None:  # Hypothesis's own shrink time limit (default 300 s)
            _engine.MAX_SHRINKING_SECONDS = gp.shrink_seconds
        with seed_only():
            config = _run_campaigns(target, campaigns, gp, seed, config, concurrency, raced, results, t0,
                                    on_progress, Findings(gp.distinct))
    finally:
        if saved_budget is not None:
            _engine.MAX_SHRINKING_SECONDS = saved_budget
    if on_progress:
        on_progress("done", len(campaigns), len(campaigns))
    return GateResult(target.spec, target.profile.name, gp.name, seed, results, time.monotonic() - t0, concurrency,
                      config.writer_lock, Construction.of(config))


def _run_campaigns(target, campaigns, gp, seed, config, concurrency, raced, results, t0, on_progress, found):
    """Every campaign in turn (``results`` gets each); returns the config with
    the findings excused."""
    for i, campaign in enumerate(campaigns):
        interrupt.check()  # a swallowed SIGTERM: no further campaign
        if on_progress:
            on_progress(campaign.name, i, len(campaigns))
        steps_before = sum(r.steps for r in results)
        failed = frozenset(v.property for r in results for v in r.violations)
        res = _run_campaign(target, campaign, gp, seed, config, concurrency, raced, found, failed)
        _rebase_detection(res, t0, steps_before)
        results.append(res)
        if campaign.mode == "preemption":
            raced |= {v.property for v in res.violations}
        # A finding is not hunted again by later campaigns: they start with it
        # excused (at its step kind while distinct findings are still wanted).
        for v in res.violations:
            if v.exc is not None:
                config = found.excuse(config, v.exc)
    return config


def _run_campaign(target: LoadedTarget, campaign: Campaign, gp: GateProfile, seed: int, base: SessionConfig,
                  concurrency: str = "off", raced: set[str] | frozenset[str] = frozenset(),
                  found: Findings | None = None, failed: frozenset[str] = frozenset()) -> CampaignResult:
    res = CampaignResult(campaign.name, sorted(campaign.checks), campaign.mode)
    found = found if found is not None else Findings(gp.distinct)
    if campaign.mode == "free":
        return _run_free(target, gp, seed, base, res)
    if campaign.mode == "faults":
        return _run_faults(target, base, res)
    if campaign.mode == "threads":
        return _run_sw(target, base, res)
    if campaign.mode == "constructions":
        return _run_constructions(target, gp, seed, base, res, failed)
    if campaign.mode == "program":
        return _run_programs(target, gp, base, res, scheduled=concurrency == "controlled", found=found)
    if campaign.mode in ("controlled", "preemption"):
        # Races are findings of their own: only CONFORMANCE excusals carry
        # over, what the preemption sweep found (``raced``), and PROM and PROG
        # once found (the client's account, which needs no interleaving: a
        # lockstep finding of either has the same cause).
        base = replace(base, excused=frozenset(e for e in base.excused if e.startswith("CONFORMANCE")) | set(raced)
                       | (failed & {"PROM", "PROG"}))
        if campaign.mode == "preemption":
            return _run_preemption(target, base, res)
        try:
            with ProcessPool(target, base.readers, start_method=base.start_method) as pool:
                return _run_rounds(target, campaign, gp, seed, base, res,
                                   lambda config: scheduled_machine(target, config, pool),
                                   gp.scheduled_examples, gp.scheduled_steps, Findings())
        except ScheduleError as exc:
            res.error = f"ScheduleError: {exc}"
            return res
    if not campaign.applies_to(target):
        res.skipped = f"profile {target.profile.name} has no {'signed handles' if campaign.needs_signed else 'touch'}"
        return res
    return _run_rounds(target, campaign, gp, seed, base, res,
                       lambda config: machine_for(target, campaign, config), gp.max_examples, gp.step_count, found)


def _rebase_detection(res: CampaignResult, t0: float, steps_before: int) -> None:
    """Campaign-relative detection marks (monotonic time, campaign steps) ->
    gate-relative ones (seconds since ``t0``, steps of the whole gate)."""
    for v in res.violations:
        if v.detected_seconds is not None:
            v.detected_seconds = round(max(0.0, v.detected_seconds - t0), 3)
        if v.detected_steps is not None:
            v.detected_steps += steps_before


def _run_rounds(target, campaign, gp, seed, base, res, make_machine, max_examples, step_count,
                found: Findings) -> CampaignResult:
    """Rounds of one campaign, each carried past the findings before it: a
    new property's finding takes one of ``gp.rounds``, a distinct finding of a
    property already found takes none (``found``'s budget bounds those)."""
    config = base
    t0 = time.monotonic()
    limit, round_ = gp.rounds, -1
    while round_ < limit:
        round_ += 1
        if round_ == limit:
            if res.completed or res.error or not res.violations or not gp.final_round:
                break
            # Out of rounds: one last run for the properties alone, with every
            # divergence from the model excused, so their verdicts are established.
            config = replace(config, compare_state=False, excused=config.excused | {"CONFORMANCE"})
        counters = {"examples": 0, "steps": 0}
        machine = make_machine(config)
        _count(machine, counters)
        # the same seed every round: the same exploration, carried past the excused findings
        factory = hyp_seed(seed)(lambda: machine())
        hs = settings(
            max_examples=max_examples,
            stateful_step_count=step_count,
            deadline=None,
            database=None,
            verbosity=Verbosity.quiet,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            print_blob=False,
        )
        try:
            run_state_machine_as_test(factory, settings=hs)
            res.completed = True
        except PropertyViolation as exc:
            shrink_used = time.monotonic() - counters.get("failed_at", time.monotonic())
            res.violations.append(Violation(exc.prop, exc.message, campaign.name, round_,
                                            [s.to_json() for s in exc.steps],
                                            {**config_to_json(config), **({"promises": True} if campaign.mode ==
                                                                        "controlled" else {})}, exc,
                                            concurrency="off" if campaign.mode == "lockstep" else campaign.mode,
                                            detected_seconds=counters.get("failed_at", time.monotonic()),
                                            detected_steps=res.steps + counters.get("failed_steps",
                                                                                    counters["steps"]),
                                            shrink_complete=shrink_used < gp.shrink_seconds,
                                            occurrence=found.record(exc)))
            if res.violations[-1].occurrence > 1:
                limit += 1
            config = found.excuse(config, exc)
        except Flaky as exc:
            res.error = f"the target behaved non-deterministically: {str(exc).splitlines()[0]}"
        except Exception as exc:  # noqa: BLE001 - a harness or target crash, reported
            res.error = f"{type(exc).__name__}: {exc}"
        finally:
            res.examples += counters["examples"]
            res.steps += counters["steps"]
            for d in counters.get("deviations", ()):
                entry = res.rates.setdefault("client_deviations", {}).setdefault(
                    d["rule"], {"count": 0, "property": d["property"], "first": d["message"]})
                entry["count"] += 1
        if res.completed or res.error:
            break
    res.seconds = time.monotonic() - t0
    return res


def _run_faults(target: LoadedTarget, base: SessionConfig, res: CampaignResult) -> CampaignResult:
    """Every process-fault scenario once (fixed programs: no seed, no
    shrinking); a scenario's first finding of each property becomes a
    violation whose config names the scenario (:func:`.faults.replay_fault`)."""
    from ..concurrency.faults import DATA_BUFFER_SIZE, LIVE_BOUND, MAX_OBJECT_SIZE, READERS, SCENARIOS, run_scenario

    t0 = time.monotonic()
    res.rates = {"live_bound_seconds": LIVE_BOUND, "scenarios": {}}
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
    from ..concurrency.sw import DATA_BUFFER_SIZE, MAX_OBJECT_SIZE, run_all

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


def _run_free(target: LoadedTarget, gp: GateProfile, seed: int, base: SessionConfig,
              res: CampaignResult) -> CampaignResult:
    """The free-running campaign: one load of ``gp.free_seconds``, its history
    checked per handle; the first finding of each property becomes a violation
    whose steps are that handle's sub-history."""
    t0 = time.monotonic()
    n = len(base.readers)
    config = free_config(n_readers=n, writer_lock=base.writer_lock, start_method=base.start_method)
    try:
        res.rates = _free_load(target, config, gp.free_seconds, seed, res, "free-running",
                               {e for e in base.excused if e.startswith("CONFORMANCE@")})
    except ScheduleError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    res.seconds = time.monotonic() - t0
    return res


def _free_load(target: LoadedTarget, config: SessionConfig, seconds: float, seed: int, res: CampaignResult,
               campaign: str, excused: set[str] | frozenset[str], prefix: str = "") -> dict[str, Any]:
    """One free-running load: its findings (the first of each property not
    in ``excused``; ``prefix`` starts their messages) appended to ``res.violations``, ``res`` marked completed
    or unknown, its examples and steps added; returns its rates.

    Raises:
        ScheduleError: a process did not start, finish or report in time.
    """
    n = config.n_readers
    fr = run_free(target, config, seconds, n, seed)
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
            "per_process": {p: {k: round(v, 1) for k, v in d.items()} for p, d in fr.per_process.items()}}


def _run_constructions(target: LoadedTarget, gp: GateProfile, seed: int, base: SessionConfig, res: CampaignResult,
                       failed: frozenset[str]) -> CampaignResult:
    """The ``constructions`` campaign: in each construction other than the
    gate's primary one (``base``'s), the preemption sweep on a process pool
    built that way, then a free-running load of ``gp.construction_seconds``.
    A property the gate already failed (``failed``) is not reported again;
    within a construction, one finding per property (the sweep's first).
    ``res.rates["constructions"]`` lists what ran in each."""
    from ..concurrency.races import sweep

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


def _run_programs(target: LoadedTarget, gp: GateProfile, base: SessionConfig, res: CampaignResult,
                  scheduled: bool, found: Findings) -> CampaignResult:
    """The boundary campaign: every z3-generated program (conformance/proofs/boundary.py)
    on a fresh session.  A program that breaks a property is rerun with it
    excused (as campaigns are, up to ``gp.rounds`` times), so later findings
    surface; programs that need the warp hook are skipped on targets without one.
    ``scheduled`` (gate concurrency ``controlled``): each program then also runs
    on real writer and reader processes, every reader's get lagging across the
    writer's next operation (:func:`~.boundary.run_program_scheduled`)."""
    from ..targets.adapter import can_warp
    from ..proofs.boundary import programs, run_program, run_program_scheduled

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
            from ..targets.adapter import StoreAdapter

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
    from ..concurrency.races import sweep

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


def _count(machine: type, counters: dict[str, Any]) -> None:
    """Count examples (machine instances) and steps (calls run) of one round,
    and mark the first failing step (``failed_at``: ``time.monotonic()``;
    ``failed_steps``: steps run so far), before Hypothesis shrinks it."""
    run, init, teardown = machine._run, machine.__init__, machine.teardown

    def mark_failure():
        if "failed_at" not in counters:
            counters["failed_at"] = time.monotonic()
            counters["failed_steps"] = counters["steps"]

    def counting_init(self):
        counters["examples"] += 1
        init(self)

    def counting_run(self, call: Call):
        counters["steps"] += 1
        try:
            return run(self, call)
        except PropertyViolation:
            mark_failure()
            raise

    def marking_teardown(self):
        counters.setdefault("deviations", []).extend(getattr(getattr(self, "session", None), "deviations", ()))
        try:
            return teardown(self)
        except PropertyViolation:  # LEAK, found when the store closes
            mark_failure()
            raise

    machine.__init__ = counting_init
    machine._run = counting_run
    machine.teardown = marking_teardown


@dataclass
class Findings:
    """Gate-wide: the failing step kinds found per property, and how many
    distinct findings (beyond the first of each property) may still be reported."""

    extra: int = 0
    actions: dict[str, list[str]] = field(default_factory=dict)
    """Property -> the causes (failing step kinds, e.g. ``get/cleared``) found, in order."""

    def record(self, exc: PropertyViolation) -> int:
        """Count a violation; its occurrence (1: its property's first)."""
        if exc.prop == "CONFORMANCE":
            return 1
        seen = self.actions.setdefault(exc.prop, [])
        if seen:
            self.extra -= 1
        seen.append(exc.cause)
        return len(seen)

    def excuse(self, config: SessionConfig, exc: PropertyViolation) -> SessionConfig:
        """Excuse the violation in ``config``: only at its step kind while the
        budget lasts (so another cause of the property still surfaces), else
        every property found, outright."""
        if exc.prop == "CONFORMANCE" or exc.cause == "":
            return _excuse(config, exc)
        if self.extra > 0:
            return replace(config, excused=config.excused | {f"{exc.prop}@{exc.cause}"})
        return replace(config, excused=config.excused | set(self.actions))


def _excuse(config: SessionConfig, exc: PropertyViolation) -> SessionConfig:
    if exc.prop == "CONFORMANCE" and "state differs from the model" in exc.message:
        # once the states have diverged, the model's outcomes are no guide either
        return replace(config, compare_state=False, excused=config.excused | {"CONFORMANCE"})
    if exc.prop == "CONFORMANCE":  # excuse this action's divergences only
        return replace(config, excused=config.excused | {f"CONFORMANCE@{exc.action}"})
    return replace(config, excused=config.excused | {exc.prop})


_config_json = config_to_json  # its name here before the layered packages (9a6edc8, 2026-12-01)

__all__ = ["ALL_PROPERTIES", "CONCURRENCY_MODES", "CONTROLLED", "DESCRIPTIONS", "GATE_PROFILES", "PREEMPTION", "GateResult", "Violation", "run_gate", "config_from_json"]
