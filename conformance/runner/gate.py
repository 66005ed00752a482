"""The conformance gate: run every campaign against one target, collect verdicts.

Gate profiles (``--profile``):

* ``ci``: deterministic (fixed seed 0 unless ``--seed``), under 2 minutes on
  a 2-core machine.  What it finds is fixed by the seed, and so is each
  shrunk counterexample: shrinking is budgeted in examples run
  (``shrink_examples``), never in seconds, so a loaded or slow machine gives
  the same trace, only later;
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
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from hypothesis import HealthCheck, Verbosity, settings
from hypothesis import seed as hyp_seed
from hypothesis.errors import Flaky
from hypothesis.internal.conjecture import engine as _engine
from hypothesis.stateful import run_state_machine_as_test

from shmspec.model.properties import DESCRIPTIONS, PROPERTY_IDS  # noqa: F401 - re-exported (old imports)

from ..core import interrupt
from ..core.config import SessionConfig, config_from_json, config_to_json
from ..core.protocol import CampaignContext, CampaignLike
from ..core.results import ALL_PROPERTIES, CampaignResult, GateResult, Violation
from ..lockstep.session import Call, PropertyViolation
from ..protocols import protocol_of
# The ring-buffer protocol's campaigns, importable from here under their names
# from before the protocol seam (2026-12-02).
from ..protocols.ringbuffer import CONCURRENCY_MODES  # noqa: F401
from ..protocols.ringbuffer.campaigns import (  # noqa: F401
    BOUNDARY, CONCURRENT_CAMPAIGNS, CONSTRUCTIONS_CAMPAIGN, CONTROLLED, DEFAULT_CAMPAIGNS, FAULTS, PREEMPTION,
    SW_CAMPAIGN, history_steps)
from ..targets.loader import LoadedTarget


@dataclass(frozen=True)
class GateProfile:
    name: str
    max_examples: int
    step_count: int
    rounds: int
    deterministic: bool
    final_round: bool = True
    shrink_seconds: int = 300
    """Kept for the Python API of before 2026-12-03 and unused: shrinking is
    budgeted by ``shrink_examples`` (a wall-clock budget made the trace
    depend on the machine's load)."""
    shrink_examples: int = 2000
    """Per counterexample: Hypothesis stops shrinking once a round has run this
    many examples after its first failing one (work, not time: the same seed
    gives the same shrunk trace on any machine, under any load)."""
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
    seeds: int = 1
    """Seed units: the gate runs once per seed (:mod:`.units`), each with the
    sizes above; ``--workers`` runs them in parallel, ``--shard`` splits them."""
    example_db: bool = False
    """Default of ``--example-db``: False, none (what a seed finds is fixed);
    True, the user cache's ``examples/`` (counterexamples found are replayed
    first by the next run)."""


GATE_PROFILES: dict[str, GateProfile] = {
    # a push's first look (docs/gate.md#gate-profiles---profile): the lockstep campaigns only,
    # few short examples, one round per campaign (and its properties established past
    # CONFORMANCE), a small shrink budget
    "smoke": GateProfile("smoke", max_examples=25, step_count=30, rounds=1, deterministic=True, final_round=True,
                         shrink_examples=40, concurrency="off", scheduled_examples=20, scheduled_steps=20,
                         free_seconds=1.0, construction_seconds=0.5, distinct=0),
    "ci": GateProfile("ci", max_examples=100, step_count=30, rounds=3, deterministic=True, shrink_examples=200,
                      scheduled_examples=150, scheduled_steps=40, free_seconds=5.0, distinct=1,
                      construction_seconds=2.0),
    "dev": GateProfile("dev", max_examples=200, step_count=40, rounds=3, deterministic=False, shrink_examples=2000,
                       scheduled_examples=200, scheduled_steps=60, free_seconds=20.0, distinct=6,
                       construction_seconds=5.0, example_db=True),
    # 8 seed units of 250 examples: 2000 examples per campaign, as one seed of
    # 2000 was before 2026-12-02, but in units --workers and --shard spread
    "deep": GateProfile("deep", max_examples=250, step_count=60, rounds=5, deterministic=False, shrink_examples=2000,
                        scheduled_examples=250, scheduled_steps=80, free_seconds=15.0, distinct=24,
                        construction_seconds=4.0, seeds=8, example_db=True),
}


_DATABASE: Any = None
"""The example database of the run in progress (:func:`example_database`), or None."""


def example_database(spec: str | None, profile: str = "ci") -> Any:
    """The Hypothesis example database ``--example-db`` names: ``none``; a
    directory (``DirectoryBasedExampleDatabase``); ``github:OWNER/REPO``, the
    user cache's ``examples/`` over the counterexamples that repository's CI
    uploaded (``GitHubArtifactDatabase``, read-only; ``GITHUB_TOKEN``);
    ``None``: the gate profile's default (``ci``: none; ``dev``, ``deep``:
    ``<cache>/examples``).  Within it each campaign, target and excusal set
    has its own key (:class:`KeyedDatabase`).

    Raises:
        ValueError: ``github:`` without ``OWNER/REPO``.
    """
    from hypothesis.database import (DirectoryBasedExampleDatabase, GitHubArtifactDatabase, MultiplexedDatabase,
                                     ReadOnlyDatabase)

    from ..core.paths import cache_dir

    if spec is None:
        if not GATE_PROFILES[profile].example_db:
            return None
        spec = str(cache_dir() / "examples")
    if spec == "none":
        return None
    if spec.startswith("github:"):
        owner, _, repo = spec[len("github:"):].partition("/")
        if not owner or not repo:
            raise ValueError(f"--example-db github:OWNER/REPO, not {spec!r}")
        local = DirectoryBasedExampleDatabase(str(cache_dir() / "examples"))
        return MultiplexedDatabase(local, ReadOnlyDatabase(GitHubArtifactDatabase(owner, repo)))
    return DirectoryBasedExampleDatabase(spec)


def _keyed(target: Any, campaign: Any, config: SessionConfig) -> Any:
    if _DATABASE is None:
        return None
    import hashlib
    import json

    spec = target.spec if not target.spec.startswith("file:") else "file:" + target.spec.rsplit("/", 1)[-1]
    ident = json.dumps([protocol_of(target).name, spec, campaign.name, config_to_json(config)], sort_keys=True,
                       default=str)
    return KeyedDatabase(_DATABASE, hashlib.sha256(ident.encode()).hexdigest()[:16].encode() + b".")


try:
    from hypothesis.database import ExampleDatabase as _ExampleDatabase
except ImportError:  # pragma: no cover - Hypothesis always has it
    _ExampleDatabase = object


class KeyedDatabase(_ExampleDatabase):
    """``inner`` with every key prefixed: Hypothesis keys a stateful test by
    its factory's source, the same for every campaign, so each campaign round
    gets its own prefix (hash of protocol, target, campaign and the round's
    config, excusals included: an example saved while a property was
    violated is not dropped by a round that excuses it)."""

    def __init__(self, inner: Any, prefix: bytes):
        super().__init__()
        self.inner, self.prefix = inner, prefix

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.prefix + key, value)

    def fetch(self, key: bytes):
        return self.inner.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.prefix + src, self.prefix + dest, value)


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


