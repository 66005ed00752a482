"""Byte layout of impl's segments (segment version 2; docs/impl-protocol.md).

Ring segment ``<name>`` (sizes in bytes)::

    [ secret: 32 ][ control block: 128 ][ data region: B = data_buffer_size ]
      offset 0      offset 32             offset 160 (DATA_OFFSET)

Reader table ``<name>_r`` (created when the writer's storage is built)::

    [ table header: 256 ][ slot 0 ][ slot 1 ] ... [ slot N-1 ]
    table header = [ 8 words (TBL_*) ][ the writer's serde class name: 192 bytes, UTF-8, 0-padded ]
    slot r = [ slot header: 576 ][ ack 0 ] ... [ ack K-1 ]       (8 bytes each)
    slot header = [ owner pid ][ pin ][ epoch ][ revoked ][ leases ][ 3 spare ]
                  [ lease 0: 4 words ] ... [ lease 15 ]

* The secret keys the handle signatures (vLLM >= 0.32 also keeps a 32-byte
  secret at offset 0; handles, virtual addresses inside the data region, are
  the same as vLLM's).
* Every word is accessed through a native-endian ``'Q'`` memoryview at an
  8-byte-aligned offset: one aligned 8-byte load or store, never torn.  All
  processes sharing a segment run on one machine, so native order is shared.
* Control words (:data:`CTL_*`) are written by the writer only; slot ``r`` is
  written by reader ``r`` only (its ``pin`` and acks).

Chunk in the data region (same sizes as vLLM 0.11 - 0.33, so the same sequence
of sizes yields the same handles)::

    [ id: int32 LE ][ chunk_size: int32 LE ][ 4 reserved bytes ][ metadata ][ data ]

``chunk_size`` counts the 8 header bytes.  The 4 bytes after the header are
vLLM's in-band ``reader_count``; impl writes 0 there and never reads them
(reads are acknowledged in the reader table).
"""

from __future__ import annotations

import struct

from shmspec.model.profile import impl_max_chunks

SECRET_BYTES = 32
CONTROL_OFFSET = SECRET_BYTES
CONTROL_BYTES = 128
CONTROL_SLOTS = CONTROL_BYTES // 8
DATA_OFFSET = CONTROL_OFFSET + CONTROL_BYTES

# control block words
CTL_ABS_START = 0
CTL_ABS_END = 1
CTL_DRAIN_SEQ = 2
CTL_DRAIN_LO = 3
CTL_DRAIN_HI = 4
CTL_DRAIN_HW = 5
CTL_MAGIC = 8
CTL_DATA_BYTES = 9
CTL_MAX_CHUNKS = 10

SEGMENT_MAGIC = int.from_bytes(b"SHMSPEC2", "little")
TABLE_MAGIC = int.from_bytes(b"SHMSRDR3", "little")
TABLE_VERSION = 3  # 3: zero-copy leases in the slot header (2026-12-06)

# reader table header words
TBL_MAGIC = 0
TBL_N_READERS = 1
TBL_MAX_OBJECT = 2
TBL_DATA_BYTES = 3
TBL_MAX_CHUNKS = 4
TBL_LEASE_US = 5  # the writer's lease time in microseconds; 0: no lease time (no revocation)
TABLE_HEADER_BYTES = 256
TBL_SERDE_OFFSET, TBL_SERDE_BYTES = 64, 192
"""Bytes of the table header holding the writer's serde family (storage's
``_serde_name``; a reader of another family is refused: vLLM 0.33.0 checks nothing)."""
SLOT_HEADER_BYTES = 576
# slot header words
SLOT_OWNER_PID = 0
SLOT_PIN = 1
SLOT_EPOCH = 2  # the reader's lease epoch (the reader writes it)
SLOT_REVOKED = 3  # the epoch the writer revoked (the one word of a slot the writer writes)
SLOT_LEASES = 4  # how many of the slot's zero-copy lease entries are in use (the reader writes it)
SLOT_SHARED_READ = 5
"""With a lease time: 1 + the lease entry of a ``get(copy=False)`` still
building its value (its pin already cleared), else 0 (the reader writes it;
2026-12-07, a word unused before, so no table version change).  Such a read
is bounded by the lease time as a pinned one is: past it the writer revokes
the reader's lease and, if the read is still in flight after its fence, the
entry is void and the get raises ``StaleHandle`` when it resumes."""
SLOT_LEASE_BASE = 8  # word of lease entry 0
LEASE_WORDS = 4
"""A zero-copy lease entry: ``[pin_word(seq, abs) | 0 when free][physical
offset][bytes][CLOCK_MONOTONIC microseconds when taken]``: the chunk of
allocation ``abs`` at bytes ``[offset, offset + bytes)`` of the data region,
which a value returned by ``get(..., copy=False)`` still points into."""
MAX_LEASES = 16
assert SLOT_LEASE_BASE + MAX_LEASES * LEASE_WORDS <= SLOT_HEADER_BYTES // 8

