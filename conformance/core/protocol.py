"""The protocol seam: what the gate, the reports and the commands need of one
store protocol, and nothing they need of a particular store.

A *store protocol* is a family of stores sharing one contract: vLLM's
ring-buffer object store (``SingleWriterShmRingBuffer`` +
``SingleWriterShmObjectStorage``, :mod:`shmspec.conformance.protocols.ringbuffer`)
is the first.  Everything specific to it sits behind :class:`StoreProtocol`:
its model, adapter, TLA+ spec, property registry, action names, campaigns and
how each runs, how a finding replays, and its seeded faults.  The gate
(:func:`shmspec.conformance.runner.gate.run_gate`) only schedules campaigns,
carries excusals from one to the next and collects verdicts; a second
protocol is a new module under ``conformance/protocols/`` registered with
:func:`shmspec.conformance.protocols.register`, not edits across the gate
(``tests/conformance/protocols/test_protocol_seam.py`` runs a second, toy protocol through the gate,
the report and :func:`shmspec.replay` to keep that true).

Imports nothing of the harness above ``core``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

from shmspec.model.properties import Property

if TYPE_CHECKING:
    from .config import SessionConfig
    from .results import CampaignResult


@runtime_checkable
class CampaignLike(Protocol):
    """What the gate reads of a campaign: its name, the property ids a clean
    run establishes (``checks``) and its ``mode`` (the protocol's
    :meth:`StoreProtocol.run_campaign` dispatches on it)."""

    name: str
    checks: frozenset[str]
    mode: str


@dataclass
class CampaignContext:
    """What the gate hands a protocol for one campaign.

    ``config`` carries the gate's excusals so far; ``raced`` the properties the
    preemption sweep found, ``failed`` every property found by an earlier
    campaign; ``found`` the gate-wide distinct-findings ledger (``record(exc)``
    -> occurrence, ``excuse(config, exc)`` -> config).  ``run_rounds(res,
    make_machine, max_examples, step_count, found=None, base=None)`` runs a
    Hypothesis state machine (``make_machine(config)`` -> machine class) in
    rounds under the gate profile's budget, each round carried past the
    findings before it, and returns ``res`` filled in.  The machine runs each
    call through its ``_run(call)`` method (counted as a step) and raises
    :class:`~shmspec.conformance.lockstep.session.PropertyViolation` for a
    finding, judged with :meth:`SessionConfig.excuses
    <shmspec.conformance.core.config.SessionConfig.excuses>`;
    ``fresh_findings`` gives the campaign its own distinct-findings ledger.
    ``stop_at`` (property ids, or None): a campaign that runs in pieces of
    its own (the slot protocols' deployed runs) stops after the piece that
    found one of them, as ``run_rounds`` does (``shmspec mutants``, which
    needs only the first finding of the property a fault names).
    """

    target: Any
    profile: Any
    """The gate profile (:class:`~shmspec.conformance.runner.gate.GateProfile`): budgets."""
    seed: int
    config: "SessionConfig"
    concurrency: str
    raced: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()
    found: Any = None
    run_rounds: Callable[..., "CampaignResult"] = field(default=None, repr=False)  # type: ignore[assignment]
    stop_at: frozenset[str] | None = None


class StoreProtocol:
    """One store protocol.  Subclass and set the attributes; override the
    methods.  Every attribute is read by the harness, none by a store.

    Attributes:
        name: the protocol's id (``ringbuffer``); a target names it in its
            ``protocol`` attribute (default ``ringbuffer``).
        title: one line for reports.
        properties: the property registry, in verdict order (the gate gives a
            verdict on each; report tables and matrix columns follow it).
        actions: the action names traces and reports use.
        concurrency_modes: the gate's ``--concurrency`` choices it supports.
        tla_dir: the TLA+ spec's folder (``shmspec model``), or None.
        mutants: the module path of its seeded-fault library (``shmspec
            mutants``), or None.
        checkers, stated_in: where its properties are checked and stated
            (``shmspec properties --protocol NAME``).
    """

    name: str = ""
    title: str = ""
    properties: tuple[Property, ...] = ()
    actions: tuple[str, ...] = ()
    concurrency_modes: tuple[str, ...] = ("off",)
    default_concurrency: str | None = None
    """The mode a run uses when the gate profile's default is not one of
    :attr:`concurrency_modes` (None: ``off``)."""
    tla_dir: Path | None = None
    mutants: str | None = None
    checkers: dict[str, str] = {}
    """Checker name -> its entry point (``module:qualname`` or a file), for
    ``shmspec properties``; a property's ``checkers`` name these."""
    stated_in: str = ""
    """Where the property registry is (``module:name``)."""
    why: dict[str, str] = {}
    """Property id -> how a store comes to allow its violation (report.html's
    "Why the store allowed it" paragraph); the ring buffer's are the
    reporting layer's own."""

    @property
    def property_ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.properties)

    def base_campaigns(self) -> tuple[CampaignLike, ...]:
        """The campaigns every gate run starts with (one process; the gate's
        ``campaigns`` argument replaces them)."""
        raise NotImplementedError

    def concurrent_campaigns(self, concurrency: str) -> tuple[CampaignLike, ...]:
        """The campaigns run after the base ones at ``concurrency`` (one of
        :attr:`concurrency_modes`)."""
        return ()

    def campaigns(self, concurrency: str) -> tuple[CampaignLike, ...]:
        """Every campaign of a gate run at ``concurrency``, in the order they run."""
        return tuple(self.base_campaigns()) + tuple(self.concurrent_campaigns(concurrency))

    def run_campaign(self, ctx: CampaignContext, campaign: CampaignLike, res: "CampaignResult") -> "CampaignResult":
        """Run ``campaign`` and fill ``res`` (its ``violations``,
        ``completed``/``unknown``/``error``/``skipped``, counts, ``rates``)."""
        raise NotImplementedError

    def load(self, spec: str) -> Any:
        """The target named by ``spec``.

        Raises:
            TargetError: it cannot be loaded.
        """
        raise NotImplementedError

    def construction(self, config: "SessionConfig") -> Any:
        """The construction a gate run in ``config`` checks (reports name it):
        by default the ring buffer's, :meth:`Construction.of
        <shmspec.conformance.core.constructions.Construction.of>`."""
        from .constructions import Construction

        return Construction.of(config)

    def replay(self, target_spec: str, case: dict[str, Any]) -> str | None:
        """Re-run one recorded finding (a report.json violation or repro case:
        ``concurrency``, ``config``, ``steps``/``calls``, ``property``) on
        ``target_spec``: ``"PROP: message"`` if a property is violated again,
        else None.

        Raises:
            UsageError: the case names a mode this protocol has not.
            TargetError: the target cannot be loaded.
        """
        raise NotImplementedError


__all__ = ["CampaignContext", "CampaignLike", "StoreProtocol"]