def concurrency_for(protocol: Any, profile: str, concurrency: str | None) -> str:
    """The concurrency mode a run uses: ``concurrency``, or (None) the gate
    profile's where the protocol has that mode, else ``off``.

    Raises:
        KeyError: unknown gate profile.
        ValueError: a concurrency mode the protocol has not.
    """
    if concurrency is None:
        concurrency = GATE_PROFILES[profile].concurrency
        concurrency = concurrency if concurrency in protocol.concurrency_modes else \
            getattr(protocol, "default_concurrency", None) or "off"
    if concurrency not in protocol.concurrency_modes:
        raise ValueError(f"unknown concurrency mode {concurrency!r} "
                         f"(choose from {', '.join(protocol.concurrency_modes)})")
    return concurrency


def run_gate(
    target: LoadedTarget,
    profile: str = "ci",
    seed: int | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
    campaigns: tuple[CampaignLike, ...] | None = None,
    config: SessionConfig | None = None,
    first_finding_only: bool = False,
    concurrency: str | None = None,
    seeds: int | None = None,
    workers: int = 1,
    shard: tuple[int, int] | None = None,
    example_db: str | None = None,
    stop_at: frozenset[str] | None = None,
    executor: Any = None,
) -> GateResult:
    """Run the gate on ``target`` with its store protocol's campaigns
    (:func:`~shmspec.conformance.protocols.protocol_of`).
    ``on_progress(campaign, done, total)`` is called as it goes.
    ``campaigns`` (default: the protocol's base campaigns) and
    ``first_finding_only`` narrow the profile (tests use them to run only the
    campaigns that check one property, stopping each campaign at its first
    finding).  ``concurrency`` (default: the profile's) appends the
    protocol's campaigns of that mode (ring buffer: ``controlled``, scheduled
    writer and reader processes, or ``free``, a free-running load); ``off``
    appends none.  ``seeds`` (default: the profile's) seed units run the
    gate once per seed, ``workers`` at a time in forked processes, only
    shard ``(i, n)``'s units when ``shard`` is given (:mod:`.units`);
    ``example_db``: :func:`example_database`.  ``stop_at`` (property ids):
    once a campaign finds one of them, the campaigns after it are not run
    (each recorded as skipped, with why): ``shmspec mutants`` stops a
    fault's gate at the first finding of the property the fault names.
    ``executor`` (:mod:`.executors`; None: this machine's forked processes)
    runs the seed units elsewhere, a Ray cluster's tasks: the same seeds
    give the same findings there (``workers`` then does not apply).

    Raises:
        KeyError: unknown gate profile.
        ValueError: a concurrency mode the protocol has not; ``seeds`` or
            ``workers`` below 1; a shard with no unit, or without ``seed``
            on a random-seed profile (its shards would draw other seeds).
    """
    gp = GATE_PROFILES[profile]
    units = gp.seeds if seeds is None else seeds
    if units < 1 or workers < 1:
        raise ValueError("--seeds and --workers must be at least 1")
    if shard is not None and seed is None and not gp.deterministic:
        raise ValueError(f"--shard needs --seed on the {profile} profile: every shard must derive the same seeds")
    if units > 1 or workers > 1 or shard is not None or executor is not None:
        return _run_seed_units(target, profile, seed, on_progress, campaigns, config, first_finding_only,
                               concurrency, units, workers, shard, example_db, stop_at, executor)
    global _DATABASE
    saved_db, _DATABASE = _DATABASE, example_database(example_db, profile)
    try:
        return _run_gate(target, profile, seed, on_progress, campaigns, config, first_finding_only, concurrency,
                         stop_at)
    finally:
        _DATABASE = saved_db


