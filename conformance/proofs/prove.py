"""z3 obligations over the model's ring arithmetic (``shmspec prove``).

Every obligation is built from the model's own definitions
(:func:`~shmspec.model.ring.placement`, :func:`~shmspec.model.ring.fits`,
:func:`~shmspec.model.ring.free_step`, :func:`~shmspec.model.ring.renormalise`,
:func:`~shmspec.model.ring.next_id`, :func:`~shmspec.model.ring.chunk_bytes`,
:func:`~shmspec.model.store.reads_complete`) evaluated over z3 terms
(:data:`~.z3ops.Z3_OPS`), never from a restated copy.  Sizes are bytes, ids are
modulo ``ID_MAX = 2**31``, addresses are the model's virtual addresses.

The ring invariant :func:`ring_inv` (the claim the DISJ, WRAP and bounds
obligations establish) over a ring of ``B`` bytes with live chunks
``(address a_i, chunk size n_i, id i_i)``, oldest first:

* ``1 <= B <= 2**31 - 1`` (ring sizes within int32 limits);
* ``0 <= start < B`` and ``start <= end <= start + B``; an empty ring has
  ``end == start``;
* ``0 <= a_i < 2 * B``; ``n_i >= 9``; no chunk straddles the ring's end
  (``a_i % B + n_i <= B``);
* in the frame of ``start`` (``v_i = start + (a_i - start) % B``) the chunks
  follow each other without overlap, ``v_i + n_i <= v_(i+1)``, and the
  youngest ends at ``end``;
* ids are consecutive: ``i_i = (id_start + i) % 2**31`` and
  ``id_end = (id_start + k) % 2**31``.

Obligations that quantify over the live chunks are proven for every chunk count
``k <= chunks`` (default 4; ``--chunks``) by unrolling; the invariant is a
conjunction of facts about neighbouring chunks, and allocate and free touch
only the youngest, respectively the two oldest, chunks.  Obligations that do
not need the chunk list (the bounds under allocate, WRAP's distinct ids, header
and threshold overflow) hold for any number of chunks.  Kinds: ``valid`` (the
claim holds for all values: proven when its negation is unsat) and ``witness``
(a bound is tight: proven when z3 finds a state beyond the bound that breaks
the property; the state is shown).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import z3

from shmspec.model import ring as R
from shmspec.model.profile import IMPL, Profile
from shmspec.model.ring import HEADER_BYTES, ID_MAX
from shmspec.model.store import reads_complete

from .z3ops import Z3_OPS

INT32_MAX = 2**31 - 1
MIN_CHUNK = HEADER_BYTES + 1
"""The smallest chunk: a 1-byte payload plus the 8-byte header (``allocate`` rejects size 0)."""
DEFAULT_CHUNKS = 4
TIMEOUT_MS = 20_000
"""Per obligation; an obligation z3 cannot decide within it is ``unknown`` (not proven)."""


@dataclass
class RingVars:
    """Symbolic ring: ``B``, ``start``, ``end``, ``id_start``, ``id_end`` and
    ``k`` chunks ``(a, n, id)``."""

    B: Any
    start: Any
    end: Any
    id_start: Any
    id_end: Any
    chunks: list[tuple[Any, Any, Any]]

    @classmethod
    def fresh(cls, k: int, prefix: str = "") -> "RingVars":
        I = z3.Int  # noqa: E741, N806 - z3 integer constructor, short in the formulas
        return cls(I("B"), I(prefix + "start"), I(prefix + "end"), I(prefix + "id_start"), I(prefix + "id_end"),
                   [(I(f"{prefix}a{i}"), I(f"{prefix}n{i}"), I(f"{prefix}id{i}")) for i in range(k)])

    def named(self) -> dict[str, Any]:
        out = {"B": self.B, "start": self.start, "end": self.end, "id_start": self.id_start, "id_end": self.id_end}
        for i, (a, n, id_) in enumerate(self.chunks):
            out[f"chunk{i}"] = (a, n, id_)
        return out


def _frame(x: Any, start: Any, B: Any) -> Any:  # noqa: N803
    return start + (x - start) % B


def layout(r: RingVars, lo: Any, hi: Any) -> list[Any]:
    """Chunks inside ``[lo, hi]`` in the frame of ``r.start``, ordered, disjoint, not
    straddling the ring's end, youngest ending at ``r.end``; consecutive ids."""
    B = r.B  # noqa: N806
    c = [lo <= r.start, r.start <= r.end, r.end <= hi, 0 <= r.id_start, r.id_start < ID_MAX,
         r.id_end == (r.id_start + len(r.chunks)) % ID_MAX]
    if not r.chunks:
        c.append(r.end == r.start)
    prev_end = r.start
    for i, (a, n, id_) in enumerate(r.chunks):
        v = _frame(a, r.start, B)
        c += [0 <= a, a < 2 * B, n >= MIN_CHUNK, a % B + n <= B, prev_end <= v, id_ == (r.id_start + i) % ID_MAX]
        prev_end = v + n
    c.append(prev_end == r.end)
    return c


