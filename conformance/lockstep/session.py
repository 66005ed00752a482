"""Lockstep execution of calls on the model and one target, with every check.

A :class:`Session` owns one target (through :class:`~.adapter.StoreAdapter`)
and the model state.  :meth:`Session.execute` takes one :class:`Call` (plain,
JSON-able data), performs it on both, compares the outcomes through one
observation function, checks every property, and appends a :class:`Step` to
the trace.  The Hypothesis machine (``machine.py``) only *generates* calls;
replay (``repro_test.py``) feeds the recorded calls to a fresh session, so a
report's steps are exactly what ran.

Handle arguments are symbolic: ``{"ref": "h3"}`` names the third handle the
writer issued in this session (its address, id, key and signature), and
``forge`` names an alteration.  That keeps traces replayable even though real
signatures depend on the segment's random secret.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Any

from shmspec.model import ring as model_ring
from shmspec.model import store as M
from shmspec.model.properties import SEVERITY as _SEVERITY
from shmspec.model.properties import by_severity, check_state, check_transition, nrr_message
from shmspec.model.errors import OutOfSpace
from shmspec.model.ring import ID_MAX

from ..core import serde
from ..targets.adapter import Observation, Snapshot, StoreAdapter, observe, target_state_checks, warp, warp_counts
from ..targets.loader import LoadedTarget
from ..core.config import SessionConfig
from ..core.serde import Blob, object_nbytes

FORGERIES = ("sig_flip", "wrong_key", "address_plus_B", "id_next", "no_sig")
"""Alterations of an issued handle (AUTH for signed stores; stale/invalid otherwise)."""

BAD_FIELDS = {
    "negative_address": dict(address=-1),
    "huge_address": dict(address=2**64),
    "id_out_of_range": dict(id=ID_MAX),
    "negative_id": dict(id=-1),
    "short_signature": dict(signature=[1, 2, 3]),
    "non_str_key": dict(key=7),
}
"""Malformed handle fields a reader may be handed (each must give ValueError)."""


SEVERITY = _SEVERITY
"""Property ids, most severe first (``shmspec.model.properties.SEVERITY``):
when one step breaks several properties, the most severe is raised first."""

INTERRUPT_POINTS: dict[str, tuple[str, ...]] = {
    "put": ("free_step", "retire", "pin_scan", "header_write", "payload_write", "publish"),
    "free_unused": ("free_step", "retire"),
    "clear": ("clear",),
}
"""The write yield points (model/steps.py) at which the exception campaign
raises an asynchronous exception, per writer operation (EXC)."""


class InjectedInterrupt(BaseException):
    """Raised by the harness from a target's yield point (property EXC): a
    ``BaseException``, like ``KeyboardInterrupt``, so a store's ``except
    Exception`` does not swallow it."""


class PropertyViolation(AssertionError):
    """A property of SEMANTICS.md (or CONFORMANCE) failed at one step."""

    def __init__(self, prop: str, message: str, steps: list["Step"] | None = None, action: str = "",
                 cause: str = ""):
        super().__init__(f"{prop}: {message}")
        self.prop = prop
        self.message = message
        self.steps = list(steps or [])
        self.action = action
        self.cause = cause or action
        """The failing step's kind, finer than ``action`` for handle-taking
        calls: ``get/live``, ``get/stale``, ``get/cleared``, ``get/<forgery>``
        (distinct findings are told apart by it)."""


@dataclass
class Call:
    """One operation to perform: ``process`` (``writer``/``r1``...), ``action``
    (a model action name) and JSON-able ``args``."""

    process: str
    action: str
    args: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"process": self.process, "action": self.action, "args": self.args}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Call":
        return cls(d["process"], d["action"], dict(d.get("args", {})))


@dataclass
class Step:
    """One executed call, as traces and reports show it."""

    index: int
    process: str
    action: str
    args: dict[str, Any]
    expected: str
    observed: str
    changed: dict[str, Any]
    violations: list[tuple[str, str]] = field(default_factory=list)
    cause: str = ""
    """The step's kind for telling findings apart (:attr:`PropertyViolation.cause`)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "process": self.process,
            "action": self.action,
            "args": self.args,
            "expected": self.expected,
            "observed": self.observed,
            "changed": self.changed,
            "violations": [{"property": p, "message": m} for p, m in self.violations],
        }


@dataclass
class HandleRef:
    """A handle the writer issued: what was put under it and how to present it."""

    ref: str
    key: str
    address: int
    id: int
    abs_id: int
    data: bytes
    epoch: int
    model_sig: M.Sig | None = None
    real_sig: list[int] | None = None


def render(x: Any) -> str:
    if isinstance(x, Observation):
        return render(x.value) if x.ok else x.error
    if isinstance(x, M.Outcome):
        if x.ok:
            return render(x.value)
        alts = sorted(x.also) + (["<original object>"] if x.stale_may_return else [])
        return x.error + (f" (or {' / '.join(alts)})" if alts else "")
    if isinstance(x, bytes):
        return Blob(x).__repr__()
    if isinstance(x, M.Sig):
        return "<signature>"
    if isinstance(x, list) and len(x) == 32:
        return "<signature>"
    return repr(x)


