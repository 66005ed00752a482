"""Replay a behaviour of the TLA+ spec on a real target, step by step.

A *behaviour* is a sequence of the spec's actions with their arguments
(:class:`~shmspec.model.atomic.Step`) and the spec states they reach: a TLC
counterexample replayed on the model (:func:`.agreement.replay_trace`, see
:func:`behaviour_of`), or a path through TLC's state graph
(:mod:`.spectests`).  :func:`replay_on_target` runs it as a controlled
schedule on real writer and reader processes (a
:class:`~.schedule.ScheduledSession` over a :class:`~.procs.ProcessPool`) and
after every step compares what the target observed with what the spec state
says (:class:`Observation`); the first step where they differ is where the
target *departs*.

Step mapping.  A process is paused just before a yield point; one spec step
advances it from the yield point where that step begins to the one where the
process's next spec step begins (or to the end of its operation):

==================  ===============================  ==============================
spec action         impl (hazard pins, segment v2)   vLLM (deserializes in place)
==================  ===============================  ==============================
pin_scan(k, n)      ``put`` started (kills           the whole ``put`` (the writer
                    published), past ``pin_scan``    has no yield points)
pin_wait            past ``pin_wait`` to             nothing (done by the put)
                    ``header_write``
header_write(k, n)  past ``header_write``; for a     the whole ``put``
                    vLLM behaviour the ``put`` is
                    started and runs through its
                    pin scan first
payload_write       to ``publish``                   nothing (done by the put)
publish             to the end of the put            nothing (done by the put)
free_step           ``free_unused`` (started if      ``free_unused``, whole
                    idle) past one ``free_step``
                    (for a vLLM behaviour, and past
                    ``retire``)
retire              past ``retire``, to the end of   (no such step)
                    ``free_unused``
clear               the whole ``clear()``            the whole ``clear()``
pin(r, h)           ``get(h)`` started, past         (no such step)
                    ``pin``
reader_check(r)     past ``reader_check``            (a vLLM behaviour's
                                                     ``reader_check(r, h)``:
                                                     ``get(h)`` started, past
                                                     ``reader_check``; on impl
                                                     past ``pin`` too)
deserialize(r)      past ``deserialize``             past ``deserialize``
payload_read(r)     (a vLLM behaviour's step: past   past ``deserialize`` (in place)
                    ``deserialize``)
counter_increment   past ``counter_increment``       lock, count, unlock
                    (the ack)
unpin(r)            past ``unpin`` (the pin is       (no such step)
                    released)
==================  ===============================  ==============================

A target's read path is chosen by its profile: ``lenient_stale`` profiles
(vLLM's) check the header and deserialize in place, the others (impl) pin,
check, deserialize under the pin and acknowledge.  A step that starts a get
carries its handle.  impl's writer pauses at ``pin_wait`` while a pin it found
names a chunk that is no longer live; its ``free_unused`` reclaims every chunk
that is reclaimable when it gets there: after one spec ``free_step`` the
writer stays paused before its next ``free_step`` or its ``retire``, and the
next writer step of another kind first runs ``free_unused`` to its end.

Observations.  While the spec's writer is inside a put the ring is compared
as both kinds of writer show it: ``start``, ``id_start`` and the published
chunks (impl adds a chunk to its ring when it publishes it, vLLM's writer has
finished the whole put); the new chunk's address and id are compared at
``publish`` (the handle) and in the ring from then on.

Geometry.  One spec unit is :data:`UNIT_BYTES` bytes (the spec's 8-byte unit
cannot hold the harness serde's 8 bytes of metadata): a chunk of ``n`` units
is ``n * UNIT_BYTES`` bytes, its 8-byte header included, so the object put by
allocation ``a`` into a chunk of ``n`` units carries ``n * UNIT_BYTES - 20``
data bytes (4 of reader_count and 8 of harness metadata, see
:mod:`.serde`).  Ring placement, the wrap jump and FIFO free are linear in
the unit, so every address and size the target reports is the spec's times
:data:`UNIT_BYTES`.  ``max_object_size`` is the ring size: every object fits,
and ``free_unused``'s ``2 * max_object_size`` bound never stops a reclaim
early.  Ids are the target's (modulo ``2**31``), compared modulo the spec's
``IdMod``.  Where the spec's small ``IdMod`` makes a stale handle's id equal
a live chunk's (what takes the store ``2**31`` allocations), a target that
checks ids (vLLM) still tells them apart, and departs there; impl checks
absolute counters and is unaffected.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Any

from shmspec.model import atomic
from shmspec.model.atomic import GARBAGE, NO_OBJ, WRITER, Config, State, Step
from shmspec.model.properties import PROPERTY_IDS

from .agreement import TraceReplay, departs_first
from ..targets.loader import LoadedTarget
from ..concurrency.procs import ProcessPool, ScheduleError, StepOutcome
from ..concurrency.schedule import ScheduledSession
from ..core.serde import COUNT_BYTES, MD_BYTES
from ..lockstep.session import SessionConfig
from .tlc import ACTION_NAMES

UNIT_BYTES = 16
"""Bytes per spec unit on the target (at least 12, so every object's data
holds its 4-byte allocation number)."""
HEADER_BYTES = 8
"""The store's chunk header, ``[id: int32][chunk_size: int32]``."""

