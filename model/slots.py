"""The slot-flag protocol of vLLM's ``ShmRingBuffer``/``MessageQueue`` ring
(and, with deferred release, ``ShmTensorArena``) as a pure transition
system, at the protocol's atomicity: every flag write, the copy (begin and
end), every flag read a separate step, sequentially consistent (a fence is
what makes a real store's steps behave so).  Source: vLLM 0.33.0's
``shm_broadcast.py`` (``acquire_write``, ``acquire_read``) and
``shm_tensor_arena.py`` (``write_tensor``, ``_mark_released``), read
2026-12-02; the contract is docs/slots.md.

Each slot has a metadata row ``[written, done_0, ..., done_{R-1}]``.  The
writer, at its ``current_idx``, waits until the slot is unwritten or done by
every reader, clears ``written`` (the claim), copies the message (two steps:
the bytes are torn in between), resets every reader's flag, sets
``written``, and moves on.  A reader, at its own ``current_idx``, waits until
the slot is written and not done by it, reads it (one step: it holds the
bytes), then sets its flag (the release) and moves on.

:func:`successors` is the transition function, :func:`violations` the
invariants, :func:`explore` breadth-first search over the reachable states
(the state count the TLA+ spec's TLC run must equal, issue 16).  Faults
(``Config.faults``) are the protocol's known wrong orders:

* ``no_claim``: the writer does not clear ``written`` before copying;
* ``reset_first``: it resets the readers' flags before the copy (with
  ``no_claim``: a reader sees a written slot not yet read by it, mid-copy);
* ``early_release``: a reader sets its flag before it has read (the arena's
  release before its tensor is dropped);
* ``free_ignores_readers``: the writer reuses a written slot some reader has
  not released;
* ``publish_first``: ``written`` set before the flags are reset (the order
  vLLM's comment warns against).  Harmless under sequential consistency: a
  reader that sees the slot written and its stale flag set waits, and reads
  once the flags are reset (:func:`explore` finds no violation; a weak
  memory order is outside this model).

Imports nothing of ours.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

TORN = -2
"""``data`` of a slot whose copy has begun and not ended."""
EMPTY = -1
"""``data`` of a slot never written."""

FAULTS = frozenset({"no_claim", "reset_first", "early_release", "free_ignores_readers", "publish_first"})
FENCES = frozenset({"claim", "publish"})
"""Where the writer may fence under ``tso``/``pso``: after its claim, and
between the flag reset and ``written`` (``publish``).  vLLM 0.33.0 has the
second only (``VLLM_FENCES``); impl's ``SlotArena``/``SlotQueue`` have both."""
VLLM_FENCES = frozenset({"publish"})
MEMORY = ("sc", "tso", "pso")
"""Store orders: ``sc`` (every store visible at once), ``tso`` (x86: each
writer store waits in a FIFO buffer, drained in order), ``pso`` (stores to
different locations drain in any order, as on ARM and POWER; to one
location in order)."""


@dataclass(frozen=True)
class SlotProperty:
    """One property of the slot protocol (docs/slots.md)."""

    id: str
    statement: str
    kind: str  # safety | liveness


PROPERTIES: tuple[SlotProperty, ...] = (
    SlotProperty("NRR", "a reader's bytes never change while it holds them: no slot is rewritten before every "
                        "reader released it, and no reader reads a slot mid-copy", "safety"),
    SlotProperty("FIFO", "each reader receives the messages in the order written, none lost and none twice",
                 "safety"),
    SlotProperty("PROG", "once every reader has released a slot, the writer can reuse it; a reader that never "
                         "releases is named", "liveness"),
    SlotProperty("LIVE", "the arena's writer never blocks (no free slot: it falls back); every wait of the queue is "
                         "bounded by its timeout", "liveness"),
    SlotProperty("DISJ", "a write changes its own slot only: slots and metadata rows never overlap", "safety"),
    SlotProperty("FALLBACK", "a message over the slot size, or one finding no free slot, takes the caller's path "
                             "and changes nothing in the arena", "safety"),
    SlotProperty("CONFORMANCE", "the metadata rows equal the model's after every call", "refinement"),
)


@dataclass(frozen=True)
class Config:
    """``readers`` (R >= 1), ``slots`` (S >= 1), ``messages`` the writer
    writes (0..messages-1), ``faults`` (a subset of :data:`FAULTS`).

    Raises:
        ValueError: a size below 1 or an unknown fault (from ``__post_init__``).
    """

    readers: int = 2
    slots: int = 2
    messages: int = 3
    faults: frozenset[str] = field(default_factory=frozenset)
    memory: str = "sc"
    """The writer's store order (:data:`MEMORY`)."""
    fences: frozenset[str] = VLLM_FENCES
    """The writer's fences (:data:`FENCES`), each a step of its own under
    ``tso`` and ``pso`` that waits until every store of the writer is
    visible (under ``sc`` a fence changes nothing and is no step)."""

    def __post_init__(self):
        if self.memory not in MEMORY:
            raise ValueError(f"unknown memory order {self.memory!r} (known: {', '.join(MEMORY)})")
        if set(self.fences) - FENCES:
            raise ValueError(f"unknown fence {sorted(set(self.fences) - FENCES)[0]!r} (known: claim, publish)")
        for name in ("readers", "slots", "messages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)}")
        unknown = set(self.faults) - FAULTS
        if unknown:
            raise ValueError(f"unknown fault {sorted(unknown)[0]!r} (known: {', '.join(sorted(FAULTS))})")