class Session:
    """Model + target in lockstep.  Raises :class:`PropertyViolation` from
    :meth:`execute` on the first violation of a property not in
    ``config.excused`` (excused ones are recorded in ``self.excused_hits``)."""

    def __init__(self, target: LoadedTarget, config: SessionConfig | None = None):
        self.target = target
        self.config = config or SessionConfig()
        c = self.config
        self.profile = target.profile
        self.state = M.initial(self.profile, c.data_buffer_size, c.max_object_size, c.n_readers,
                               writer_lock=c.writer_lock)
        self.adapter = StoreAdapter(target, c.data_buffer_size, c.max_object_size, c.n_readers,
                                    writer_lock=c.writer_lock)
        self.refs: list[HandleRef] = []
        self.epoch = 0
        self.trace: list[Step] = []
        self.excused_hits: list[tuple[str, str]] = []
        self.deviations: list[dict[str, Any]] = []
        """Client deviations that left the store's contract unbroken, as data:
        ``rule`` (the client rule broken), ``property`` (the one it would
        otherwise fail), ``step``, ``message``.  Reported, never failed."""
        self.put_data: dict[str, bytes] = {}
        self._before: Snapshot | None = None
        self.closed = False
        # The client's account of the read-once protocol (PROM, PROG): per
        # handle ``(epoch, address, id)`` and reader, the reads it was promised
        # (a put, each get_cached, a counting touch by the writer) and the
        # reads it made (a get that returned the object; in counting-touch
        # stores, a reader's touch of a handle it has read before).
        self.promised: dict[tuple[int, int, int], dict[str, int]] = {}
        self.made: dict[tuple[int, int, int], dict[str, int]] = {}
        self.accounting = True
        """False once a boundary program set counts by hand (``warp_counts``)."""
        self.adapter.open()
        for name in c.readers:
            self.execute(Call(name, "attach_reader", {"lock": True}))

    # -- queries used by the generator -----------------------------------------
    def ref(self, name: str) -> HandleRef:
        for r in self.refs:
            if r.ref == name:
                return r
        raise KeyError(f"unknown handle ref {name!r}")

    def is_live(self, r: HandleRef) -> bool:
        return any(c.abs_id == r.abs_id for c in self.state.ring.chunks)

    def all_refs(self) -> list[HandleRef]:
        return list(self.refs)

    def live_refs(self) -> list[HandleRef]:
        return [r for r in self.refs if self.is_live(r)]

    def stale_refs(self) -> list[HandleRef]:
        return [r for r in self.refs if not self.is_live(r)]

    @staticmethod
    def ident(r: HandleRef) -> tuple[int, int, int]:
        """The handle's identity for the client's account: ``(epoch, address, id)``."""
        return (r.epoch, r.address, r.id)

    def _promise(self, ident: tuple[int, int, int]) -> None:
        d = self.promised.setdefault(ident, {})
        for name in self.config.readers:
            d[name] = d.get(name, 0) + 1

    def _made(self, ident: tuple[int, int, int], reader: str) -> None:
        d = self.made.setdefault(ident, {})
        d[reader] = d.get(reader, 0) + 1

    def owed(self, r: HandleRef, reader: str) -> int:
        """Reads ``reader`` was promised of ``r``'s handle and has not made
        (0 for a handle issued before the latest ``clear()``)."""
        if r.epoch != self.epoch:
            return 0
        ident = self.ident(r)
        return self.promised.get(ident, {}).get(reader, 0) - self.made.get(ident, {}).get(reader, 0)

    def owed_reads(self) -> list[tuple[HandleRef, str]]:
        """Every read the client still owes, one entry per read: ``(ref,
        reader)``, handles oldest first (the latest ref of each handle)."""
        latest: dict[tuple[int, int, int], HandleRef] = {}
        for r in self.refs:
            if r.epoch == self.epoch:
                latest[self.ident(r)] = r
        out = []
        for ident, r in latest.items():
            for reader in self.config.readers:
                out += [(r, reader)] * max(0, self.owed(r, reader))
        return out

    def account_text(self, ident: tuple[int, int, int]) -> str:
        """``r1 made 2 of 2 promised reads, r2 1 of 2`` for messages."""
        p, m = self.promised.get(ident, {}), self.made.get(ident, {})
        parts = [f"{name} {m.get(name, 0)} of {p.get(name, 0)}" for name in self.config.readers]
        return "reads made of those promised: " + ", ".join(parts)

    def next_address(self, nbytes: int) -> int | None:
        """Where the model says a put of ``nbytes`` would land (None: it would not)."""
        probe = M.Action.of("put", key="\0probe", value=b"", nbytes=nbytes)
        _, out = M.step(self.state, probe)
        return out.value[0] if out.ok else None

    def adversarial_data(self, length: int, tag: bytes) -> tuple[bytes, list[str]]:
        """``length`` payload bytes that mimic the store's framing: wherever a
        stale handle's header offset falls inside the next chunk's data, place a
        complete fake chunk ``[stale id][size][count 0][MAGIC][n][b'FORGED...']``.
        Returns the bytes and the refs of the stale handles they carry a fake chunk for."""
        data = bytearray(tag + b"\xa5" * max(0, length - len(tag)))
        address = self.next_address(object_nbytes(bytes(data)))
        if address is None:
            return bytes(data), []
        B = self.state.ring.size
        data_phys = address % B + model_ring.HEADER_BYTES + serde.COUNT_BYTES + serde.MD_BYTES
        placed: list[str] = []
        for r in self.stale_refs():
            off = r.address % B - data_phys
            if off < len(tag):
                continue
            forged = b"FORGED" + r.ref.encode()
            frame = struct.pack("<ii", r.id, 20 + len(forged)) + struct.pack("<i", 0)
            frame += serde.metadata_for(forged) + forged
            if off + len(frame) <= len(data):
                data[off : off + len(frame)] = frame
                placed.append(r.ref)
        return bytes(data), placed

    def adversarial_lengths(self, lengths: range) -> list[int]:
        """The payload lengths for which the next put would carry at least one fake chunk."""
        tag = b"\0" * 4
        return [n for n in lengths if self.adversarial_data(n, tag)[1]]

    # -- execution ----------------------------------------------------------
    def execute(self, call: Call) -> Step:
        before_model = self.state
        before_snap = self._before = self.adapter.snapshot()
        calls_before = serde.DESERIALIZE_CALLS[0]
        handler = getattr(self, f"_do_{call.action}", None)
        if handler is None:
            raise ValueError(f"unknown action {call.action!r}")
        cause = self._cause_of(call)
        model_action, expected, observed, violations = handler(call)
        after_snap = self.adapter.snapshot()
        deserialized = serde.DESERIALIZE_CALLS[0] - calls_before
        violations += self._observation_checks(call, expected, observed, before_snap, after_snap, deserialized,
                                               attributed=bool(violations))
        violations += self._state_checks(call, before_model, model_action, expected, before_snap, after_snap)
        violations = by_severity(violations)
        step = Step(
            index=len(self.trace),
            process=call.process,
            action=call.action,
            args=dict(call.args),
            expected=render(expected),
            observed=render(observed) + (f"  [{observed.detail}]" if observed.error and observed.error.startswith("Crash") else ""),
            changed=_changed(before_model, self.state),
            violations=violations,
            cause=cause,
        )
        self.trace.append(step)
        self._raise_first(step)
        return step

    def _cause_of(self, call: Call) -> str:
        """``action``, and for a handle-taking call what the handle was before
        it: ``live``, ``stale`` (its chunk reclaimed), ``cleared`` (issued
        before a clear), or the forgery or bad-field kind presented."""
        ref = call.args.get("ref")
        if ref is None:
            return call.action
        altered = call.args.get("forge") or call.args.get("fields")
        if altered:
            return f"{call.action}/{altered}"
        r = self.ref(ref)
        return f"{call.action}/{'cleared' if r.epoch < self.epoch else 'live' if self.is_live(r) else 'stale'}"

    def _raise_first(self, step: Step) -> None:
        for prop, msg in step.violations:
            if self.config.excuses(prop, step.action, step.cause):
                self.excused_hits.append((prop, msg))
                continue
            raise PropertyViolation(prop, f"step {step.index} ({step.process} {step.action}): {msg}", self.trace,
                                    step.action, step.cause)

    def _model(self, action: M.Action) -> M.Outcome:
        self.state, out = M.step(self.state, action)
        return out

    # -- handlers: each returns (model action, expected, observed, violations) ----
    def _do_attach_reader(self, call: Call):
        lock = bool(call.args.get("lock", True))
        a = M.Action.of("attach_reader", call.process, lock=lock)
        exp = self._model(a)
        obs = self.adapter.attach_reader(call.process, with_lock=lock)
        v = []
        if not lock and obs.error != "MissingReaderLock":
            v.append(("LOCK", f"a reader built without a lock was {'accepted' if obs.ok else 'rejected with ' + obs.error}"))
        return a, exp, obs, v

    def _do_put(self, call: Call):
        key, data = call.args["key"], bytes.fromhex(call.args["data"])
        nbytes = object_nbytes(data)
        a = M.Action.of("put", key=key, value=data, nbytes=nbytes)
        exp = self._model(a)
        obs = self.adapter.put(key, Blob(data))
        before = self._before
        v = []
        crashed = (obs.error or "").startswith("Crash")
        if key in before.key_index:
            if obs.error != "DuplicateKey":
                v.append(("DUP", f"put of key {key!r}, cached by the target, gave {render(obs)}, not DuplicateKey"))
        elif nbytes > self.config.max_object_size:
            if obs.error != "ObjectTooLarge":
                v.append(("SIZE", f"put of {nbytes} bytes (max {self.config.max_object_size}) gave {render(obs)}"))
        elif not crashed:
            room = self._room_after_reclaim(before, nbytes)
            if room == (obs.error == "OutOfSpace"):
                v.append(("OOM", f"on the target's own state (start {before.start}, end {before.end}, live ids "
                                  f"{[c.id for c in before.chunks]}) FIFO reclaim leaves "
                                  f"{'room' if room else 'no room'} for {nbytes} bytes, but put gave {render(obs)}"))
        if call.args.get("progress") and not crashed:
            v += self._progress_check(nbytes, obs)
        if obs.ok:
            self.put_data[key] = data
            self._issue(key, tuple(obs.value), data)
        return a, exp, obs, v

    def _progress_check(self, nbytes: int, obs: Observation) -> list[tuple[str, str]]:
        """PROG after a drain (every promised read made, touches released,
        ``free_unused`` until the ring could be empty): the put of ``nbytes``
        must succeed and leave no other chunk live.  A violation names the
        oldest chunk still live when the client owes it no read and no touch
        holds it: a count that never reaches its threshold pins it for ever."""
        after = self.adapter.snapshot()
        new = tuple(obs.value) if obs.ok else None
        left = [c for c in after.chunks if (c.address, c.id) != new]
        if not left or not self.accounting:
            return []
        head = left[0]
        ident = (self.epoch, head.address, head.id)
        refs = [r for r in self.refs if self.ident(r) == ident]
        owed = [reader for reader in self.config.readers if refs and self.owed(refs[-1], reader) > 0]
        protected = any(c.protected for c in self.state.ring.chunks if c.id == head.id)
        name = f"{refs[-1].ref} (key {refs[-1].key!r})" if refs else "a chunk no handle was issued for"
        rule = ("a reference never read" if owed else "a touch without a later get_cached or release_touches")
        relied = self.config.relies_on is None or rule in self.config.relies_on
        if (owed or protected) and relied:  # the client still owes a read (or a touch holds it): not the store's fault
            self.deviations.append({
                "rule": rule, "property": "PROG", "step": len(self.trace),
                "message": f"chunk id {head.id} at {head.address}, {name}, stays live after the drain: "
                           + (f"{', '.join(owed)} never made the read(s) promised of it"
                              if owed else "a touch still protects it")
                           + f"; the put of {nbytes} bytes gave {render(obs)}. PROG does not hold the store to "
                             f"this: the client broke its rule ({rule})"})
            return []
        released = " and every touch released" if self.profile.touch == "protecting" else ""
        return [("PROG", f"every promised read made{released} and free_unused run until the ring could be "
                         f"empty, the put of {nbytes} bytes gave {render(obs)} and chunk id {head.id} at "
                         f"{head.address}, {name}, is still live: the store counts "
                         f"{head.counts_text(self.config.n_readers)}"
                         + (f"; {self.account_text(ident)}" if refs else ""))]

    def _room_after_reclaim(self, snap: Snapshot, nbytes: int) -> bool:
        """SEMANTICS.md's put step 3 applied to a target's own state: is there
        contiguous room for ``nbytes``, at once or after FIFO reclaim of up to
        ``2 * max_object_size`` bytes?"""
        protected = {c.id for c in self.state.ring.chunks if c.protected}
        slots = M.reader_slots(self.state)
        chunks = tuple(
            model_ring.Chunk(id=c.id, abs_id=i, address=c.address, size=c.size,
                             writer_count=c.writer_count, reader_count=c.reader_count, protected=c.id in protected,
                             reads=(tuple(zip(slots, c.reads)) + (((M.WRITER, c.stand_in),) if c.stand_in else ())
                                    if c.reads is not None else ()))
            for i, c in enumerate(snap.chunks)
        )
        ring = model_ring.Ring(snap.ring_size, snap.start, snap.end, snap.id_start, snap.id_end, chunks)
        try:
            model_ring.plan_allocation(ring, nbytes)
            return True
        except OutOfSpace:
            pass
        ring, _ = model_ring.free(ring, lambda c: M.is_free(self.state, c), 2 * self.config.max_object_size)
        try:
            model_ring.plan_allocation(ring, nbytes)
            return True
        except OutOfSpace:
            return False

    def _do_get_cached(self, call: Call):
        key = call.args["key"]
        a = M.Action.of("get_cached", key=key)
        exp = self._model(a)
        obs = self.adapter.get_cached(key)
        if obs.ok:
            self._issue(key, tuple(obs.value), self.put_data.get(key, b""))
        return a, exp, obs, []

    def _issue(self, key: str, handle: tuple[int, int], data: bytes) -> None:
        """Record a handle the target issued, with the bytes the target was given
        under that key (not the model's idea of them: NRR is about the target)."""
        chunk = self.state.chunk_for_key(key)
        model_sig = real_sig = None
        if self.profile.signed:
            sig_obs = self.adapter.get_signature(key)
            real_sig = list(sig_obs.value) if sig_obs.ok else None
            model_sig = self.state.signature_for(chunk) if chunk is not None else None
        self._promise((self.epoch, handle[0], handle[1]))
        self.refs.append(
            HandleRef(
                ref=f"h{len(self.refs) + 1}",
                key=key,
                address=handle[0],
                id=handle[1],
                abs_id=chunk.abs_id if chunk is not None and chunk.handle == handle else -1,
                data=data,
                epoch=self.epoch,
                model_sig=model_sig,
                real_sig=real_sig,
            )
        )

    def _do_is_cached(self, call: Call):
        a = M.Action.of("is_cached", key=call.args["key"])
        return a, self._model(a), self.adapter.is_cached(call.args["key"]), []

    def _handle_args(self, call: Call) -> tuple[HandleRef, dict[str, Any], dict[str, Any]]:
        """(ref, model args, target args) for a handle-taking call."""
        r = self.ref(call.args["ref"])
        m = dict(address=r.address, id=r.id, signature=r.model_sig, key=r.key)
        t = dict(address=r.address, id=r.id, signature=r.real_sig, key=r.key)
        forge = call.args.get("forge")
        B = self.state.ring.size
        if forge == "sig_flip":
            m["signature"] = M.FORGED
            t["signature"] = [(t["signature"][0] ^ 1)] + t["signature"][1:] if t["signature"] else [0] * 32
        elif forge == "wrong_key":
            m["key"] = t["key"] = r.key + "~"
        elif forge == "address_plus_B":
            m["address"] = t["address"] = r.address + B
        elif forge == "id_next":
            m["id"] = t["id"] = (r.id + 1) % ID_MAX
        elif forge == "no_sig":
            m["signature"] = t["signature"] = None
        elif forge is not None:
            raise ValueError(f"unknown forgery {forge!r}")
        for k, val in BAD_FIELDS.get(call.args.get("fields", ""), {}).items():
            m[k] = t[k] = val
        if "fields" in call.args and call.args["fields"] not in BAD_FIELDS:
            raise ValueError(f"unknown bad-field kind {call.args['fields']!r}")
        return r, m, t

    def _do_get(self, call: Call):
        r, m, t = self._handle_args(call)
        if call.process == M.WRITER:
            a = M.Action.of("get", M.WRITER, address=m["address"], id=m["id"])
            exp = self._model(a)
            obs = self.adapter.writer_get(t["address"], t["id"])
        else:
            margs = m if self.profile.signed else dict(address=m["address"], id=m["id"])
            a = M.Action.of("get", call.process, **margs)
            exp = self._model(a)
            obs = self.adapter.reader_get(call.process, t["address"], t["id"], t["signature"], t["key"])
        return a, exp, obs, self._read_checks(call, r, exp, obs) + self._account_read(call, r, obs)

    def _account_read(self, call: Call, r: HandleRef, obs: Observation) -> list[tuple[str, str]]:
        """Count a reader's read for the client's account; PROM when a read the
        reader was promised, and has not made, fails."""
        if call.args.get("forge") or call.args.get("fields") or r.epoch != self.epoch:
            return []
        ident = self.ident(r)
        if call.process == M.WRITER:  # counted only with the readers' lock (vLLM 0.33.0): it stands in for a reader
            if obs.ok and obs.value == Blob(r.data) and self.config.writer_lock:
                self._made(ident, M.WRITER)
            return []
        if obs.ok:
            if obs.value == Blob(r.data):
                self._made(ident, call.process)
            return []
        if self.owed(r, call.process) > 0 and self.accounting and not (obs.error or "").startswith("Crash"):
            promised = self.promised[ident]
            made = self.made.get(ident, {})
            stand_in = made.get(M.WRITER, 0)
            if stand_in and stand_in + sum(min(made.get(n, 0), p) for n, p in promised.items()) \
                    >= sum(promised.values()):
                self.deviations.append({
                    "rule": "the writer's gets stand in for readers' reads", "property": "PROM",
                    "step": len(self.trace) + 1,
                    "message": f"{call.process}'s promised read of {r.ref} {(r.address, r.id)} failed with "
                               f"{render(obs)} after the writer, built with the readers' lock, read it "
                               f"{stand_in} time(s) ({self.account_text(ident)}): with the writer's gets every "
                               "promised read was made, so the store may reclaim the chunk (vLLM 0.33.0's "
                               "construction). PROM does not hold the store to this"})
                return []
            over = [f"{name} read it {n - promised.get(name, 0)} more time(s) than promised"
                    for name, n in self.made.get(ident, {}).items() if n > promised.get(name, 0)]
            return [("PROM", f"{call.process}'s promised read of {r.ref} {(r.address, r.id)} failed with "
                             f"{render(obs)} ({self.account_text(ident)}"
                             + (f"; {', '.join(over)}" if over else "") + ")"
                             + (". The client broke the read-once rule (a handle read twice); PROM still "
                                "holds the store to the other readers' promised reads" if over else ""))]
        return []

    def _read_checks(self, call: Call, r: HandleRef, exp: M.Outcome, obs: Observation) -> list[tuple[str, str]]:
        """NRR / CLR / AUTH on what a get returned, judged against what was put
        under the handle (not against the model, which may predict a violation
        for an older profile)."""
        if not obs.ok:
            return []
        got = render(obs.value)
        original = Blob(r.data)
        altered = call.args.get("forge") or call.args.get("fields")
        if altered:
            if self.profile.signed:
                return [("AUTH", f"{altered} handle {r.ref} was accepted and returned {got}")]
            if obs.value == original and (self.is_live(r) or exp.stale_may_return or self.profile.lenient_stale):
                # an equivalent handle (address + k*B) reached the right object, live or (a
                # lenient_stale store) freed and still intact
                return []
            if exp.ok and obs.value == Blob(exp.value):
                return []  # the altered handle is another live handle, and got its object
            return [("NRR", nrr_message(f"{call.process}'s get ({altered})", "returned", got,
                                        f"{r.ref} altered by {altered}", "no object put under it"))]
        if r.epoch < self.epoch:
            if self.profile.clr == "drain" and obs.value == original:
                return []  # CLR, vLLM's drain contract: a pre-clear handle may read its own object
            v = [("CLR", f"handle {r.ref} {(r.address, r.id)} issued before clear() resolved afterwards to {got}")]
            if obs.value != original:
                v.append(("NRR", nrr_message(f"{call.process}'s get (cleared)", "returned", got,
                                             f"{r.ref} {(r.address, r.id)}", render(r.data),
                                             serde.difference(obs.value, r.data))))
            return v
        if obs.value == original:
            return []
        state = "live" if self.is_live(r) else f"not live: {exp.error}"
        return [("NRR", nrr_message(f"{call.process}'s get ({state})", "returned", got, f"{r.ref} {(r.address, r.id)}",
                                    render(r.data), serde.difference(obs.value, r.data)))]

    def _do_touch(self, call: Call):
        if call.process == M.WRITER:
            key = call.args["key"]
            a = M.Action.of("touch", key=key)
            obs = self.adapter.writer_touch(key)
            handle = self._before.key_index.get(key)
            if obs.ok and handle is not None and self.profile.touch == "counting":
                self._promise((self.epoch, handle[0], handle[1]))  # a counting touch promises a read
            return a, self._model(a), obs, []
        r, m, t = self._handle_args(call)
        margs = m if self.profile.signed else dict(address=m["address"], id=m["id"], key=m["key"])
        a = M.Action.of("touch", call.process, **margs)
        exp = self._model(a)
        obs = self.adapter.reader_touch(call.process, t["key"], t["address"], t["id"], t["signature"])
        altered = call.args.get("forge") or call.args.get("fields")
        if altered and self.profile.signed and obs.ok and not exp.ok:  # a touch validates the handle (AUTH)
            return a, exp, obs, [("AUTH", f"{altered} handle {r.ref} was accepted by touch")]
        if (obs.ok and not altered and self.profile.touch == "counting" and r.epoch == self.epoch
                and self.made.get(self.ident(r), {}).get(call.process, 0) > 0):
            # vLLM 0.12 - 0.31's receiver acknowledges a cached item by touching
            # it; a touch before its own first get is the pre-touch of a new item.
            self._made(self.ident(r), call.process)
        return a, exp, obs, []

    def _do_release_touches(self, call: Call):
        a = M.Action.of("release_touches")
        return a, self._model(a), self.adapter.release_touches(), []

    def _do_clear(self, call: Call):
        a = M.Action.of("clear")
        exp = self._model(a)
        obs = self.adapter.clear()
        self.epoch += 1
        return a, exp, obs, []

    def _do_free_unused(self, call: Call):
        a = M.Action.of("free_unused")
        return a, self._model(a), self.adapter.free_unused(), []

    # -- exception safety (EXC) ---------------------------------------------
    def _do_put_failing(self, call: Call):
        """A put whose serialized data the store cannot copy (``Uncopyable``):
        it must raise and leave the store as before (or as after the reclaim
        it ran: chunks every reader had read)."""
        key, data = call.args["key"], bytes.fromhex(call.args["data"])
        a = M.Action.of("put", key=key, value=data, nbytes=object_nbytes(data) + 8)
        obs = self.adapter.put(key, serde.Uncopyable(data))
        outcomes = [("as before", self.state), ("as after its reclaim", M._free_unused(self.state))]
        if obs.ok:
            outcomes = []  # the put cannot have succeeded: its data has no bytes to copy
        return self._exc_outcome(call, a, outcomes, f"put of an uncopyable object: {render(obs)}")

    def _do_interrupt(self, call: Call):
        """``op`` (put, free_unused or clear) with an asynchronous exception
        raised at its first ``at`` yield point: afterwards (a snapshot reads
        the writer's indexes, which lets impl complete an interrupted commit)
        the store must be as before it, or as after it (a put: or as after
        its reclaim alone)."""
        from shmspec.impl import yieldpoints

        op, at = call.args["op"], call.args["at"]
        if at not in INTERRUPT_POINTS[op]:
            raise ValueError(f"{op} has no interrupt point {at!r}")
        if op == "put":
            key, data = call.args["key"], bytes.fromhex(call.args["data"])
            a = M.Action.of("put", key=key, value=data, nbytes=object_nbytes(data))
            run = lambda: self.adapter.writer.put(key, Blob(data))  # noqa: E731
        else:
            a = M.Action.of(op)
            run = getattr(self.adapter.writer, op)
        after, _ = M.step(self.state, a)
        outcomes = [("as before", self.state), ("as after", after)]
        if op == "put":
            outcomes.append(("as after its reclaim", M._free_unused(self.state)))
        fired = []

        def hook(point: str) -> None:
            if point == at and not fired:
                fired.append(point)
                raise InjectedInterrupt(f"injected at {at}")

        saved, yieldpoints.HOOK = yieldpoints.HOOK, hook
        try:
            run()
            how = f"{op} ran to its end ({at} was not reached)"
        except InjectedInterrupt:
            how = f"{op} interrupted at {at}"
        except Exception as exc:  # noqa: BLE001 - a store error (e.g. OutOfSpace) before the point
            how = f"{op} raised {type(exc).__name__} before {at}"
        finally:
            yieldpoints.HOOK = saved
        return self._exc_outcome(call, a, outcomes, how)

    def _exc_outcome(self, call: Call, a: M.Action, outcomes: list[tuple[str, M.State]], how: str):
        """Match the target's state with each allowed model state; adopt the
        first that matches, else an EXC violation."""
        got = self.adapter.snapshot().comparable()
        key = call.args.get("key")
        entry = dict(got[5]).get(key) if key is not None else None
        if entry is not None and call.args.get("op", "put") == "put" and entry not in dict(_model_snapshot(self.state)[5]).values():
            stored = self.adapter.stored_object(entry[0])
            if stored != Blob(bytes.fromhex(call.args["data"])):  # no key without its object
                text = f"{how}; key cached on a chunk that holds {stored!r}"
                v = [("EXC", f"{how}: key {key!r} is cached at {tuple(entry)}, whose chunk holds {stored!r}, not "
                             f"the object put{serde.difference(stored, bytes.fromhex(call.args['data']))}")]
                return a, M.Outcome(value=text), Observation(value=text), v
        for name, st_ in outcomes:
            if _model_snapshot(st_) == got:
                if st_ is not self.state and call.args.get("op", "put") == "clear":
                    self.epoch += 1
                self.state = st_
                if name == "as after" and entry is not None and call.args.get("op", "put") == "put":
                    self.put_data[key] = bytes.fromhex(call.args["data"])
                    self._issue(key, tuple(entry), self.put_data[key])
                text = f"{how}; store {name}"
                return a, M.Outcome(value=text), Observation(value=text), []
        want = " or ".join(f"{n} ({_tuple_diff(_model_snapshot(st_), got) or 'equal'})" for n, st_ in outcomes[:2])
        text = f"{how}; store neither as before nor as after"
        v = [("EXC", f"{how}: the store is neither as before nor as after it: {want}")]
        return a, M.Outcome(value=text), Observation(value=text), v

    def _do_warp(self, call: Call):
        """Boundary programs: start the (empty) store at ``start`` (bytes) with
        next id ``id`` on the model and, through the warp hook, the target."""
        from ..targets.warp import warp_model

        start, id_ = call.args["start"], call.args["id"]
        self.state = warp_model(self.state, start, id_)
        obs = observe(lambda: warp(self.adapter.writer, start, id_))
        return M.Action.of("warp"), M.Outcome(), obs, []

    def _do_warp_counts(self, call: Call):
        """Boundary programs: set the counts of the live chunk of handle ``ref``
        (``writer_count`` promises, int32 ``reader_count``) on model and target."""
        from ..targets.warp import warp_model_counts

        r = self.ref(call.args["ref"])
        self.accounting = False  # counts set by hand: the client's account no longer describes them
        wc, rc = call.args["writer_count"], call.args["reader_count"]
        self.state = warp_model_counts(self.state, r.abs_id, wc, rc)
        obs = observe(lambda: warp_counts(self.adapter.writer, r.id, r.address, wc, rc))
        return M.Action.of("warp_counts"), M.Outcome(), obs, []

    # -- checks -------------------------------------------------------------
    def _observation_checks(self, call, exp, obs, before: Snapshot, after: Snapshot, deserialized: int,
                            attributed: bool = False):
        """AUTH / DUP / SIZE side effects, then CONFORMANCE for an outcome that
        differs from the model's and no property has explained yet."""
        v: list[tuple[str, str]] = []
        altered = "forge" in call.args or "fields" in call.args
        if altered and self.profile.signed and not exp.ok and call.process != M.WRITER:
            if deserialized:
                v.append(("AUTH", f"{deserialized} deserialize call(s) for a rejected {call.args.get('forge') or call.args.get('fields')} handle"))
            if before.comparable() != after.comparable():
                v.append(("AUTH", "a rejected handle changed the store's state"))
        if call.action == "put" and before.comparable() != after.comparable():
            key, nbytes = call.args["key"], object_nbytes(bytes.fromhex(call.args["data"]))
            if key in before.key_index:  # judged on the target's own index
                v.append(("DUP", f"the put of cached key {key!r} changed the store: {_snap_diff(before, after)}"))
            elif nbytes > self.config.max_object_size:
                v.append(("SIZE", f"the oversize put changed the store: {_snap_diff(before, after)}"))
        if not v and not attributed and not _outcome_matches(exp, obs, self._original_for(call), call.action):
            detail = f" [{obs.detail}]" if obs.detail else ""
            v.append(("CONFORMANCE", f"model: {render(exp)}; target: {render(obs)}{detail}"))
        return v

    def _original_for(self, call: Call) -> bytes | None:
        if "ref" in call.args and "forge" not in call.args and "fields" not in call.args:
            return self.ref(call.args["ref"]).data
        return None

    def _state_checks(self, call, before_model, model_action, exp, before: Snapshot, after: Snapshot):
        # the target's own state
        v = target_state_checks(before, after, self.config.n_readers, reclaimed=call.action != "clear",
                                protected={c.id for c in before_model.ring.chunks if c.protected}, ids=True)
        # the model's own invariants (a failure here is a model or profile finding)
        for prop, msgs in {**check_state(self.state), **check_transition(before_model, model_action, self.state, exp)}.items():
            v += [(prop, f"model: {m}") for m in msgs]
        if self.config.compare_state and not any(p != "CONFORMANCE" for p, _ in v):
            want = _model_snapshot(self.state)
            got = after.comparable()
            if want != got:
                v.append(("CONFORMANCE", f"state differs from the model: {_tuple_diff(want, got)}"))
        return v

    # -- teardown -----------------------------------------------------------
    def close(self) -> None:
        """Close the target; check LEAK.  Raises PropertyViolation on a leak."""
        if self.closed:
            return
        self.closed = True
        gone = self.adapter.close()
        step = Step(len(self.trace), M.WRITER, "close", {}, "segment unlinked",
                    "segment unlinked" if gone else f"segment {self.adapter.segment} still exists", {},
                    [] if gone else [("LEAK", f"segment {self.adapter.segment} left behind after closing the writer")])
        self.trace.append(step)
        if not gone:  # report it, then clean up after the target
            try:
                os.unlink(os.path.join("/dev/shm", self.adapter.segment.lstrip("/")))
            except OSError:
                pass
            else:  # the writer created it here, so this process's resource_tracker holds it: let go
                from multiprocessing import resource_tracker

                resource_tracker.unregister("/" + self.adapter.segment.lstrip("/"), "shared_memory")
        self._raise_first(step)


