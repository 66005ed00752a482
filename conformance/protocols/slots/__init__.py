"""The slot-flag stores (docs/slots.md), two protocols of one family:
``arena`` (vLLM's ``ShmTensorArena``, impl's ``SlotArena``) and ``queue``
(the shared-memory ring of vLLM's ``MessageQueue``, impl's ``SlotQueue``).

What is specific to them, in one place:

* models: :mod:`shmspec.model.slots` (the protocol's steps, BFS) and
  :mod:`shmspec.model.slotapi` (the lockstep prediction per API call);
* properties: :data:`shmspec.model.slots.PROPERTIES` (the arena is judged
  on all of them, the queue on those its API has: no FALLBACK or DISJ);
* targets and drivers: :mod:`.targets` (``KIND:impl``, ``KIND:vllm==X.Y.Z``,
  ``KIND:file:PATH``; the aliases ``impl-KIND`` and ``vllm-KIND==X.Y.Z``);
* campaigns: :mod:`.campaigns`; sessions (the checks): :mod:`.session`;
* TLA+ spec: ``tla/slots/Slots.tla`` and its ``MC_slots*.cfg``.

Importing this loads neither Hypothesis nor a target.
"""

from __future__ import annotations

from typing import Any

from shmspec.model.properties import Property
from shmspec.model.slots import PROPERTIES as SLOT_PROPERTIES

from ...core.config import config_from_json
from ...core.errors import UsageError
from ...core.protocol import CampaignContext, StoreProtocol

_SEVERITY = {"NRR": 1, "DISJ": 2, "FIFO": 3, "FALLBACK": 4, "PROG": 5, "LIVE": 6, "CONFORMANCE": 7}
_ARENA_ONLY = frozenset({"FALLBACK", "DISJ"})


_STATEMENT = {("arena", "LIVE"): "the arena's writer never blocks: with no free slot it falls back",
              ("queue", "LIVE"): "every wait of the queue is bounded by its timeout"}

WHY: dict[tuple[str, str], str] = {
    ("arena", "NRR"): "The writer's free check let it reuse a slot some reader had not released (its done flag "
                      "was unset, or the flags it read were stale), or a reader's release came before its last view "
                      "of the slot was dropped. The slot was rewritten under a view still in use.",
    ("queue", "NRR"): "The writer claimed its next slot while a reader had not released it (or a reader released "
                      "before its block ended), and rewrote the slot under that reader.",
    ("arena", "FIFO"): "A reader's view was refused, or named a slot that no longer held its message.",
    ("queue", "FIFO"): "A reader found its slot readable although it held no new message for it: the slot was "
                       "published after a failed write, its flags were reset before the claim, or the reader's ring "
                       "position did not move on after its read (the message is read again).",
    ("arena", "PROG"): "The writer fell back although a slot was free (every reader had released it): its probe did "
                       "not look at every slot, or a release never reached the flags.",
    ("queue", "PROG"): "A slot stayed unreleased after its reader left the block, typically because the release is "
                       "not in a finally clause: a caller exception in acquire_read skips it (vLLM before #45224), "
                       "and the writer waits on that slot.",
    ("arena", "FALLBACK"): "The writer wrote a message over the slot size, or changed the arena's flags on a path "
                           "that then fell back.",
    ("arena", "DISJ"): "A write's copy went past its slot, into the next slot or a metadata row.",
    ("arena", "LIVE"): "A call of the arena did not return within its bound.",
    ("arena", "CONFORMANCE"): "The arena's metadata rows differ from the ones its clients' calls imply: a flag was "
                              "set, reset or left that the protocol would not.",
    ("queue", "CONFORMANCE"): "The ring's metadata rows differ from the ones its clients' calls imply: a flag was "
                              "set, reset or left that the protocol would not (often the first sign of the PROG or "
                              "FIFO finding beside it).",
    ("queue", "LIVE"): "The release's acquire_write/acquire_read take no timeout, so a wait on a slot that is never "
                       "released never ends (the harness stops it at its first sleep).",
}
"""Why-paragraphs of report.html, per (protocol, property)."""


def _registry(kind: str) -> tuple[Property, ...]:
    props = [p for p in SLOT_PROPERTIES if kind == "arena" or p.id not in _ARENA_ONLY]
    props.sort(key=lambda p: _SEVERITY[p.id])
    return tuple(Property(p.id, _STATEMENT.get((kind, p.id), p.statement), _SEVERITY[p.id], p.kind,
                          frozenset({"lockstep"})) for p in props)