class State(NamedTuple):
    written: tuple[int, ...]
    done: tuple[tuple[int, ...], ...]  # done[slot][reader]
    data: tuple[int, ...]  # message id, EMPTY or TORN
    w_pc: str  # idle | copy_end | reset | publish | next (| reset2 after publish_first)
    w_idx: int
    w_msg: int
    r_pc: tuple[str, ...]  # check | read | release (| read_after_release under early_release)
    r_idx: tuple[int, ...]
    r_hold: tuple[int, ...]  # the message id a reader read and still holds (EMPTY: none)
    r_got: tuple[tuple[int, ...], ...]  # what each reader received, in order
    w_buf: tuple[tuple[str, int, int, int], ...] = ()
    """The writer's stores not yet visible, oldest first: ``(kind, slot,
    reader, value)``, kind ``w`` (written), ``d`` (done; reader 0-based) or
    ``x`` (data; reader -1).  Always empty under ``sc``."""


def initial(cfg: Config) -> State:
    r = cfg.readers
    return State((0,) * cfg.slots, ((0,) * r,) * cfg.slots, (EMPTY,) * cfg.slots, "idle", 0, 0,
                 ("check",) * r, (0,) * r, (EMPTY,) * r, ((),) * r)


def _set(t: tuple, i: int, v) -> tuple:
    return t[:i] + (v,) + t[i + 1:]


def _commit(s: State, entry: tuple[str, int, int, int]) -> State:
    """``s`` with one store made visible."""
    kind, i, r, v = entry
    if kind == "w":
        return s._replace(written=_set(s.written, i, v))
    if kind == "x":
        return s._replace(data=_set(s.data, i, v))
    return s._replace(done=_set(s.done, i, _set(s.done[i], r, v)))


def _store(cfg: Config, s: State, *entries: tuple[str, int, int, int]) -> State:
    """The writer's stores: visible at once under ``sc``, else buffered."""
    if cfg.memory == "sc":
        for e in entries:
            s = _commit(s, e)
        return s
    return s._replace(w_buf=s.w_buf + tuple(entries))


def _wread(s: State, kind: str, i: int, r: int = -1) -> int:
    """A location as the writer reads it: its own newest buffered store, else memory."""
    for k, j, q, v in reversed(s.w_buf):
        if (k, j, q) == (kind, i, r):
            return v
    return s.written[i] if kind == "w" else s.data[i] if kind == "x" else s.done[i][r]


def successors(cfg: Config, s: State) -> Iterator[tuple[str, State]]:
    """Every step enabled in ``s``: ``(label, next state)``; labels are
    ``writer <step>`` or ``r<k> <step>``."""
    f = cfg.faults
    i = s.w_idx
    weak = cfg.memory != "sc"
    # a buffered store becoming visible: the oldest (tso), or any with no older one to its location (pso)
    for k, e in enumerate(s.w_buf):
        if k > 0 and cfg.memory == "tso":
            break
        if any(o[:3] == e[:3] for o in s.w_buf[:k]):
            continue
        yield f"writer drain {e[0]}[{e[1]}{'' if e[2] < 0 else f',{e[2]}'}]={e[3]}", _commit(
            s._replace(w_buf=s.w_buf[:k] + s.w_buf[k + 1:]), e)
    if s.w_pc == "idle" and s.w_msg < cfg.messages:
        free = (not _wread(s, "w", i) or all(_wread(s, "d", i, r) for r in range(cfg.readers))
                or "free_ignores_readers" in f)
        if free:
            nxt = s._replace(w_pc="reset" if "reset_first" in f else "copy_begin")
            if "no_claim" not in f:
                nxt = _store(cfg, nxt, ("w", i, -1, 0))
                if weak and "claim" in cfg.fences:
                    nxt = nxt._replace(w_pc="fence_claim:" + nxt.w_pc)
            yield "writer claim", nxt
    elif s.w_pc.startswith("fence_claim:"):
        if not s.w_buf:  # the claim visible before anything else of the copy
            yield "writer fence", s._replace(w_pc=s.w_pc.split(":", 1)[1])
    elif s.w_pc == "copy_begin":
        yield "writer copy_begin", _store(cfg, s._replace(w_pc="copy_end"), ("x", i, -1, TORN))
    elif s.w_pc == "copy_end":
        after = "publish" if "reset_first" in f else ("publish" if "publish_first" in f else "reset")
        yield "writer copy_end", _store(cfg, s._replace(w_pc=after), ("x", i, -1, s.w_msg))
    elif s.w_pc == "reset":
        after = "copy_begin" if "reset_first" in f else ("next" if "publish_first" in f else "publish")
        if after == "publish" and weak and "publish" in cfg.fences:
            after = "fence"
        yield "writer reset_flags", _store(cfg, s._replace(w_pc=after),
                                           *(("d", i, r, 0) for r in range(cfg.readers)))
    elif s.w_pc == "fence":
        if not s.w_buf:  # vLLM's memory_fence() between the reset and ``written``: waits until all is visible
            yield "writer fence", s._replace(w_pc="publish")
    elif s.w_pc == "publish":
        after = "reset" if "publish_first" in f and "reset_first" not in f else "next"
        yield "writer publish", _store(cfg, s._replace(w_pc=after), ("w", i, -1, 1))
    elif s.w_pc == "next":
        yield "writer advance", s._replace(w_idx=(i + 1) % cfg.slots, w_msg=s.w_msg + 1, w_pc="idle")
    for r in range(cfg.readers):
        j, pc = s.r_idx[r], s.r_pc[r]
        name = f"r{r + 1}"
        if pc == "check" and len(s.r_got[r]) < cfg.messages:
            if s.written[j] and not s.done[j][r]:
                if "early_release" in f:  # the flag first, then the read
                    yield f"{name} release", s._replace(done=_set(s.done, j, _set(s.done[j], r, 1)),
                                                        r_pc=_set(s.r_pc, r, "read_late"))
                else:
                    yield f"{name} acquire", s._replace(r_pc=_set(s.r_pc, r, "read"))
        elif pc in ("read", "read_late"):
            got = s.data[j]
            nxt = s._replace(r_hold=_set(s.r_hold, r, got), r_got=_set(s.r_got, r, s.r_got[r] + (got,)))
            if pc == "read_late":
                nxt = nxt._replace(r_pc=_set(s.r_pc, r, "check"), r_idx=_set(s.r_idx, r, (j + 1) % cfg.slots),
                                   r_hold=_set(s.r_hold, r, EMPTY))
                yield f"{name} read", nxt
            else:
                yield f"{name} read", nxt._replace(r_pc=_set(s.r_pc, r, "release"))
        elif pc == "release":
            yield f"{name} release", s._replace(done=_set(s.done, j, _set(s.done[j], r, 1)),
                                                r_pc=_set(s.r_pc, r, "check"), r_idx=_set(s.r_idx, r, (j + 1) % cfg.slots),
                                                r_hold=_set(s.r_hold, r, EMPTY))


