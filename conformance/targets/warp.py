"""The warp hook on the model side: start a model state at a chosen counter state.

The target side is :func:`~.adapter.warp` / :func:`~.adapter.warp_counts`
(impl's ``SingleWriterShmRingBuffer.warp``, vLLM's ring attributes).  Together
they let boundary programs (:mod:`.boundary`) reach id wraparound (WRAP) and
int32 counter limits without 2**31 operations.
"""

from __future__ import annotations

from dataclasses import replace

from shmspec.model import store as M
from shmspec.model.ring import ID_MAX


def warp_model(state: M.State, start: int, id_: int) -> M.State:
    """An empty model ring moved to ``start == end == start`` (bytes, ``0 <= start
    < B``) with ``id_start == id_end == id_`` (modulo 2**31).  ``abs_end`` (the
    allocation count, used for impl's generation binding) advances to the next
    ``k >= abs_end`` with ``k % 2**31 == id_``, as impl's warp does, and
    the drain window of an earlier clear closes (impl's warp closes it).

    Raises:
        ValueError: the ring holds chunks, or an argument is out of range.
    """
    r = state.ring
    if r.chunks:
        raise ValueError("only an empty ring can be warped")
    if not 0 <= start < r.size or not 0 <= id_ < ID_MAX:
        raise ValueError(f"warp out of range: start {start}, id {id_}")
    abs_end = state.abs_end + (id_ - state.abs_end) % ID_MAX
    ring = replace(r, start=start, end=start, id_start=id_, id_end=id_)
    return replace(state, ring=ring, abs_end=abs_end, drain=())


def warp_model_counts(state: M.State, abs_id: int, writer_count: int, reader_count: int) -> M.State:
    """The live chunk ``abs_id`` with ``writer_count`` promises and ``reader_count``
    reads (its per-reader read log is kept).

    Raises:
        ValueError: no live chunk ``abs_id``.
    """
    chunks = state.ring.chunks
    if not any(c.abs_id == abs_id for c in chunks):
        raise ValueError(f"allocation {abs_id} is not live")
    if state.profile.per_reader:  # the same split as the target's (adapter.split_reads)
        from .adapter import split_reads

        slots = M.reader_slots(state)
        counts = split_reads(reader_count, state.n_readers)
        chunks = tuple(replace(c, writer_count=writer_count, reader_count=reader_count,
                               reads=tuple(sorted(zip(slots, counts))))
                       if c.abs_id == abs_id else c for c in chunks)
    else:
        chunks = tuple(replace(c, writer_count=writer_count, reader_count=reader_count) if c.abs_id == abs_id else c
                       for c in chunks)
    return replace(state, ring=replace(state.ring, chunks=chunks))