PIN_ABS_BITS = 48
PIN_ABS_MASK = (1 << PIN_ABS_BITS) - 1
"""A pin word is ``(seq << 48) | ((abs + 1) & PIN_ABS_MASK)``, 0 when unpinned."""


ID_NBYTES = 4
SIZE_NBYTES = 4
MD_SIZE = ID_NBYTES + SIZE_NBYTES  # ring chunk header: [id][chunk_size]
COUNT_NBYTES = 4  # vLLM's reader_count slot in front of every stored object
OBJECT_HEADER = MD_SIZE + COUNT_NBYTES  # 12: smallest sane chunk_size of an object
ID_MAX = 2**31  # ids live in [0, ID_MAX)
INT32_MAX = 2**31 - 1

CHUNK_HEADER = struct.Struct("<ii")
"""The ``[id][chunk_size]`` header: two signed 32-bit little-endian ints, the
same encoding as :func:`bytes_to_int32` (``CHUNK_HEADER.unpack_from(view,
offset)`` decodes both in one call, without copying)."""
assert CHUNK_HEADER.size == MD_SIZE


def segment_size(data_buffer_size: int) -> int:
    """Total bytes of a ring segment holding ``data_buffer_size`` data bytes."""
    return DATA_OFFSET + data_buffer_size


def default_max_chunks(data_buffer_size: int) -> int:
    """``K``, the live-chunk bound of a ring of ``data_buffer_size`` bytes when
    none is given: the model's :func:`~shmspec.model.profile.impl_max_chunks`,
    ``max(1024, B // 4096)`` (one 8-byte ack word per chunk and reader: 8 MiB
    per reader for a 4 GiB ring)."""
    return impl_max_chunks(data_buffer_size)


def slot_bytes(max_chunks: int) -> int:
    """Bytes of one reader's slot: header plus ``max_chunks`` ack words."""
    return SLOT_HEADER_BYTES + 8 * max_chunks


def table_size(n_readers: int, max_chunks: int) -> int:
    """Total bytes of the reader table for ``n_readers`` readers."""
    return TABLE_HEADER_BYTES + n_readers * slot_bytes(max_chunks)


def slot_offset(reader: int, max_chunks: int) -> int:
    """Byte offset of reader ``reader``'s slot in the reader table."""
    return TABLE_HEADER_BYTES + reader * slot_bytes(max_chunks)


def pin_word(seq: int, abs_counter: int) -> int:
    """The pin a reader publishes while it reads allocation ``abs_counter``."""
    return ((seq & 0xFFFF) << PIN_ABS_BITS) | ((abs_counter + 1) & PIN_ABS_MASK)


def pinned_abs(word: int, abs_end: int) -> int | None:
    """The allocation a non-zero pin word names, seen from ``abs_end`` (the
    largest ``k`` below ``abs_end + 2**47`` with the pin's low 48 bits);
    ``None`` for 0 (no pin)."""
    if word == 0:
        return None
    k1 = (word & PIN_ABS_MASK) - 1  # abs + 1 modulo 2**48, minus one
    # the candidate congruent to k1 modulo 2**48 nearest to abs_end
    base = abs_end - ((abs_end - k1) % (1 << PIN_ABS_BITS))
    if abs_end - base > (1 << (PIN_ABS_BITS - 1)):
        base += 1 << PIN_ABS_BITS
    return base


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
