"""The slot protocol's campaigns: lockstep state machines (Hypothesis) over
an arena or a queue, run by the gate through
:class:`~shmspec.conformance.protocols.slots.SlotsProtocol`.

* ``lockstep``: honest clients (each reader views, drops and flushes in
  any order; the queue's blocks whole or split so the other processes act
  inside them, and callers that raise inside a block);
* ``deviations``: the client deviations of docs/slots.md (a view kept after
  the tensor is dropped; a reader that stops receiving), judged by the same
  properties: the store must stay safe, and its fallback must name the
  reader holding the slots.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from ...core.config import SessionConfig
from ...core.protocol import CampaignContext
from ...core.results import CampaignResult
from ...lockstep.session import Call, Step
from .session import SLOT_BYTES, session_for

ONE_PROCESS = "one-process"
"""The construction: writer and readers built in the controller's process."""
ARENA_CHECKS = frozenset({"NRR", "FIFO", "PROG", "LIVE", "FALLBACK", "DISJ", "CONFORMANCE"})
QUEUE_CHECKS = frozenset({"NRR", "FIFO", "PROG", "LIVE", "CONFORMANCE"})


@dataclass(frozen=True)
class SlotCampaign:
    name: str
    checks: frozenset[str]
    mode: str = "lockstep"
    deviations: bool = False


FAULT_CHECKS = frozenset({"LIVE", "NRR", "FIFO", "PROG"})
DEPLOYED_CHECKS = frozenset({"LIVE", "NRR", "FIFO", "PROG"})
"""What the deployed construction's history checker judges (:mod:`.deployed`)."""


def campaigns_for(kind: str) -> tuple[SlotCampaign, ...]:
    checks = ARENA_CHECKS if kind == "arena" else QUEUE_CHECKS
    return (SlotCampaign("lockstep", checks), SlotCampaign("deviations", checks, deviations=True),
            SlotCampaign("faults", FAULT_CHECKS, mode="faults"))


def deployed_campaigns(kind: str) -> tuple[SlotCampaign, ...]:
    """The campaigns of the deployed construction (``--concurrency free``,
    the slot protocols' default): controlled interleavings, a free-running
    load and process faults, of the queue (an arena target: the queue with
    its tensor arena on)."""
    return (SlotCampaign("deployed-controlled", DEPLOYED_CHECKS, mode="deployed-controlled"),
            SlotCampaign("deployed", DEPLOYED_CHECKS, mode="deployed"),
            SlotCampaign("deployed-faults", DEPLOYED_CHECKS, mode="deployed-faults"))


CONTROLLED_BUDGET = {"smoke": (8, 12), "ci": (16, 40), "dev": (60, 120), "deep": (200, 300)}
"""Per gate profile: schedules drawn, and runs the shrinker may take after
the first failing one (work, not seconds: the same seed gives the same
counterexample on any machine).  ``smoke`` runs no deployed campaign by
default (``--concurrency off``); its budget is for one named explicitly
(``--concurrency on`` or ``campaigns=``)."""
SCHEDULES = st.lists(st.sampled_from([0, 0, 1, 2]), min_size=64, max_size=200)
"""A schedule's choices, one per store (:class:`~.deployed.Deployment`):
mostly 0 (the process goes on after its store), sometimes a switch right
after it: the windows a release, a claim or a publish opens."""


DEPLOYED_MESSAGES = {"ci": 24, "dev": 64, "deep": 160}
"""Messages of the free-running load per gate profile (the faults' runs end at their fault)."""


def deployments(ctx: CampaignContext, campaign: SlotCampaign) -> list[Any]:
    """The deployed runs of a campaign: the free load in the primary
    construction (``--start-method``, ``--readers`` local readers, one
    remote reader) and with one spawned local reader; each fault once, in
    the primary construction with its waits at 0.5 s."""
    from .deployed import FAULTS, Deployment

    method = ctx.config.start_method if ctx.config.start_method in ("fork", "spawn") else "fork"
    arena = ctx.target.kind == "arena"  # vLLM's arena is off with remote readers: none in the arena's primary
    primary = Deployment(local=ctx.config.n_readers, remote=0 if arena else 1, start_method=method,
                         seed=ctx.seed & 0xFFFF, messages=DEPLOYED_MESSAGES.get(ctx.profile.name, 24), arena=arena,
                         torch=ctx.target.torch if arena else "")
    if campaign.mode == "deployed":
        other = replace(primary, local=1, remote=1, start_method="spawn" if method == "fork" else "fork")
        return [primary, other]
    at = {"reader-killed-holding": 5, "reader-killed-between": 7, "writer-killed-mid-write": 6,
          "writer-stalled-before-send": 6}
    return [replace(primary, fault=f, at=at[f], timeout=0.5, local=max(2, primary.local)) for f in FAULTS]