def _run_seed_units(target, profile, seed, on_progress, campaigns, config, first_finding_only, concurrency, units,
                    workers, shard, example_db, stop_at=None, executor=None) -> GateResult:
    from . import units as _units

    gp = GATE_PROFILES[profile]
    if seed is None:
        seed = 0 if gp.deterministic else random.randrange(2**32)
    ks = _units.shard_units(units, shard)
    if not ks:
        raise ValueError(f"--shard {shard[0]}/{shard[1]} has no unit of the {units} seed units")
    seeds = [_units.unit_seed(seed, k) for k in ks]
    example_database(example_db, profile)  # a bad spec fails here, before any unit
    concurrency_for(protocol_of(target), profile, concurrency)

    def run_one(s: int) -> GateResult:
        return run_gate(target, profile, s, None, campaigns, config, first_finding_only, concurrency,
                        seeds=1, workers=1, example_db=example_db, stop_at=stop_at)

    t0 = time.monotonic()
    if executor is not None:
        from .executors import Task

        tasks = [Task(f"seed {s}", _unit_task, (target, gp, s, campaigns, config, first_finding_only, concurrency,
                                                 example_db, stop_at)) for s in seeds]
        if on_progress:
            on_progress(f"seed units: {len(seeds)} (seeds {', '.join(map(str, seeds))}) on {executor.describe()}",
                        0, len(seeds))
        ended: list[int] = []

        def on_done(i: int, _result: Any) -> None:
            ended.append(i)
            if on_progress:
                on_progress(f"seed unit {len(ended)}/{len(seeds)} ended (seed {seeds[i]})", len(ended), len(seeds))

        def on_notice(text: str) -> None:
            if on_progress:
                on_progress(f"seed units: {text}", len(ended), len(seeds))

        parts = executor.map(tasks, on_done, on_notice)
    else:
        if on_progress:
            n = min(workers, len(seeds))
            on_progress(f"seed units: {len(seeds)} (seeds {', '.join(map(str, seeds))}) on {n} "
                        f"worker{'s' * (n != 1)}", 0, len(seeds))
        parts = _units.run_units(run_one, seeds, workers, on_progress)
    if not any(isinstance(p, GateResult) for p in parts):  # no unit reported: an error verdict, never a pass
        protocol = protocol_of(target)
        parts[0] = GateResult(target.spec, target.profile.name, profile, seeds[0],
                              [CampaignResult(f"seed {seeds[0]}", [], "unit", error=str(parts[0]))], 0.0,
                              concurrency_for(protocol, profile, concurrency), protocol=protocol.name,
                              registry=protocol.properties)
    result = _units.merge(list(zip(seeds, parts)), time.monotonic() - t0, shard, workers, units)
    result.seed = seed
    if executor is not None:
        result.executor, result.workers = executor.describe(), 1
    return result