class SlotProtocol(StoreProtocol):
    """One of the two slot-flag protocols (``kind``: ``arena`` or ``queue``)."""

    concurrency_modes = ("off", "free")
    default_concurrency = "free"
    """``free``: after the one-process campaigns, the deployed construction's
    (:mod:`.deployed`: processes, sockets, ``enqueue``/``dequeue``); ``off``:
    the one-process campaigns alone."""
    mutants = "shmspec.conformance.mutants.slots"
    checkers = {"lockstep": "shmspec.conformance.protocols.slots.session:_Session.execute"}
    stated_in = "shmspec.model.slots:PROPERTIES"

    def __init__(self, kind: str):
        from ...core import paths

        self.kind = self.name = kind
        self.title = ("slot-flag zero-copy tensor arena (vLLM ShmTensorArena)" if kind == "arena" else
                      "slot-flag broadcast ring (vLLM MessageQueue / ShmRingBuffer)")
        self.properties = _registry(kind)
        self.actions = (("write", "view", "keep", "drop", "flush") if kind == "arena" else
                        ("put", "begin_write", "end_write", "abort_write", "get", "begin_read", "end_read",
                         "abort_read"))
        self.tla_dir = paths.tla_dir() / "slots"
        self.why = {prop: text for (k, prop), text in WHY.items() if k == kind}

    def base_campaigns(self) -> tuple[Any, ...]:
        from .campaigns import campaigns_for

        return campaigns_for(self.kind)

    def concurrent_campaigns(self, concurrency: str) -> tuple[Any, ...]:
        from .campaigns import deployed_campaigns

        return deployed_campaigns(self.kind) if concurrency == "free" else ()

    def run_campaign(self, ctx: CampaignContext, campaign: Any, res: Any) -> Any:
        from .campaigns import run_campaign

        return run_campaign(ctx, campaign, res)

    def load(self, spec: str) -> Any:
        from .targets import load

        return load(self.kind, spec)

    def construction(self, config: Any) -> Any:
        """Writer and readers in the controller's process (the lockstep campaigns)."""
        from ...core.constructions import Construction

        return Construction(False, "one-process", config.n_readers)  # campaigns.ONE_PROCESS

    def replay(self, target_spec: str, case: dict[str, Any]) -> str | None:
        mode = case.get("concurrency", "off")
        if mode == "deployed" or "deployment" in case.get("config", {}):
            return self._replay_deployed(target_spec, case)
        if mode not in ("off", "faults"):
            raise UsageError(f"the {self.kind} protocol has no concurrency {mode!r}")
        from ...lockstep.session import Call, PropertyViolation
        from .. import load as load_any
        from .session import session_for

        if mode == "faults":  # the process-fault scenario is deterministic: run it again
            from .faults import run_scenario

            _, exc = run_scenario(load_any(target_spec), config_from_json(case["config"]))
            return None if exc is None else f"{exc.prop}: {exc.message}"

        session = session_for(load_any(target_spec), config_from_json(case["config"]))
        calls = case.get("calls") or [{k: s[k] for k in ("process", "action", "args")} for s in case["steps"]]
        try:
            for c in calls:
                session.execute(Call.from_json(c))
        except PropertyViolation as exc:
            return f"{exc.prop}: {exc.message}"
        finally:
            session.close()
        return None


    @staticmethod
    def _replay_deployed(target_spec: str, case: dict[str, Any]) -> str | None:
        """Run the case's deployment again and judge it: its first violation
        of the case's property (any property where the case names none).  A
        free-running load may interleave otherwise; a fault ends the same way."""
        from .. import load as load_any
        from . import deployed

        dep = deployed.Deployment.from_json(case["config"]["deployment"])
        excused = set(case["config"].get("excused", ()))
        want = case.get("property")
        for s in deployed.judge(deployed.run(load_any(target_spec), dep)):
            for prop, msg in s.violations:
                if prop not in excused and (want is None or prop == want):
                    return f"{prop}: step {s.index} ({s.process} {s.action}): {msg}"
        return None


ARENA = SlotProtocol("arena")
QUEUE = SlotProtocol("queue")

__all__ = ["ARENA", "QUEUE", "SlotProtocol"]