WRITE_BEGINS = ("pin_scan", "pin_wait", "header_write", "payload_write", "publish", "free_step", "retire", "clear")
"""Writer yield points where a spec step begins (lock points are inside steps)."""
WRITE_ACTIONS = WRITE_BEGINS
"""The spec's writer actions."""
PINNED_READ = (("pin", "pin"), ("check", "reader_check"), ("deserialize", "deserialize"),
               ("counter_increment", "counter_increment"), ("unpin", "unpin"))
"""impl's read path (segment v2, a serde that does not keep its buffer, as
the harness's): each spec read step and the yield point it begins at."""
PINNED_ALIASES = {"payload_read": "deserialize"}
"""A vLLM behaviour's read steps on impl's path: vLLM's in-place
``payload_read`` is impl's ``deserialize``."""
CAUSES = {
    "inside-put": "the spec interleaves a reader step inside a put; this target's writer runs a put whole",
    "whole-free": "this target's free_unused reclaims every reclaimable chunk in one step",
    "batch-free": "this target's free_unused applies every chunk it reclaims at its end (the spec frees one per step)",
    "id-wrap": "the spec's ids wrap at IdMod; the target's 2**31 ids tell the handles apart",
}
"""Departures that come from the mapping, not from the target: a target
without writer yield points (vLLM) cannot stop inside a put or between two
free steps; no target reaches the spec's small id wraparound."""
IN_PLACE_READ = (("check", "reader_check"), ("payload_read", "deserialize"), ("counter_increment", "lock_acquire"))
"""vLLM's read path (0.11 - 0.33): the id check, deserialize in place, count."""
IN_PLACE_ALIASES = {"deserialize": "payload_read"}
"""impl's ``deserialize`` step on vLLM's path (a hardened behaviour's pin has
no counterpart there)."""


# ------------------------------------------------------------------ geometry
@dataclass(frozen=True)
class Geometry:
    """A spec config's store on a target, in bytes."""

    unit: int
    ring_bytes: int
    max_object_size: int

    def session_config(self, cfg: Config) -> SessionConfig:
        """The scheduled session's config: every property excused (recorded,
        not raised), so a replay observes the whole behaviour."""
        return SessionConfig(self.ring_bytes, self.max_object_size, len(cfg.readers), tuple(cfg.readers),
                             compare_state=False, excused=frozenset(PROPERTY_IDS) | {"CONFORMANCE"})


def geometry(cfg: Config, unit: int = UNIT_BYTES) -> Geometry:
    """The byte geometry of ``cfg`` (see the module docstring).

    Raises:
        ValueError: ``unit`` below 12 bytes.
    """
    if unit < HEADER_BYTES + COUNT_BYTES:
        raise ValueError(f"a unit of {unit} bytes cannot hold a chunk's header and reader_count")
    ring = cfg.ring_units * unit
    return Geometry(unit, ring, ring)


def object_data(geo: Geometry, abs_: int, size: int) -> bytes:
    """The data bytes put by allocation ``abs_`` into a chunk of ``size``
    units: its number (4 bytes LE), then a fill byte of its own, so that the
    chunk is exactly ``size * geo.unit`` bytes and every object differs."""
    n = size * geo.unit - HEADER_BYTES - COUNT_BYTES - MD_BYTES
    return (struct.pack("<I", abs_) + bytes([0x41 + abs_ % 26]) * n)[:n]


