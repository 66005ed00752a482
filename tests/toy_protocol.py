"""A second store protocol, as small as one can be: a key-value *register
store* (``put(key, value)`` once per key, ``get(key)`` returns that value),
with two properties and one lockstep campaign.  It exists to keep the
protocol seam honest (tests/conformance/protocols/test_protocol_seam.py): the gate, the reports
and :func:`shmspec.replay` run it through
:class:`~shmspec.conformance.core.protocol.StoreProtocol` alone, with no edit
to any of them.

Targets: ``toy:good`` (correct), ``toy:stale`` (a ``get`` of a key put over
a duplicate returns the rejected value: a recycled-slot read in miniature),
``toy:dup`` (accepts a duplicate put).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from shmspec.conformance.core.config import SessionConfig, config_from_json
from shmspec.conformance.core.errors import TargetError, UsageError
from shmspec.conformance.core.protocol import CampaignContext, StoreProtocol
from shmspec.conformance.lockstep.session import Call, PropertyViolation, Step
from shmspec.model.properties import Property

PROPERTIES = (
    Property("READ", "a get returns the value its key was first put with", 1, "safety", frozenset({"toy"})),
    Property("ONCE", "a second put of a key is rejected", 2, "safety", frozenset({"toy"})),
)


class Store:
    """The correct register store (``toy:good``)."""

    def __init__(self, variant: str = "good"):
        self.variant = variant
        self.cells: dict[str, int] = {}

    def put(self, key: str, value: int) -> str:
        if key not in self.cells:
            self.cells[key] = value
            return "ok"
        if self.variant in ("stale", "dup"):
            self.cells[key] = value  # overwritten although the put is refused (stale) or accepted (dup)
        return "ok" if self.variant == "dup" else "Duplicate"

    def get(self, key: str) -> Any:
        return self.cells.get(key, "Missing")


@dataclass(frozen=True)
class ToyCampaign:
    name: str
    checks: frozenset[str]
    mode: str = "lockstep"


@dataclass
class ToyTarget:
    spec: str
    variant: str
    protocol: str = "toy"
    source: Any = None
    profile: Any = field(default_factory=lambda: SimpleNamespace(name="toy"))


class ToySession:
    """Model and target in lockstep; every property judged after each call."""

    def __init__(self, target: ToyTarget, config: SessionConfig):
        self.store, self.model, self.config, self.trace = Store(target.variant), {}, config, []

    def execute(self, call: Call) -> Step:
        key, value = call.args["key"], call.args.get("value")
        violations = []
        if call.action == "put":
            expected = "Duplicate" if key in self.model else "ok"
            self.model.setdefault(key, value)
            observed = self.store.put(key, value)
            if expected == "Duplicate" and observed != "Duplicate":
                violations.append(("ONCE", f"a second put of {key!r} was accepted"))
        else:
            expected, observed = self.model.get(key, "Missing"), self.store.get(key)
            if observed != expected:
                violations.append(("READ", f"get({key!r}) returned {observed!r}, not {expected!r}"))
        step = Step(len(self.trace), call.process, call.action, dict(call.args), repr(expected), repr(observed), {},
                    violations, call.action)
        self.trace.append(step)
        for prop, msg in violations:
            if not self.config.excuses(prop, call.action):
                raise PropertyViolation(prop, f"step {step.index} (writer {call.action}): {msg}", self.trace,
                                        call.action)
        return step


def machine_for(target: ToyTarget, config: SessionConfig) -> type:
    class ToyMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.session = ToySession(target, config)

        def _run(self, call: Call) -> Step:
            return self.session.execute(call)

        @rule(key=st.sampled_from("abc"), value=st.integers(0, 3))
        def put(self, key, value):
            self._run(Call("writer", "put", {"key": key, "value": value}))

        @rule(key=st.sampled_from("abc"))
        def get(self, key):
            self._run(Call("writer", "get", {"key": key}))

    return ToyMachine


class ToyProtocol(StoreProtocol):
    name = "toy"
    title = "register store (test protocol)"
    properties = PROPERTIES
    actions = ("put", "get")
    concurrency_modes = ("off",)
    checkers = {"toy": "toy_protocol:ToySession.execute"}
    stated_in = "toy_protocol:PROPERTIES"

    def base_campaigns(self):
        return (ToyCampaign("registers", frozenset({"READ", "ONCE"})),)

    def run_campaign(self, ctx: CampaignContext, campaign, res):
        return ctx.run_rounds(res, lambda config: machine_for(ctx.target, config), ctx.profile.max_examples,
                              ctx.profile.step_count)

    def load(self, spec: str) -> ToyTarget:
        if spec not in ("good", "stale", "dup"):
            raise TargetError(f"unknown toy target {spec!r}: use toy:good, toy:stale or toy:dup")
        return ToyTarget(f"toy:{spec}", spec)

    def replay(self, target_spec: str, case: dict[str, Any]) -> str | None:
        if case.get("concurrency", "off") != "off":
            raise UsageError(f"the toy protocol has no concurrency {case['concurrency']!r}")
        from shmspec.conformance import protocols

        session = ToySession(protocols.load(target_spec), config_from_json(case["config"]))
        calls = case.get("calls") or [{k: s[k] for k in ("process", "action", "args")} for s in case["steps"]]
        try:
            for c in calls:
                session.execute(Call.from_json(c))
        except PropertyViolation as exc:
            return f"{exc.prop}: {exc.message}"
        return None


PROTOCOL = ToyProtocol()