def _unit_task(target, gp: GateProfile, seed, campaigns, config, first_finding_only, concurrency, example_db,
               stop_at) -> GateResult:
    """One seed unit as an executor's task (:mod:`.executors`), in a fresh
    process: the gate at ``seed`` alone, its violations reduced to what
    travels (:func:`.units._portable`).  ``gp`` travels with it: a profile
    the caller registered is unknown to a fresh process."""
    from . import units as _units

    GATE_PROFILES.setdefault(gp.name, gp)
    return _units._portable(run_gate(target, gp.name, seed, None, campaigns, config, first_finding_only,
                                     concurrency, seeds=1, workers=1, example_db=example_db, stop_at=stop_at))


def _run_gate(target, profile, seed, on_progress, campaigns, config, first_finding_only, concurrency,
              stop_at=None) -> GateResult:
    protocol = protocol_of(target)
    gp = GATE_PROFILES[profile]
    concurrency = concurrency_for(protocol, profile, concurrency)
    base = protocol.base_campaigns() if campaigns is None else campaigns
    campaigns = tuple(base) + tuple(protocol.concurrent_campaigns(concurrency))
    if first_finding_only:
        gp = replace(gp, rounds=1, final_round=False, distinct=0)
    if seed is None:
        seed = 0 if gp.deterministic else random.randrange(2**32)
    config = config or SessionConfig()
    t0 = time.monotonic()
    results: list[CampaignResult] = []
    raced: set[str] = set()  # found by the preemption sweep: the drawn schedules need not hunt them again
    with seed_only(), shrink_clock(gp.shrink_examples):
        config = _run_campaigns(target, campaigns, gp, seed, config, concurrency, raced, results, t0,
                                on_progress, Findings(gp.distinct), stop_at)
    if on_progress:
        on_progress("done", len(campaigns), len(campaigns))
    for r in results:
        for v in r.violations:
            v.protocol = protocol.name
            v.seed = seed  # a seed unit's merge keeps it; a one-seed run's is the run's
    return GateResult(target.spec, target.profile.name, gp.name, seed, results, time.monotonic() - t0, concurrency,
                      config.writer_lock, protocol.construction(config), protocol=protocol.name,
                      registry=protocol.properties, stand_ins=tuple(getattr(target, "stand_ins", ()) or ()))


def _run_campaigns(target, campaigns, gp, seed, config, concurrency, raced, results, t0, on_progress, found,
                   stop_at=None):
    """Every campaign in turn (``results`` gets each); returns the config with
    the findings excused.  After a finding of a ``stop_at`` property the
    rest are recorded as skipped."""
    stopped = None
    for i, campaign in enumerate(campaigns):
        interrupt.check()  # a swallowed SIGTERM: no further campaign
        if stopped is not None:
            results.append(CampaignResult(campaign.name, sorted(campaign.checks), campaign.mode, skipped=stopped))
            continue
        if on_progress:
            on_progress(campaign.name, i, len(campaigns))
        steps_before = sum(r.steps for r in results)
        failed = frozenset(v.property for r in results for v in r.violations)
        res = _run_campaign(target, campaign, gp, seed, config, concurrency, raced, found, failed, stop_at)
        _rebase_detection(res, t0, steps_before)
        results.append(res)
        if campaign.mode == "preemption":
            raced |= {v.property for v in res.violations}
        # A finding is not hunted again by later campaigns: they start with it
        # excused (at its step kind while distinct findings are still wanted).
        for v in res.violations:
            if v.exc is not None:
                config = found.excuse(config, v.exc)
        hit = next((v.property for v in res.violations if stop_at and v.property in stop_at), None)
        if hit is not None:
            stopped = f"not run: the gate stopped at the first finding of {hit} (campaign {campaign.name})"
    return config