def ring_inv(r: RingVars) -> Any:
    """The ring invariant (module docstring) as one z3 formula."""
    return z3.And(1 <= r.B, r.B <= INT32_MAX, 0 <= r.start, r.start < r.B, *layout(r, r.start, r.start + r.B))


def free_inv(r: RingVars, s0: Any) -> Any:
    """Inside free's loop: the ring lies in the frame ``[s0, s0 + B]`` of the
    ``start`` the loop began with (``start`` may pass ``B`` until the final
    renormalisation), or the ring has been emptied (``start = end = 0``)."""
    emptied = z3.And(len(r.chunks) == 0, r.start == 0, r.end == 0, 0 <= r.id_start, r.id_start < ID_MAX,
                     r.id_end == r.id_start)
    return z3.And(1 <= r.B, r.B <= INT32_MAX, 0 <= s0, s0 < r.B,
                  z3.Or(emptied, z3.And(*layout(r, s0, s0 + r.B))))


def allocate_step(r: RingVars, size: Any) -> tuple[RingVars, Any, Any, Any]:
    """``allocate(size)`` on a symbolic ring through the model's functions.

    Returns the ring after it, the condition under which it succeeds
    (``fits``), the chunk's address and its chunk size."""
    n = R.chunk_bytes(size)
    address = R.placement(r.end, r.B, n, Z3_OPS)
    ok = z3.And(size >= 1, R.fits(address, n, r.start, r.B))
    after = RingVars(r.B, r.start, address + n, r.id_start, R.next_id(r.id_end, Z3_OPS),
                     r.chunks + [(address, n, r.id_end)])
    return after, ok, address, n


def free_one(r: RingVars) -> RingVars:
    """One iteration of ``free``'s loop: drop the oldest chunk (requires k >= 1)."""
    rest = r.chunks[1:]
    has_next = z3.BoolVal(bool(rest))
    next_address = rest[0][0] if rest else r.start
    start, end = R.free_step(r.start, r.end, has_next, next_address, r.B, Z3_OPS)
    return RingVars(r.B, start, end, R.next_id(r.id_start, Z3_OPS), r.id_end, rest)


def renormalised(r: RingVars) -> RingVars:
    start, end = R.renormalise(r.start, r.end, r.B, Z3_OPS)
    return RingVars(r.B, start, end, r.id_start, r.id_end, r.chunks)


def disjoint_inside(r: RingVars) -> Any:
    """DISJ on a symbolic ring: physical extents inside ``[0, B)`` and pairwise disjoint."""
    B = r.B  # noqa: N806
    c = [z3.And(0 <= a % B, a % B + n <= B) for a, n, _ in r.chunks]
    for i, (a, n, _) in enumerate(r.chunks):
        for b, m, _ in r.chunks[i + 1:]:
            c.append(z3.Or(a % B + n <= b % B, b % B + m <= a % B))
    return z3.And(*c)