# -------------------------------------------------------------- observations
@dataclass(frozen=True)
class Observation:
    """What one step showed: the acting process's ``outcome`` (``passed``,
    ``stale``, ``deserialized o2``, ``freed id 0``, ...) and the writer's
    ``ring`` afterwards in spec units: ``(start, end, id_start, id_end,
    ((id, address, size, reads), ...))`` with the published chunks (reads:
    vLLM's in-band reader_count, impl's acknowledged reads summed over the
    readers); while the writer is inside a put, ``end`` and ``id_end`` are
    ``None`` (not compared, see the module docstring)."""

    outcome: str
    ring: tuple

    def render(self) -> str:
        r = self.ring
        if not r:
            return self.outcome
        chunks = " ".join(f"{c[0]}@{c[1]}+{c[2]}:{'?' if c[3] is None else c[3]}" for c in r[4])
        end, id_end = ("?" if x is None else x for x in (r[1], r[3]))
        return f"{self.outcome}; ring {r[0]}..{end} ids {r[2]}..{id_end} [{chunks}]"


def obj_name(tag: int) -> str:
    """An object tag as the spec names it: ``o<allocation + 1>``, ``garbage``, ``-``."""
    return "garbage" if tag == GARBAGE else "-" if tag == NO_OBJ else f"o{tag}"


def _read_kind(step: Step) -> str:
    """A reader step's kind: its action, ``reader_check`` as ``check``."""
    return "check" if step.name == "reader_check" else step.name


def spec_ring(cfg: Config, s: State) -> tuple:
    """The writer's ring of spec state ``s`` (:class:`Observation`'s ``ring``)."""
    inside = s.wpc not in ("idle", "freeing")
    published = len(s.chunks) - 1 if inside and not cfg.hardened else len(s.chunks)
    chunks = tuple((c[3], c[1], c[2], sum(a[c[0]] for a in s.acks) if cfg.hardened
                    else s.mem[c[1] % cfg.ring_units][2]) for c in s.chunks[:published])
    return (s.start, None if inside else s.end, s.id_start, None if inside else s.id_end, chunks)


def expected(cfg: Config, before: State, after: State, step: Step) -> Observation:
    """What the spec says step ``step`` from ``before`` to ``after`` shows."""
    ring = spec_ring(cfg, after)
    if step.process == WRITER:
        if step.name == "pin_scan":
            return Observation("waits for a pin" if after.wpc == "wait" else "proceeds", ring)
        if step.name == "pin_wait":
            return Observation("proceeds", ring)
        if step.name == "header_write":
            return Observation("header written", ring)
        if step.name == "payload_write":
            return Observation("payload written", ring)
        if step.name == "publish":
            ab = dict(step.args)["abs"]
            h = next(x for x in after.issued if x[0] == ab)
            return Observation(f"handle h{ab} = ({h[1]}, {h[2]})", ring)
        if step.name == "free_step":
            if not cfg.hardened:
                return Observation(f"freed id {before.chunks[0][3]}", ring)
            last = ", the last" if after.wpc == "retire" else ""
            return Observation(f"plans id {before.chunks[before.planned][3]}{last}", ring)
        if step.name == "retire":
            ids = [c[3] for c in before.chunks[:before.planned]]
            return Observation(f"freed id{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}", ring)
        return Observation("cleared", ring)
    i = cfg.readers.index(step.process)
    kind = _read_kind(step)
    if kind == "pin":
        return Observation("pinned", ring)
    if kind == "check":
        return Observation("passed" if after.pc[i] != "idle" else "stale", ring)
    if kind == "counter_increment":
        return Observation("counted", ring)
    if kind == "unpin":
        return Observation("unpinned", ring)
    return Observation(f"deserialized {obj_name(after.got[i])}", ring)