def _run_campaign(target: Any, campaign: CampaignLike, gp: GateProfile, seed: int, base: SessionConfig,
                  concurrency: str = "off", raced: set[str] | frozenset[str] = frozenset(),
                  found: Findings | None = None, failed: frozenset[str] = frozenset(),
                  stop_at: frozenset[str] | None = None) -> CampaignResult:
    """One campaign, run by the target's protocol; ``ctx.run_rounds`` is
    :func:`_run_rounds` bound to this campaign (it ends at a finding of a
    ``stop_at`` property: no further round)."""
    res = CampaignResult(campaign.name, sorted(campaign.checks), campaign.mode)
    found = found if found is not None else Findings(gp.distinct)

    def run_rounds(res: CampaignResult, make_machine: Callable, max_examples: int, step_count: int,
                   base: SessionConfig | None = None, fresh_findings: bool = False) -> CampaignResult:
        return _run_rounds(target, campaign, gp, seed, ctx.config if base is None else base, res, make_machine,
                           max_examples, step_count, Findings() if fresh_findings else found, stop_at)

    ctx = CampaignContext(target, gp, seed, base, concurrency, frozenset(raced), failed, found, run_rounds, stop_at)
    return protocol_of(target).run_campaign(ctx, campaign, res)


def _rebase_detection(res: CampaignResult, t0: float, steps_before: int) -> None:
    """Campaign-relative detection marks (monotonic time, campaign steps) ->
    gate-relative ones (seconds since ``t0``, steps of the whole gate)."""
    for v in res.violations:
        if v.detected_seconds is not None:
            v.detected_seconds = round(max(0.0, v.detected_seconds - t0), 3)
        if v.detected_steps is not None:
            v.detected_steps += steps_before