# -- obligations -----------------------------------------------------------------


@dataclass
class Problem:
    """What an obligation hands the solver: ``hyps`` and ``claim`` (valid:
    ``hyps => claim``; witness: ``hyps and claim`` satisfiable), plus the terms
    shown in a counterexample: ``action`` taken from ``before`` to ``after``
    with ``inputs``."""

    hyps: list[Any]
    claim: Any
    action: str = "state"
    inputs: dict[str, Any] = field(default_factory=dict)
    before: RingVars | None = None
    after: RingVars | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Obligation:
    """One claim: ``name``, the ``property`` id it establishes (SEMANTICS.md),
    ``statement``, ``kind`` (``valid`` or ``witness``), ``build(k, profile)`` -> one
    :class:`Problem` per chunk count to check (``chunked``: for k = 0..chunks)."""

    name: str
    property: str
    statement: str
    build: Callable[[int, Profile], Problem]
    kind: str = "valid"
    chunked: bool = False
    min_chunks: int = 0
    explain: Callable[[Profile], str | None] | None = None
    """Why the obligation is refuted for a profile, where that is a known,
    documented behaviour of the release (shown with the counterexample)."""


def _ob_initial(k: int, profile: Profile = IMPL) -> Problem:
    r = RingVars.fresh(0)
    x = z3.Int("warp_start")
    # fresh ring, clear(), or a warp to (start = end = x, any id) on an empty ring
    init = RingVars(r.B, x, x, r.id_start, r.id_start, [])
    return Problem([1 <= r.B, r.B <= INT32_MAX, 0 <= x, x < r.B, 0 <= r.id_start, r.id_start < ID_MAX],
                   ring_inv(init), "initial", {"start": x}, init, init)


def _ob_alloc_bounds(k: int, profile: Profile = IMPL) -> Problem:
    r = RingVars.fresh(0)
    size = z3.Int("size")
    after, ok, address, n = allocate_step(r, size)
    hyps = [1 <= r.B, r.B <= INT32_MAX, 0 <= r.start, r.start < r.B, r.start <= r.end, r.end <= r.start + r.B,
            size <= INT32_MAX, ok]
    claim = z3.And(r.start <= after.end, after.end <= r.start + r.B, r.end <= address, address < 2 * r.B)
    return Problem(hyps, claim, "allocate", {"size": size}, r, after, {"address": address})


def _ob_alloc_inv(k: int, profile: Profile = IMPL) -> Problem:
    r = RingVars.fresh(k)
    size = z3.Int("size")
    after, ok, address, _ = allocate_step(r, size)
    return Problem([ring_inv(r), size <= INT32_MAX, ok], ring_inv(after), "allocate", {"size": size}, r, after,
                   {"address": address})


def _ob_free_entry(k: int, profile: Profile = IMPL) -> Problem:
    r = RingVars.fresh(k)
    return Problem([ring_inv(r)], free_inv(r, r.start), "free (entry)", {}, r, r)


def _ob_free_step(k: int, profile: Profile = IMPL) -> Problem:
    r = RingVars.fresh(k)
    s0 = z3.Int("s0")
    after = free_one(r)
    return Problem([free_inv(r, s0)], free_inv(after, s0), "free (one chunk)", {"s0": s0}, r, after)


def _ob_free_exit(k: int, profile: Profile = IMPL) -> Problem:
    r = RingVars.fresh(k)
    s0 = z3.Int("s0")
    after = renormalised(r)
    return Problem([free_inv(r, s0)], ring_inv(after), "free (renormalise)", {"s0": s0}, r, after)


def _ob_disj(k: int, profile: Profile = IMPL) -> Problem:
    r = RingVars.fresh(k)
    return Problem([ring_inv(r)], disjoint_inside(r), "state", {}, r, r)


