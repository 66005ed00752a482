"""The harness's serializer, given to every target so that the harness controls
the payload bytes exactly.

Wire format of one object inside a chunk's payload (after the store's 4-byte
reader count):  ``[MAGIC: 4 bytes][n: uint32 LE][data: n bytes]``.  The
metadata part is the first 8 bytes; ``data`` is what the harness generated.

``deserialize`` never raises: bytes that are not a well-formed object (what a
store hands over when it deserializes a recycled slot) come back as
:class:`Garbage`, so NRR sees exactly what the store returned.  Every call is
counted in :data:`DESERIALIZE_CALLS` (property AUTH: nothing is deserialized
for a forged handle).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

MAGIC = b"SHMS"
MD_BYTES = 8
"""Metadata bytes per object: magic + length."""
COUNT_BYTES = 4
"""The store's in-band reader count in front of the metadata."""

DESERIALIZE_CALLS = [0]
"""Process-wide count of deserialize calls (a list so it can be mutated in place)."""


@dataclass(frozen=True)
class Blob:
    """A harness object: opaque bytes.  Equality is byte equality."""

    data: bytes

    def __repr__(self) -> str:
        return f"Blob({self.data[:12].hex()}{'...' if len(self.data) > 12 else ''}, {len(self.data)} B)"


@dataclass(frozen=True)
class Garbage:
    """What a store returned when it deserialized bytes that are not an object."""

    raw: bytes

    def __repr__(self) -> str:
        return f"Garbage({self.raw[:16].hex()}, {len(self.raw)} B)"


def object_nbytes(data: bytes) -> int:
    """Bytes the store accounts for one object: count + metadata + data."""
    return COUNT_BYTES + MD_BYTES + len(data)


def metadata_for(data: bytes) -> bytes:
    return MAGIC + struct.pack("<I", len(data))


@dataclass(frozen=True)
class Uncopyable:
    """A blob whose serialized data the store cannot copy into the ring
    (property EXC): the serde hands over ``[data, <a piece of n bytes with no
    buffer>]``, so a store that allocates before it copies fails after its
    allocation (vLLM's ``copy_to_buffer``), one that checks first fails before."""

    data: bytes


class _NoBuffer:
    """``len()`` says ``n`` bytes, but it exports no buffer: copying it raises TypeError."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


class HarnessSerde:
    """``ObjectSerde``-compatible: ``serialize(Blob) -> (data, nbytes, md, md_nbytes)``."""

    def serialize(self, value: Any) -> tuple[bytes, int, bytes, int]:
        if isinstance(value, Uncopyable):
            md = metadata_for(value.data + b"\0" * 8)
            return [value.data, _NoBuffer(8)], len(value.data) + 8, md, len(md)
        if not isinstance(value, Blob):
            raise TypeError(f"HarnessSerde serializes Blob values, not {type(value).__name__}")
        md = metadata_for(value.data)
        return value.data, len(value.data), md, len(md)

    def deserialize(self, data: memoryview) -> Any:
        DESERIALIZE_CALLS[0] += 1
        return self.decode(bytes(data))

    @staticmethod
    def decode_shared(data: memoryview) -> Any:
        """impl's ``get(copy=False)``: ``[MAGIC][n][n bytes]`` -> a ``Blob``
        whose ``data`` is the view of shared memory itself (no copy), so a
        kept value shows what the ring holds there now; else ``Garbage``
        (copied)."""
        if (len(data) >= MD_BYTES and bytes(data[:4]) == MAGIC
                and struct.unpack_from("<I", data, 4)[0] == len(data) - MD_BYTES):
            return Blob(data[MD_BYTES:])
        return Garbage(bytes(data))

    @staticmethod
    def decode(raw: bytes) -> Any:
        """``[MAGIC][n][n bytes]`` -> ``Blob``; anything else -> ``Garbage``."""
        if len(raw) >= MD_BYTES and raw[:4] == MAGIC:
            (n,) = struct.unpack_from("<I", raw, 4)
            if MD_BYTES + n == len(raw):
                return Blob(raw[MD_BYTES:])
        return Garbage(raw)


def difference(got: object, want: bytes) -> str:
    """Where an object read differs from the bytes put: ``""`` when equal, else
    e.g. ``" (first difference at byte 36: 02 != 04)"``, so two renderings that
    look the same (long payloads are shown truncated) are told apart."""
    raw = got.data if isinstance(got, Blob) else got.raw if isinstance(got, Garbage) else None
    if raw is None or raw == want:
        return ""
    for i, (a, b) in enumerate(zip(raw, want)):
        if a != b:
            return f" (first difference at byte {i}: {a:02x} != {b:02x})"
    return f" (lengths differ: {len(raw)} != {len(want)} bytes)"
