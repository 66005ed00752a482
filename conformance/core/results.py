"""Results of a gate run: a :class:`Violation` (one shrunk counterexample),
a :class:`CampaignResult` per campaign and the :class:`GateResult`, with the
verdict per property.  ``report.json`` is written from these
(:mod:`shmspec.conformance.reporting.report`).

Imports nothing of the harness above ``core``; no Hypothesis, no multiprocess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shmspec.model.properties import PROPERTIES, Property

from .constructions import Construction

ALL_PROPERTIES: tuple[str, ...] = tuple(p.id for p in PROPERTIES)
"""Every property the gate gives a verdict on, in the model's order, then
CONFORMANCE (the target's outcomes and state agree with the model's)."""


def finding_fingerprint(protocol: str, prop: str, campaign: str, cause: str | None,
                        construction: dict[str, Any]) -> str:
    """A finding's stable name, for baselines and contracts: ``PROP:campaign:
    cause:hash``, where ``cause`` is the kind of step that broke (``get/cleared``,
    ``free_unused``; ``-`` where a campaign has none) and ``hash`` 8 hex digits
    of the protocol and the construction (report.json's ``construction`` minus
    its ``name``).  Neither the seed nor any step number is in it, so the same
    bug found by another seed, or after an unrelated change moved its step,
    keeps its fingerprint; another cause of a known property gets a new one."""
    import hashlib
    import json

    shape = {k: v for k, v in sorted((construction or {}).items()) if k != "name"}
    digest = hashlib.sha256(json.dumps([protocol, shape], sort_keys=True).encode()).hexdigest()[:8]
    return f"{prop}:{campaign}:{cause or '-'}:{digest}"


@dataclass
class Violation:
    """One shrunk counterexample: the property, its message, and the steps."""

    property: str
    message: str
    campaign: str
    round: int
    steps: list[dict[str, Any]]
    config: dict[str, Any]
    exc: Any = field(default=None, repr=False, compare=False)
    concurrency: str = "off"
    """``off`` (lockstep steps), ``controlled`` (scheduled lane steps) or ``free``."""
    detected_seconds: float | None = None
    """Time to detection: seconds from the gate's start until the failing step
    (or free-running load) first ran, before any shrinking."""
    detected_steps: int | None = None
    """Steps to detection: steps the gate had run (all campaigns, in order)
    up to and including that first failing step."""
    shrink_complete: bool | None = None
    """Lockstep and controlled: True when Hypothesis's shrinking ended within
    the profile's ``shrink_examples``; False when that budget cut it.  Either
    way the budget counts examples, not seconds, so the same seed gives the
    same trace on any machine (since 2026-12-03; before, a time budget cut
    it).  None where nothing is shrunk."""
    shrink_examples: int | None = None
    """Examples run while shrinking (after the first failing one), or None
    where nothing is shrunk."""

    occurrence: int = 1
    """1 for the first violation of its property in the gate; n > 1 for a
    distinct finding (its failing step kind differs from the n - 1 before)."""
    protocol: str = "ringbuffer"
    """The store protocol whose campaign found it (:mod:`shmspec.conformance.protocols`);
    a replay goes to that protocol."""
    seed: int | None = None
    """The seed of the run, or in a run of several seed units (``--seeds``)
    of the unit, that found it (its Hypothesis exploration and free-running
    load); None where no gate ran (a TLC or z3 counterexample)."""
    trace: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    """A CONFORMANCE finding of ``--validate-traces``: the recorded run that
    departs from the spec, as a trace document (``shmspec validate`` reads
    it; the report writes it to ``traces/V<n>.json``); else None."""

    def calls(self) -> list[dict[str, Any]]:
        """What a replay needs: lockstep calls, or the exact schedule."""
        if self.concurrency == "controlled":
            return [{"process": s["process"], "kind": s["kind"], "action": s["action"], "args": s["args"]}
                    for s in self.steps]
        if self.concurrency in ("free", "faults", "threads"):
            return []  # re-run from config (a free run's seed, load and geometry; a fault scenario's name)
        return [{"process": s["process"], "action": s["action"], "args": s["args"]} for s in self.steps if s["action"] != "close"]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Violation":
        """A violation of ``report.json`` (:meth:`to_json`), for ``shmspec
        merge``: its exception reduced to what the reports and the merge use
        (property, cause, action, message)."""
        from types import SimpleNamespace  # noqa: PLC0415

        exc = SimpleNamespace(prop=d["property"], cause=d.get("cause") or "", action=d.get("action") or "",
                              message=d["message"])
        return cls(d["property"], d["message"], d["campaign"], int(d.get("round", 0)), list(d["steps"]),
                   dict(d["config"]), exc, d.get("concurrency", "off"), shrink_complete=d.get("shrink_complete"),
                   shrink_examples=d.get("shrink_examples"), occurrence=int(d.get("occurrence", 1)),
                   protocol=d.get("protocol", "ringbuffer"), seed=d.get("seed"), trace=d.get("trace"))

    def to_json(self) -> dict[str, Any]:
        return {
            "property": self.property,
            "message": self.message,
            "campaign": self.campaign,
            "concurrency": self.concurrency,
            "round": self.round,
            "config": self.config,
            "steps": self.steps,
            "shrink_complete": self.shrink_complete,
            "shrink_examples": self.shrink_examples,
            "reproducible": self.concurrency != "free",
            "occurrence": self.occurrence,
            "cause": getattr(self.exc, "cause", None),
            "action": getattr(self.exc, "action", None) or None,
            "fingerprint": self.fingerprint,
            "construction": self.construction.to_json(),
            "protocol": self.protocol,
            "seed": self.seed,
            **({"trace": self.trace} if self.trace is not None else {}),
        }

    @property
    def construction(self) -> Construction:
        """The construction the finding was made in (from its config)."""
        return Construction.of(self.config)

    @property
    def fingerprint(self) -> str:
        """:func:`finding_fingerprint` of this finding."""
        return finding_fingerprint(self.protocol, self.property, self.campaign, getattr(self.exc, "cause", None),
                                   self.construction.to_json())


@dataclass
class CampaignResult:
    name: str
    checks: list[str]
    mode: str = "lockstep"
    examples: int = 0
    steps: int = 0
    seconds: float = 0.0
    completed: bool = False
    skipped: str | None = None
    violations: list[Violation] = field(default_factory=list)
    error: str | None = None
    unknown: str | None = None
    """Why a check ran out of budget (its properties are then "unknown", never "pass")."""
    rates: dict[str, Any] = field(default_factory=dict)
    """Throughput measured by the campaign (free-running: ops per second)."""
    not_claimed: dict[str, str] = field(default_factory=dict)
    """Property -> why the target's contract does not claim it (SW on a
    store that confines its writer to one thread); its verdict is then
    ``not-claimed`` unless another campaign fails it."""

    @classmethod
    def from_json(cls, d: dict[str, Any], violations: dict[str, Violation]) -> "CampaignResult":
        """A campaign of ``report.json``; ``violations`` maps the report's
        violation ids (``V1``) to the loaded violations."""
        return cls(d["name"], list(d["checks"]), d.get("mode", "lockstep"), int(d["examples"]), int(d["steps"]),
                   float(d["seconds"]), bool(d["completed"]), d.get("skipped"),
                   [violations[i] for i in d.get("violations", [])], d.get("error"), d.get("unknown"),
                   dict(d.get("rates") or {}), dict(d.get("not_claimed") or {}))


@dataclass
class GateResult:
    target: str
    model_profile: str
    profile: str
    seed: int
    campaigns: list[CampaignResult]
    seconds: float
    concurrency: str = "off"
    """The concurrency mode run after the lockstep campaigns."""
    writer_lock: bool = False
    """The primary construction's writer: False, built as vLLM builds it (no
    reader lock); True, given the readers' lock too."""
    construction: Construction = Construction()
    """The primary construction: every campaign but ``constructions`` ran in it."""
    protocol: str = "ringbuffer"
    """The target's store protocol (:mod:`shmspec.conformance.protocols`)."""
    registry: tuple[Property, ...] = field(default=PROPERTIES, repr=False, compare=False)
    """The protocol's properties, in verdict order: :attr:`properties` and
    :meth:`property_counts` give one entry per property, in this order."""
    seeds: tuple[int, ...] = ()
    """The seeds of the units run (``--seeds``; :mod:`~shmspec.conformance.runner.units`);
    empty for a one-seed run (then :attr:`seed` alone)."""
    units: int = 1
    """Seed units of the whole run (a shard runs some of them)."""
    shard: tuple[int, int] | None = None
    """``(i, n)``: this run was shard i of n (``--shard i/n``)."""
    workers: int = 1
    """Worker processes the units ran in (``--workers``; local executor)."""
    contract: Any = None
    """The :class:`~shmspec.conformance.core.contract.Contract` the target
    was judged by (None: a protocol without declared contracts)."""
    stand_ins: tuple[str, ...] = ()
    """Names of the target file's own project the loader stood in for
    (SGLang's helpers: ``sglang.srt.utils.network.get_open_port``, ...)."""
    executor: str = "local"
    """Where the units ran: ``local``, or ``ray (ADDRESS)``
    (:mod:`~shmspec.conformance.runner.executors`)."""

    @classmethod
    def from_report(cls, d: dict[str, Any], registry: tuple[Property, ...] = PROPERTIES,
                    contract: Any = None) -> "GateResult":
        """The result a ``report.json`` (schema ``shmspec.report/1``) was
        written from, as far as the report keeps it (each violation's
        exception is reduced to its cause and action; ``detected_*`` are not
        kept): what ``shmspec merge`` merges.  ``registry``: the report's
        protocol's properties; ``contract``: its loaded contract.

        Raises:
            KeyError, TypeError, ValueError: the document is not such a report.
        """
        vs = {v["id"]: Violation.from_json(v) for v in d["violations"]}
        shard = tuple(int(x) for x in d["shard"].split("/")) if d.get("shard") else None
        seeds = tuple(d.get("seeds") or ())
        return cls(d["target"], d["model_profile"], d["profile"], int(d["seed"]),
                   [CampaignResult.from_json(c, vs) for c in d["campaigns"]], float(d["seconds"]),
                   d.get("concurrency", "off"), bool(d["construction"].get("writer_lock", False)),
                   Construction.from_json(d["construction"]), d.get("protocol", "ringbuffer"), registry,
                   seeds if int(d.get("units", 1)) > 1 or shard else (), int(d.get("units", 1)), shard,
                   int(d.get("workers", 1)), contract, tuple(d.get("stand_ins") or ()), d.get("executor", "local"))

    @property
    def contract_name(self) -> str:
        """The contract as the reports name it: the model profile, plus what
        the declaration changed (:attr:`Contract.name`)."""
        return self.contract.name if self.contract is not None else self.model_profile

    @property
    def seed_text(self) -> str:
        """The seed as the reports print it: ``0``, or with seed units
        ``0 (8 seed units, shard 2/4: seeds 2654435769, 387276957; 2 workers)``."""
        if not self.seeds:
            return str(self.seed)
        shard = f", shard {self.shard[0]}/{self.shard[1]}" if self.shard else ""
        where = (f"{self.workers} worker{'s' if self.workers != 1 else ''}" if self.executor == "local"
                 else f"on {self.executor}")
        return f"{self.seed} ({self.units} seed units{shard}: seeds {', '.join(map(str, self.seeds))}; {where})"

    @property
    def property_ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.registry)

    @property
    def descriptions(self) -> dict[str, str]:
        """Property id -> its statement."""
        return {p.id: p.statement for p in self.registry}

    @property
    def constructions(self) -> list[dict[str, Any]]:
        """Every construction run (``report.json``'s ``constructions``): the
        primary one with the campaigns that ran in it, then each one the
        ``constructions`` campaign ran, with what ran there."""
        own = {c.name: c.rates["construction"] for c in self.campaigns if c.rates.get("construction")}
        ran = [c.name for c in self.campaigns if c.mode != "constructions" and not c.skipped and c.name not in own]
        # the faults campaign needs a survivor: it always runs two readers
        two = Construction(self.construction.writer_lock, self.construction.start_method, 2)
        apart = [n for n in ran if n == "faults"] if two != self.construction else []
        out = [{**self.construction.to_json(), "primary": True, "campaigns": [n for n in ran if n not in apart]}]
        if apart:
            out.append({**two.to_json(), "primary": False, "campaigns": apart})
        for name, row in own.items():  # a campaign that ran in a construction of its own (the slot queue's deployed)
            out.append({**{k: row[k] for k in ("name", "deployed", "writer_lock", "start_method", "n_readers",
                                               "remote_readers", "scheduled", "arena", "torch") if k in row},
                        "primary": False, "campaigns": [name]})
        for c in self.campaigns:
            for row in c.rates.get("constructions", []) if c.mode == "constructions" else []:
                parts = [k for k in ("preemption", "free_running") if k in row]
                out.append({**row, "primary": False, "campaigns": [f"{c.name}: {p}" for p in parts]})
        return out

    @property
    def violations(self) -> list[Violation]:
        return [v for c in self.campaigns for v in c.violations]

    @property
    def properties(self) -> dict[str, str]:
        """Verdict per property: fail if any violation; pass if a campaign that
        checks it ran to the end; unknown if the only campaigns that check it
        ran out of budget; not-claimed if the target's contract does not claim
        it (a campaign ran it and reported what it saw, or the declared
        contract's ``not_claimed`` names it); otherwise not-checked."""
        out = {}
        failed = {v.property for v in self.violations}
        declared = self.contract.not_claimed if self.contract is not None else {}
        for pid in self.property_ids:
            if pid in failed:
                out[pid] = "fail"
            elif pid in declared:
                out[pid] = "not-claimed"
            elif any(c.completed and pid in c.checks for c in self.campaigns):
                out[pid] = "pass"
            elif any(c.unknown and pid in c.checks for c in self.campaigns):
                out[pid] = "unknown"
            elif any(pid in c.not_claimed for c in self.campaigns):
                out[pid] = "not-claimed"
            else:
                out[pid] = "not-checked"
        return out

    @property
    def verdict(self) -> str:
        if self.violations:
            return "fail"
        if any(c.error for c in self.campaigns):
            return "error"
        if any(c.unknown for c in self.campaigns):
            return "unknown"
        return "pass"

    def property_counts(self) -> dict[str, tuple[int, int, float]]:
        """(examples, steps, seconds) summed over campaigns that check each property."""
        out = {}
        for pid in self.property_ids:
            cs = [c for c in self.campaigns if pid in c.checks and not c.skipped]
            out[pid] = (sum(c.examples for c in cs), sum(c.steps for c in cs), sum(c.seconds for c in cs))
        return out


__all__ = ["ALL_PROPERTIES", "CampaignResult", "GateResult", "Violation", "finding_fingerprint"]