# ------------------------------------------------------------------ behaviour
@dataclass
class Behaviour:
    """Spec steps and what each must show: ``steps[i]`` leads from the spec
    state ``i - 1`` to state ``i`` and shows ``expect[i]`` (index 0, Init, is
    None in both); ``states`` keeps the spec states when known."""

    steps: list[Step | None]
    expect: list[Observation | None]
    states: list[State] | None = None

    @classmethod
    def from_states(cls, cfg: Config, states: list[State], steps: list[Step | None]) -> "Behaviour":
        """A behaviour whose expectations are :func:`expected` of its states."""
        exp: list[Observation | None] = [None] + [expected(cfg, states[i - 1], states[i], steps[i])
                                                  for i in range(1, len(steps))]
        return cls(steps, exp, states)

    def to_json(self) -> dict[str, Any]:
        """``{"steps": [{"action", "process", "args"}], "expect": [[outcome, ring]]}``
        without the Init entries (handles and rings as nested lists)."""
        return {"steps": [{"action": st.name, "process": st.process, "args": {k: _plain(v) for k, v in st.args}}
                          for st in self.steps[1:]],
                "expect": [[o.outcome, _plain(o.ring)] for o in self.expect[1:]]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Behaviour":
        """Inverse of :meth:`to_json`.

        Raises:
            KeyError, TypeError: not a behaviour's JSON.
        """
        steps = [Step(s["action"], s["process"], tuple((k, _tuple(v)) for k, v in s["args"].items()))
                 for s in d["steps"]]
        exp = [Observation(o[0], _tuple(o[1])) for o in d["expect"]]
        if len(steps) != len(exp):
            raise TypeError("a behaviour needs one expectation per step")
        return cls([None, *steps], [None, *exp])


def _plain(v: Any) -> Any:
    return [_plain(x) for x in v] if isinstance(v, (tuple, list)) else v


def _tuple(v: Any) -> Any:
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


def recover_step(cfg: Config, before: State, after: State, action: str) -> Step:
    """The step named ``action`` from ``before`` to ``after``, its process and
    arguments read off the state difference (for trace steps the model could
    not follow).

    Raises:
        ValueError: no reader changed on a reader action.
    """
    if action in WRITE_ACTIONS:
        if action in ("pin_scan", "header_write"):
            c = atomic.current(cfg, after)
            return Step(action, WRITER, (("key", c[4]), ("size", c[2])))
        if action == "free_step":
            return Step(action, WRITER, (("abs", before.chunks[before.planned if cfg.hardened else 0][0]),))
        if action == "retire":
            return Step(action, WRITER, (("abs", before.chunks[before.planned - 1][0]),))
        if action in ("clear", "pin_wait"):
            return Step(action, WRITER)
        return Step(action, WRITER, (("abs", atomic.current(cfg, before)[0]),))
    for i, r in enumerate(cfg.readers):
        if before.starts[i] != after.starts[i]:
            return Step(action, r, (("handle", after.hd[i]),))
        if before.pc[i] != after.pc[i]:
            return Step(action, r)
    raise ValueError(f"no reader changed in the {action} step")


def behaviour_of(cfg: Config, replay: TraceReplay, actions: list[str]) -> Behaviour:
    """The concrete behaviour of a replayed TLC trace (``actions[i]``: the
    trace's action names): the model's steps and states while it followed the
    trace; after the step where it departed, TLC's states as printed with
    each step read off their difference (:func:`recover_step`)."""
    follow = replay.model_departs != 0
    states: list[State] = [atomic.initial(cfg) if follow else replay.states[0]]
    steps: list[Step | None] = [None]
    for i in range(1, len(replay.states)):
        step = replay.steps[i] if follow and i < len(replay.steps) else None
        nxt = None
        if step is not None:
            nxt = next((t for st, t in atomic.successors(cfg, states[-1]) if st == step), None)
        if nxt is None:
            if follow:  # from here on, TLC's states as printed
                follow = False
                states[-1] = replay.states[i - 1]
            step = recover_step(cfg, replay.states[i - 1], replay.states[i], ACTION_NAMES.get(actions[i], actions[i]))
            nxt = replay.states[i]
        states.append(nxt)
        steps.append(step)
    return Behaviour.from_states(cfg, states, steps)


# ---------------------------------------------------------------- the target
@dataclass
class StepResult:
    """One spec step on the target: ``index`` into the behaviour, the step,
    the spec's and the target's observations, and the scheduled steps taken."""

    index: int
    step: Step
    spec: Observation
    target: Observation
    lanes: list[dict[str, Any]] = field(default_factory=list)
    cause: str | None = None
    """For a departure the mapping cannot avoid, why (:data:`CAUSES`)."""

    @property
    def agrees(self) -> bool:
        return self.spec == self.target

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "action": self.step.name, "process": self.step.process,
                "args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.step.args},
                "spec": self.spec.render(), "target": self.target.render(), "agrees": self.agrees,
                "cause": self.cause, "scheduled": self.lanes}