SIZES = st.sampled_from([1, SLOT_BYTES - 1, SLOT_BYTES, SLOT_BYTES + 1]) | st.integers(1, SLOT_BYTES + 2)
"""Message sizes (bytes): the slot's boundaries often, any size up to two past it."""


def arena_machine(target, config: SessionConfig, deviations: bool) -> type:
    readers = st.integers(0, config.n_readers - 1)

    class ArenaMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.session = session_for(target, config)

        def _run(self, call: Call) -> Step:
            return self.session.execute(call)

        def teardown(self):
            self.session.close()

        @rule(size=SIZES, seed=st.integers(0, 255))
        def write(self, size, seed):
            self._run(Call("writer", "write", {"size": size, "seed": seed}))

        @rule(reader=readers)
        def view(self, reader):
            self._run(Call(f"r{reader + 1}", "view", {"reader": reader}))

        @rule(reader=readers, which=st.integers(0, 3))
        def drop(self, reader, which):
            self._run(Call(f"r{reader + 1}", "drop", {"reader": reader, "which": which}))

        @rule(reader=readers)
        def flush(self, reader):
            self._run(Call(f"r{reader + 1}", "flush", {"reader": reader}))

        @rule(reader=readers)
        def consume(self, reader):
            # an honest reader's dequeue in full: every view it held dropped, flushed, the next message viewed
            # (three or more calls; it makes the slots cycle within a run's steps)
            name = f"r{reader + 1}"
            while self.session.held[reader]:
                self._run(Call(name, "drop", {"reader": reader, "which": 0}))
            self._run(Call(name, "flush", {"reader": reader}))
            self._run(Call(name, "view", {"reader": reader}))

        @rule(reader=readers)
        def retain(self, reader):
            # a dequeue that keeps its oldest tensor (chunked prefill's prompt_embeds, retained across steps:
            # vLLM's arena notes) and drops the rest: slots are released out of order
            name = f"r{reader + 1}"
            while len(self.session.held[reader]) > 1:
                self._run(Call(name, "drop", {"reader": reader, "which": 1}))
            self._run(Call(name, "flush", {"reader": reader}))
            self._run(Call(name, "view", {"reader": reader}))

        @precondition(lambda self: deviations)
        @rule(reader=readers)
        def keep(self, reader):
            self._run(Call(f"r{reader + 1}", "keep", {"reader": reader}))

    return ArenaMachine


