"""Byte layout of one store segment and the shared control block.

Segment (all sizes in bytes)::

    [ secret: 32 ][ control block: 64 ][ data region: B = data_buffer_size ]
      offset 0      offset 32            offset 96 (DATA_OFFSET)

* The secret keys the handle signatures (vLLM >= 0.32 also keeps a 32-byte
  secret at offset 0; vLLM's data region starts right after it, ours after the
  control block -- handles, which are virtual addresses inside the data region,
  are the same).
* The control block is written only by the writer.  Slot 0 holds ``abs_start``
  and slot 1 ``abs_end``: 64-bit absolute allocation counters that never wrap
  and never reset.  Chunk ``k`` (the ``k``-th allocation ever made on this
  segment) has the 31-bit id ``k % 2**31``; the live chunks are exactly those
  with ``abs_start <= k < abs_end``.  Slots 2..7 are reserved (zero).
* Each slot is accessed through a native-endian ``'Q'`` memoryview at an
  8-byte-aligned offset, so every read and write is one aligned 8-byte memory
  access (no torn counter values).  All processes sharing a segment run on the
  same machine, so native byte order is the same for all of them.

Chunk in the data region (same sizes as vLLM 0.11 - 0.33, so the same sequence
of sizes yields the same handles)::

    [ id: int32 LE ][ chunk_size: int32 LE ][ reader_count: int32 LE ][ metadata ][ data ]

``chunk_size`` counts the 8 header bytes; the object part (``reader_count`` +
metadata + data) is ``chunk_size - 8`` bytes.
"""

from __future__ import annotations

import struct

SECRET_BYTES = 32
CONTROL_OFFSET = SECRET_BYTES
CONTROL_BYTES = 64
CONTROL_SLOTS = CONTROL_BYTES // 8
DATA_OFFSET = CONTROL_OFFSET + CONTROL_BYTES

SLOT_ABS_START = 0
SLOT_ABS_END = 1

ID_NBYTES = 4
SIZE_NBYTES = 4
MD_SIZE = ID_NBYTES + SIZE_NBYTES  # ring chunk header: [id][chunk_size]
COUNT_NBYTES = 4  # reader_count in front of every stored object
OBJECT_HEADER = MD_SIZE + COUNT_NBYTES  # 12: smallest sane chunk_size of an object
ID_MAX = 2**31  # ids live in [0, ID_MAX)
INT32_MAX = 2**31 - 1

CHUNK_HEADER = struct.Struct("<ii")
"""The ``[id][chunk_size]`` header: two signed 32-bit little-endian ints, the
same encoding as :func:`bytes_to_int32` (``CHUNK_HEADER.unpack_from(view,
offset)`` decodes both in one call, without copying)."""
assert CHUNK_HEADER.size == MD_SIZE


def segment_size(data_buffer_size: int) -> int:
    """Total bytes of a segment holding ``data_buffer_size`` data bytes."""
    return DATA_OFFSET + data_buffer_size


def int32_to_bytes(value: int) -> bytes:
    """Signed 32-bit little-endian encoding (vLLM's ``int2byte``)."""
    return value.to_bytes(ID_NBYTES, "little", signed=True)


def bytes_to_int32(data) -> int:
    """Inverse of :func:`int32_to_bytes` (vLLM's ``byte2int``)."""
    return int.from_bytes(data, "little", signed=True)


def candidate_abs(monotonic_id: int, abs_end: int) -> int:
    """The absolute counter a 31-bit id refers to, seen from ``abs_end``.

    Returns the largest ``k < abs_end`` with ``k % 2**31 == monotonic_id``; if
    there is none, returns ``monotonic_id`` itself (generation 0), which is
    ``>= abs_end`` and therefore never live.
    """
    if abs_end <= monotonic_id:
        return monotonic_id
    return abs_end - 1 - ((abs_end - 1 - monotonic_id) % ID_MAX)


def generation(abs_counter: int) -> int:
    """How many times the 31-bit id space had wrapped when ``abs_counter`` was issued."""
    return abs_counter // ID_MAX
