"""The ring buffer's allocation and FIFO-free arithmetic, as pure functions.

Mirrors ``SingleWriterShmRingBuffer`` of vLLM >= 0.12 (SEMANTICS.md "Ring
buffer").  Addresses are *virtual* byte addresses (they may exceed the ring
size ``B``; the physical offset is ``address % B``).  Ids are modulo
``ID_MAX = 2**31``.  Every function returns a new :class:`Ring`; nothing is
mutated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from .errors import OutOfSpace

ID_MAX = 2**31
"""Ids are int32 in the header and wrap modulo this (exclusive bound)."""

HEADER_BYTES = 8
"""``[id: int32 LE][chunk_size: int32 LE]`` in front of every chunk."""


# -- the integer arithmetic, over an injected ``ops`` -------------------------
# Each function below is the model's one definition of a piece of ring
# arithmetic.  With the default :data:`INT_OPS` (Python ints and bools) it is
# what the model computes; conformance/proofs/prove.py passes an ops object that
# builds z3 terms instead, so the proofs are about these very definitions.
# Comparisons and ``+ - *`` are written as Python operators (z3 overloads
# them); conditionals, ``%`` and ``//`` go through ``ops``.  Divisors are
# always the ring size ``B > 0``, where floor and Euclidean division agree.


class IntOps:
    """Python-int arithmetic: ``ite`` is a conditional expression, ``mod`` and
    ``div`` are Python's ``%`` and ``//`` (floor), ``and_`` is ``all``."""

    @staticmethod
    def ite(cond: Any, then: Any, other: Any) -> Any:
        return then if cond else other

    @staticmethod
    def mod(a: Any, b: Any) -> Any:
        return a % b

    @staticmethod
    def div(a: Any, b: Any) -> Any:
        return a // b

    @staticmethod
    def and_(*conds: Any) -> Any:
        return all(conds)


INT_OPS = IntOps()
"""The ops the model itself runs with."""


def chunk_bytes(size: Any) -> Any:
    """Chunk size of a ``size``-byte payload: ``size + 8`` (the ``chunk_size``
    header field, which counts the header; int32 in the segment)."""
    return size + HEADER_BYTES


def placement(end: Any, ring_size: Any, n: Any, ops: Any = INT_OPS) -> Any:
    """Virtual address for an ``n``-byte chunk: ``end``, or, when
    ``end % B + n > B`` (no contiguous room at the tail), the wrap jump to the
    next multiple of ``B``: ``(end // B + 1) * B`` (vLLM ``allocate_buf``)."""
    jump = ops.mod(end, ring_size) + n > ring_size
    return ops.ite(jump, (ops.div(end, ring_size) + 1) * ring_size, end)


def fits(address: Any, n: Any, start: Any, ring_size: Any) -> Any:
    """The OOM test: an ``n``-byte chunk at ``address`` keeps
    ``address + n - start <= B`` (otherwise vLLM raises ``MemoryError``)."""
    return address + n - start <= ring_size


def next_id(id_: Any, ops: Any = INT_OPS) -> Any:
    """The id after ``id_``: ``(id_ + 1) % 2**31`` (WRAP)."""
    return ops.mod(id_ + 1, ID_MAX)


def free_step(start: Any, end: Any, has_next: Any, next_address: Any, ring_size: Any,
              ops: Any = INT_OPS) -> tuple[Any, Any]:
    """``(start, end)`` after dropping the oldest chunk: ``start`` moves forward
    to the next live chunk, ``start += (next_address - start) % B``, or, when
    no chunk is left (``has_next`` false), ``start = end = 0`` (vLLM >= 0.11)."""
    moved = start + ops.mod(next_address - start, ring_size)
    return ops.ite(has_next, moved, 0), ops.ite(has_next, end, 0)


def ids_after_clear(id_end: Any, keep_ids: Any, ops: Any = INT_OPS) -> Any:
    """``id_start = id_end`` after ``clear()``: the old ``id_end`` (vLLM >= 0.32,
    ``keep_ids``) or 0 (older releases)."""
    return ops.ite(keep_ids, id_end, 0)


def renormalise(start: Any, end: Any, ring_size: Any, ops: Any = INT_OPS) -> tuple[Any, Any]:
    """After a free: if ``start >= B`` both ``start`` and ``end`` drop by ``B``."""
    over = start >= ring_size
    return ops.ite(over, start - ring_size, start), ops.ite(over, end - ring_size, end)