def _ob_wrap(k: int, profile: Profile = IMPL) -> Problem:
    """Symbolic chunk count ``k`` (not unrolled): live ids ``(id_start + i) % 2**31``
    for ``i < k`` and the next id ``(id_start + k) % 2**31`` are pairwise distinct
    when ``k`` chunks of at least 9 bytes fit disjointly in ``B <= 2**31 - 1``."""
    B, count, id_start, i, j = z3.Ints("B live_chunks id_start i j")  # noqa: N806
    hyps = [1 <= B, B <= INT32_MAX, 0 <= count, count * MIN_CHUNK <= B, 0 <= id_start, id_start < ID_MAX,
            0 <= i, i < j, j <= count]
    claim = (id_start + i) % ID_MAX != (id_start + j) % ID_MAX
    return Problem(hyps, claim, "state", {"live_chunks": count, "i": i, "j": j},
                   extra={"B": B, "id_start": id_start})


def _ob_wrap_bound(k: int, profile: Profile = IMPL) -> Problem:
    B, count, id_start = z3.Ints("B live_chunks id_start")  # noqa: N806
    hyps = [count * MIN_CHUNK <= B, 0 <= id_start, id_start < ID_MAX, count >= 1]
    claim = (id_start + count) % ID_MAX == id_start  # the next allocation reuses a live id
    return Problem(hyps, claim, "allocate", {"live_chunks": count}, extra={"B": B, "id_start": id_start})


def _ob_header(k: int, profile: Profile = IMPL) -> Problem:
    r = RingVars.fresh(0)
    size, previous = z3.Ints("size previous_id")
    after, ok, address, n = allocate_step(r, size)
    # the id written is a fresh ring's 0 or one next_id made from an earlier id (clear() keeps such an id
    # or resets to 0; a warp sets an id checked to lie in [0, 2**31))
    made = z3.Or(r.id_end == 0, r.id_end == R.next_id(previous, Z3_OPS))
    hyps = [1 <= r.B, r.B <= INT32_MAX, 0 <= r.start, r.start < r.B, r.start <= r.end, r.end <= r.start + r.B,
            previous >= 0, made, ok]
    claim = z3.And(0 <= r.id_end, r.id_end <= INT32_MAX, MIN_CHUNK <= n, n <= INT32_MAX,
                   address % r.B + n <= r.B, address < 2**64)
    return Problem(hyps, claim, "allocate", {"size": size}, r, after, {"address": address, "chunk_size": n})


def _ob_size_field(k: int, profile: Profile = IMPL) -> Problem:
    nbytes, max_object_size = z3.Ints("nbytes max_object_size")
    hyps = [1 <= nbytes, nbytes <= max_object_size, max_object_size <= INT32_MAX - HEADER_BYTES]
    return Problem(hyps, R.chunk_bytes(nbytes) <= INT32_MAX, "put", {"nbytes": nbytes},
                   extra={"max_object_size": max_object_size})


def _ob_size_bound(k: int, profile: Profile = IMPL) -> Problem:
    nbytes, max_object_size = z3.Ints("nbytes max_object_size")
    hyps = [1 <= nbytes, nbytes <= max_object_size, max_object_size == INT32_MAX - HEADER_BYTES + 1]
    return Problem(hyps, R.chunk_bytes(nbytes) > INT32_MAX, "put", {"nbytes": nbytes},
                   extra={"max_object_size": max_object_size, "chunk_size": R.chunk_bytes(nbytes)})


def _ob_threshold(k: int, profile: Profile = IMPL) -> Problem:
    rc, wc, nr = z3.Ints("reader_count writer_count n_readers")
    hyps = [1 <= nr, 0 <= wc, 0 <= rc, rc <= INT32_MAX, wc * nr <= INT32_MAX, z3.Not(reads_complete(rc, wc, nr))]
    claim = rc + 1 <= INT32_MAX  # the counted read's new reader_count fits int32
    return Problem(hyps, claim, "get", {"reader_count": rc}, extra={"writer_count": wc, "n_readers": nr})


