"""The properties of SEMANTICS.md as predicates, named by their ids.

Three shapes, so that every checker (lockstep machine, state enumeration, TLC
trace replay) calls the same code:

* state invariants ``inv(state) -> list[str]`` (messages; empty when it holds),
* transition properties ``trans(before, action, after, outcome) -> list[str]``,
* the observation properties NRR, DUP, LOCK, SIZE, AUTH, CLR need what a real
  target returned and are checked by the harness against these definitions.

``PROPERTY_IDS`` lists every id of SEMANTICS.md; ``DESCRIPTIONS`` gives the
one-line statement shown in reports.
"""

from __future__ import annotations

from typing import Callable

from .ring import ID_MAX, Chunk
from .store import Action, Outcome, State, is_free

PROPERTY_IDS: tuple[str, ...] = (
    "NRR", "DUP", "LOCK", "SIZE", "OOM", "FIFO", "RC", "DISJ", "WRAP", "CLR", "AUTH", "LEAK", "EXC", "PROM",
    "PROG", "LIVE", "SW",
)

DESCRIPTIONS: dict[str, str] = {
    "NRR": "a reader's get returns exactly the object put under that handle, or the stale-handle error",
    "DUP": "a put of a cached key is rejected and changes nothing",
    "LOCK": "a reader without a lock cannot be built",
    "SIZE": "an object over max_object_size is rejected and changes nothing",
    "OOM": "put raises MemoryError exactly when, after FIFO reclaim, no contiguous room exists",
    "FIFO": "chunks are reclaimed oldest first; a busy chunk blocks younger ones",
    "RC": "a chunk is never reclaimed before its promised reads (vLLM: reader_count >= writer_count * n_readers; "
          "per reader: every reader read it writer_count times)",
    "DISJ": "live chunks never overlap and lie inside the segment",
    "WRAP": "ids wrap at 2**31 without two live chunks sharing an id",
    "CLR": "a handle issued before clear() resolves after it only to its own, intact object (drain), or never (strict)",
    "AUTH": "a forged or altered signed handle is rejected before any shared byte is read",
    "LEAK": "closing the writer leaves no shared-memory segment behind",
    "EXC": "a put, reclaim or clear that raises (a serializer result that cannot be copied, an asynchronous "
           "exception at a yield point) leaves the store as before it or as after it",
    "PROM": "a reader's promised read of a handle succeeds until that reader has made it, whatever other "
            "readers did (read it twice, or never)",
    "PROG": "once every promised read is made and every touch released, a put of max_object_size succeeds: no "
            "chunk stays pinned by a count that never reaches its threshold",
    "LIVE": "no operation of a live process blocks longer than a stated bound, whatever another process did "
            "(killed mid-get, in the reader lock, mid-put); the survivors get no wrong object",
    "SW": "two threads using one writer at once are serialized or refused: no exception outside the taxonomy, no "
          "key without its live chunk or chunk without its key, no handle that reads back wrong",
    "CONFORMANCE": "the target's outcomes and state agree with the reference model",
}


def extent(chunk: Chunk, ring_size: int) -> tuple[int, int]:
    """Physical ``[begin, end)`` of a chunk in the data region, bytes."""
    begin = chunk.address % ring_size
    return begin, begin + chunk.size


def disj(chunks: list[Chunk] | tuple[Chunk, ...], ring_size: int) -> list[str]:
    """DISJ over any list of live chunks (model or target snapshot)."""
    out: list[str] = []
    spans = sorted((extent(c, ring_size), c.id) for c in chunks)
    for (b, e), cid in spans:
        if e > ring_size or b < 0:
            out.append(f"chunk id {cid} at [{b}, {e}) lies outside the {ring_size}-byte ring")
    for ((b1, e1), i1), ((b2, e2), i2) in zip(spans, spans[1:]):
        if b2 < e1:
            out.append(f"chunks id {i1} [{b1}, {e1}) and id {i2} [{b2}, {e2}) overlap")
    return out


def wrap(chunks: list[Chunk] | tuple[Chunk, ...]) -> list[str]:
    """WRAP: live ids are distinct and in ``[0, 2**31)``."""
    out = []
    ids = [c.id for c in chunks]
    if len(set(ids)) != len(ids):
        out.append(f"two live chunks share an id: {sorted(ids)}")
    out += [f"id {i} outside [0, 2**31)" for i in ids if not 0 <= i < ID_MAX]
    return out


def ring_bounds(state: State) -> list[str]:
    """``start <= end <= start + B`` and ``0 <= start < B`` (the ring's own invariant)."""
    r = state.ring
    if not (0 <= r.start < r.size and r.start <= r.end <= r.start + r.size):
        return [f"ring bounds broken: start={r.start} end={r.end} B={r.size}"]
    return []


STATE_INVARIANTS: dict[str, Callable[[State], list[str]]] = {
    "DISJ": lambda s: disj(s.ring.chunks, s.ring.size) + ring_bounds(s),
    "WRAP": lambda s: wrap(s.ring.chunks),
}


def freed_chunks(before: State, after: State) -> list[Chunk]:
    """Chunks live before and gone after a step (not counting a clear)."""
    live_after = {c.abs_id for c in after.ring.chunks}
    return [c for c in before.ring.chunks if c.abs_id not in live_after]


def fifo(before_chunks: tuple[Chunk, ...] | list[Chunk], freed_ids: set[int]) -> list[str]:
    """FIFO: the freed chunks are a prefix of the live chunks, oldest first."""
    k = len(freed_ids)
    prefix = {c.id for c in list(before_chunks)[:k]}
    if freed_ids != prefix:
        return [f"freed ids {sorted(freed_ids)} are not the oldest {k} live ids {sorted(prefix)}"]
    return []


def rc(before: State, freed: list[Chunk]) -> list[str]:
    """RC: every freed chunk was free by the reclaim predicate before the step."""
    def counts(c: Chunk) -> str:
        if before.profile.per_reader:
            return f"reads per reader {dict(c.reads)} < writer_count {c.writer_count}"
        return f"reader_count {c.reader_count} < writer_count {c.writer_count} x n_readers {before.n_readers}"

    return [
        f"chunk id {c.id} reclaimed with {counts(c)}" + (" (protected by touch)" if c.protected else "")
        for c in freed
        if not is_free(before, c)
    ]


def check_transition(before: State, action: Action, after: State, outcome: Outcome) -> dict[str, list[str]]:
    """FIFO and RC for one model step (a clear drops everything by design)."""
    if action.name == "clear":
        return {}
    freed = freed_chunks(before, after)
    return {"FIFO": fifo(before.ring.chunks, {c.id for c in freed}), "RC": rc(before, freed)}


def check_state(state: State) -> dict[str, list[str]]:
    return {pid: inv(state) for pid, inv in STATE_INVARIANTS.items()}


def protocol_kept(state: State) -> bool:
    """The read-once client protocol: no reader has read a chunk more often
    than the writer promised (``writer_count``).  NRR's guarantee against
    recycled reads under concurrency assumes it; impl/ keeps NRR without it."""
    return all(n <= c.writer_count for c in state.ring.chunks for _, n in c.reads)
