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

from ..core import interrupt
from ..targets.loader import LoadedTarget
from ..core.serde import object_nbytes
from .session import BAD_FIELDS, FORGERIES, INTERRUPT_POINTS, Call, Session, SessionConfig

KEYS = tuple(f"k{i}" for i in range(8))
"""A small key pool, so duplicate puts happen (8 keys: enough live objects to fill the ring)."""


@dataclass(frozen=True)
class Campaign:
    """A named group of rules and the properties a clean run establishes."""

    name: str
    rules: frozenset[str]
    checks: frozenset[str]
    needs_signed: bool = False
    needs_touch: bool = False
    mode: str = "lockstep"
    """``lockstep`` (one process, model in lockstep), ``controlled`` or ``free``."""

    def applies_to(self, target: LoadedTarget) -> bool:
        p = target.profile
        return (p.signed or not self.needs_signed) and (p.touch != "none" or not self.needs_touch)


# WRAP is evaluated at every step too, but these random campaigns never reach
# id wraparound (2**31 puts), so none claims it; the gate's boundary campaign
# (gate.BOUNDARY) does, through the warp hook.
_EVERY_STEP = {"DISJ", "FIFO", "RC", "LEAK", "CONFORMANCE"}
CAMPAIGNS: tuple[Campaign, ...] = (
    Campaign("core", frozenset({"put", "consume", "put_oversize", "get_cached", "is_cached", "get_live", "writer_get", "free_unused"}),
             frozenset({"NRR", "DUP", "SIZE", "OOM"} | _EVERY_STEP)),
    Campaign("stale", frozenset({"put", "consume", "clear_then_reread", "get_cached", "get_live", "get_stale", "free_unused", "clear"}),
             frozenset({"NRR", "CLR", "OOM"} | _EVERY_STEP)),
    Campaign("adversarial", frozenset({"put", "consume", "put_adversarial", "forge_and_read", "get_live", "get_stale", "free_unused", "clear"}),
             frozenset({"NRR", "CLR"} | _EVERY_STEP)),
    Campaign("auth", frozenset({"put", "consume", "get_cached", "get_live", "get_forged", "touch_forged", "free_unused"}),
             frozenset({"AUTH", "NRR"} | _EVERY_STEP), needs_signed=True),
    Campaign("fields", frozenset({"put", "get_live", "get_bad_fields"}), frozenset({"NRR"} | _EVERY_STEP)),
    Campaign("touch", frozenset({"put", "consume", "get_cached", "get_live", "touch_writer", "touch_reader", "release_touches", "free_unused",
                                 "drain_then_put", "cache_hit"}),
             frozenset({"NRR", "OOM", "PROM", "PROG"} | _EVERY_STEP), needs_touch=True),
    Campaign("protocol", frozenset({"put", "consume", "reread", "get_cached", "get_live", "get_stale", "free_unused",
                                    "drain_then_put", "drain_deviating"}),
             frozenset({"PROM", "PROG", "NRR", "OOM"} | _EVERY_STEP)),
    Campaign("lock", frozenset({"put", "get_live", "attach_lockless"}), frozenset({"LOCK"} | _EVERY_STEP)),
    Campaign("exc", frozenset({"put", "consume", "get_cached", "get_live", "free_unused", "clear", "put_failing",
                               "interrupted"}), frozenset({"EXC"} | _EVERY_STEP)),
)


def payloads(max_len: int) -> st.SearchStrategy[bytes]:
    """Payload bodies whose length is drawn uniformly up to ``max_len`` bytes
    (plain ``st.binary`` favours short values, and short values never fill the ring)."""
    return st.integers(0, max_len).flatmap(lambda n: st.binary(min_size=n, max_size=n))


def _has(attr: str):
    """Precondition: the session has some handles of this kind."""
    return lambda self: self.session is not None and bool(getattr(self.session, attr)())