@dataclass
class TargetReplay:
    """A behaviour replayed on a target.

    ``departs``: index of the first step whose observations differ (None: the
    target followed every step); ``violations``: what the scheduled session's
    own checks saw on the target during the replayed steps (``(property,
    message)``, e.g. NRR when a reader deserialized another object; what
    finishing the operations still in flight shows afterwards is not
    included); ``error``: a harness
    failure (a process that did not respond), which also ends the replay.
    """

    target: str
    steps: list[StepResult]
    departs: int | None
    violations: list[tuple[str, str]]
    seconds: float
    error: str | None = None

    @property
    def departure(self) -> StepResult | None:
        return next((s for s in self.steps if s.index == self.departs), None)

    def summary(self) -> str:
        """One line: followed to the end, or where and how the target departs."""
        seen = sorted({p for p, _ in self.violations})
        tail = f"; the target's checks saw {', '.join(seen)}" if seen else ""
        d = self.departure
        if d is None:
            return f"{self.target} follows all {len(self.steps)} steps{tail} ({self.seconds:.2f} s)"
        spec, got = (d.spec.outcome, d.target.outcome) if d.spec.outcome != d.target.outcome else (
            d.spec.render(), d.target.render())
        why = f" [{d.cause}: {CAUSES[d.cause]}]" if d.cause else ""
        return (f"{self.target} departs at step {d.index} {d.step.name}({d.step.process}): spec "
                f"{spec!r}, target {got!r}{why}{tail} ({self.seconds:.2f} s)")

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "departs": self.departs, "seconds": round(self.seconds, 3),
                "error": self.error, "summary": self.summary(),
                "violations": [{"property": p, "message": m} for p, m in self.violations],
                "steps": [s.to_json() for s in self.steps]}


class _Recorder:
    """A pool that remembers the last :class:`StepOutcome` (the session keeps
    only its rendering)."""

    def __init__(self, pool: ProcessPool):
        self._pool = pool
        self.last: StepOutcome | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def start(self, *a: Any, **k: Any) -> StepOutcome:
        self.last = self._pool.start(*a, **k)
        return self.last

    def advance(self, *a: Any, **k: Any) -> StepOutcome:
        self.last = self._pool.advance(*a, **k)
        return self.last


