"""Version profiles: the documented behaviour differences of the real store.

A :class:`Profile` is a parameter of the model, never a fork of it.  Sources:
``../shared/SEMANTICS.md`` ("Releases") and vLLM's
``vllm/distributed/device_communicators/shm_object_storage.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TouchMode = Literal["none", "counting", "protecting"]
ClrContract = Literal["drain", "strict"]
SwContract = Literal["threads", "one-thread"]


@dataclass(frozen=True)
class Profile:
    """Behaviour switches of one store version.

    Attributes:
        name: stable profile name (appears in report.json).
        clear_keeps_ids: ``clear()`` keeps ``id_end`` and sets ``id_start = id_end``
            (vLLM >= 0.32); otherwise ids reset to 0 (vLLM < 0.32).
        signed: reader ``get``/``touch`` take ``(signature, key)`` and check an
            HMAC before touching shared memory (vLLM >= 0.32).
        touch: ``"none"`` (vLLM 0.11), ``"counting"`` (0.12 - 0.31: touch bumps
            a count) or ``"protecting"`` (>= 0.32: the writer's touch protects a
            chunk from eviction until ``get_cached`` or ``release_touches``).
        bind_generation: signatures also bind the id generation
            (``abs_id // 2**31``), so a handle from before an id wrap never
            verifies again (impl/ only).
        lenient_stale: a handle whose chunk is no longer live may still return
            the object originally put under it (the store reads the freed but
            not yet overwritten bytes).  NRR allows that outcome; the hardened
            store never does it.
        data_offset: physical offset of the data region in the segment, bytes
            (32 where a signing secret precedes it).
        has_close: the storage has ``close()`` (vLLM >= 0.15).
        per_reader: reads are counted per reader (impl segment v2): a chunk
            is free when *every* reader has read it ``writer_count`` times,
            so one reader's surplus reads never stand in for another's (RC's
            per-reader form); at most ``n_readers`` readers attach
            (``TooManyReaders``).  Otherwise vLLM's aggregate
            ``reader_count >= writer_count * n_readers``.
        drain: CLR as vLLM's drain contract, exactly: a reader's handle of a
            chunk dropped by the latest ``clear()`` still returns its object
            while no later allocation overlaps the chunk (impl).  Without it a
            pre-clear handle is stale at once (``lenient_stale`` profiles may
            return the original object either way).
        chunk_cap: at most ``max_chunks`` chunks are live (:func:`impl_max_chunks`
            of the ring size); a put beyond it is ``OutOfSpace`` (impl).
        clr: the CLR contract the store is judged by (SEMANTICS.md, CLR):
            ``"drain"`` (vLLM's, every release: a pre-clear handle may resolve
            after the clear to its own object, never to another) or
            ``"strict"`` (no pre-clear handle resolves after the clear).
        sw: the SW contract (SEMANTICS.md, SW): ``"threads"`` (two threads
            may use the writer at once: it serializes them or refuses, impl)
            or ``"one-thread"`` (the store confines its writer to one thread:
            vLLM's ring docstring, every release, says only one
            process/thread should write; SW findings are then reported as not
            claimed and do not fail).
        leases: the store declares reader leases (SEMANTICS.md, LEASE): a
            reader's pins and promised reads end with its lease (its view
            closed or its process died), so a dead reader never stops the
            writer (impl's ``lease_policy="forfeit"``).  Without it LEASE is
            not claimed.
    """

    name: str
    clear_keeps_ids: bool
    signed: bool
    touch: TouchMode
    bind_generation: bool = False
    lenient_stale: bool = True
    data_offset: int = 0
    has_close: bool = False
    per_reader: bool = False
    drain: bool = False
    chunk_cap: bool = False
    clr: ClrContract = "drain"
    sw: SwContract = "one-thread"
    leases: bool = False


def impl_max_chunks(data_buffer_size: int) -> int:
    """impl's live-chunk bound ``K`` for a ring of ``data_buffer_size`` bytes:
    ``max(1024, B // 4096)`` (one 8-byte ack word per chunk and reader)."""
    return max(1024, data_buffer_size // 4096)


VLLM_0_11 = Profile("vllm-0.11", clear_keeps_ids=False, signed=False, touch="none")
VLLM_0_12 = Profile("vllm-0.12", clear_keeps_ids=False, signed=False, touch="counting")
VLLM_0_15 = Profile(
    "vllm-0.15", clear_keeps_ids=False, signed=False, touch="counting", has_close=True
)
VLLM_0_32 = Profile(
    "vllm-0.32",
    clear_keeps_ids=True,
    signed=True,
    touch="protecting",
    data_offset=32,
    has_close=True,
)
IMPL = Profile(
    "impl",
    clear_keeps_ids=True,
    signed=True,
    touch="protecting",
    bind_generation=True,
    lenient_stale=False,
    data_offset=32,
    has_close=True,
    per_reader=True,
    drain=True,
    chunk_cap=True,
    sw="threads",
    leases=True,
)
IMPL_STRICT = Profile(
    "impl-strict",
    clear_keeps_ids=True,
    signed=True,
    touch="protecting",
    bind_generation=True,
    lenient_stale=False,
    data_offset=32,
    has_close=True,
    per_reader=True,
    drain=False,
    chunk_cap=True,
    clr="strict",
    sw="threads",
    leases=True,
)
"""impl's contract with the stricter CLR: no handle issued before a
``clear()`` resolves after it (for stores that choose it)."""

PROFILES: dict[str, Profile] = {
    p.name: p for p in (VLLM_0_11, VLLM_0_12, VLLM_0_15, VLLM_0_32, IMPL, IMPL_STRICT)
}


def profile_for_vllm(version: str) -> Profile:
    """The profile of a vLLM release ``"X.Y.Z"`` (releases from 0.11.0 on).

    Raises:
        ValueError: the version does not parse or predates the store (0.11.0).
    """
    try:
        parts = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        raise ValueError(f"not a vLLM release number: {version!r}") from None
    if len(parts) < 2 or parts < (0, 11):
        raise ValueError(f"vLLM {version} predates the shared-memory object store (0.11.0)")
    if parts >= (0, 32):
        return VLLM_0_32
    if parts >= (0, 15):
        return VLLM_0_15
    if parts >= (0, 12):
        return VLLM_0_12
    return VLLM_0_11
