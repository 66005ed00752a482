"""Boundary programs: z3 picks starting states and payload sizes that hit each
edge of the ring arithmetic; each becomes a list of lockstep calls.

A program is a fixed skeleton (warp, puts, reads, frees) whose numbers (the
warp's start address and id, every payload length, counter values) are left to
z3, with the edge as a constraint.  The skeleton is executed symbolically
through the model's own functions (:func:`~shmspec.model.ring.placement`,
:func:`~shmspec.model.ring.fits`, :func:`~shmspec.model.ring.free_step`,
:func:`~shmspec.model.ring.renormalise`, over :data:`~.z3ops.Z3_OPS`), so the
edge is hit on the model by construction, and the session then checks every
property and the target's agreement with the model at each step.

Programs are generated for one session geometry (:class:`~.session.SessionConfig`:
ring size ``B`` and ``max_object_size`` in bytes, the readers).  Calls are the
session's JSON calls, plus ``warp`` (``{"start": bytes, "id": next id}``) and
``warp_counts`` (``{"ref", "writer_count", "reader_count"}``), which use the
warp hooks (:func:`~.adapter.warp`) and are therefore only run on targets that
have them (:func:`~.adapter.can_warp`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import z3

from shmspec.model import ring as R
from shmspec.model.ring import ID_MAX

from ..core.serde import COUNT_BYTES, MD_BYTES
from ..lockstep.session import SessionConfig
from .z3ops import Z3_OPS

INT32_MAX = 2**31 - 1
TAG_BYTES = 4
"""Every payload starts with a 4-byte tag (its put's index), so no two objects are equal."""


@dataclass
class Program:
    """One boundary program: ``name``, the ``edge`` it hits, the property ids
    it exercises, ``calls`` (JSON, as :class:`~.session.Call` takes them) and
    whether it needs the warp hook."""

    name: str
    edge: str
    properties: tuple[str, ...]
    calls: list[dict[str, Any]]
    needs_warp: bool = False
    values: dict[str, int] = field(default_factory=dict)
    """The numbers z3 chose (warp start and id, payload lengths, counts)."""
    unreachable: str | None = None
    """Why no program hits this edge in the geometry (z3 found none); no calls then."""


class _Sym:
    """Symbolic execution of one skeleton on the model's arithmetic (B concrete)."""

    def __init__(self, cfg: SessionConfig, warp: bool, warp_id: int | None = None):
        self.cfg = cfg
        self.B = cfg.data_buffer_size
        self.s = z3.Solver()
        self.steps: list[tuple[str, Any]] = []
        self.vars: dict[str, Any] = {}
        self.chunks: list[list[Any]] = []  # [ref, address, n, consumed]
        self.refs = 0
        if warp:
            x = self.var("warp_start", 0, self.B - 1)
            i = z3.IntVal(warp_id) if warp_id is not None else self.var("warp_id", 0, ID_MAX - 1)
            self.vars["warp_id"] = i
            self.start = self.end = x
            self.steps.append(("warp", (x, i)))
        else:
            self.start = self.end = z3.IntVal(0)

    def var(self, name: str, lo: int, hi: int) -> Any:
        v = z3.Int(name)
        self.s.add(lo <= v, v <= hi)
        self.vars[name] = v
        return v

    def put(self, name: str, mode: str = "direct", constrain: Callable[[Any], Any] | None = None) -> dict[str, Any]:
        """A put of a payload of symbolic length ``name``.  ``mode``: ``direct``
        (fits at once), ``reclaim`` (fits only after the put's FIFO reclaim of
        the consumed oldest chunks), ``oom`` (MemoryError; nothing reclaimable).
        ``constrain(n)``: a further constraint on the chunk size ``n`` in the
        state before the put."""
        max_len = self.cfg.max_object_size - COUNT_BYTES - MD_BYTES
        length = self.var(name, TAG_BYTES, max_len)
        n = R.chunk_bytes(COUNT_BYTES + MD_BYTES + length)
        if constrain is not None:
            self.s.add(constrain(n))
        info = {"n": n, "end_before": self.end, "start_before": self.start}
        address = R.placement(self.end, self.B, n, Z3_OPS)
        ok = R.fits(address, n, self.start, self.B)
        if mode == "direct":
            self.s.add(ok)
        else:
            self.s.add(z3.Not(ok))
            if mode == "oom":
                self.s.add(z3.BoolVal(not any(c[3] for c in self.chunks[:1])))
                self.steps.append(("put", (name, length)))
                info.update(address=address, ok=False)
                return info
            self._free()
            address = R.placement(self.end, self.B, n, Z3_OPS)
            self.s.add(R.fits(address, n, self.start, self.B))
        self.refs += 1
        self.chunks.append([self.refs, address, n, False])
        self.end = address + n
        self.steps.append(("put", (name, length)))
        info.update(address=address, ok=True, ref=self.refs)
        return info

    def consume(self, ref: int) -> None:
        """Every reader reads handle ``h<ref>`` once (read-once protocol)."""
        for c in self.chunks:
            if c[0] == ref:
                c[3] = True
        self.steps.append(("consume", ref))

    def _free(self) -> None:
        nbytes = 2 * self.cfg.max_object_size
        freed = z3.IntVal(0)
        while self.chunks and self.chunks[0][3]:
            self.s.add(freed < nbytes)  # the loop goes on to this chunk
            _, _, n, _ = self.chunks.pop(0)
            has_next = bool(self.chunks)
            nxt = self.chunks[0][1] if has_next else self.start
            self.start, self.end = R.free_step(self.start, self.end, z3.BoolVal(has_next), nxt, self.B, Z3_OPS)
            freed = freed + n
        self.before_renormalise = self.start
        self.start, self.end = R.renormalise(self.start, self.end, self.B, Z3_OPS)

    def fits_after_reclaim(self, n: Any, bound: int) -> Any:
        """Whether an ``n``-byte chunk fits after a FIFO reclaim of the
        consumed oldest chunks that stops once ``bound`` bytes are freed (the
        state is not changed)."""
        start, end, freed = self.start, self.end, z3.IntVal(0)
        states = [(start, end, freed)]
        chunks = self.chunks
        i = 0
        while i < len(chunks) and chunks[i][3]:
            has_next = i + 1 < len(chunks)
            start, end = R.free_step(start, end, z3.BoolVal(has_next), chunks[i + 1][1] if has_next else start,
                                     self.B, Z3_OPS)
            freed = freed + chunks[i][2]
            states.append((start, end, freed))
            i += 1

        def fits_at(st: tuple[Any, Any, Any]) -> Any:
            s_, e_ = R.renormalise(st[0], st[1], self.B, Z3_OPS)
            return R.fits(R.placement(e_, self.B, n, Z3_OPS), n, s_, self.B)

        expr = fits_at(states[-1])
        for st in reversed(states[:-1]):  # the loop stops at the first state with freed >= bound
            expr = z3.If(st[2] >= bound, fits_at(st), expr)
        return expr

    def free(self) -> None:
        self._free()
        self.steps.append(("free", None))

    def solve(self, cfg: SessionConfig) -> tuple[list[dict[str, Any]], dict[str, int]]:
        if self.s.check() != z3.sat:
            raise ValueError(f"no concrete program hits this edge in this geometry ({self.s.check()})")
        m = self.s.model()

        def val(t: Any) -> int:
            return m.eval(t, model_completion=True).as_long()

        calls: list[dict[str, Any]] = []
        puts = 0
        for kind, arg in self.steps:
            if kind == "warp":
                calls.append({"process": "writer", "action": "warp", "args": {"start": val(arg[0]), "id": val(arg[1])}})
            elif kind == "put":
                puts += 1
                length = val(arg[1])
                data = puts.to_bytes(TAG_BYTES, "little") + bytes([0xB0 + puts % 16]) * (length - TAG_BYTES)
                calls.append({"process": "writer", "action": "put", "args": {"key": f"b{puts}", "data": data.hex()}})
            elif kind == "consume":
                calls += [{"process": r, "action": "get", "args": {"ref": f"h{arg}"}} for r in cfg.readers]
            elif kind == "free":
                calls.append({"process": "writer", "action": "free_unused", "args": {}})
            elif kind == "raw":
                calls.append(arg)
        return calls, {k: val(v) for k, v in self.vars.items()}


def _tail_exact(y: _Sym) -> None:
    a = y.put("len_a")
    y.s.add(a["end_before"] % y.B + a["n"] == y.B)  # ends exactly at the ring's end: no jump
    b = y.put("len_b")
    y.s.add(b["address"] % y.B == 0)  # the next chunk starts at the ring's front without a jump
    y.consume(a["ref"])
    y.consume(b["ref"])
    y.free()


def _tail_miss(y: _Sym) -> None:
    a = y.put("len_a")
    b = y.put("len_b")
    y.s.add(b["end_before"] % y.B + b["n"] == y.B + 1)  # one byte too long for the tail: wrap jump
    y.consume(a["ref"])
    y.consume(b["ref"])
    y.free()


def _end_behind_start(y: _Sym) -> None:
    a = y.put("len_a")
    b = y.put("len_b")
    y.consume(a["ref"])
    y.free()
    c = y.put("len_c")
    y.s.add(c["address"] % y.B == 0, c["address"] > b["address"])  # c wrapped to the front
    y.s.add(y.end % y.B < y.start)  # physically, end now lies before start
    y.consume(b["ref"])
    y.consume(c["ref"])
    y.put("len_d", "reclaim")


def _start_renormalised(y: _Sym) -> None:
    a = y.put("len_a")
    b = y.put("len_b")
    y.consume(a["ref"])
    y.free()
    c = y.put("len_c")
    y.s.add(c["address"] >= y.B)
    y.consume(b["ref"])
    y.free()
    y.s.add(y.before_renormalise >= y.B)  # start passed B: start and end drop by B
    y.put("len_d")


def _full_ring(y: _Sym) -> None:
    y.put("len_a")
    y.put("len_b")
    c = y.put("len_c")
    y.s.add(y.end - y.start == y.B, c["address"] % y.B + c["n"] <= y.B)  # exactly full
    y.put("len_d", "oom")


def _oom_by_one(y: _Sym) -> None:
    a = y.put("len_a")
    y.put("len_b")
    y.consume(a["ref"])
    y.free()
    c = y.put("len_c")
    y.s.add(c["address"] % y.B == 0)  # c wrapped to the front, behind start
    d = y.put("len_d", "oom")
    y.s.add(d["address"] == d["end_before"], d["end_before"] + d["n"] - y.start == y.B + 1)


def _reclaim_past_max(y: _Sym) -> None:
    refs = [y.put(f"len_{x}")["ref"] for x in "abc"]
    for r in refs:
        y.consume(r)
    bound = y.cfg.max_object_size  # a reclaim that stops after one object's worth leaves no room
    y.put("len_d", "reclaim", constrain=lambda n: z3.Not(y.fits_after_reclaim(n, bound)))


def _id_wrap(y: _Sym) -> None:
    a = y.put("len_a")
    b = y.put("len_b")
    c = y.put("len_c")  # ids 2**31 - 2, 2**31 - 1, 0
    y.consume(a["ref"])
    y.free()
    y.consume(b["ref"])
    y.consume(c["ref"])
    y.put("len_d", "reclaim")
    y.steps.append(("raw", {"process": y.cfg.readers[0], "action": "get", "args": {"ref": "h2"}}))
    y.steps.append(("raw", {"process": y.cfg.readers[0], "action": "get", "args": {"ref": "h4"}}))


def _id_wrap_clear(y: _Sym) -> None:
    a = y.put("len_a")  # id 2**31 - 1
    y.s.add(a["address"] % y.B == 0)  # the first put after the clear lands on the same slot
    y.steps.append(("raw", {"process": "writer", "action": "clear", "args": {}}))
    y.start = y.end = z3.IntVal(0)
    y.chunks.clear()
    y.put("len_b")
    y.steps.append(("raw", {"process": y.cfg.readers[0], "action": "get", "args": {"ref": "h1"}}))
    y.steps.append(("raw", {"process": y.cfg.readers[0], "action": "get", "args": {"ref": "h2"}}))


def _counts_at_limit(y: _Sym) -> None:
    a = y.put("len_a")
    n = len(y.cfg.readers)
    wc = y.var("writer_count", 1, INT32_MAX)
    rc = y.var("reader_count", 0, INT32_MAX)
    y.s.add(wc * y.cfg.n_readers <= INT32_MAX, wc * y.cfg.n_readers > INT32_MAX - y.cfg.n_readers,
            rc + n == wc * y.cfg.n_readers)  # the last promised reads bring the count to the threshold
    y.steps.append(("raw_counts", (a["ref"], wc, rc)))
    y.consume(a["ref"])
    y.free()
    y.put("len_b")


EDGES: tuple[tuple[str, str, tuple[str, ...], Callable[[_Sym], None], bool, int | None], ...] = (
    ("tail-exact", "a chunk fills the tail exactly (end % B + n == B): no wrap jump", ("DISJ", "OOM"),
     _tail_exact, True, None),
    ("tail-miss-by-one", "a chunk one byte longer than the tail (end % B + n == B + 1): wrap jump", ("DISJ", "OOM"),
     _tail_miss, True, None),
    ("wrap-end-behind-start", "after a wrap jump the end lies physically before start", ("DISJ", "OOM", "FIFO"),
     _end_behind_start, False, None),
    ("wrap-start-renormalised", "a free moves start past B; start and end drop by B", ("DISJ", "OOM", "FIFO"),
     _start_renormalised, False, None),
    ("full-ring", "live chunks fill all B bytes; the next put is MemoryError", ("OOM", "DISJ"), _full_ring, False, None),
    ("oom-by-one", "a put one byte over the free room (end + n - start == B + 1)", ("OOM",), _oom_by_one, False, None),
    ("reclaim-past-max", "the put's reclaim must free more than max_object_size bytes (up to 2 x, vLLM's bound) "
     "before the chunk fits", ("OOM", "FIFO"), _reclaim_past_max, False, None),
    ("id-wrap", "ids 2**31 - 2, 2**31 - 1, 0, 1: reclaim and reads across the id wraparound", ("WRAP", "FIFO", "NRR"),
     _id_wrap, True, ID_MAX - 2),
    ("id-wrap-clear", "clear() right at id 2**31 - 1; the pre-clear handle is re-read", ("WRAP", "CLR", "NRR"),
     _id_wrap_clear, True, ID_MAX - 1),
    ("counts-at-limit", "writer_count * n_readers at the int32 limit: the last reads reach it and the chunk is freed",
     ("RC", "FIFO"), _counts_at_limit, False, None),
)


@lru_cache(maxsize=8)
def _programs(B: int, max_object_size: int, n_readers: int, readers: tuple[str, ...]) -> tuple[Program, ...]:
    cfg = SessionConfig(data_buffer_size=B, max_object_size=max_object_size, n_readers=n_readers, readers=readers)
    out = []
    for name, edge, props, build, warp, warp_id in EDGES:
        y = _Sym(cfg, warp, warp_id)
        build(y)
        steps = y.steps
        counts = [s for s in steps if s[0] == "raw_counts"]
        y.steps = [s for s in steps if s[0] != "raw_counts"]
        try:
            calls, values = y.solve(cfg)
        except ValueError as exc:
            out.append(Program(name, edge, props, [], warp, unreachable=str(exc)))
            continue
        for ref, wc, rc in (c[1] for c in counts):  # after the put that issued the handle
            at = next(i for i, c in enumerate(calls) if c["action"] == "put" and c["args"]["key"] == f"b{ref}") + 1
            calls.insert(at, {"process": "writer", "action": "warp_counts",
                              "args": {"ref": f"h{ref}", "writer_count": values["writer_count"],
                                       "reader_count": values["reader_count"]}})
        needs = any(c["action"] in ("warp", "warp_counts") for c in calls)
        out.append(Program(name, edge, props, calls, needs, values))
    return tuple(out)


def programs(cfg: SessionConfig | None = None, include_unreachable: bool = False) -> list[Program]:
    """The boundary program of every edge z3 can hit in the session geometry
    ``cfg`` (default :class:`~.session.SessionConfig`), in :data:`EDGES`
    order; deterministic for one geometry.  ``include_unreachable`` also
    returns the edges it cannot hit there (``unreachable`` says why, no calls),
    e.g. a wrap behind ``start`` needs three objects longer than the ring.
    """
    cfg = cfg or SessionConfig()
    ps = _programs(cfg.data_buffer_size, cfg.max_object_size, cfg.n_readers, tuple(cfg.readers))
    return [p for p in ps if include_unreachable or p.unreachable is None]


def run_program(target: Any, program: Program, config: SessionConfig | None = None) -> tuple[Any, Any]:
    """Run one program on a fresh session (model and ``target`` in lockstep,
    every property checked at every step).  Returns ``(session, violation)``:
    the :class:`~.session.PropertyViolation` raised (its ``steps`` are the
    trace), or None when the program passed.  The session is closed (LEAK checked).

    When the target issued a different number of handles than the model
    (a put failed on one side only, possible once a state divergence is
    excused), the program's later handle references no longer mean what z3
    planned, so it stops there (``session.stopped_early`` names the step).
    """
    from ..lockstep.session import Call, PropertyViolation, Session

    session = Session(target, config or SessionConfig())
    session.stopped_early = None
    base = 0  # the model's allocation count after the warp
    try:
        for c in program.calls:
            if len(session.refs) != session.state.abs_end - base:
                session.stopped_early = len(session.trace)
                break
            session.execute(Call.from_json(c))
            if c["action"] == "warp":
                base = session.state.abs_end
        session.close()
    except PropertyViolation as exc:
        if not session.closed:
            try:
                session.close()
            except PropertyViolation:
                pass
        return session, exc
    return session, None



def run_program_scheduled(target: Any, program: Program, config: SessionConfig, pool: Any,
                          lag: bool = True) -> tuple[Any, Any]:
    """Run one program on real processes (a :class:`~.procs.ProcessPool`: one
    writer, the readers) through :class:`~.schedule.ScheduledSession`, which
    checks NRR, CLR, RC, FIFO, DISJ after every scheduled step and LEAK at the end.

    ``lag``: each reader's get is started and left paused at its first yield
    point while the writer's next operation runs to completion, then resumed
    (a reader lagging across every edge: the free, the wrap jump, the id
    wraparound, the clear); otherwise every operation runs to completion in
    program order.  Returns ``(scheduled session, violation or None)``; like
    :func:`run_program`, a program whose handle the target never issued stops
    there (``stopped_early``).
    """
    from ..concurrency.schedule import ScheduledSession
    from ..lockstep.session import PropertyViolation

    s = ScheduledSession(pool, target, config)
    s.stopped_early = None
    paused: list[str] = []

    def finish(proc: str) -> None:
        while proc in s.runnable():
            s.execute({"process": proc, "kind": "advance"})

    try:
        for c in program.calls:
            proc, action, args = c["process"], c["action"], c["args"]
            if "ref" in args and not any(r.ref == args["ref"] for r in s.refs):
                s.stopped_early = len(s.trace)
                break
            if proc in paused:
                finish(proc)
                paused.remove(proc)
            if action == "warp_counts":  # the warped count stands in for that many gets (RC's count check)
                r = s.ref(args["ref"])
                s.gets_started[(r.address, r.id)] = s.gets_started.get((r.address, r.id), 0) + args["reader_count"]
            s.execute({"process": proc, "kind": "start", "action": action, "args": args})
            if lag and proc != "writer":
                paused.append(proc)
                continue
            finish(proc)
            if proc == "writer":
                for r in paused:
                    finish(r)
                paused.clear()
        for r in paused:
            finish(r)
        s.finish()
    except PropertyViolation as exc:
        s.finish_quietly()
        return s, exc
    return s, None