def _ob_threshold_bound(k: int, profile: Profile = IMPL) -> Problem:
    rc, wc, nr = z3.Ints("reader_count writer_count n_readers")
    hyps = [1 <= nr, nr <= 8, wc == INT32_MAX / nr + 1, rc == INT32_MAX]
    claim = z3.Not(reads_complete(rc, wc, nr))  # never free while reader_count is an int32
    return Problem(hyps, claim, "get", {"reader_count": rc}, extra={"writer_count": wc, "n_readers": nr})


def _ob_clear_ids(k: int, profile: Profile = IMPL) -> Problem:
    """Profile-dependent (``clear_keeps_ids``).  A handle live before ``clear()``
    has id ``(id_start + i) % 2**31``, ``i < k``; the j-th allocation after the
    clear gets ``(ids_after_clear(id_end) + j) % 2**31``.  Claim: they differ
    for every ``j < 2**31 - k`` (the first allocation after a clear lands at
    address 0, where the first chunk ever was, so an equal id would resolve
    the pre-clear handle: CLR)."""
    id_start, count, i, j = z3.Ints("id_start live_chunks i j")
    id_end = (id_start + count) % ID_MAX
    after = R.ids_after_clear(id_end, z3.BoolVal(profile.clear_keeps_ids), Z3_OPS)
    hyps = [0 <= id_start, id_start < ID_MAX, 1 <= count, count < ID_MAX, 0 <= i, i < count, 0 <= j,
            j < ID_MAX - count]
    claim = (id_start + i) % ID_MAX != (after + j) % ID_MAX
    return Problem(hyps, claim, "clear", {"live_chunks": count, "i": i, "j": j},
                   extra={"id_start": id_start, "handle_id": (id_start + i) % ID_MAX, "new_id": (after + j) % ID_MAX})


def _drain_hyps(r: RingVars, hw: Any) -> list[Any]:
    """Ring bounds, and the drain invariant ``J``: since the latest clear the
    allocated bytes are exactly ``[0, hw)`` and the ring's end lies in it
    (``end % B <= hw <= B``).  A clear sets ``start = end = hw = 0``: ``J``."""
    return [1 <= r.B, r.B <= INT32_MAX, 0 <= r.start, r.start < r.B, r.start <= r.end, r.end <= r.start + r.B,
            0 <= hw, hw <= r.B, r.end % r.B <= hw]


def _ob_drain_alloc(k: int, profile: Profile = IMPL) -> Problem:
    """An allocation after a clear starts inside the covered prefix (``p <=
    hw``), so the allocated bytes stay a prefix ``[0, hw')`` with ``hw' =
    max(hw, p + n)``, and ``J`` holds after it.  Hence "no allocation since the
    clear reached a pre-clear chunk at ``[b, e)``" is ``b >= hw``: what impl's
    reader checks (``address % B >= drain_hw``) and what the model states
    (no post-clear chunk overlaps it)."""
    r = RingVars.fresh(0)
    hw, size = z3.Ints("drain_hw size")
    after, ok, address, n = allocate_step(r, size)
    p = address % r.B
    new_hw = z3.If(hw >= p + n, hw, p + n)
    claim = z3.And(p <= hw, p + n <= r.B, after.end % r.B <= new_hw, new_hw <= r.B)
    return Problem(_drain_hyps(r, hw) + [ok], claim, "put", {"size": size}, before=r, after=after,
                   extra={"drain_hw": hw, "phys_begin": p})


def _ob_drain_free(k: int, profile: Profile = IMPL) -> Problem:
    """Reclaim (a free step, which may empty the ring to ``start = end = 0``,
    then the ``start >= B`` renormalisation) keeps ``J``: it moves no byte into
    use and ``end`` keeps its physical offset or becomes 0."""
    r = RingVars.fresh(0)
    hw, nxt, has = z3.Int("drain_hw"), z3.Int("next_address"), z3.Bool("has_next")
    start, end = R.free_step(r.start, r.end, has, nxt, r.B, Z3_OPS)
    start, end = R.renormalise(start, end, r.B, Z3_OPS)
    claim = z3.And(end % r.B <= hw)
    return Problem(_drain_hyps(r, hw) + [r.start <= nxt, nxt <= r.end], claim, "free_unused", {}, before=r,
                   extra={"drain_hw": hw, "end_after": end})