def _outcome_matches(exp: M.Outcome, obs: Observation, original: bytes | None, action: str = "") -> bool:
    if exp.ok:
        if not obs.ok:
            return False
        if isinstance(exp.value, bytes):
            return obs.value == Blob(exp.value)
        if isinstance(exp.value, M.Sig):
            return isinstance(obs.value, list) and len(obs.value) == 32
        return obs.value == exp.value
    if obs.ok:
        if action == "touch":  # a lenient store may validate a freed, intact header
            return exp.stale_may_return and obs.value is None
        return exp.stale_may_return and original is not None and obs.value == Blob(original)
    return exp.accepts_error(obs.error)


def _model_snapshot(s: M.State) -> tuple:
    r = s.ring
    return (
        r.start, r.end, r.id_start, r.id_end,
        tuple((c.id, c.address, c.size, c.reader_count, c.writer_count) for c in r.chunks),
        tuple(sorted(s.key_index.items())),
    )


_SNAP_FIELDS = ("start", "end", "id_start", "id_end", "chunks (id, address, size, reader_count, writer_count)", "key_index")


def _tuple_diff(want: tuple, got: tuple) -> str:
    parts = [f"{name}: model {w!r}, target {g!r}" for name, w, g in zip(_SNAP_FIELDS, want, got) if w != g]
    return "; ".join(parts)


def _snap_diff(a: Snapshot, b: Snapshot) -> str:
    return _tuple_diff(a.comparable(), b.comparable())


def _changed(before: M.State, after: M.State) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("start", "end", "id_start", "id_end"):
        x, y = getattr(before.ring, name), getattr(after.ring, name)
        if x != y:
            out[name] = [x, y]
    live_b = [c.id for c in before.ring.chunks]
    live_a = [c.id for c in after.ring.chunks]
    if live_b != live_a:
        out["live"] = live_a
    return out