def queue_machine(target, config: SessionConfig, deviations: bool) -> type:
    readers = st.integers(0, config.n_readers - 1)
    sizes = st.integers(1, SLOT_BYTES - 4)

    class QueueMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.session = session_for(target, config)
            self.stopped = -1 if not deviations else None  # the reader that stops receiving (deviations)

        def _run(self, call: Call) -> Step:
            return self.session.execute(call)

        def teardown(self):
            self.session.close()

        def _writing(self) -> bool:
            return "w" in self.session.driver.open

        def _reading(self, r: int) -> bool:
            return r in self.session.driver.open

        @precondition(lambda self: not self._writing())
        @rule(size=sizes, seed=st.integers(0, 255))
        def put(self, size, seed):
            self._run(Call("writer", "put", {"size": size, "seed": seed}))

        @precondition(lambda self: not self._writing())
        @rule()
        def begin_write(self):
            self._run(Call("writer", "begin_write", {}))

        @precondition(lambda self: self._writing())
        @rule(size=sizes, seed=st.integers(0, 255))
        def end_write(self, size, seed):
            self._run(Call("writer", "end_write", {"size": size, "seed": seed}))

        @precondition(lambda self: self._writing())
        @rule()
        def abort_write(self):
            self._run(Call("writer", "abort_write", {}))

        @rule(reader=readers, whole=st.booleans())
        def get(self, reader, whole):
            if self._reading(reader) or reader == self.stopped:
                return
            self._run(Call(f"r{reader + 1}", "get" if whole else "begin_read", {"reader": reader}))

        @rule(reader=readers, raised=st.booleans())
        def end_read(self, reader, raised):
            if self._reading(reader):
                self._run(Call(f"r{reader + 1}", "abort_read" if raised else "end_read", {"reader": reader}))

        @rule(reader=readers)
        def drain(self, reader):
            # a reader that reads until nothing is left (at most one lap of the ring)
            if self._reading(reader) or reader == self.stopped:
                return
            for _ in range(self.session.model.slots):
                step = self._run(Call(f"r{reader + 1}", "get", {"reader": reader}))
                if step.observed == "timeout":
                    break

        @precondition(lambda self: not self._writing())
        @rule(seed=st.integers(0, 255))
        def fill(self, seed):
            # the writer puts until its next slot is not released (at most one lap)
            for _ in range(self.session.model.slots):
                step = self._run(Call("writer", "put", {"size": SLOT_BYTES - 4, "seed": seed}))
                if step.observed == "timeout":
                    break

        @precondition(lambda self: self.stopped is None)
        @rule(reader=readers)
        def stop(self, reader):
            self.stopped = reader  # from here on this reader never receives again

    return QueueMachine


def _no_message_queue(target: Any) -> str | None:
    """Why a target has no deployed construction (vLLM 0.5.1's
    ``ShmRingBufferIO`` has no ``MessageQueue``, no sockets), or None."""
    files = getattr(target, "files", None)
    if target.origin != "impl" and files is not None and not hasattr(files.broadcast, "MessageQueue"):
        return "the file has no MessageQueue (vLLM 0.5.1's ShmRingBufferIO): no deployed construction to build"
    return None


def run_campaign(ctx: CampaignContext, campaign: SlotCampaign, res: CampaignResult) -> CampaignResult:
    if campaign.mode.startswith("deployed") and _no_message_queue(ctx.target):
        res.skipped = _no_message_queue(ctx.target)
        return res
    if campaign.mode == "faults":
        return _run_faults(ctx, campaign, res)
    if campaign.mode == "deployed-controlled":
        return _run_controlled(ctx, campaign, res)
    if campaign.mode in ("deployed", "deployed-faults"):
        return _run_deployed(ctx, campaign, res)
    make = arena_machine if ctx.target.kind == "arena" else queue_machine
    # the construction these campaigns check, recorded in every finding's config (replay builds the same)
    base = replace(ctx.config, start_method=ONE_PROCESS)
    return ctx.run_rounds(res, lambda config: make(ctx.target, config, campaign.deviations),
                          ctx.profile.max_examples, ctx.profile.step_count, base=base)


def _run_faults(ctx: CampaignContext, campaign: SlotCampaign, res: CampaignResult) -> CampaignResult:
    """The process-fault scenario (:mod:`.faults`): a reader killed holding a slot."""
    import time

    from ...core.config import config_to_json
    from ...core.results import Violation
    from .faults import run_scenario

    config = replace(ctx.config, start_method=ONE_PROCESS)
    t0 = time.monotonic()
    try:
        trace, exc = run_scenario(ctx.target, config)
    except Exception as e:  # noqa: BLE001 - the scenario could not run: an error, never a pass
        res.error = f"{type(e).__name__}: {e}"
        return res
    res.examples, res.steps, res.completed = 1, len(trace), True
    if exc is not None:
        res.violations.append(Violation(exc.prop, exc.message, campaign.name, 0, [s.to_json() for s in exc.steps],
                                        config_to_json(config), exc, concurrency="faults",
                                        detected_seconds=t0, detected_steps=len(exc.steps),
                                        occurrence=ctx.found.record(exc) if ctx.found is not None else 1))
    return res


def _own_excusals(ctx: CampaignContext) -> Any:
    """The session config a deployed campaign judges by: the gate carries
    every earlier campaign's findings as excusals, but a finding in another
    construction says nothing of this one, so only the excusals the run
    started with (a contract's ``not_claimed``) stay."""
    keep = frozenset(e for e in ctx.config.excused if e.split("@", 1)[0] not in ctx.failed)
    return replace(ctx.config, excused=keep)