def _run_rounds(target, campaign, gp, seed, base, res, make_machine, max_examples, step_count,
                found: Findings, stop_at: frozenset[str] | None = None) -> CampaignResult:
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
        _SHRINK_CLOCK.counters = counters
        # the same seed every round: the same exploration, carried past the excused findings
        factory = hyp_seed(seed)(lambda: machine())
        hs = settings(
            max_examples=max_examples,
            stateful_step_count=step_count,
            deadline=None,
            database=_keyed(target, campaign, config),
            verbosity=Verbosity.quiet,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            print_blob=False,
        )
        try:
            run_state_machine_as_test(factory, settings=hs)
            res.completed = True
        except PropertyViolation as exc:
            shrink_used = counters["examples"] - counters.get("failed_examples", counters["examples"])
            if campaign.mode == "lockstep" and shrink_used >= gp.shrink_examples:
                exc = delete_steps(make_machine(config), exc, counters)  # the budget cut shrinking: drop no-ops
            res.violations.append(Violation(exc.prop, exc.message, campaign.name, round_,
                                            [s.to_json() for s in exc.steps],
                                            {**config_to_json(config), **({"promises": True} if campaign.mode ==
                                                                        "controlled" else {})}, exc,
                                            concurrency="off" if campaign.mode == "lockstep" else campaign.mode,
                                            detected_seconds=counters.get("failed_at", time.monotonic()),
                                            detected_steps=res.steps + counters.get("failed_steps",
                                                                                    counters["steps"]),
                                            shrink_complete=shrink_used < gp.shrink_examples,
                                            shrink_examples=shrink_used,
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
        if res.completed or res.error or (stop_at and any(v.property in stop_at for v in res.violations)):
            break
    res.seconds = time.monotonic() - t0
    return res


def _opened(machine_cls: Any) -> Any:
    """A machine of ``machine_cls`` with its session open (the ring buffer's
    opens it in an ``@initialize`` rule, the slot stores' in ``__init__``)."""
    m = machine_cls()
    if getattr(m, "session", None) is None and hasattr(m, "open_store"):
        m.open_store()
    return m


def _replay_calls(machine_cls: Any, calls: list[dict[str, Any]]) -> PropertyViolation | None:
    """Run ``calls`` (after the session's own set-up) on a fresh machine's
    session, close it; the violation raised, or None."""
    from ..lockstep.session import Call  # noqa: PLC0415

    m = None
    try:
        m = _opened(machine_cls)
        for c in calls:
            m.session.execute(Call.from_json(c))
        m.teardown()
    except PropertyViolation as exc:
        return exc
    except Exception:  # noqa: BLE001 - not a trace the session can run (a call names a handle never put)
        return None
    finally:
        session = getattr(m, "session", None) if m is not None else None
        if callable(getattr(session, "close", None)) and not getattr(session, "closed", False):
            try:
                session.close()
            except PropertyViolation:
                pass
    return None


def delete_steps(machine_cls: Any, exc: PropertyViolation, counters: dict[str, Any] | None = None
                 ) -> PropertyViolation:
    """A lockstep counterexample with the steps it does not need deleted:
    from the last step to the first, each is dropped when the trace without
    it still breaks the same property with the same cause (on a fresh
    session of the same machine, so the new trace is a real run).  Runs when
    the profile's shrink budget cut Hypothesis's shrinking short (a trace
    Hypothesis shrank to the end has no such step); one replay per step, a
    count of work, so the result does not depend on the machine's speed.
    ``counters["deleted_steps"]`` counts the steps dropped.  Returns the
    violation of the shortest trace found (``exc`` when none was dropped)."""
    probe = _opened(machine_cls)
    try:
        setup = len(getattr(probe.session, "trace", []))
    finally:
        try:
            probe.teardown()
        except PropertyViolation:
            pass
    steps = [s.to_json() for s in exc.steps]
    calls = [{"process": s["process"], "action": s["action"], "args": s["args"]}
             for s in steps[setup:] if s["action"] != "close"]
    best, dropped = exc, 0
    for i in reversed(range(len(calls) - 1)):  # the failing (last) call stays
        again = _replay_calls(machine_cls, calls[:i] + calls[i + 1:])
        if again is not None and again.prop == exc.prop and again.cause == exc.cause:
            calls, best, dropped = calls[:i] + calls[i + 1:], again, dropped + 1
    if counters is not None:
        counters["deleted_steps"] = dropped
    return best


class _ShrinkClock:
    """Stands in for the ``time`` module inside Hypothesis's engine while a
    gate runs: its ``perf_counter`` (which the engine reads only to time its
    shrink phase against ``MAX_SHRINKING_SECONDS``) returns the examples the
    current round has run, so that limit counts examples, not seconds.
    Everything else is the real ``time``."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.counters: dict[str, Any] = {"examples": 0}

    def perf_counter(self) -> float:
        return float(self.counters["examples"])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


_SHRINK_CLOCK = _ShrinkClock(time)


@contextmanager
def shrink_clock(examples: int):
    """Within: Hypothesis's shrink limit is ``examples`` examples run after the
    first failing one, counted per round by :func:`_count` (deterministic:
    hypothesis 6.100-6.170 read the limit only through the engine module's
    ``time.perf_counter``; tests/conformance/runner/test_shrink.py checks it)."""
    saved = (getattr(_engine, "time", None), getattr(_engine, "MAX_SHRINKING_SECONDS", None))
    _engine.time, _engine.MAX_SHRINKING_SECONDS = _SHRINK_CLOCK, examples
    try:
        yield _SHRINK_CLOCK
    finally:
        _engine.time, _engine.MAX_SHRINKING_SECONDS = saved


def _count(machine: type, counters: dict[str, Any]) -> None:
    """Count examples (machine instances) and steps (calls run) of one round,
    and mark the first failing step (``failed_at``: ``time.monotonic()``;
    ``failed_steps``: steps run so far), before Hypothesis shrinks it."""
    run, init, teardown = machine._run, machine.__init__, machine.teardown

    def mark_failure():
        if "failed_at" not in counters:
            counters["failed_at"] = time.monotonic()
            counters["failed_steps"] = counters["steps"]
            counters["failed_examples"] = counters["examples"]

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

__all__ = ["ALL_PROPERTIES", "CONCURRENCY_MODES", "CONTROLLED", "DESCRIPTIONS", "GATE_PROFILES", "PREEMPTION", "GateResult",
           "Violation", "config_from_json", "run_gate"]
