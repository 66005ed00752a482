"""The store at its atomic steps: one writer and N readers, interleaved.

This is the transition system of ``tla/ShmStore.tla`` written in Python, with
the ring arithmetic taken from :mod:`.ring` and the free threshold from
:mod:`.store` (the same definitions the lockstep model and the z3 obligations
use).  ``shmspec model`` enumerates it breadth-first and compares the states it
reaches with the states TLC reaches (:func:`explore`, :func:`canonical`), and
replays TLC's counterexamples on it (:func:`follow`).

Units and values (as in the spec):

- One *unit* is 8 bytes, the size of a chunk header; a chunk of size ``n``
  units (header included) holds ``n - 1`` units of payload.  Addresses are
  virtual units (``address % ring_units`` is the physical unit).
- Ids are modulo ``id_mod`` (the store's 2**31, made small so that
  wraparound is reached): the id after ``i`` is ``next_id(i) % id_mod``.
- Shared memory is one cell per unit, ``(id, size, cnt, obj)``: a header
  cell's id, chunk size and reader_count, a payload cell's object tag.  The
  object put by allocation ``a`` has tag ``a + 1``; :data:`NO_OBJ` is
  "nothing deserialized", :data:`GARBAGE` the bytes of more than one object.
- A handle is ``(abs, addr, id, obj)``: allocation number, virtual address,
  id, and the tag of the object put under it.

Profiles: ``hardened`` is impl/'s reader protocol (window check against the
published absolute counters, copy, recheck, count under the lock that the
writer holds while it frees or clears); otherwise vLLM 0.11-0.33's (one id
check against the header in shared memory, deserialize in place, count
whatever sits at the handle's address).  ``clear_resets``: ``clear()`` resets
ids to 0 (vLLM < 0.32).  ``read_once``: clients keep the read-once protocol.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import permutations
from typing import Any, NamedTuple

from .ring import fits, free_step as ring_free_step, ids_after_clear, next_id, placement, renormalise
from .store import reads_complete

NO_OBJ = 0
GARBAGE = -1
NO_HANDLE = (0, 0, 0, NO_OBJ)
WRITER = "writer"
READER_PCS = ("idle", "checked", "read", "copied", "rechecked", "counted")


@dataclass(frozen=True)
class Config:
    """The spec's constants (a TLC config's ``CONSTANTS`` block).

    Attributes:
        readers: reader names (the spec's model values), sorted.
        ring_units: ring size B, in units of 8 bytes.
        sizes: chunk sizes a put may take, units, header included (>= 2).
        keys: object keys (model values), sorted.
        id_mod: ids are modulo this.
        max_puts: bound on allocations.
        max_reads: bound on gets per reader and handle.
        hardened, read_once, clear_resets: the protocol switches above.
    """

    readers: tuple[str, ...]
    ring_units: int
    sizes: tuple[int, ...]
    keys: tuple[str, ...]
    id_mod: int
    max_puts: int
    max_reads: int
    hardened: bool
    read_once: bool
    clear_resets: bool

    @classmethod
    def from_constants(cls, c: dict[str, Any]) -> "Config":
        """From parsed TLA+ values keyed by the spec's constant names.

        Raises:
            ValueError: a constant is missing or out of range.
        """
        try:
            cfg = cls(tuple(sorted(c["Readers"])), int(c["RingUnits"]), tuple(sorted(c["Sizes"])),
                      tuple(sorted(c["Keys"])), int(c["IdMod"]), int(c["MaxPuts"]), int(c["MaxReads"]),
                      bool(c["Hardened"]), bool(c["ReadOnce"]), bool(c["ClearResets"]))
        except KeyError as e:
            raise ValueError(f"constant {e.args[0]} is not set") from None
        if not cfg.readers or cfg.ring_units < 2 or min(cfg.sizes) < 2 or cfg.id_mod < 1:
            raise ValueError(f"constants out of range: {cfg}")
        return cfg


class State(NamedTuple):
    """One state; the fields are the spec's variables (in snake case).

    Per-reader fields are tuples in :attr:`Config.readers` order; ``starts``
    is, per reader, a tuple over allocation numbers ``0 .. max_puts - 1``.
    """

    start: int
    end: int
    id_start: int
    id_end: int
    chunks: tuple[tuple[int, int, int, int, str], ...]   # (abs, addr, size, id, key), oldest first
    mem: tuple[tuple[int, int, int, int], ...]            # unit -> (id, size, cnt, obj)
    wpc: str                                              # "idle" | "header" | "payload"
    pub_start: int
    pub_end: int
    puts: int
    issued: tuple[tuple[int, int, int, int], ...]         # sorted handles
    clear_at: int
    pc: tuple[str, ...]
    hd: tuple[tuple[int, int, int, int], ...]
    hsz: tuple[int, ...]
    copy: tuple[int, ...]
    got: tuple[int, ...]
    floor: tuple[int, ...]
    starts: tuple[tuple[int, ...], ...]


class Step(NamedTuple):
    """An action with its arguments: ``name`` (a step of :mod:`.steps`), the
    ``process`` taking it, and ``args`` as ``(name, value)`` pairs."""

    name: str
    process: str
    args: tuple[tuple[str, Any], ...] = ()


def initial(cfg: Config) -> State:
    """The spec's ``Init``."""
    n = len(cfg.readers)
    return State(0, 0, 0, 0, (), ((0, 0, 0, NO_OBJ),) * cfg.ring_units, "idle", 0, 0, 0, (), 0,
                 ("idle",) * n, (NO_HANDLE,) * n, (0,) * n, (NO_OBJ,) * n, (NO_OBJ,) * n, (0,) * n,
                 ((0,) * cfg.max_puts,) * n)


def _set(t: tuple, i: int, v: Any) -> tuple:
    return t[:i] + (v,) + t[i + 1:]


def _in_window(s: State, h: tuple) -> bool:
    return s.pub_start <= h[0] < s.pub_end


def read_at(cfg: Config, s: State, addr: int, n: int) -> int:
    """What a reader deserializes from the ``n - 1`` payload cells after
    ``addr``: the one tag they hold, else :data:`GARBAGE`."""
    p = addr % cfg.ring_units
    tags = {s.mem[u][3] for u in range(p + 1, p + n) if u < cfg.ring_units}
    return next(iter(tags)) if len(tags) == 1 else GARBAGE


def successors(cfg: Config, s: State) -> Iterator[tuple[Step, State]]:
    """Every enabled action of the spec's ``Next`` with its successor state,
    one per binding of the action's arguments (as TLC enumerates them)."""
    B = cfg.ring_units
    # ---- the writer
    if s.wpc == "idle" and s.puts < cfg.max_puts:
        live_keys = {c[4] for c in s.chunks}
        for k in cfg.keys:
            if k in live_keys:
                continue
            for n in cfg.sizes:
                a = placement(s.end, B, n)
                if not fits(a, n, s.start, B):
                    continue
                _, _, cnt, obj = s.mem[a % B]
                yield (Step("header_write", WRITER, (("key", k), ("size", n))),
                       s._replace(chunks=s.chunks + ((s.puts, a, n, s.id_end, k),),
                                  mem=_set(s.mem, a % B, (s.id_end, n, cnt, obj)), end=a + n,
                                  id_end=next_id(s.id_end) % cfg.id_mod, puts=s.puts + 1, wpc="header"))
    if s.wpc == "header":
        ab, a, n, _, _ = s.chunks[-1]
        p = a % B
        mem = tuple((m[0], m[1], 0, m[3]) if u == p else (m[0], m[1], m[2], ab + 1) if p < u < p + n else m
                    for u, m in enumerate(s.mem))
        yield Step("payload_write", WRITER, (("abs", ab),)), s._replace(mem=mem, wpc="payload")
    if s.wpc == "payload":
        ab, a, _, i, _ = s.chunks[-1]
        yield (Step("publish", WRITER, (("abs", ab),)),
               s._replace(issued=tuple(sorted(s.issued + ((ab, a, i, ab + 1),))), pub_end=ab + 1, wpc="idle"))
    if s.wpc == "idle" and s.chunks:
        head = s.chunks[0]
        if head[3] == s.id_start and reads_complete(s.mem[head[1] % B][2], 1, len(cfg.readers)):
            rest = s.chunks[1:]
            id_start = next_id(s.id_start) % cfg.id_mod
            has_next = bool(rest) and rest[0][3] == id_start
            start, end = ring_free_step(s.start, s.end, has_next, rest[0][1] if rest else 0, B)
            start, end = renormalise(start, end, B)
            yield (Step("free_step", WRITER, (("abs", head[0]),)),
                   s._replace(chunks=rest, id_start=id_start, start=start, end=end, pub_start=head[0] + 1))
    if s.wpc == "idle":
        id_end = 0 if cfg.clear_resets else s.id_end
        yield (Step("clear", WRITER),
               s._replace(chunks=(), start=0, end=0, id_start=ids_after_clear(id_end, not cfg.clear_resets),
                          id_end=id_end, pub_start=s.puts, clear_at=s.puts))
    # ---- the readers
    for i, r in enumerate(cfg.readers):
        yield from _reader(cfg, s, i, r)


def _reader(cfg: Config, s: State, i: int, r: str) -> Iterator[tuple[Step, State]]:
    B = cfg.ring_units
    pc = s.pc[i]
    if pc == "idle":
        bound = 1 if cfg.read_once else cfg.max_reads
        for h in s.issued:
            if s.starts[i][h[0]] >= bound:
                continue
            hdr = s.mem[h[1] % B]
            ok = _in_window(s, h) if cfg.hardened else hdr[0] == h[2]
            yield (Step("reader_check", r, (("handle", h),)),
                   s._replace(starts=_set(s.starts, i, _set(s.starts[i], h[0], s.starts[i][h[0]] + 1)),
                              hd=_set(s.hd, i, h), floor=_set(s.floor, i, s.clear_at),
                              got=_set(s.got, i, NO_OBJ), copy=_set(s.copy, i, NO_OBJ),
                              hsz=_set(s.hsz, i, hdr[1]), pc=_set(s.pc, i, "checked" if ok else "idle")))
    elif pc == "copied":
        ok = _in_window(s, s.hd[i])
        yield Step("reader_check", r), s._replace(pc=_set(s.pc, i, "rechecked" if ok else "idle"))
    elif pc == "checked":
        v = read_at(cfg, s, s.hd[i][1], s.hsz[i])
        if cfg.hardened:
            yield Step("payload_read", r), s._replace(copy=_set(s.copy, i, v), pc=_set(s.pc, i, "copied"))
        else:
            yield Step("payload_read", r), s._replace(got=_set(s.got, i, v), pc=_set(s.pc, i, "read"))
    elif pc in ("read", "rechecked"):
        if cfg.hardened and not _in_window(s, s.hd[i]):
            yield Step("counter_increment", r), s._replace(pc=_set(s.pc, i, "idle"))
        else:
            p = s.hd[i][1] % B
            m = s.mem[p]
            yield (Step("counter_increment", r),
                   s._replace(mem=_set(s.mem, p, (m[0], m[1], m[2] + 1, m[3])),
                              pc=_set(s.pc, i, "counted" if cfg.hardened else "idle")))
    elif pc == "counted":
        yield Step("deserialize", r), s._replace(got=_set(s.got, i, s.copy[i]), pc=_set(s.pc, i, "idle"))


# ---------------------------------------------------------------- properties
def _phys_extent(cfg: Config, c: tuple) -> tuple[int, int]:
    p = c[1] % cfg.ring_units
    return p, p + c[2]


def invariants(cfg: Config, s: State) -> dict[str, bool]:
    """The spec's invariants on ``s`` (property id -> holds); the same
    definitions as ``ShmStore.tla``'s NRR, CLR, DISJ, FIFO, WRAP, DUP, RC."""
    B = cfg.ring_units
    ch = s.chunks
    ext = [_phys_extent(cfg, c) for c in ch]
    offs = [(c[1] - s.start) % B for c in ch]
    published = len(ch) if s.wpc == "idle" else len(ch) - 1
    return {
        "NRR": all(g in (NO_OBJ, h[3]) for g, h in zip(s.got, s.hd)),
        "CLR": all(g == NO_OBJ or h[0] >= f for g, h, f in zip(s.got, s.hd, s.floor)),
        "DISJ": all(e[1] <= B for e in ext) and all(
            ext[i][1] <= ext[j][0] or ext[j][1] <= ext[i][0] for i in range(len(ch)) for j in range(i + 1, len(ch))),
        "FIFO": all(c[0] == ch[0][0] + i and offs[i] + c[2] <= s.end - s.start
                    and (offs[i] == 0 if i == 0 else offs[i - 1] < offs[i]) for i, c in enumerate(ch)),
        "WRAP": len({c[3] for c in ch}) == len(ch),
        "DUP": len({c[4] for c in ch}) == len(ch),
        "RC": all(s.mem[c[1] % B][2] <= sum(st[c[0]] for st in s.starts) for c in ch[:published]),
    }


# ------------------------------------------------------- symmetry, search
def canonical(cfg: Config, s: State) -> State:
    """The least state (tuple order) among ``s`` with readers and keys
    permuted: one representative per symmetry orbit, as TLC's ``SYMMETRY``
    (the spec's ``Symmetry``: permutations of Readers and of Keys)."""
    best = None
    n = len(cfg.readers)
    for rp in permutations(range(n)):
        per = s._replace(pc=tuple(s.pc[j] for j in rp), hd=tuple(s.hd[j] for j in rp),
                         hsz=tuple(s.hsz[j] for j in rp), copy=tuple(s.copy[j] for j in rp),
                         got=tuple(s.got[j] for j in rp), floor=tuple(s.floor[j] for j in rp),
                         starts=tuple(s.starts[j] for j in rp))
        for kp in permutations(cfg.keys):
            ren = dict(zip(cfg.keys, kp))
            cand = per._replace(chunks=tuple(c[:4] + (ren[c[4]],) for c in per.chunks))
            if best is None or cand < best:
                best = cand
    return best


@dataclass
class Exploration:
    """A breadth-first search: the canonical states reached, states generated
    (successors computed, as TLC counts them, plus the initial state), the
    depth (number of BFS levels, the initial state's level is 1), the
    invariants violated somewhere, and whether ``max_states`` cut it short."""

    states: set[State]
    generated: int
    depth: int
    violated: dict[str, State] = field(default_factory=dict)
    complete: bool = True


def explore(cfg: Config, max_states: int | None = None) -> Exploration:
    """Breadth-first search of the reachable states, one per symmetry orbit."""
    init = canonical(cfg, initial(cfg))
    seen = {init}
    frontier = [init]
    generated, depth = 1, 1
    violated: dict[str, State] = {}
    _note(cfg, init, violated)
    while frontier:
        nxt = []
        for s in frontier:
            for _, t in successors(cfg, s):
                generated += 1
                c = canonical(cfg, t)
                if c not in seen:
                    seen.add(c)
                    nxt.append(c)
                    _note(cfg, c, violated)
                    if max_states is not None and len(seen) >= max_states:
                        return Exploration(seen, generated, depth + 1, violated, complete=False)
        if nxt:
            depth += 1
        frontier = nxt
    return Exploration(seen, generated, depth, violated)


def _note(cfg: Config, s: State, violated: dict[str, State]) -> None:
    for name, ok in invariants(cfg, s).items():
        if not ok and name not in violated:
            violated[name] = s


def follow(cfg: Config, start: State, name: str, target: State) -> tuple[Step, State] | None:
    """The step named ``name`` from ``start`` whose successor is ``target`` up
    to symmetry, with the successor; ``None`` when the model has no such step
    (the model departs from the trace here)."""
    want = canonical(cfg, target)
    for step, t in successors(cfg, start):
        if step.name == name and canonical(cfg, t) == want:
            return step, t
    return None


__all__ = ["Config", "Exploration", "GARBAGE", "NO_HANDLE", "NO_OBJ", "State", "Step", "canonical",
           "explore", "follow", "initial", "invariants", "read_at", "successors"]