@dataclass(frozen=True)
class Chunk:
    """One live chunk.

    Attributes:
        id: monotonic id modulo 2**31.
        abs_id: absolute allocation number (never wraps, never resets); the
            model's name for "which allocation this is".
        address: virtual address of the header, bytes.
        size: chunk size including the 8 header bytes, bytes.
        key, value: the object stored (``None`` for bare ring allocations).
        writer_count: promises made by put / get_cached (each promises one
            read by each of ``n_readers`` readers).
        reader_count: reads counted by readers.
        protected: kept from eviction by a protecting ``touch`` (vLLM >= 0.32).
        reads: ``((reader, count), ...)`` reads per reader, for the client
            protocol predicate (not part of the real store's state).
    """

    id: int
    abs_id: int
    address: int
    size: int
    key: str | None = None
    value: Any = None
    writer_count: int = 0
    reader_count: int = 0
    protected: bool = False
    reads: tuple[tuple[str, int], ...] = ()

    @property
    def handle(self) -> tuple[int, int]:
        """``(address, id)`` as returned by ``put`` / ``get_cached``."""
        return (self.address, self.id)


@dataclass(frozen=True)
class Ring:
    """Writer-private ring state.  ``chunks`` are the live chunks, oldest first."""

    size: int
    start: int = 0
    end: int = 0
    id_start: int = 0
    id_end: int = 0
    chunks: tuple[Chunk, ...] = ()

    def physical(self, address: int) -> int:
        """Physical offset of a virtual address inside the data region, bytes."""
        return address % self.size

    def by_id(self, id_: int) -> Chunk | None:
        for c in self.chunks:
            if c.id == id_:
                return c
        return None


def plan_allocation(ring: Ring, size: int) -> int:
    """Virtual address where a ``size``-byte payload would go.

    Raises:
        OutOfSpace: no contiguous room of ``size + 8`` bytes (OOM).
        ValueError: ``size <= 0``.
    """
    if size <= 0:
        raise ValueError("Size must be greater than 0")
    n = chunk_bytes(size)
    address = placement(ring.end, ring.size, n)
    if not fits(address, n, ring.start, ring.size):
        raise OutOfSpace()
    return address


def allocate(ring: Ring, size: int, abs_id: int, **fields: Any) -> tuple[Ring, Chunk]:
    """Allocate ``size`` payload bytes; returns the new ring and the chunk.

    ``fields`` (key, value, writer_count, ...) are stored on the chunk.

    Raises:
        OutOfSpace: see :func:`plan_allocation`; the ring is unchanged.
    """
    address = plan_allocation(ring, size)
    chunk = Chunk(
        id=ring.id_end, abs_id=abs_id, address=address, size=chunk_bytes(size), **fields
    )
    ring = replace(
        ring,
        end=address + chunk.size,
        id_end=next_id(ring.id_end),
        chunks=ring.chunks + (chunk,),
    )
    return ring, chunk


def free(
    ring: Ring, is_free: Callable[[Chunk], bool], nbytes: int | None = None
) -> tuple[Ring, tuple[Chunk, ...]]:
    """FIFO free from the oldest chunk until ``nbytes`` (default: the ring
    size) have been freed or the oldest chunk is busy.

    Returns the new ring and the freed chunks, oldest first (property FIFO).
    """
    if nbytes is None:
        nbytes = ring.size
    chunks = list(ring.chunks)
    start, end, id_start = ring.start, ring.end, ring.id_start
    freed: list[Chunk] = []
    freed_bytes = 0
    while chunks and chunks[0].id == id_start and freed_bytes < nbytes:
        oldest = chunks[0]
        if not is_free(oldest):
            break
        chunks.pop(0)
        freed.append(oldest)
        id_start = next_id(id_start)
        has_next = bool(chunks) and chunks[0].id == id_start
        start, end = free_step(start, end, has_next, chunks[0].address if has_next else start, ring.size)
        freed_bytes += oldest.size
    start, end = renormalise(start, end, ring.size)
    return (
        replace(ring, start=start, end=end, id_start=id_start, chunks=tuple(chunks)),
        tuple(freed),
    )


def clear(ring: Ring, keep_ids: bool) -> Ring:
    """Drop every chunk.  ``keep_ids``: vLLM >= 0.32 (id_start = id_end);
    otherwise ids reset to 0 (older releases; breaks CLR)."""
    id_end = ids_after_clear(ring.id_end, keep_ids)
    return replace(ring, start=0, end=0, id_start=id_end, id_end=id_end, chunks=())