class _Run:
    """One behaviour on one target (see :func:`replay_on_target`)."""

    def __init__(self, cfg: Config, geo: Geometry, target: LoadedTarget, pool: ProcessPool):
        self.cfg, self.geo, self.target = cfg, geo, target
        self.pool = _Recorder(pool)
        self.session = ScheduledSession(self.pool, target, geo.session_config(cfg))  # type: ignore[arg-type]
        in_place = target.profile.lenient_stale
        path = IN_PLACE_READ if in_place else PINNED_READ
        self.read_path = dict(path)
        self.read_order = [k for k, _ in path]
        self.read_aliases = IN_PLACE_ALIASES if in_place else PINNED_ALIASES
        self.refs: dict[int, str] = {}
        """spec allocation number -> the session's ref of the target's handle."""
        self.tags: dict[bytes, int] = {}
        self.puts = 0
        """Allocations so far (the spec's ``puts``: one per put started)."""
        self.put_abs: int | None = None
        self.put_handle: tuple[int, int] | None = None
        self.seen: dict[str, int] = {}
        self.lanes: list[dict[str, Any]] = []
        self.whole_writer = in_place
        """vLLM's writer: no yield points, every operation runs whole."""
        self.read_inside_put = False
        self.reclaiming: list[int] = []
        """The target's live ids when its running ``free_unused`` started."""
        self.planned = 0
        """``free_step`` points that reclaim has passed."""

    # -- plumbing
    def _exec(self, proc: str, kind: str, action: str = "", args: dict | None = None) -> StepOutcome:
        step: dict[str, Any] = {"process": proc, "kind": kind}
        if kind == "start":
            step.update(action=action, args=args or {})
        refs = len(self.session.refs)
        lane = self.session.execute(step)
        self.lanes.append(lane.to_json())
        out = self.pool.last
        assert out is not None
        if proc == WRITER and out.result is not None and len(self.session.refs) > refs and self.put_abs is not None:
            self.refs[self.put_abs] = self.session.refs[-1].ref
            h = out.result["value"]["handle"]
            self.put_handle = (h[0], h[1])
        return out

    def _point(self, proc: str) -> str | None:
        return self.pool.procs[proc].point

    def _id(self, i: int) -> int:
        return i % self.cfg.id_mod

    def _units(self, v: int) -> int | str:
        return v // self.geo.unit if v % self.geo.unit == 0 else f"{v}B"

    def ring(self, want: tuple) -> tuple:
        """The target's ring as :class:`Observation` has it; projected as
        ``want`` is while the spec's writer is inside a put (``end`` and
        ``id_end`` not compared, only as many chunks as the spec published)."""
        snap = self.session.snap
        if snap is None:
            return ("?",)
        chunks = tuple((self._id(c.id), self._units(c.address), self._units(c.size), c.reader_count)
                       for c in snap.chunks)
        ring = (self._units(snap.start), self._units(snap.end), self._id(snap.id_start), self._id(snap.id_end), chunks)
        if len(want) == 5 and want[1] is None:
            ring = (ring[0], None, ring[2], None, chunks[:len(want[4])])
        return ring

    def _to_begin(self, proc: str, out: StepOutcome, begins: tuple[str, ...]) -> StepOutcome:
        """Advance ``proc`` until it pauses at one of ``begins`` or finishes."""
        for _ in range(64):
            if out.result is not None or self._point(proc) in begins:
                return out
            out = self._exec(proc, "advance")
        raise ScheduleError(f"{proc} did not reach {begins} within 64 steps")

    def _obj(self, v: Any) -> str:
        if isinstance(v, dict) and "blob" in v:
            tag = self.tags.get(bytes.fromhex(v["blob"]))
            return f"o{tag}" if tag is not None else f"an object never put ({v['blob'][:16]}...)"
        if isinstance(v, dict) and "garbage" in v:
            return "garbage"
        return repr(v)

    # -- the writer
    def _drain_writer(self) -> None:
        while self._point(WRITER) is not None:
            self._exec(WRITER, "advance")

    def _error(self, out: StepOutcome | None) -> str | None:
        if out is not None and out.result is not None and out.result["error"] is not None:
            return out.result["error"]
        return None

    def _scanned(self, out: StepOutcome) -> str:
        """The outcome of impl's pin scan (or of a wait round): the writer
        went on to ``header_write``, or it waits at ``pin_wait``."""
        if (err := self._error(out)) is not None:
            return err
        point = self._point(WRITER)
        if point == "pin_wait":
            return "waits for a pin"
        return "proceeds" if point == "header_write" else f"the writer is {'paused at ' + point if point else 'done'}"

    def writer(self, step: Step) -> str:
        point = self._point(WRITER)
        name = step.name
        starts_put = name == "pin_scan" or (name == "header_write" and not self.cfg.hardened)
        if starts_put or name == "clear":
            if point in ("free_step", "retire"):  # impl's greedy free_unused: run it to its end first
                self._drain_writer()
            elif point is not None:
                return f"the writer is paused at {point}"
            if name == "clear":
                out = self._exec(WRITER, "start", "clear", {})
                while out.result is None:
                    out = self._exec(WRITER, "advance")
                return "cleared" if out.result["error"] is None else out.result["error"]
            a = dict(step.args)
            self.put_abs, self.put_handle = self.puts, None
            data = object_data(self.geo, self.puts, a["size"])
            self.tags[data] = self.puts + 1
            self.puts += 1
            out = self._exec(WRITER, "start", "put", {"key": a["key"], "data": data.hex()})
            if out.result is not None:  # a writer without yield points: the whole put
                if (err := self._error(out)) is not None:
                    return err
                return "proceeds" if name == "pin_scan" else "header written"
            out = self._to_begin(WRITER, out, WRITE_BEGINS)
            if self._point(WRITER) == "pin_scan":
                out = self._to_begin(WRITER, self._exec(WRITER, "advance"), WRITE_BEGINS)
            outcome = self._scanned(out)
            if name == "pin_scan" or outcome != "proceeds":
                return outcome
            point = self._point(WRITER)  # a vLLM behaviour's header_write: on past the header
        if name == "pin_wait":
            if point != "pin_wait":
                return f"the writer is {'paused at ' + point if point else 'idle'}, not at pin_wait"
            outcome = self._scanned(self._to_begin(WRITER, self._exec(WRITER, "advance"), WRITE_BEGINS))
            return "still waits for a pin" if outcome == "waits for a pin" else outcome
        if name in ("header_write", "payload_write", "publish"):
            if point == name:
                out = self._to_begin(WRITER, self._exec(WRITER, "advance"), WRITE_BEGINS)
            elif (point is None and self.put_handle is not None
                  and (name == "header_write" or self.put_abs == dict(step.args)["abs"])):
                out = None  # the put ran whole when it started (no writer yield points)
            else:
                return f"the writer is {'paused at ' + point if point else 'idle'}, not at {name}"
            if (err := self._error(out)) is not None:
                return err
            if name == "header_write":
                return "header written"
            if name == "payload_write":
                return "payload written"
            if self.put_handle is None:
                return "no handle returned"
            return f"handle h{self.put_abs} = ({self._units(self.put_handle[0])}, {self._id(self.put_handle[1])})"
        # free_step: impl's free_unused pauses before it plans each chunk it
        # reclaims, and at retire before it applies them all; vLLM's runs whole
        if name == "retire":
            if point != "retire":
                return f"the writer is {'paused at ' + point if point else 'idle'}, not at retire"
            out = self._to_begin(WRITER, self._exec(WRITER, "advance"), WRITE_BEGINS)
            if (err := self._error(out)) is not None:
                return err
            return self._freed()
        if point is None:
            snap = self.session.snap
            self.reclaiming, self.planned = ([c.id for c in snap.chunks] if snap is not None else []), 0
            out = self._to_begin(WRITER, self._exec(WRITER, "start", "free_unused", {}), ("free_step",))
            if (err := self._error(out)) is not None:
                return err
        elif point != "free_step":
            return f"the writer is paused at {point}"
        if self._point(WRITER) == "free_step":
            # a vLLM behaviour frees a chunk per step: impl's retire is passed through
            stops = ("free_step", "retire") if self.cfg.hardened else ("free_step",)
            out = self._to_begin(WRITER, self._exec(WRITER, "advance"), stops)
            self.planned += 1
            if out.result is None and self.planned <= len(self.reclaiming):
                last = ", the last" if self._point(WRITER) == "retire" else ""
                return f"plans id {self._id(self.reclaiming[self.planned - 1])}{last}"
        return self._freed()

    def _freed(self) -> str:
        """What the target's reclaim retired: the ids it held when it started
        that its ring no longer holds."""
        snap = self.session.snap
        left = {c.id for c in snap.chunks} if snap is not None else set()
        freed = [self._id(i) for i in self.reclaiming if i not in left]
        if not freed:
            return "freed nothing"
        return f"freed id{'s' if len(freed) > 1 else ''} {', '.join(map(str, freed))}"

    # -- the readers
    def reader(self, step: Step) -> str:
        r = step.process
        kind = _read_kind(step)
        kind = self.read_aliases.get(kind, kind) if kind not in self.read_path else kind
        if kind not in self.read_path:
            return f"no {_read_kind(step)} step on this target's read path"
        begin = self.read_path[kind]
        k = self.read_order.index(kind)
        nxt = (self.read_path[self.read_order[k + 1]],) if k + 1 < len(self.read_order) else ()
        if step.args:  # the get of the step's handle starts here
            if r not in self.pool.idle():
                return f"reader {r} is paused at {self._point(r)}"
            h = dict(step.args)["handle"]
            ref = self.refs.get(h[0])
            if ref is None:
                return f"the target never issued handle h{h[0]}"
            self.seen[r] = 0
            out = self._to_begin(r, self._exec(r, "start", "get", {"ref": ref}), (begin,))
            if out.result is None and self._point(r) != begin:
                return f"reader {r} paused at {self._point(r)} before its {_read_kind(step)}"
        elif self._point(r) != begin:
            return f"reader {r} is {'paused at ' + str(self._point(r)) if self._point(r) else 'idle'}, not at {begin}"
        else:
            out = None
        if out is None or out.result is None:
            out = self._to_begin(r, self._exec(r, "advance"), nxt)
        new = out.deserialized[self.seen.get(r, 0):]
        self.seen[r] = 0 if out.result is not None else len(out.deserialized)
        got = ", ".join(self._obj(d) for d in new)
        if out.result is not None and out.result["error"] is not None:
            base = "stale" if out.result["error"] == "StaleHandle" else out.result["error"]
        elif kind == "pin":
            base = "pinned"
        elif kind == "check":
            base = "passed"
        elif kind == "counter_increment":
            base = "counted"
        elif kind == "unpin":
            base = "unpinned"
        else:
            return f"deserialized {got or 'nothing'}"
        return base + (f" (deserialized {got})" if got else "")

    def cause(self, step: Step, before: State | None, want: Observation, got: Observation) -> str | None:
        """Why a departure is the mapping's (a key of :data:`CAUSES`), if it is."""
        if before is None:
            return None
        if _read_kind(step) == "check" and (want.outcome, got.outcome) == ("passed", "stale") and before.puts > self.cfg.id_mod:
            # the header at the handle's address carries the handle's id modulo
            # IdMod (the spec passes) but another allocation's full id
            return "id-wrap"
        if self.whole_writer and (step.process != WRITER and before.wpc != "idle"
                                  or step.name in WRITE_ACTIONS[:5] and self.read_inside_put):
            return "inside-put"
        if self.whole_writer and step.name == "free_step" and got.outcome.startswith("freed ids"):
            return "whole-free"
        if not self.cfg.hardened and step.name == "free_step" and got.outcome.startswith("plans"):
            return "batch-free"
        return None

    def step(self, step: Step, want: Observation) -> Observation:
        try:
            outcome = self.writer(step) if step.process == WRITER else self.reader(step)
        except ScheduleError as exc:
            # a step into the reader lock while another process holds it: the
            # target cannot take it now
            outcome = f"blocked: {exc}" if "would block" in str(exc) else f"schedule error: {exc}"
        return Observation(outcome, self.ring(want.ring))