def _first(ctx: CampaignContext, trace: list, dep: Any) -> Any:
    """The first violation of a deployed run's trace not excused by
    :func:`_own_excusals`, as a :class:`PropertyViolation` (None: none)."""
    found = _firsts(ctx, trace, dep)
    return found[0] if found else None


def _firsts(ctx: CampaignContext, trace: list, dep: Any) -> list[Any]:
    """The first violation of each property in a deployed run's trace (in
    step order), not excused by :func:`_own_excusals`: one run can break
    several (a zero-copy send's NRR and the arena's lost slot at its end)."""
    from ...lockstep.session import PropertyViolation

    config = _own_excusals(ctx)
    out: dict[str, Any] = {}
    for s in trace:
        for prop, msg in s.violations:
            if prop not in out and not config.excuses(prop, s.action, s.cause):
                # the kind of step that broke, not the run's load or fault: one root cause seen by the free
                # load and by every fault run is one finding (its first occurrence, with its deployment)
                out[prop] = PropertyViolation(prop, f"step {s.index} ({s.process} {s.action}): {msg}", trace,
                                              s.action, cause=f"deployed/{s.cause}")
    return list(out.values())


def _deployed_config(ctx: CampaignContext, dep: Any) -> dict[str, Any]:
    from ...core.config import config_to_json

    return {**config_to_json(replace(ctx.config, start_method=dep.start_method, n_readers=dep.local,
                                     readers=tuple(dep.labels()[:dep.local]))), "deployment": dep.to_json()}


def _run_controlled(ctx: CampaignContext, campaign: SlotCampaign, res: CampaignResult) -> CampaignResult:
    """Controlled interleavings in the deployed construction: Hypothesis
    draws a schedule (:data:`SCHEDULES`), the processes take their flag
    loads and stores in its order (:func:`~.deployed.run` with
    ``schedule``), the history checker judges; a failing schedule shrinks
    within :data:`CONTROLLED_BUDGET` runs and replays exactly."""
    import time

    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hyp_seed

    from ...core.results import Violation
    from ...lockstep.session import PropertyViolation
    from . import deployed

    t0 = time.monotonic()
    examples, shrink_runs = CONTROLLED_BUDGET.get(ctx.profile.name, CONTROLLED_BUDGET["ci"])
    method = ctx.config.start_method if ctx.config.start_method in ("fork", "spawn") else "fork"
    base = deployed.Deployment(local=ctx.config.n_readers, remote=0, start_method=method, messages=6, chunks=2,
                               seed=ctx.seed & 0xFFFF)
    if ctx.target.kind == "arena":  # two arena slots; a chunk holds a tensor the arena has no slot for
        base = replace(base, arena=True, arena_slots=2, chunk_bytes=base.arena_slot_bytes + 256 * 1024,
                       torch=ctx.target.torch)
    seen: dict[tuple[int, ...], Any] = {}
    state = {"runs": 0, "first_fail": None, "error": None}

    def run_one(schedule: list[int]) -> None:
        key = tuple(schedule)
        if key not in seen:
            if state["error"]:
                raise _Spent()
            if state["first_fail"] is not None and state["runs"] - state["first_fail"] >= shrink_runs:
                raise _Spent()  # the shrink budget (runs, not seconds) is spent: stop Hypothesis here
            state["runs"] += 1
            dep = replace(base, schedule=key)
            try:
                trace = deployed.judge(deployed.run(ctx.target, dep))
            except Exception as e:  # noqa: BLE001 - the construction could not be built
                state["error"] = f"{type(e).__name__}: {e}"
                return
            res.steps += len(trace)
            exc = _first(ctx, trace, dep)
            seen[key] = (dep, exc)
            if exc is not None and state["first_fail"] is None:
                state["first_fail"] = state["runs"]
        dep, exc = seen[key]
        if exc is not None:
            raise exc

    test = hyp_seed(ctx.seed)(settings(max_examples=examples, deadline=None, database=None,
                                       phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
                                       report_multiple_bugs=False, print_blob=False,
                                       verbosity=Verbosity.quiet)(given(SCHEDULES)(run_one)))
    from hypothesis.internal.conjecture import engine

    wall = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = 24 * 3600  # the shrink budget here is the runs above, never the clock
    try:
        try:
            test()
            res.completed = state["error"] is None
        except _Spent:  # the smallest failing schedule found (shortlex, as Hypothesis orders them)
            failing = [(len(k), k) for k, (d, e) in seen.items() if e is not None]
            if failing:
                raise seen[min(failing)[1]][1] from None
    except PropertyViolation as exc:
        dep = next(d for d, e in seen.values() if e is exc)
        res.violations.append(Violation(exc.prop, exc.message, campaign.name, 0, [s.to_json() for s in exc.steps],
                                        _deployed_config(ctx, dep), exc, concurrency="deployed",
                                        detected_seconds=t0, detected_steps=len(exc.steps),
                                        shrink_complete=state["runs"] - (state["first_fail"] or 0) < shrink_runs,
                                        occurrence=ctx.found.record(exc) if ctx.found is not None else 1))
        res.completed = True
    finally:
        engine.MAX_SHRINKING_SECONDS = wall
    res.error = state["error"] and f"{base.name}, scheduled: {state['error']}"
    res.examples = state["runs"]
    res.rates["construction"] = replace(base, schedule=()).construction()
    res.rates["schedules"] = state["runs"]
    res.seconds = time.monotonic() - t0
    return res


