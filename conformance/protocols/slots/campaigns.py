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


def campaigns_for(kind: str) -> tuple[SlotCampaign, ...]:
    checks = ARENA_CHECKS if kind == "arena" else QUEUE_CHECKS
    return (SlotCampaign("lockstep", checks), SlotCampaign("deviations", checks, deviations=True),
            SlotCampaign("faults", FAULT_CHECKS, mode="faults"))


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


def run_campaign(ctx: CampaignContext, campaign: SlotCampaign, res: CampaignResult) -> CampaignResult:
    if campaign.mode == "faults":
        return _run_faults(ctx, campaign, res)
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


__all__ = ["ARENA_CHECKS", "QUEUE_CHECKS", "SlotCampaign", "arena_machine", "campaigns_for", "queue_machine",
           "run_campaign"]