def replay_on_target(cfg: Config, behaviour: Behaviour, target: LoadedTarget, pool: ProcessPool | None = None,
                     geo: Geometry | None = None, stop_at_departure: bool = True) -> TargetReplay:
    """Run ``behaviour`` on ``target`` as a controlled schedule and compare
    every step's observation with the spec's (:func:`expected`).

    ``pool``: a running :class:`ProcessPool` whose readers are
    ``cfg.readers`` (one is started, and shut down, when None).  The replay
    stops at the first departure unless ``stop_at_departure`` is false.

    Raises:
        ValueError: ``pool``'s readers are not the config's.
    """
    geo = geo or geometry(cfg)
    t0 = time.perf_counter()
    own = pool is None
    if pool is None:
        pool = ProcessPool(target, tuple(cfg.readers))
    elif tuple(pool.reader_names) != tuple(cfg.readers):
        raise ValueError(f"the pool's readers {pool.reader_names} are not the config's {cfg.readers}")
    results: list[StepResult] = []
    departs: int | None = None
    error: str | None = None
    violations: list[tuple[str, str]] = []
    try:
        run = _Run(cfg, geo, target, pool)
        for i in range(1, len(behaviour.steps)):
            step, want = behaviour.steps[i], behaviour.expect[i]
            before = behaviour.states[i - 1] if behaviour.states else None
            run.lanes = []
            got = run.step(step, want)
            res = StepResult(i, step, want, got, run.lanes)
            if not res.agrees:
                res.cause = run.cause(step, before, want, got)
            if before is not None and step.process != WRITER and before.wpc != "idle":
                run.read_inside_put = True
            elif step.name == "publish":
                run.read_inside_put = False
            results.append(res)
            if not res.agrees and departs is None:
                departs = i
                if got.outcome.startswith("schedule error"):
                    error = got.outcome
                if stop_at_departure or error:
                    break
        try:
            # operations still in flight run to completion, so checks made when
            # a get returns (CLR) see the trace's last reads
            run.session.finish()
        except Exception as exc:  # noqa: BLE001 - a harness failure while draining
            error = error or f"{type(exc).__name__}: {exc}"
            pool.respawn()
        violations = sorted(set(run.session.excused_hits))
    finally:
        if own:
            pool.shutdown()
    return TargetReplay(target.spec, results, departs, violations, time.perf_counter() - t0, error)


__all__ = ["ACTION_NAMES", "CAUSES", "IN_PLACE_READ", "PINNED_READ", "WRITE_ACTIONS", "WRITE_BEGINS", "Behaviour", "Geometry", "Observation", "StepResult", "TargetReplay", "UNIT_BYTES", "behaviour_of",
           "departs_first", "expected", "geometry", "obj_name", "object_data", "recover_step",
           "replay_on_target", "spec_ring"]