class _Base(RuleBasedStateMachine):
    """Shared set-up, teardown and helpers; rules are attached per campaign."""

    target: LoadedTarget
    config: SessionConfig

    def __init__(self) -> None:
        super().__init__()
        self.session: Session | None = None
        self.puts = 0

    @initialize()
    def open_store(self) -> None:
        self.session = Session(self.target, self.config)

    def _tag(self) -> bytes:
        """A unique 4-byte prefix per put, so equal payloads never hide a recycled read."""
        self.puts += 1
        return self.puts.to_bytes(4, "little")

    def _run(self, call: Call) -> None:
        interrupt.check()  # a swallowed SIGTERM stops the run here (conformance/core/interrupt.py)
        self.session.execute(call)

    def _draw_ref(self, data, refs):
        return data.draw(st.sampled_from(refs), label="handle")

    @invariant()
    def session_open(self) -> None:
        assert self.session is None or not self.session.closed

    def teardown(self) -> None:
        if self.session is not None:
            self.session.close()

    # -- rule bodies (decorated per campaign by machine_for) -----------------
    def put(self, key, body):
        self._run(Call("writer", "put", {"key": key, "data": (self._tag() + body).hex()}))

    def put_oversize(self, key, extra):
        length = self.config.max_object_size - object_nbytes(b"") + extra
        self._run(Call("writer", "put", {"key": key, "data": (self._tag() + b"\x5a" * (length - 4)).hex()}))

    def put_adversarial(self, key, data):
        max_data = self.config.max_object_size - object_nbytes(b"")
        lengths = self.session.adversarial_lengths(range(24, max_data + 1)) or [max_data]
        length = data.draw(st.sampled_from(lengths), label="length")
        payload, _ = self.session.adversarial_data(length, self._tag())
        self._run(Call("writer", "put", {"key": key, "data": payload.hex()}))

    def forge_and_read(self, key, data, reader):
        """The attack in one rule: an adversarial put, then a reader presents one
        of the stale handles whose fake chunk it carries (NRR, CLR)."""
        max_data = self.config.max_object_size - object_nbytes(b"")
        lengths = self.session.adversarial_lengths(range(24, max_data + 1))
        if not lengths:
            return
        length = data.draw(st.sampled_from(lengths), label="length")
        payload, placed = self.session.adversarial_data(length, self._tag())
        self._run(Call("writer", "put", {"key": key, "data": payload.hex()}))
        if placed:
            self._run(Call(reader, "get", {"ref": data.draw(st.sampled_from(placed), label="handle")}))

    def consume(self, data):
        """Every reader reads one live handle once (the read-once protocol), so
        its chunk becomes reclaimable and puts exercise FIFO reclaim."""
        r = self._draw_ref(data, self.session.live_refs())
        for reader in self.config.readers:
            self._run(Call(reader, "get", {"ref": r.ref}))

    def clear_then_reread(self, key, body, data, reader):
        """CLR in one rule: clear(), a put that may reuse the first slot, then a
        reader presents a handle issued before the clear."""
        self._run(Call("writer", "clear"))
        self._run(Call("writer", "put", {"key": key, "data": (self._tag() + body).hex()}))
        cleared = [r for r in self.session.refs if r.epoch < self.session.epoch]
        if cleared:
            r = self._draw_ref(data, cleared)
            self._run(Call(reader, "get", {"ref": r.ref}))

    def get_cached(self, key):
        if self.session.state.chunk_for_key(key) is not None:
            self._run(Call("writer", "get_cached", {"key": key}))

    def is_cached(self, key):
        self._run(Call("writer", "is_cached", {"key": key}))

    def get_live(self, data, reader):
        r = self._draw_ref(data, self.session.live_refs())
        self._run(Call(reader, "get", {"ref": r.ref}))

    def writer_get(self, data):
        r = self._draw_ref(data, self.session.refs)
        self._run(Call("writer", "get", {"ref": r.ref}))

    def get_stale(self, data, reader):
        r = self._draw_ref(data, self.session.stale_refs())
        self._run(Call(reader, "get", {"ref": r.ref}))

    def get_forged(self, data, reader, forge):
        r = self._draw_ref(data, self.session.refs)
        self._run(Call(reader, "get", {"ref": r.ref, "forge": forge}))

    def touch_forged(self, data, reader, forge):
        r = self._draw_ref(data, self.session.refs)
        self._run(Call(reader, "touch", {"ref": r.ref, "forge": forge}))

    def get_bad_fields(self, data, reader, kind):
        r = self._draw_ref(data, self.session.refs)
        self._run(Call(reader, "get", {"ref": r.ref, "fields": kind}))

    def touch_writer(self, key):
        self._run(Call("writer", "touch", {"key": key}))

    def touch_reader(self, data, reader):
        r = self._draw_ref(data, self.session.refs)
        self._run(Call(reader, "touch", {"ref": r.ref}))

    def cache_hit(self, data):
        """vLLM's receiver protocol for a cache hit, as one rule: the writer
        touches a cached key, then each reader gets the handle and touches
        it after its own get, the readers' steps interleaved as drawn (one
        reader's touch may come before another's first get)."""
        r = self._draw_ref(data, self.session.live_refs())
        self._run(Call("writer", "touch", {"key": r.key}))
        pending = {reader: ["get", "touch"] for reader in self.config.readers}
        while pending:
            reader = data.draw(st.sampled_from(sorted(pending)), label="reader")
            self._run(Call(reader, pending[reader].pop(0), {"ref": r.ref}))
            if not pending[reader]:
                del pending[reader]

    def release_touches(self):
        self._run(Call("writer", "release_touches"))

    def clear(self):
        self._run(Call("writer", "clear"))

    def free_unused(self):
        self._run(Call("writer", "free_unused"))

    def put_failing(self, key, body):
        """A put whose serialized object the store cannot copy (EXC)."""
        self._run(Call("writer", "put_failing", {"key": key, "data": (self._tag() + body).hex()}))

    def interrupted(self, data, op, key, body):
        """A writer operation with an asynchronous exception at one of its
        yield points (EXC; targets that run impl's yield points)."""
        at = data.draw(st.sampled_from(INTERRUPT_POINTS[op]), label="at")
        args = {"op": op, "at": at}
        if op == "put":
            args.update(key=key, data=(self._tag() + body).hex())
        self._run(Call("writer", "interrupt", args))

    def reread(self, data, reader):
        """A client deviation: one reader reads a handle twice in a row (an
        n>1 fan-out), beyond what it was promised (PROM: the other readers'
        promised reads must still succeed)."""
        r = self._draw_ref(data, self.session.live_refs())
        self._run(Call(reader, "get", {"ref": r.ref}))
        self._run(Call(reader, "get", {"ref": r.ref}))

    def drain_then_put(self):
        """PROM and PROG in one rule: every reader makes every read it still
        owes (by the client's account), touches are released, ``free_unused``
        runs, then a put of ``max_object_size`` bytes must succeed.  Each is a
        step of its own in the trace."""
        self._drain("none")

    def drain_deviating(self, deviation):
        """:meth:`drain_then_put` by a client that breaks PROG's rule on the
        way (drawn as data): ``unread:<reader>`` (that reader never makes its
        owed reads: a reference never read), ``touch_kept`` (the touches are
        not released: a touch without a later ``get_cached``).  A chunk that
        stays live only because of it is the client's fault: reported by the
        session (``Session.deviations``), not failed."""
        self._drain(deviation)

    def _drain(self, deviation):
        s = self.session
        skip = deviation.split(":", 1)[1] if deviation.startswith("unread:") else None
        for r, reader in s.owed_reads():
            if reader != skip:
                self._run(Call(reader, "get", {"ref": r.ref}))
        if s.profile.touch == "protecting" and deviation != "touch_kept":
            self._run(Call("writer", "release_touches"))
        # free_unused frees up to 2 * max_object_size bytes a call: enough calls
        # to empty the ring, were every chunk reclaimable
        for _ in range(-(-self.config.data_buffer_size // (2 * self.config.max_object_size)) + 1):
            self._run(Call("writer", "free_unused"))
        length = self.config.max_object_size - object_nbytes(b"")
        n = sum(1 for st_ in s.trace if st_.args.get("progress"))
        args = {"key": f"p{n}", "data": (self._tag() + b"\x3c" * (length - 4)).hex(), "progress": True}
        if deviation != "none":
            args["deviation"] = deviation
        self._run(Call("writer", "put", args))

    def attach_lockless(self):
        n = sum(1 for s in self.session.trace if s.action == "attach_reader")
        self._run(Call(f"x{n}", "attach_reader", {"lock": False}))


def _rule_specs(target: LoadedTarget, config: SessionConfig) -> dict[str, tuple[dict, object]]:
    """rule name -> (strategies of its arguments, precondition or None)."""
    readers = st.sampled_from(config.readers)
    keys = st.sampled_from(KEYS)
    field_kinds = sorted(BAD_FIELDS) if target.profile.signed else [
        "negative_address", "huge_address", "id_out_of_range", "negative_id"]
    return {
        "put": (dict(key=keys, body=payloads(config.max_object_size - object_nbytes(b"") - 4)), None),
        "consume": (dict(data=st.data()), _has("live_refs")),
        "clear_then_reread": (dict(key=keys, body=payloads(16), data=st.data(), reader=readers), _has("all_refs")),
        "put_oversize": (dict(key=keys, extra=st.integers(1, 16)), None),
        "put_adversarial": (dict(key=keys, data=st.data()), _has("stale_refs")),
        "forge_and_read": (dict(key=keys, data=st.data(), reader=readers), _has("stale_refs")),
        "get_cached": (dict(key=keys), None),
        "is_cached": (dict(key=keys), None),
        "get_live": (dict(data=st.data(), reader=readers), _has("live_refs")),
        "writer_get": (dict(data=st.data()), _has("all_refs")),
        "get_stale": (dict(data=st.data(), reader=readers), _has("stale_refs")),
        "get_forged": (dict(data=st.data(), reader=readers, forge=st.sampled_from(FORGERIES)), _has("all_refs")),
        "touch_forged": (dict(data=st.data(), reader=readers, forge=st.sampled_from(FORGERIES)), _has("all_refs")),
        "get_bad_fields": (dict(data=st.data(), reader=readers, kind=st.sampled_from(field_kinds)), _has("all_refs")),
        "touch_writer": (dict(key=keys), None),
        "touch_reader": (dict(data=st.data(), reader=readers), _has("all_refs")),
        "release_touches": ({}, None),
        "cache_hit": (dict(data=st.data()), _has("live_refs")),
        "clear": ({}, None),
        "free_unused": ({}, None),
        "attach_lockless": ({}, None),
        "drain_then_put": ({}, None),
        "drain_deviating": (dict(deviation=st.sampled_from([f"unread:{r}" for r in config.readers])), None),
        "reread": (dict(data=st.data(), reader=readers), _has("live_refs")),
        "put_failing": (dict(key=keys, body=payloads(config.max_object_size - object_nbytes(b"") - 12)), None),
        "interrupted": (dict(data=st.data(), op=st.sampled_from(sorted(INTERRUPT_POINTS)), key=keys,
                             body=payloads(config.max_object_size - object_nbytes(b"") - 4)), None),
    }


def _runs_impl_yield_points(target: LoadedTarget) -> bool:
    """impl and stores derived from its classes call impl's yield points (the
    ``interrupted`` rule raises there); other targets have none."""
    from shmspec import impl

    return issubclass(target.storage_cls, impl.SingleWriterShmObjectStorage)


def machine_for(target: LoadedTarget, campaign: Campaign, config: SessionConfig) -> type[RuleBasedStateMachine]:
    """A fresh machine class running ``campaign`` against ``target``: only the
    campaign's rules exist on it (disabled rules would cost Hypothesis filtered
    draws on every step)."""
    specs = _rule_specs(target, config)
    ns: dict[str, object] = {"target": target, "config": config}
    for name in sorted(campaign.rules):
        if name in ("touch_forged", "release_touches") and target.profile.touch != "protecting":
            continue
        if name == "interrupted" and not _runs_impl_yield_points(target):
            continue
        strategies, pre = specs[name]
        body = getattr(_Base, name)

        def bound(self, _body=body, **kw):
            return _body(self, **kw)

        bound.__name__ = bound.__qualname__ = name
        fn = rule(**strategies)(bound)
        if pre is not None:
            fn = precondition(pre)(fn)
        ns[name] = fn
    return type(f"Lockstep_{campaign.name}", (_Base,), ns)