OBLIGATIONS: tuple[Obligation, ...] = (
    Obligation("initial-inv", "DISJ", "a fresh, cleared or warped empty ring (start = end < B) satisfies the ring invariant",
               _ob_initial),
    Obligation("alloc-bounds", "DISJ", "allocate keeps start <= end <= start + B and 0 <= address < 2B "
               "(any chunk count, ring and object sizes within int32)", _ob_alloc_bounds),
    Obligation("alloc-inv", "DISJ", "allocate preserves the ring invariant (k live chunks)", _ob_alloc_inv, chunked=True),
    Obligation("free-entry", "DISJ", "the ring invariant implies free's loop invariant", _ob_free_entry, chunked=True),
    Obligation("free-step", "DISJ", "dropping the oldest chunk (start moves to the next chunk, or start = end = 0) "
               "preserves free's loop invariant", _ob_free_step, chunked=True, min_chunks=1),
    Obligation("free-exit", "DISJ", "the start >= B renormalisation restores the ring invariant", _ob_free_exit,
               chunked=True),
    Obligation("disjoint", "DISJ", "the ring invariant implies live chunks are disjoint and inside the segment",
               _ob_disj, chunked=True),
    Obligation("ids-distinct", "WRAP", "live ids and the next id are distinct (ids modulo 2**31; k * 9 <= B <= 2**31 - 1)",
               _ob_wrap),
    Obligation("ids-bound", "WRAP", "bound: from B = 9 * 2**31 bytes on (not int32), 2**31 live 9-byte chunks make "
               "the next id a live one", _ob_wrap_bound, kind="witness"),
    Obligation("header-fields", "DISJ", "allocate writes an int32 id and chunk_size, header and chunk inside the "
               "segment, address < 2**64 (the signature's 8-byte field)", _ob_header),
    Obligation("size-field", "SIZE", "with max_object_size <= 2**31 - 9, put's chunk_size fits int32 for any ring size",
               _ob_size_field),
    Obligation("size-bound", "SIZE", "bound: max_object_size = 2**31 - 8 lets chunk_size reach 2**31 (int32 overflow) "
               "on a ring larger than 2 GiB", _ob_size_bound, kind="witness"),
    Obligation("clear-ids", "CLR", "after clear(), the next 2**31 - k allocations never reuse the id of a handle "
               "live before it (profile: clear keeps or resets ids)", _ob_clear_ids,
               explain=lambda p: None if p.clear_keeps_ids else (
                   f"profile {p.name}: clear() resets ids to 0 (vLLM < 0.32), so the first put after a clear "
                   "gets id 0 at address 0, the slot and id of the first handle ever issued, and that "
                   "pre-clear handle resolves to the new object (CLR; the gate's stale campaign finds it)")),
    Obligation("drain-prefix", "CLR", "after clear(), every allocation starts inside the bytes allocated since "
               "(p <= drain_hw): they stay a prefix [0, drain_hw), so a pre-clear chunk at [b, e) is intact iff "
               "b >= drain_hw (impl's drain check is exact)", _ob_drain_alloc),
    Obligation("drain-free", "CLR", "reclaim keeps the drain invariant (end % B <= drain_hw)", _ob_drain_free),
    Obligation("threshold", "RC", "a counted read of a busy chunk keeps reader_count in int32 while writer_count * "
               "n_readers <= 2**31 - 1 (read-once clients)", _ob_threshold),
    Obligation("threshold-bound", "RC", "bound: writer_count = (2**31 - 1) // n_readers + 1 promises make a chunk "
               "never free while reader_count is an int32", _ob_threshold_bound, kind="witness"),
)


# -- running them ----------------------------------------------------------------


