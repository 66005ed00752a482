"""The lockstep Hypothesis state machine and the campaigns the gate runs.

:func:`machine_for` builds a ``RuleBasedStateMachine`` class bound to one
target and one :class:`Campaign`.  Its rules only *draw* calls (which key,
which payload, which handle, which forgery); :class:`~.session.Session` runs
each call on the model and the target and checks every property after every
step.  Hypothesis shrinks a failing run to the fewest calls.

A campaign enables a group of rules and names the properties it establishes
when it completes without a violation.  Rules a target's profile cannot take
(signatures on a store without them, touch on 0.11) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from .loader import LoadedTarget
from .serde import object_nbytes
from .session import BAD_FIELDS, FORGERIES, Call, Session, SessionConfig

KEYS = ("k0", "k1", "k2", "k3", "k4")
"""A small key pool, so duplicate puts happen."""


@dataclass(frozen=True)
class Campaign:
    """A named group of rules and the properties a clean run establishes."""

    name: str
    rules: frozenset[str]
    checks: frozenset[str]
    needs_signed: bool = False
    needs_touch: bool = False

    def applies_to(self, target: LoadedTarget) -> bool:
        p = target.profile
        return (p.signed or not self.needs_signed) and (p.touch != "none" or not self.needs_touch)


_EVERY_STEP = {"DISJ", "WRAP", "FIFO", "RC", "LEAK", "CONFORMANCE"}
CAMPAIGNS: tuple[Campaign, ...] = (
    Campaign("core", frozenset({"put", "put_oversize", "get_cached", "is_cached", "get_live", "writer_get", "free_unused"}),
             frozenset({"NRR", "DUP", "SIZE", "OOM"} | _EVERY_STEP)),
    Campaign("stale", frozenset({"put", "get_cached", "get_live", "get_stale", "free_unused", "clear"}),
             frozenset({"NRR", "CLR", "OOM"} | _EVERY_STEP)),
    Campaign("adversarial", frozenset({"put", "put_adversarial", "get_live", "get_stale", "free_unused", "clear"}),
             frozenset({"NRR", "CLR"} | _EVERY_STEP)),
    Campaign("auth", frozenset({"put", "get_cached", "get_live", "get_forged", "touch_forged", "free_unused"}),
             frozenset({"AUTH", "NRR"} | _EVERY_STEP), needs_signed=True),
    Campaign("fields", frozenset({"put", "get_live", "get_bad_fields"}), frozenset({"NRR"} | _EVERY_STEP)),
    Campaign("touch", frozenset({"put", "get_cached", "get_live", "touch_writer", "touch_reader", "release_touches", "free_unused"}),
             frozenset({"NRR", "OOM"} | _EVERY_STEP), needs_touch=True),
    Campaign("lock", frozenset({"put", "get_live", "attach_lockless"}), frozenset({"LOCK"} | _EVERY_STEP)),
)


def payloads(min_len: int = 0, max_len: int = 60) -> st.SearchStrategy[bytes]:
    return st.binary(min_size=min_len, max_size=max_len)


def machine_for(target: LoadedTarget, campaign: Campaign, config: SessionConfig) -> type[RuleBasedStateMachine]:
    """A fresh machine class running ``campaign`` against ``target``."""
    enabled = campaign.rules
    signed = target.profile.signed
    protecting = target.profile.touch == "protecting"
    readers = config.readers

    def on(name: str):
        return precondition(lambda self: name in enabled)

    class LockstepMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.session: Session | None = None
            self.puts = 0

        @initialize()
        def open_store(self) -> None:
            self.session = Session(target, config)

        def _tag(self) -> bytes:
            self.puts += 1
            return self.puts.to_bytes(4, "little")

        def _run(self, call: Call) -> None:
            self.session.execute(call)

        @on("put")
        @rule(key=st.sampled_from(KEYS), body=payloads())
        def put(self, key, body):
            self._run(Call("writer", "put", {"key": key, "data": (self._tag() + body).hex()}))

        @on("put_oversize")
        @rule(key=st.sampled_from(KEYS), extra=st.integers(1, 16))
        def put_oversize(self, key, extra):
            tag = self._tag()
            length = config.max_object_size - object_nbytes(b"") + extra
            self._run(Call("writer", "put", {"key": key, "data": (tag + b"\x5a" * (length - 4)).hex()}))

        @on("put_adversarial")
        @precondition(lambda self: self.session is not None and self.session.stale_refs())
        @rule(key=st.sampled_from(KEYS), length=st.integers(24, config.max_object_size - object_nbytes(b"")))
        def put_adversarial(self, key, length):
            data = self.session.adversarial_data(length, self._tag())
            self._run(Call("writer", "put", {"key": key, "data": data.hex()}))

        @on("get_cached")
        @rule(key=st.sampled_from(KEYS))
        def get_cached(self, key):
            if self.session.state.chunk_for_key(key) is not None:
                self._run(Call("writer", "get_cached", {"key": key}))

        @on("is_cached")
        @rule(key=st.sampled_from(KEYS))
        def is_cached(self, key):
            self._run(Call("writer", "is_cached", {"key": key}))

        @on("get_live")
        @precondition(lambda self: self.session is not None and self.session.live_refs())
        @rule(data=st.data(), reader=st.sampled_from(readers))
        def get_live(self, data, reader):
            r = data.draw(st.sampled_from(self.session.live_refs()), label="handle")
            self._run(Call(reader, "get", {"ref": r.ref}))

        @on("writer_get")
        @precondition(lambda self: self.session is not None and self.session.refs)
        @rule(data=st.data())
        def writer_get(self, data):
            r = data.draw(st.sampled_from(self.session.refs), label="handle")
            self._run(Call("writer", "get", {"ref": r.ref}))

        @on("get_stale")
        @precondition(lambda self: self.session is not None and self.session.stale_refs())
        @rule(data=st.data(), reader=st.sampled_from(readers))
        def get_stale(self, data, reader):
            r = data.draw(st.sampled_from(self.session.stale_refs()), label="handle")
            self._run(Call(reader, "get", {"ref": r.ref}))

        @on("get_forged")
        @precondition(lambda self: self.session is not None and self.session.refs)
        @rule(data=st.data(), reader=st.sampled_from(readers), forge=st.sampled_from(FORGERIES))
        def get_forged(self, data, reader, forge):
            r = data.draw(st.sampled_from(self.session.refs), label="handle")
            self._run(Call(reader, "get", {"ref": r.ref, "forge": forge}))

        @on("touch_forged")
        @precondition(lambda self: self.session is not None and self.session.refs and protecting)
        @rule(data=st.data(), reader=st.sampled_from(readers), forge=st.sampled_from(FORGERIES))
        def touch_forged(self, data, reader, forge):
            r = data.draw(st.sampled_from(self.session.refs), label="handle")
            self._run(Call(reader, "touch", {"ref": r.ref, "forge": forge}))

        @on("get_bad_fields")
        @precondition(lambda self: self.session is not None and self.session.refs)
        @rule(data=st.data(), reader=st.sampled_from(readers),
              kind=st.sampled_from(sorted(BAD_FIELDS) if signed else ["negative_address", "huge_address", "id_out_of_range", "negative_id"]))
        def get_bad_fields(self, data, reader, kind):
            r = data.draw(st.sampled_from(self.session.refs), label="handle")
            self._run(Call(reader, "get", {"ref": r.ref, "fields": kind}))

        @on("touch_writer")
        @rule(key=st.sampled_from(KEYS))
        def touch_writer(self, key):
            self._run(Call("writer", "touch", {"key": key}))

        @on("touch_reader")
        @precondition(lambda self: self.session is not None and self.session.refs)
        @rule(data=st.data(), reader=st.sampled_from(readers))
        def touch_reader(self, data, reader):
            r = data.draw(st.sampled_from(self.session.refs), label="handle")
            self._run(Call(reader, "touch", {"ref": r.ref}))

        @on("release_touches")
        @precondition(lambda self: protecting)
        @rule()
        def release_touches(self):
            self._run(Call("writer", "release_touches"))

        @on("clear")
        @rule()
        def clear(self):
            self._run(Call("writer", "clear"))

        @on("free_unused")
        @rule()
        def free_unused(self):
            self._run(Call("writer", "free_unused"))

        @on("attach_lockless")
        @rule()
        def attach_lockless(self):
            n = sum(1 for s in self.session.trace if s.action == "attach_reader")
            self._run(Call(f"x{n}", "attach_reader", {"lock": False}))

        @invariant()
        def session_open(self):
            assert self.session is None or not self.session.closed

        def teardown(self):
            if self.session is not None:
                self.session.close()

    LockstepMachine.__name__ = LockstepMachine.__qualname__ = f"Lockstep_{campaign.name}"
    return LockstepMachine