def violations(cfg: Config, s: State) -> list[tuple[str, str]]:
    """The invariants broken in ``s``: ``(property id, message)``."""
    out = []
    for r in range(cfg.readers):
        name = f"r{r + 1}"
        got = s.r_got[r]
        if got and got[-1] == TORN:
            out.append(("NRR", f"{name} read a slot mid-copy (its bytes torn)"))
        hold = s.r_hold[r]
        if s.r_pc[r] == "release" and hold != s.data[s.r_idx[r]]:
            out.append(("NRR", f"{name} holds message {hold} of slot {s.r_idx[r]}, which now holds "
                               f"{'a torn copy' if s.data[s.r_idx[r]] == TORN else s.data[s.r_idx[r]]}"))
        clean = tuple(m for m in got if m != TORN)
        if clean != tuple(range(len(clean))):
            out.append(("FIFO", f"{name} received {list(clean)}, not {list(range(len(clean)))}"))
    return out


@dataclass
class Exploration:
    """What :func:`explore` found: ``states`` (distinct reachable states),
    ``violation`` (the first broken invariant in BFS order: property,
    message and the shortest trace of step labels to it, or None), and
    ``deadlocks`` (non-final states with no step: a PROG counterexample)."""

    states: int
    violation: tuple[str, str, list[str]] | None = None
    deadlocks: int = 0
    deadlock_trace: list[str] | None = None


def explore(cfg: Config, limit: int = 2_000_000) -> Exploration:
    """Breadth-first search of the reachable states; stops at the first
    violation (its trace is a shortest one).

    Raises:
        RuntimeError: more than ``limit`` states (the search is refused, not cut short silently).
    """
    start = initial(cfg)
    parent: dict[State, tuple[State, str] | None] = {start: None}
    queue = deque([start])
    found = Exploration(0)

    def trace(s: State) -> list[str]:
        out = []
        while parent[s] is not None:
            s, label = parent[s]
            out.append(label)
        return out[::-1]

    while queue:
        s = queue.popleft()
        broken = violations(cfg, s)
        if broken:
            found.states = len(parent)
            found.violation = (broken[0][0], broken[0][1], trace(s))
            return found
        steps = list(successors(cfg, s))
        final = s.w_msg == cfg.messages and all(len(g) == cfg.messages for g in s.r_got) and not s.w_buf
        if not steps and not final:
            found.deadlocks += 1
            if found.deadlock_trace is None:
                found.deadlock_trace = trace(s)
        for label, nxt in steps:
            if nxt not in parent:
                if len(parent) >= limit:
                    raise RuntimeError(f"more than {limit} states: give a smaller Config")
                parent[nxt] = (s, label)
                queue.append(nxt)
    found.states = len(parent)
    return found


__all__ = ["Config", "EMPTY", "Exploration", "FAULTS", "PROPERTIES", "SlotProperty", "State", "TORN", "explore",
           "initial", "successors", "violations"]