class _Spent(BaseException):
    """Ends a controlled campaign's Hypothesis run when its shrink budget is
    spent (a BaseException: Hypothesis does not catch it)."""


def _run_deployed(ctx: CampaignContext, campaign: SlotCampaign, res: CampaignResult) -> CampaignResult:
    """The deployed construction's runs (:mod:`.deployed`): each judged by
    the history checker; its first violation not excused is a finding,
    named with the construction it ran in (``config["deployment"]``)."""
    import time

    from ...core.results import Violation
    from . import deployed

    t0 = time.monotonic()
    runs = []
    planned = deployments(ctx, campaign)
    for dep in planned:
        try:
            out = deployed.run(ctx.target, dep)
        except Exception as e:  # noqa: BLE001 - the construction could not be built: an error, never a pass
            res.error = f"{dep.name}: {type(e).__name__}: {e}"
            break
        trace = deployed.judge(out)
        res.examples += 1
        res.steps += len(trace)
        runs.append({**dep.construction(), "fault": dep.fault, "messages": dep.messages,
                     "sent": sum(1 for s in trace if s.process == "writer" and s.observed.startswith("sent")),
                     "seconds": round(out.seconds, 2),
                     "exitcodes": {k: v for k, v in out.exitcodes.items()},
                     "lost_in_flight": [list(n[1:]) for n in out.notes if n[0] == "lost-in-flight"]})
        for exc in _firsts(ctx, trace, dep):
            if ctx.found is not None and exc.cause in ctx.found.actions.get(exc.prop, ()):
                continue  # the same kind of step broke in an earlier run: one finding (docs/slots.md)
            res.violations.append(Violation(exc.prop, exc.message, campaign.name, 0, [x.to_json() for x in trace],
                                            _deployed_config(ctx, dep), exc, concurrency="deployed",
                                            detected_seconds=t0, detected_steps=len(trace),
                                            occurrence=ctx.found.record(exc) if ctx.found is not None else 1))
        if ctx.stop_at and any(v.property in ctx.stop_at for v in res.violations):
            # its first finding is all a stop_at run needs (shmspec mutants): the later runs are skipped
            res.rates["stopped"] = f"after run {len(runs)} of {len(planned)}, at a finding of " \
                                   f"{', '.join(sorted({v.property for v in res.violations} & ctx.stop_at))}"
            break
    res.rates["deployed"] = runs
    res.rates["construction"] = runs[0] if runs else None
    res.completed = res.error is None and "stopped" not in res.rates  # stopped: as a ring campaign's rounds
    res.seconds = time.monotonic() - t0
    return res


__all__ = ["ARENA_CHECKS", "DEPLOYED_CHECKS", "deployed_campaigns", "deployments", "QUEUE_CHECKS", "SlotCampaign", "arena_machine", "campaigns_for", "queue_machine",
           "run_campaign"]