@dataclass
class ObligationResult:
    """Verdict of one obligation: ``proven``, ``refuted`` or ``unknown``;
    ``seconds`` of solver time; ``checked`` the chunk counts checked;
    ``model`` the counterexample (valid) or witness (witness kind) values."""

    name: str
    property: str
    statement: str
    kind: str
    verdict: str
    seconds: float
    checked: list[int]
    model: dict[str, Any] | None = None
    step: dict[str, Any] | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "property": self.property, "statement": self.statement, "kind": self.kind,
                "verdict": self.verdict, "seconds": round(self.seconds, 3), "chunks": self.checked,
                "model": self.model, "step": self.step, "reason": self.reason}


def _val(m: z3.ModelRef, t: Any) -> Any:
    if isinstance(t, tuple):
        return [_val(m, x) for x in t]
    v = m.eval(t, model_completion=True)
    return v.as_long() if z3.is_int_value(v) else str(v)


def _step(p: Problem, m: z3.ModelRef, witness: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    values: dict[str, Any] = {}
    if p.before is not None:
        values.update({f"{k}": _val(m, v) for k, v in p.before.named().items()})
    values.update({k: _val(m, v) for k, v in {**p.inputs, **p.extra}.items()})
    changed: dict[str, Any] = {}
    if p.before is not None and p.after is not None:
        for name in ("start", "end", "id_start", "id_end"):
            x, y = _val(m, getattr(p.before, name)), _val(m, getattr(p.after, name))
            if x != y:
                changed[name] = [x, y]
        live = [_val(m, c) for c in p.after.chunks]
        changed["live"] = [f"{i}@{a}:{n}B" for a, n, i in live]
    step = {"index": 0, "process": "writer", "action": p.action,
            "args": {k: _val(m, v) for k, v in p.inputs.items()},
            "expected": "a witness" if witness else "the claim holds", "observed": "witness" if witness else "violated",
            "changed": changed, "violations": []}
    return values, step


def check(ob: Obligation, chunks: int = DEFAULT_CHUNKS, timeout_ms: int = TIMEOUT_MS,
          profile: Profile = IMPL) -> ObligationResult:
    """Prove (``valid``) or witness (``witness``) one obligation; chunked
    obligations are checked for each chunk count ``ob.min_chunks..chunks``.
    The first failing chunk count gives the counterexample."""
    ks = list(range(ob.min_chunks, chunks + 1)) if ob.chunked else [0]
    t0 = time.monotonic()
    verdict, model, step, reason = "proven", None, None, None
    for k in ks:
        p = ob.build(k, profile)
        s = z3.Solver()
        s.set("timeout", timeout_ms)
        s.add(*p.hyps)
        s.add(p.claim if ob.kind == "witness" else z3.Not(p.claim))
        res = s.check()
        if ob.kind == "witness":
            if res == z3.sat:
                model, step = _step(p, s.model(), True)
                continue
            verdict = "refuted" if res == z3.unsat else "unknown"
        else:
            if res == z3.unsat:
                continue
            verdict = "refuted" if res == z3.sat else "unknown"
            if res == z3.sat:
                model, step = _step(p, s.model(), False)
        if verdict == "unknown":
            reason = s.reason_unknown()
        elif verdict == "refuted" and ob.explain is not None:
            reason = ob.explain(profile)
        if verdict != "proven":
            if step is not None:
                step["violations"] = [{"property": ob.property, "message": f"k={k}: {ob.statement}"}]
            break
    return ObligationResult(ob.name, ob.property, ob.statement, ob.kind, verdict, time.monotonic() - t0, ks,
                            model, step, reason)


def prove_all(chunks: int = DEFAULT_CHUNKS, obligations: tuple[Obligation, ...] = OBLIGATIONS,
              on_result: Callable[[ObligationResult], None] | None = None,
              profile: Profile = IMPL) -> list[ObligationResult]:
    """Check every obligation for ``profile`` (``on_result`` is called after each)."""
    out = []
    for ob in obligations:
        res = check(ob, chunks, profile=profile)
        out.append(res)
        if on_result:
            on_result(res)
    return out
