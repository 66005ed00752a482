"""The store at its atomic steps: one writer and N readers, interleaved.

This is the transition system of ``tla/ShmStore.tla`` written in Python, with
the ring arithmetic taken from :mod:`.ring` and the free thresholds from
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

Profiles: ``hardened`` is impl/'s protocol, segment v2
(docs/impl-protocol.md): a reader's get is ``pin`` (hazard pin on the
handle's allocation, then a fence), ``reader_check`` (live in the published
window, or an intact chunk of the latest clear's drain window; the header's
id), ``deserialize`` (in place, under the pin) and ``counter_increment`` (its
own ack word, for a chunk that was live at the check) and ``unpin`` (the pin
released); a get whose check fails, or that read a drain chunk, releases its
pin in that step instead.  The writer's put is ``pin_scan`` (plan, publish
the kills, read the pins), ``pin_wait`` (blocked while a pin it found names a
chunk no longer live), ``header_write``, ``payload_write``, ``publish``; its
``free_unused`` is one ``free_step`` per chunk it plans to reclaim (each
checks the next chunk), then ``retire`` (the planned chunks go at once); a
chunk is reclaimable when every reader acknowledged it.  Otherwise vLLM
0.11-0.33's (one id check against the header in shared memory, deserialize in
place, count whatever sits at the handle's address; the put allocates at
``header_write``).  ``clear_resets``: ``clear()`` resets ids to 0 (vLLM <
0.32).  ``read_once``: clients keep the read-once protocol.  ``max_chunks``
(impl's ``K``, ack words modulo ``K``), ``fenced`` (the reader's fence between
pin and check), ``scan_pins`` (the writer's scan) and ``writer_fenced`` (the
writer's fence between its drain store and its scan; without it the drain
shows only at ``header_write``) are impl's; the last three switched off model
the faults a must-fail config checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import permutations
from typing import Any, NamedTuple

from .ring import fits, free_step as ring_free_step, ids_after_clear, next_id, placement, renormalise
from .store import per_reader_complete, reads_complete

NO_OBJ = 0
GARBAGE = -1
NO_HANDLE = (0, 0, 0, NO_OBJ)
WRITER = "writer"
READER_PCS = ("idle", "pinned", "checked", "read", "acked", "dead")
WRITER_PCS = ("idle", "wait", "ready", "header", "payload", "freeing", "retire")
VERDICTS = ("none", "live", "drain", "stale")


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
        max_chunks: impl's live-chunk bound ``K`` (``MaxChunks``).
        fenced: impl's reader fences between its pin and its check (``Fenced``).
        scan_pins: impl's writer scans the pins and waits (``ScanPins``).
        writer_fenced: impl's writer fences between publishing the drain a
            put kills and reading the pins (``WriterFenced``).
        mortal: readers whose process may die anywhere (``Mortal``, a
            fault; the step ``die``): impl's writer forfeits a dead reader's
            promised reads and ends a wait for its pin, vLLM's count never
            gets its reads.  Sorted; empty in the usual configs.
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
    max_chunks: int = 2
    fenced: bool = True
    scan_pins: bool = True
    writer_fenced: bool = True
    mortal: tuple[str, ...] = ()

    @classmethod
    def from_constants(cls, c: dict[str, Any]) -> "Config":
        """From parsed TLA+ values keyed by the spec's constant names.

        Raises:
            ValueError: a constant is missing or out of range.
        """
        try:
            cfg = cls(tuple(sorted(c["Readers"])), int(c["RingUnits"]), tuple(sorted(c["Sizes"])),
                      tuple(sorted(c["Keys"])), int(c["IdMod"]), int(c["MaxPuts"]), int(c["MaxReads"]),
                      bool(c["Hardened"]), bool(c["ReadOnce"]), bool(c["ClearResets"]), int(c["MaxChunks"]),
                      bool(c["Fenced"]), bool(c["ScanPins"]), bool(c["WriterFenced"]),
                      tuple(sorted(c.get("Mortal", ()))))
        except KeyError as e:
            raise ValueError(f"constant {e.args[0]} is not set") from None
        if (not cfg.readers or cfg.ring_units < 2 or min(cfg.sizes) < 2 or cfg.id_mod < 1
                or cfg.max_chunks < 1 or not set(cfg.mortal) <= set(cfg.readers)):
            raise ValueError(f"constants out of range: {cfg}")
        return cfg


class State(NamedTuple):
    """One state; the fields are the spec's variables (in snake case).

    Per-reader fields are tuples in :attr:`Config.readers` order; ``starts``
    and ``acks`` are, per reader, tuples over allocation numbers ``0 ..
    max_puts - 1``; ``wwait`` (the spec's set of readers) is a tuple of
    booleans in reader order; ``pend`` is ``()`` or ``(chunk,)``.
    """

    start: int
    end: int
    id_start: int
    id_end: int
    chunks: tuple[tuple[int, int, int, int, str], ...]   # (abs, addr, size, id, key), oldest first
    mem: tuple[tuple[int, int, int, int], ...]            # unit -> (id, size, cnt, obj)
    wpc: str                                              # one of WRITER_PCS
    pub_start: int
    pub_end: int
    puts: int
    issued: tuple[tuple[int, int, int, int], ...]         # sorted handles
    clear_at: int
    pend: tuple[tuple[int, int, int, int, str], ...]      # () or (the chunk being put,), Hardened
    wwait: tuple[bool, ...]                               # readers the writer waits for, Hardened
    planned: int                                          # chunks the running reclaim planned, Hardened
    drain_lo: int
    drain_hi: int
    drain_hw: int
    pc: tuple[str, ...]
    hd: tuple[tuple[int, int, int, int], ...]
    hsz: tuple[int, ...]
    got: tuple[int, ...]
    floor: tuple[int, ...]
    starts: tuple[tuple[int, ...], ...]
    pins: tuple[int, ...]                                 # 0, or 1 + the pinned allocation
    verdict: tuple[str, ...]                              # one of VERDICTS
    acks: tuple[tuple[int, ...], ...]


class Step(NamedTuple):
    """An action with its arguments: ``name`` (a step of :mod:`.steps`), the
    ``process`` taking it, and ``args`` as ``(name, value)`` pairs."""

    name: str
    process: str
    args: tuple[tuple[str, Any], ...] = ()


def initial(cfg: Config) -> State:
    """The spec's ``Init``."""
    n = len(cfg.readers)
    zeros = ((0,) * cfg.max_puts,) * n
    return State(0, 0, 0, 0, (), ((0, 0, 0, NO_OBJ),) * cfg.ring_units, "idle", 0, 0, 0, (), 0,
                 (), (False,) * n, 0, 0, 0, 0,
                 ("idle",) * n, (NO_HANDLE,) * n, (0,) * n, (NO_OBJ,) * n, (0,) * n, zeros,
                 (0,) * n, ("none",) * n, zeros)


def _set(t: tuple, i: int, v: Any) -> tuple:
    return t[:i] + (v,) + t[i + 1:]


def _set2(t: tuple, i: int, j: int, v: Any) -> tuple:
    return _set(t, i, _set(t[i], j, v))


def _in_window(s: State, h: tuple) -> bool:
    return s.pub_start <= h[0] < s.pub_end


def ctl(cfg: Config, s: State, h: tuple) -> str:
    """impl: what the control block says of handle ``h``'s allocation: the
    spec's ``Ctl`` (``"live"``, an intact ``"drain"`` chunk, or ``"stale"``)."""
    if _in_window(s, h):
        return "live"
    if s.drain_lo <= h[0] < s.drain_hi and h[1] % cfg.ring_units >= s.drain_hw:
        return "drain"
    return "stale"


def read_at(cfg: Config, s: State, addr: int, n: int) -> int:
    """What a reader deserializes from the ``n - 1`` payload cells after
    ``addr``: the one tag they hold, else :data:`GARBAGE`."""
    p = addr % cfg.ring_units
    tags = {s.mem[u][3] for u in range(p + 1, p + n) if u < cfg.ring_units}
    return next(iter(tags)) if len(tags) == 1 else GARBAGE


def current(cfg: Config, s: State) -> tuple:
    """The chunk being put (the spec's ``Cur``): impl's pending allocation,
    vLLM's last chunk (it joins the ring at ``header_write``)."""
    return s.pend[0] if cfg.hardened else s.chunks[-1]


def owner(cfg: Config, s: State, k: int) -> int:
    """impl: the allocation that owns ack word ``k % max_chunks`` now (the
    spec's ``Owner``): the latest with that word whose base the writer took,
    which it does when its pin wait ends."""
    based = s.puts if s.wpc in ("ready", "header", "payload") else s.puts - 1
    return k + ((based - k) // cfg.max_chunks) * cfg.max_chunks


def _can_put(cfg: Config, s: State, k: str, n: int) -> int | None:
    """Where a put of ``n`` units for key ``k`` goes, if it may start (the
    spec's ``CanPut``), else None."""
    if s.wpc != "idle" or s.puts >= cfg.max_puts or k in {c[4] for c in s.chunks}:
        return None
    if cfg.hardened and len(s.chunks) >= cfg.max_chunks:
        return None
    a = placement(s.end, cfg.ring_units, n)
    return a if fits(a, n, s.start, cfg.ring_units) else None


def reclaimable(cfg: Config, s: State, i: int) -> bool:
    """The reads of live chunk ``i`` (0: the oldest) are complete (the spec's
    ``Reclaimable``): vLLM's ``reader_count >= writer_count * n_readers``,
    impl's every reader's ack ``>= writer_count``; one promise per put."""
    nr = len(cfg.readers)
    c = s.chunks[i]
    if cfg.hardened:  # a dead reader's promised reads are forfeit
        live = [r for r in range(nr) if s.pc[r] != "dead"]
        return per_reader_complete([s.acks[r][c[0]] for r in live], 1, len(live))
    return reads_complete(s.mem[c[1] % cfg.ring_units][2], 1, nr)


def _plan(cfg: Config, s: State) -> State:
    """impl's ``free_step``: plan the next chunk of the running reclaim and
    check the one after it: while it is reclaimable the reclaim goes on
    (``"freeing"``), else (or when there is none) it retires next
    (``"retire"``)."""
    n = s.planned + 1
    return s._replace(planned=n, wpc="freeing" if n < len(s.chunks) and reclaimable(cfg, s, n) else "retire")


def _retire(cfg: Config, s: State) -> State:
    """impl's ``retire``: apply every planned chunk as :func:`.ring.free`
    does (``free_step`` per chunk, ``renormalise`` at the end) and publish
    ``abs_start``."""
    n = s.planned
    B = cfg.ring_units
    chunks, start, end, id_start = list(s.chunks), s.start, s.end, s.id_start
    for _ in range(n):
        chunks.pop(0)
        id_start = next_id(id_start) % cfg.id_mod
        has_next = bool(chunks) and chunks[0][3] == id_start
        start, end = ring_free_step(start, end, has_next, chunks[0][1] if has_next else start, B)
    start, end = renormalise(start, end, B)
    return s._replace(chunks=tuple(chunks), id_start=id_start, start=start, end=end,
                      pub_start=s.chunks[n - 1][0] + 1, planned=0, wpc="idle")


def _drain_kill(cfg: Config, s: State, a: int, n: int) -> tuple[int, int]:
    """``(drain_lo, drain_hw)`` once the allocation of ``n`` units at ``a`` is
    published: its bytes end the drain below them (all of them: the window
    closes).  The spec's ``DrainKill``."""
    lo, hi, hw = s.drain_lo, s.drain_hi, s.drain_hw
    if lo < hi:
        lo, hw = (hi, 0) if a % cfg.ring_units + n >= cfg.ring_units else (lo, max(hw, a % cfg.ring_units + n))
    return lo, hw


def successors(cfg: Config, s: State) -> Iterator[tuple[Step, State]]:
    """Every enabled action of the spec's ``Next`` with its successor state,
    one per binding of the action's arguments (as TLC enumerates them)."""
    B = cfg.ring_units
    # ---- the writer
    for k in cfg.keys:
        for n in cfg.sizes:
            if cfg.hardened:
                if s.wpc == "ready" and s.pend[0][4] == k and s.pend[0][2] == n:
                    ab, a, _, i, _ = s.pend[0]
                    _, _, cnt, obj = s.mem[a % B]
                    lo, hw = (s.drain_lo, s.drain_hw) if cfg.writer_fenced else _drain_kill(cfg, s, a, n)
                    yield (Step("header_write", WRITER, (("key", k), ("size", n))),
                           s._replace(mem=_set(s.mem, a % B, (i, n, cnt, obj)), wpc="header", drain_lo=lo,
                                      drain_hw=hw))
                a = _can_put(cfg, s, k, n)
                if a is None:
                    continue
                lo, hw = _drain_kill(cfg, s, a, n) if cfg.writer_fenced else (s.drain_lo, s.drain_hw)
                wait = tuple(cfg.scan_pins and p != 0 and p - 1 < s.pub_start for p in s.pins)
                yield (Step("pin_scan", WRITER, (("key", k), ("size", n))),
                       s._replace(pend=((s.puts, a, n, s.id_end, k),), drain_lo=lo, drain_hw=hw, wwait=wait,
                                  wpc="wait" if any(wait) else "ready"))
            else:
                a = _can_put(cfg, s, k, n)
                if a is None:
                    continue
                _, _, cnt, obj = s.mem[a % B]
                yield (Step("header_write", WRITER, (("key", k), ("size", n))),
                       s._replace(chunks=s.chunks + ((s.puts, a, n, s.id_end, k),),
                                  mem=_set(s.mem, a % B, (s.id_end, n, cnt, obj)), end=a + n,
                                  id_end=next_id(s.id_end) % cfg.id_mod, puts=s.puts + 1, wpc="header"))
    if s.wpc == "wait" and all(not w or s.pc[i] == "dead" for i, w in enumerate(s.wwait)):
        yield Step("pin_wait", WRITER), s._replace(wpc="ready", wwait=(False,) * len(s.wwait))
    if s.wpc == "header":
        ab, a, n, _, _ = current(cfg, s)
        p = a % B
        mem = tuple((m[0], m[1], 0, m[3]) if u == p else (m[0], m[1], m[2], ab + 1) if p < u < p + n else m
                    for u, m in enumerate(s.mem))
        yield Step("payload_write", WRITER, (("abs", ab),)), s._replace(mem=mem, wpc="payload")
    if s.wpc == "payload":
        c = current(cfg, s)
        ab, a, _, i, _ = c
        t = s._replace(issued=tuple(sorted(s.issued + ((ab, a, i, ab + 1),))), pub_end=ab + 1, wpc="idle")
        if cfg.hardened:
            t = t._replace(chunks=s.chunks + (c,), end=a + c[2], id_end=next_id(s.id_end) % cfg.id_mod,
                           puts=s.puts + 1, pend=())
        yield Step("publish", WRITER, (("abs", ab),)), t
    if cfg.hardened and (s.wpc == "freeing" or s.wpc == "idle" and s.chunks and reclaimable(cfg, s, 0)):
        yield Step("free_step", WRITER, (("abs", s.chunks[s.planned][0]),)), _plan(cfg, s)
    elif cfg.hardened and s.wpc == "retire":
        yield Step("retire", WRITER, (("abs", s.chunks[s.planned - 1][0]),)), _retire(cfg, s)
    elif not cfg.hardened and s.wpc == "idle" and s.chunks:
        head = s.chunks[0]
        if head[3] == s.id_start and reclaimable(cfg, s, 0):
            rest = s.chunks[1:]
            id_start = next_id(s.id_start) % cfg.id_mod
            has_next = bool(rest) and rest[0][3] == id_start
            start, end = ring_free_step(s.start, s.end, has_next, rest[0][1] if rest else 0, B)
            start, end = renormalise(start, end, B)
            yield (Step("free_step", WRITER, (("abs", head[0]),)),
                   s._replace(chunks=rest, id_start=id_start, start=start, end=end, pub_start=head[0] + 1))
    if s.wpc == "idle":
        id_end = 0 if cfg.clear_resets else s.id_end
        t = s._replace(chunks=(), start=0, end=0, id_start=ids_after_clear(id_end, not cfg.clear_resets),
                       id_end=id_end, pub_start=s.puts, clear_at=s.puts)
        if cfg.hardened:
            t = t._replace(drain_lo=s.pub_start, drain_hi=s.puts, drain_hw=0)
        yield Step("clear", WRITER), t
    # ---- the readers
    for i, r in enumerate(cfg.readers):
        yield from (_hardened_reader if cfg.hardened else _vllm_reader)(cfg, s, i, r)
        if r in cfg.mortal and s.pc[i] != "dead":  # the fault: r's process dies here
            yield Step("die", r), s._replace(pc=_set(s.pc, i, "dead"))


def _handles(cfg: Config, s: State, i: int) -> Iterator[tuple]:
    """The handles reader ``i`` may start a get of (the spec's ``CanGet``)."""
    bound = 1 if cfg.read_once else cfg.max_reads
    for h in s.issued:
        if s.starts[i][h[0]] < bound:
            yield h


def _vllm_reader(cfg: Config, s: State, i: int, r: str) -> Iterator[tuple[Step, State]]:
    B = cfg.ring_units
    pc = s.pc[i]
    if pc == "idle":
        for h in _handles(cfg, s, i):
            hdr = s.mem[h[1] % B]
            yield (Step("reader_check", r, (("handle", h),)),
                   s._replace(starts=_set2(s.starts, i, h[0], s.starts[i][h[0]] + 1),
                              hd=_set(s.hd, i, h), floor=_set(s.floor, i, s.clear_at), got=_set(s.got, i, NO_OBJ),
                              hsz=_set(s.hsz, i, hdr[1]), pc=_set(s.pc, i, "checked" if hdr[0] == h[2] else "idle")))
    elif pc == "checked":
        v = read_at(cfg, s, s.hd[i][1], s.hsz[i])
        yield Step("payload_read", r), s._replace(got=_set(s.got, i, v), pc=_set(s.pc, i, "read"))
    elif pc == "read":
        p = s.hd[i][1] % B
        m = s.mem[p]
        yield (Step("counter_increment", r),
               s._replace(mem=_set(s.mem, p, (m[0], m[1], m[2] + 1, m[3])), pc=_set(s.pc, i, "idle")))


def _unpin(s: State, i: int, **changes: Any) -> State:
    """The get's last step: the pin is released (the spec's ``Unpin``)."""
    return s._replace(pc=_set(s.pc, i, "idle"), pins=_set(s.pins, i, 0), verdict=_set(s.verdict, i, "none"),
                      wwait=_set(s.wwait, i, False), hsz=_set(s.hsz, i, 0), **changes)


def _hardened_reader(cfg: Config, s: State, i: int, r: str) -> Iterator[tuple[Step, State]]:
    B = cfg.ring_units
    pc = s.pc[i]
    if pc == "idle":
        for h in _handles(cfg, s, i):
            t = s._replace(starts=_set2(s.starts, i, h[0], s.starts[i][h[0]] + 1), hd=_set(s.hd, i, h),
                           floor=_set(s.floor, i, s.clear_at), got=_set(s.got, i, NO_OBJ), pc=_set(s.pc, i, "pinned"))
            if cfg.fenced:
                t = t._replace(pins=_set(s.pins, i, h[0] + 1))
            else:  # the check's loads of the control block are served before the pin is visible
                t = t._replace(verdict=_set(s.verdict, i, ctl(cfg, s, h)))
            yield Step("pin", r, (("handle", h),)), t
    elif pc == "pinned":
        h = s.hd[i]
        v = ctl(cfg, s, h) if cfg.fenced else s.verdict[i]
        hdr = s.mem[h[1] % B]
        if v != "stale" and hdr[0] == h[2]:
            t = s._replace(pc=_set(s.pc, i, "checked"), verdict=_set(s.verdict, i, v), pins=_set(s.pins, i, h[0] + 1),
                           hsz=_set(s.hsz, i, hdr[1]))
        else:
            t = _unpin(s, i)
        yield Step("reader_check", r), t
    elif pc == "checked":
        got = _set(s.got, i, read_at(cfg, s, s.hd[i][1], s.hsz[i]))
        if s.verdict[i] == "live":
            yield Step("deserialize", r), s._replace(got=got, pc=_set(s.pc, i, "read"))
        else:  # a drain read is not acknowledged: the get ends here
            yield Step("deserialize", r), _unpin(s, i, got=got)
    elif pc == "read":
        k = owner(cfg, s, s.hd[i][0])
        yield Step("counter_increment", r), s._replace(acks=_set2(s.acks, i, k, s.acks[i][k] + 1),
                                                        pc=_set(s.pc, i, "acked"))
    elif pc == "acked":
        yield Step("unpin", r), _unpin(s, i)


# ---------------------------------------------------------------- properties
def _phys_extent(cfg: Config, c: tuple) -> tuple[int, int]:
    p = c[1] % cfg.ring_units
    return p, p + c[2]


def _reused(cfg: Config, s: State, i: int) -> bool:
    """A chunk allocated since the last clear, live or (mid-put) with its
    header written, overlaps the bytes reader ``i`` resolves (the spec's
    ``Reused``)."""
    B = cfg.ring_units
    written = s.chunks + (s.pend if cfg.hardened and s.wpc in ("header", "payload") else ())
    p, n = s.hd[i][1] % B, max(s.hsz[i], 1)
    return any(c[0] >= s.clear_at and c[1] % B < p + n and p < c[1] % B + c[2] for c in written)


def invariants(cfg: Config, s: State) -> dict[str, bool]:
    """The spec's invariants on ``s`` (property id -> holds); the same
    definitions as ``ShmStore.tla``'s NRR, CLR, DISJ, FIFO, WRAP, DUP, RC,
    PROM."""
    B = cfg.ring_units
    ch = s.chunks
    ext = [_phys_extent(cfg, c) for c in ch]
    offs = [(c[1] - s.start) % B for c in ch]
    published = len(ch) if cfg.hardened or s.wpc == "idle" else len(ch) - 1
    readers = range(len(cfg.readers))
    return {
        "NRR": all(g in (NO_OBJ, h[3]) for g, h in zip(s.got, s.hd)),
        "CLR": all((s.got[i] in (NO_OBJ, s.hd[i][3]) or s.hd[i][0] >= s.floor[i])
                   and not (s.pc[i] == "checked" and s.hd[i][0] < s.clear_at and _reused(cfg, s, i))
                   for i in readers),
        "DISJ": all(e[1] <= B for e in ext) and all(
            ext[i][1] <= ext[j][0] or ext[j][1] <= ext[i][0] for i in range(len(ch)) for j in range(i + 1, len(ch))),
        "FIFO": all(c[0] == ch[0][0] + i and offs[i] + c[2] <= s.end - s.start
                    and (offs[i] == 0 if i == 0 else offs[i - 1] < offs[i]) for i, c in enumerate(ch)),
        "WRAP": len({c[3] for c in ch}) == len(ch),
        "DUP": len({c[4] for c in ch}) == len(ch),
        "RC": all(s.mem[c[1] % B][2] <= sum(st[c[0]] for st in s.starts) for c in ch[:published])
              and all(a <= st for ak, sk in zip(s.acks, s.starts) for a, st in zip(ak, sk)),
        "PROM": not cfg.hardened or all(h[0] < s.clear_at or s.starts[i][h[0]] > 0 or _in_window(s, h)
                                        or s.pc[i] == "dead" for i in readers for h in s.issued),
    }


# ------------------------------------------------------- symmetry, search
def canonical(cfg: Config, s: State) -> State:
    """The least state (tuple order) among ``s`` with readers and keys
    permuted: one representative per symmetry orbit, as TLC's ``SYMMETRY``
    (the spec's ``Symmetry``: permutations of Readers and of Keys).

    Compared as plain tuples (a ``State`` compares as its tuple), with the
    permutations and field positions computed once per config: the same
    representative as renaming through ``_replace``, at a third of the cost
    (the model's enumeration beside TLC spends most of its time here)."""
    reader_perms, key_maps = _symmetry(cfg)
    base = tuple(s)
    best = None
    for rp in reader_perms:
        if rp is None:
            per = base
        else:
            lst = list(base)
            for i in _PER_READER_AT:
                v = base[i]
                lst[i] = tuple([v[j] for j in rp])
            per = tuple(lst)
        chunks, pend = per[_CHUNKS_AT], per[_PEND_AT]
        if not chunks and not pend:  # no key in the state: every renaming gives ``per``
            if best is None or per < best:
                best = per
            continue
        for ren in key_maps:
            if ren is None:
                cand = per
            else:
                lst = list(per)
                lst[_CHUNKS_AT] = tuple([c[:4] + (ren[c[4]],) for c in chunks])
                lst[_PEND_AT] = tuple([c[:4] + (ren[c[4]],) for c in pend])
                cand = tuple(lst)
            if best is None or cand < best:
                best = cand
    return s if best == base else State._make(best)


_SYMMETRY: dict[tuple, tuple[list, list]] = {}


def _symmetry(cfg: Config) -> tuple[list, list]:
    """``(reader permutations, key renamings)`` of ``cfg``, in
    ``itertools.permutations`` order; the identity of each is ``None``."""
    at = (len(cfg.readers), tuple(cfg.keys))
    got = _SYMMETRY.get(at)
    if got is None:
        n = at[0]
        readers = [None if rp == tuple(range(n)) else rp for rp in permutations(range(n))]
        keys = [None if kp == tuple(cfg.keys) else dict(zip(cfg.keys, kp)) for kp in permutations(cfg.keys)]
        got = _SYMMETRY[at] = (readers, keys)
    return got


_PER_READER = ("wwait", "pc", "hd", "hsz", "got", "floor", "starts", "pins", "verdict", "acks")
"""The per-reader fields of :class:`State` (permuted by the symmetry)."""
_PER_READER_AT = tuple(State._fields.index(f) for f in _PER_READER)
_CHUNKS_AT, _PEND_AT = State._fields.index("chunks"), State._fields.index("pend")


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


__all__ = ["Config", "Exploration", "GARBAGE", "NO_HANDLE", "NO_OBJ", "READER_PCS", "State", "Step", "VERDICTS",
           "WRITER_PCS", "canonical", "ctl", "current", "explore", "follow", "initial", "invariants", "owner",
           "read_at", "successors"]
