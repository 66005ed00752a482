"""Tests of shmspec.impl, the hardened drop-in for vLLM 0.33's shm object store.

Expected handles are worked out by hand from the allocation rule in
SEMANTICS.md: chunk n = size + 8 (ring) and object size = 4 + metadata + data
(store); wrap to the next multiple of B when ``end % B + n > B``; OutOfSpace
when ``end + n - start > B``.
"""

from __future__ import annotations

import os
import pickle
import threading

import pytest

from shmspec.impl import (
    ObjectSerde,
    PickleSerde,
    ShmObjectStorageHandle,
    SingleWriterShmObjectStorage,
    SingleWriterShmRingBuffer,
    yieldpoints,
)
from shmspec.impl.layout import DATA_OFFSET
from shmspec.model.errors import (
    BadHandleFields,
    BadSignature,
    DuplicateKey,
    MissingReaderLock,
    MissingSignature,
    NotWriter,
    ObjectTooLarge,
    OutOfSpace,
    StaleHandle,
    UnknownKey,
)


class RawSerde(ObjectSerde):
    """bytes in, bytes out, no metadata: object size = 4 + len(value)."""

    def serialize(self, value):
        return value, len(value), b"", 0

    def deserialize(self, data):
        return bytes(data)


class ExplodingSerde(RawSerde):
    def serialize(self, value):
        if value == b"boom":
            raise RuntimeError("serializer failed")
        if value == b"liar":
            return b"liar", 99, b"", 0  # declared size does not match the bytes
        return super().serialize(value)


@pytest.fixture
def make_store():
    """Factory: (writer, reader) over a fresh segment; everything closed afterwards."""
    opened = []

    def _make(B, max_object_size, n_readers=1, serde=RawSerde):
        ring = SingleWriterShmRingBuffer(B, create=True)
        writer = SingleWriterShmObjectStorage(max_object_size, n_readers, ring, serde)
        handle = ShmObjectStorageHandle(
            max_object_size, n_readers, ring.handle(), serde, threading.Lock()
        )
        reader = SingleWriterShmObjectStorage.create_from_handle(handle)
        opened.extend([reader, writer])
        return writer, reader

    yield _make
    for store in opened:
        store.close()


def ring_state(ring):
    return (
        ring.data_buffer_start,
        ring.data_buffer_end,
        ring.monotonic_id_start,
        ring.monotonic_id_end,
        dict(ring.metadata),
    )


def store_state(store):
    return (
        ring_state(store.ring_buffer),
        dict(store.key_index),
        dict(store.id_index),
        dict(store.writer_flag),
    )


def read(writer, reader, key):
    address, monotonic_id = writer.key_index[key]
    return reader.get(address, monotonic_id, writer.get_signature(key), key)


# --------------------------------------------------------------------- ring


def test_ring_100_byte_example_free_both_resets_to_zero():
    ring = SingleWriterShmRingBuffer(100, create=True)
    try:
        assert ring.allocate_buf(20) == (0, 0)  # chunk 28: [0, 28)
        assert ring.allocate_buf(30) == (28, 1)  # chunk 38: [28, 66)
        assert (ring.data_buffer_start, ring.data_buffer_end) == (0, 66)
        assert list(ring.free_buf(lambda i, view: True)) == [0, 1]
        # Nothing left alive: start = end = 0 (vLLM's code; its docstring
        # draws start = end = 66 instead, which the code never produces).
        assert ring_state(ring) == (0, 0, 2, 2, {})
        assert ring.allocate_buf(40) == (0, 2)  # 0 + 48 <= 100: no wrap
        assert ring.allocate_buf(20) == (48, 3)  # 48 + 28 = 76 <= 100
        assert ring.data_buffer_end == 76
    finally:
        ring.close()


def test_ring_100_byte_example_wrap_then_out_of_space():
    ring = SingleWriterShmRingBuffer(100, create=True)
    try:
        assert ring.allocate_buf(20) == (0, 0)  # [0, 28)
        assert ring.allocate_buf(30) == (28, 1)  # [28, 66)
        assert ring.allocate_buf(10) == (66, 2)  # [66, 84)
        assert list(ring.free_buf(lambda i, view: i in (0, 1))) == [0, 1]
        assert (ring.data_buffer_start, ring.data_buffer_end) == (66, 84)
        # 40 -> n = 48: 84 + 48 > 100, so jump to 100; 100 + 48 - 66 = 82 <= 100.
        assert ring.allocate_buf(40) == (100, 3)
        assert ring.data_buffer_end == 148
        before = ring_state(ring)
        # 20 -> n = 28: 48 + 28 <= 100 (no wrap) but 148 + 28 - 66 = 110 > 100.
        with pytest.raises(MemoryError, match="Not enough space in the data buffer"):
            ring.allocate_buf(20)
        with pytest.raises(OutOfSpace):
            ring.allocate_buf(20)
        assert ring_state(ring) == before
        # Freeing id 2 moves start forward (100 - 66) % 100 = 34 to 100, then
        # start >= B shifts both down by 100.
        assert list(ring.free_buf(lambda i, view: True, nbytes=1)) == [2]
        assert (ring.data_buffer_start, ring.data_buffer_end) == (0, 48)
        assert ring.metadata == {3: 100}
    finally:
        ring.close()


def test_ring_busy_oldest_blocks_fifo_and_ids_wrap():
    ring = SingleWriterShmRingBuffer(100, create=True)
    try:
        ring.monotonic_id_end = 2**31 - 2
        assert ring.allocate_buf(10) == (0, 2**31 - 2)
        assert ring.allocate_buf(10) == (18, 2**31 - 1)
        assert ring.allocate_buf(10) == (36, 0)
        assert list(ring.free_buf(lambda i, view: i != 2**31 - 2)) == []
        assert list(ring.free_buf(lambda i, view: True)) == [2**31 - 2, 2**31 - 1, 0]
        assert ring.monotonic_id_start == ring.monotonic_id_end == 1
    finally:
        ring.close()


def test_ring_clear_keeps_ids():
    ring = SingleWriterShmRingBuffer(100, create=True)
    try:
        ring.allocate_buf(10)
        ring.allocate_buf(10)
        ring.clear()
        assert ring_state(ring) == (0, 0, 2, 2, {})
        assert ring.allocate_buf(10) == (0, 2)
    finally:
        ring.close()


# ------------------------------------------------------------------- handles


def test_handles_match_hand_computed_sequence(make_store):
    writer, reader = make_store(256, 100)
    assert writer.put("a", b"a" * 40) == (0, 0)  # object 44, chunk 52 -> end 52
    assert writer.put("b", b"b" * 60) == (52, 1)  # object 64, chunk 72 -> end 124
    assert writer.put("c", b"c" * 80) == (124, 2)  # object 84, chunk 92 -> end 216
    before = store_state(writer)
    # d: chunk 42; 216 + 42 > 256 -> jump to 256; 256 + 42 - 0 > 256.  The
    # reclaim finds "a" unread (0 < 1 * 1) and stops; the retry fails too.
    with pytest.raises(MemoryError):
        writer.put("d", b"d" * 30)
    assert store_state(writer) == before
    assert read(writer, reader, "a") == b"a" * 40
    assert read(writer, reader, "b") == b"b" * 60
    # Now a and b are reclaimed (52 + 72 = 124 < 200 bytes), c is unread and
    # stops the FIFO; start = 124 and 256 + 42 - 124 = 174 <= 256.
    assert writer.put("d", b"d" * 30) == (256, 3)
    assert writer.put("e", b"e" * 10) == (298, 4)  # 298 % 256 = 42; 42 + 22 <= 256
    assert writer.key_index == {"c": (124, 2), "d": (256, 3), "e": (298, 4)}
    assert writer.id_index == {2: "c", 3: "d", 4: "e"}
    assert writer.writer_flag == {2: 1, 3: 1, 4: 1}
    assert (writer.ring_buffer.data_buffer_start, writer.ring_buffer.data_buffer_end) == (124, 320)
    assert read(writer, reader, "d") == b"d" * 30
    assert read(writer, reader, "e") == b"e" * 10


def test_duplicate_put_rejected_and_old_object_kept(make_store):
    writer, reader = make_store(200, 50)
    handle = writer.put("k", b"first")
    before = store_state(writer)
    with pytest.raises(ValueError, match=r"^Key 'k' already exists in the storage\.$") as info:
        writer.put("k", b"second")
    assert isinstance(info.value, DuplicateKey)
    assert store_state(writer) == before
    assert writer.get(*handle) == b"first"
    assert reader.get(*handle, writer.get_signature("k"), "k") == b"first"


def test_oversize_rejected_and_nothing_changes(make_store):
    writer, _ = make_store(200, 50)
    writer.put("small", b"x" * 46)  # 4 + 46 = 50: exactly the limit
    before = store_state(writer)
    with pytest.raises(
        ValueError,
        match=r"^Serialized object size \(51 bytes\) exceeds max object size \(50 bytes\)$",
    ) as info:
        writer.put("big", b"x" * 47)
    assert isinstance(info.value, ObjectTooLarge)
    assert store_state(writer) == before


def test_reader_without_lock_is_rejected(make_store):
    writer, _ = make_store(200, 50)
    name = writer.ring_buffer.handle()[1]
    ring = SingleWriterShmRingBuffer(200, name, create=False)
    try:
        with pytest.raises(ValueError, match=r"^Lock must be provided for readers\.$") as info:
            SingleWriterShmObjectStorage(50, 1, ring, RawSerde)
        assert isinstance(info.value, MissingReaderLock)
    finally:
        ring.close()
    no_lock = ShmObjectStorageHandle(50, 1, writer.ring_buffer.handle(), RawSerde, None)
    with pytest.raises(MissingReaderLock):
        SingleWriterShmObjectStorage.create_from_handle(no_lock)


def test_pickle_serde_roundtrip_and_vllm_layout(make_store):
    writer, reader = make_store(4096, 1024, serde=PickleSerde)
    value = {"ints": [1, 2, 3], "text": "héllo", "blob": b"\x00\xff"}
    data, nbytes, md, md_nbytes = PickleSerde().serialize(value)
    assert pickle.loads(md) == ("bytes", nbytes, None) and md_nbytes == len(md)
    assert writer.put("v", value) == (0, 0)
    assert writer.ring_buffer.chunk_size(0) == 8 + 4 + md_nbytes + nbytes
    assert read(writer, reader, "v") == value


def test_serde_reads_shared_memory_once_and_must_not_keep_it(make_store):
    """impl/serde.py's contract (segment v2): a serde is handed a view of the
    segment itself, valid during the call (one copy: the serde's own); a
    value that still exports that view is refused with BufferError, and the
    reader's pin is released either way."""
    seen = []

    class LookingSerde(RawSerde):
        def deserialize(self, data):
            seen.append(type(data.obj).__name__)
            return bytes(data)

    class ExportingSerde(RawSerde):
        def deserialize(self, data):
            return pickle.PickleBuffer(data)  # holds an export of the shared view

    writer, reader = make_store(100, 40, serde=LookingSerde)
    writer.put("a", b"a" * 20)
    assert read(writer, reader, "a") == b"a" * 20
    assert seen == ["mmap"]  # the segment's own buffer, no private copy

    writer, reader = make_store(100, 40, serde=ExportingSerde)
    writer.put("a", b"a" * 20)
    with pytest.raises(BufferError, match="kept a view of shared memory"):
        read(writer, reader, "a")
    table = reader.ring_buffer.reader_table
    assert table.pins() == [0]


def test_keeps_buffer_serde_gets_a_private_immutable_copy(make_store):
    """A serde that declares ``keeps_buffer = True`` is handed a ``bytes``
    object of its own instead, so keeping it (no second copy) still holds
    the right object after the writer reuses the chunk."""

    class KeepingSerde(RawSerde):
        keeps_buffer = True

        def deserialize(self, data):
            assert type(data.obj) is bytes  # not a view of the segment
            return data  # kept, not copied

    writer, reader = make_store(100, 40, serde=KeepingSerde)
    assert writer.put("a", b"a" * 20) == (0, 0)
    kept = read(writer, reader, "a")
    assert bytes(kept) == b"a" * 20
    writer.free_unused()
    assert writer.put("b", b"b" * 20) == (0, 1)  # the same slot, overwritten
    assert bytes(kept) == b"a" * 20
    assert bytes(writer.get(0, 1)) == b"b" * 20  # the writer's own get: also a private copy


# ---------------------------------------------------------- reader validation


def test_stale_handle_after_free_and_reuse(make_store):
    writer, reader = make_store(100, 40)
    handle = writer.put("old", b"o" * 20)  # chunk 32 at 0
    signature = writer.get_signature("old")
    assert reader.get(*handle, signature, "old") == b"o" * 20  # counted: freeable
    writer.free_unused()
    assert not writer.is_cached("old")
    with pytest.raises(StaleHandle):  # freed, not yet reused
        reader.get(*handle, signature, "old")
    assert writer.put("new", b"n" * 20) == (0, 1)  # empty ring reset: same address
    with pytest.raises(
        ValueError, match=r"^Data for address:id '0:0' has been modified or is invalid\.$"
    ):
        reader.get(*handle, signature, "old")
    with pytest.raises(StaleHandle):
        reader.touch("old", *handle, signature)
    with pytest.raises(StaleHandle):
        writer.get(*handle)


def test_pre_clear_handle_drains_until_its_bytes_are_reused(make_store):
    """CLR, vLLM's drain contract: after clear() a pre-clear handle still reads
    its own object while no allocation reached its bytes; from then on it is
    stale, never another object (ids keep increasing)."""
    writer, reader = make_store(100, 40)
    pad = writer.put("pad", b"p" * 20)  # chunk 32 at 0
    pad_signature = writer.get_signature("pad")
    handle = writer.put("k", b"k" * 10)  # chunk 22 at 32
    assert handle == (32, 1)
    signature = writer.get_signature("k")
    writer.clear()
    assert writer.key_index == {} and writer.ring_buffer.monotonic_id_start == 2
    assert reader.get(*handle, signature, "k") == b"k" * 10  # drained: not counted
    reader.touch("k", *handle, signature)
    assert writer.put("x", b"x" * 20) == (0, 2)  # bytes [0, 32): k untouched
    assert reader.get(*handle, signature, "k") == b"k" * 10
    assert writer.put("y", b"y" * 4) == (32, 3)  # reaches k's bytes
    with pytest.raises(StaleHandle):
        reader.get(*handle, signature, "k")
    with pytest.raises(StaleHandle):
        reader.touch("k", *handle, signature)
    with pytest.raises(StaleHandle):  # pad's bytes were reused first
        reader.get(*pad, pad_signature, "pad")
    assert read(writer, reader, "y") == b"y" * 4


def test_second_clear_ends_the_first_drain(make_store):
    writer, reader = make_store(100, 40)
    handle = writer.put("k", b"k" * 10)
    signature = writer.get_signature("k")
    writer.clear()
    writer.clear()
    with pytest.raises(StaleHandle):
        reader.get(*handle, signature, "k")


def test_forged_or_altered_handles_rejected(make_store):
    writer, reader = make_store(200, 50)
    writer.put("pad", b"p" * 10)  # chunk 22 at 0
    address, monotonic_id = writer.put("k", b"v" * 10)  # chunk 22 at 22
    assert (address, monotonic_id) == (22, 1)
    signature = writer.get_signature("k")
    flipped = list(signature)
    flipped[0] ^= 1
    seen = []
    yieldpoints.HOOK = seen.append
    try:
        for call in (
            lambda: reader.get(address, monotonic_id, flipped, "k"),
            lambda: reader.get(0, monotonic_id, signature, "k"),  # altered address
            lambda: reader.get(address, 0, signature, "k"),  # altered id
            lambda: reader.get(address, monotonic_id, signature, "pad"),  # wrong key
            lambda: reader.get(2**64 - 1, monotonic_id, [0] * 32, "k"),  # forged far address
            lambda: reader.touch("k", address, monotonic_id, flipped),
        ):
            with pytest.raises(BadSignature, match="Invalid SHM handle signature"):
                call()
        # rejected before any liveness check or payload read
        assert seen == []
    finally:
        yieldpoints.HOOK = None
    for sig, key in ((None, "k"), (signature, None)):
        with pytest.raises(MissingSignature, match="Missing SHM handle signature"):
            reader.get(address, monotonic_id, sig, key)
    with pytest.raises(BadSignature):
        writer.verify_signature("k", address, monotonic_id, flipped)
    with pytest.raises(BadSignature):
        writer.verify_signature("pad", address, monotonic_id, signature)
    writer.verify_signature("k", address, monotonic_id, signature)
    reader.verify_signature("k", address, monotonic_id, signature)
    assert reader.get(address, monotonic_id, signature, "k") == b"v" * 10


@pytest.mark.parametrize(
    "address, monotonic_id, signature, key",
    [
        (-1, 0, [0] * 32, "k"),
        (True, 0, [0] * 32, "k"),
        (2**64, 0, [0] * 32, "k"),
        ("0", 0, [0] * 32, "k"),
        (0, 2**31, [0] * 32, "k"),
        (0, -1, [0] * 32, "k"),
        (0, 1.0, [0] * 32, "k"),
        (0, 0, [0] * 31, "k"),
        (0, 0, [0] * 31 + [256], "k"),
        (0, 0, [0] * 31 + [False], "k"),
        (0, 0, tuple([0] * 32), "k"),
        (0, 0, bytes(32), "k"),
        (0, 0, [0] * 32, 7),
    ],
)
def test_bad_handle_fields(make_store, address, monotonic_id, signature, key):
    """vLLM 0.33.0's message for every malformed handle; the field is named
    in ``detail``."""
    _, reader = make_store(100, 40)
    with pytest.raises(ValueError, match=r"^Invalid SHM handle signature for cache key\.$") as info:
        reader.get(address, monotonic_id, signature, key)
    assert isinstance(info.value, BadHandleFields) and info.value.detail
    with pytest.raises(BadHandleFields):
        reader.touch(key, address, monotonic_id, signature)


def test_adversarial_payload_cannot_resurrect_stale_handle(make_store):
    B = 256
    writer, reader = make_store(B, 200)
    writer.put("pad", b"p" * 28)  # chunk 40 at [0, 40)
    victim = writer.put("victim", b"GENUINE-" * 4)  # chunk 44 at [40, 84)
    assert victim == (40, 1)
    victim_sig = writer.get_signature("victim")
    assert read(writer, reader, "pad") == b"p" * 28
    assert reader.get(*victim, victim_sig, "victim") == b"GENUINE-" * 4
    writer.free_unused()
    assert writer.key_index == {}
    # The ring is empty, so the next chunk starts at 0 again.  Its data
    # begins at physical 12, so data offset 28 lands exactly on 40, where we
    # plant [id 1][chunk_size 44][reader_count 0][forged bytes]: byte for
    # byte the header vLLM's id check would accept for the stale handle.
    forged = b"FORGED!!" * 4
    planted = (1).to_bytes(4, "little") + (44).to_bytes(4, "little") + bytes(4) + forged
    attack = b"a" * 28 + planted + b"z" * 20
    assert writer.put("attack", attack) == (0, 2)
    shm = writer.ring_buffer.shared_memory.buf
    assert bytes(shm[DATA_OFFSET + 40 : DATA_OFFSET + 84]) == planted
    with pytest.raises(StaleHandle):
        reader.get(*victim, victim_sig, "victim")
    with pytest.raises(StaleHandle):
        reader.touch("victim", *victim, victim_sig)
    # same attack after clear(): ids keep increasing, the handle stays dead
    writer.clear()
    assert writer.put("attack2", attack) == (0, 3)
    with pytest.raises(StaleHandle):
        reader.get(*victim, victim_sig, "victim")
    assert read(writer, reader, "attack2") == attack


def test_old_id_generation_signature_rejected(make_store):
    writer, reader = make_store(100, 40)
    old = writer.put("k", b"gen0")
    old_sig = writer.get_signature("k")
    assert reader.get(*old, old_sig, "k") == b"gen0"
    writer.free_unused()
    # Jump ids so the next chunk reuses id 0 (generation 1) at address 0.
    writer.ring_buffer.monotonic_id_end = 0
    new = writer.put("k", b"gen1")
    assert new == old == (0, 0)
    assert writer.get_signature("k") != old_sig
    with pytest.raises(BadSignature):
        reader.get(*old, old_sig, "k")
    assert read(writer, reader, "k") == b"gen1"


@pytest.mark.parametrize("point", ["pin", "reader_check", "deserialize", "counter_increment"])
def test_writer_reuse_during_a_read_waits_for_the_pin(make_store, point):
    """A reader thread stops at ``point`` of a get; the writer clears and puts
    over the handle's bytes.  Before the pin the writer runs through and the
    reader then finds the handle stale; once pinned, the put waits for the
    reader (pin_wait), which returns its own object or, if it had not
    validated yet, StaleHandle -- never the new bytes."""
    writer, reader = make_store(100, 40)
    handle = writer.put("k", b"A" * 20)
    signature = writer.get_signature("k")
    at_point, resume = threading.Event(), threading.Event()
    main = threading.current_thread()
    waits = []

    def hook(name):
        if threading.current_thread() is main:
            if name == "pin_wait":
                waits.append(name)
                resume.set()  # the writer is blocked on the pin: let the reader go
            return
        if name == point and not at_point.is_set():
            at_point.set()
            assert resume.wait(10)

    result = []

    def get():
        try:
            result.append(reader.get(*handle, signature, "k"))
        except StaleHandle as exc:
            result.append(exc)

    yieldpoints.HOOK = hook
    try:
        t = threading.Thread(target=get)
        t.start()
        assert at_point.wait(10)
        writer.clear()
        if point == "pin":
            resume.set()
        assert writer.put("other", b"B" * 20) == (0, 1)  # the same bytes
        t.join(10)
        assert not t.is_alive()
    finally:
        yieldpoints.HOOK = None
    if point == "pin":
        assert waits == [] and isinstance(result[0], StaleHandle)
    elif point == "reader_check":
        assert waits and isinstance(result[0], StaleHandle)  # the kill was published first
    else:
        assert waits and result == [b"A" * 20]
    assert reader.ring_buffer.reader_table.pins() == [0]


# ----------------------------------------------------------- writer semantics


def test_put_rollback_when_serde_or_copy_fails(make_store):
    writer, reader = make_store(100, 40, serde=ExplodingSerde)
    writer.put("a", b"a" * 20)  # chunk 32 at 0
    before = store_state(writer)
    with pytest.raises(RuntimeError, match="serializer failed"):
        writer.put("x", b"boom")
    assert store_state(writer) == before
    with pytest.raises(ValueError):
        writer.put("x", b"liar")
    assert store_state(writer) == before

    def fail_copy(name):
        if name == "payload_write":
            raise OSError("copy failed")

    yieldpoints.HOOK = fail_copy
    try:
        with pytest.raises(OSError, match="copy failed"):
            writer.put("x", b"x" * 20)
    finally:
        yieldpoints.HOOK = None
    assert store_state(writer) == before
    assert writer.ring_buffer.published_abs_end() == 1
    # The rolled-back allocation is handed out again, as if it never happened.
    assert writer.put("x", b"x" * 20) == (32, 1)
    assert read(writer, reader, "x") == b"x" * 20


def test_put_frees_fifo_then_retries_once(make_store):
    writer, reader = make_store(100, 40)
    assert writer.put("a", b"a" * 20) == (0, 0)  # [0, 32)
    assert writer.put("b", b"b" * 20) == (32, 1)  # [32, 64)
    assert writer.put("c", b"c" * 20) == (64, 2)  # [64, 96)
    read(writer, reader, "b")  # b done, a still unread: a blocks FIFO reclaim
    with pytest.raises(OutOfSpace):
        writer.put("d", b"d" * 20)
    assert set(writer.key_index) == {"a", "b", "c"}
    read(writer, reader, "a")
    # reclaim frees a and b (64 bytes < 80), stops at unread c; start = 64.
    # d: 96 + 32 > 100 -> jump to 100; 100 + 32 - 64 = 68 <= 100.
    assert writer.put("d", b"d" * 20) == (100, 3)
    assert set(writer.key_index) == {"c", "d"}


def test_touch_and_get_cached_counting(make_store):
    writer, reader = make_store(100, 40)
    handle = writer.put("a", b"a" * 20)
    sig = writer.get_signature("a")
    reader.touch("a", *handle, sig)  # reader touch only validates
    assert writer.get(*handle) == b"a" * 20  # writer get does not count
    assert writer.default_is_free_check(0, memoryview(bytes(4))) is False
    assert reader.get(*handle, sig, "a") == b"a" * 20
    writer.touch("a")  # protected until get_cached / release_touches
    writer.touch("missing")  # unknown key: no-op
    writer.free_unused()
    assert writer.is_cached("a")
    assert writer.get_cached("a") == handle  # ends protection, promises a 2nd read
    assert writer.writer_flag[0] == 2
    writer.free_unused()
    assert writer.is_cached("a")
    assert reader.get(*handle, sig, "a") == b"a" * 20
    writer.touch("a")
    writer.release_touches()
    writer.free_unused()
    assert not writer.is_cached("a")
    with pytest.raises(UnknownKey):
        writer.get_cached("a")
    with pytest.raises(KeyError):
        writer.get_signature("a")


def test_writer_only_operations_on_reader(make_store):
    _, reader = make_store(100, 40)
    for call in (
        lambda: reader.put("k", b"v"),
        lambda: reader.get_cached("k"),
        lambda: reader.get_signature("k"),
        lambda: reader.is_cached("k"),
        lambda: reader.release_touches(),
        lambda: reader.free_unused(),
        lambda: reader.ring_buffer.allocate_buf(10),
        lambda: reader.ring_buffer.free_buf(lambda i, v: True),
        lambda: reader.ring_buffer.clear(),
    ):
        with pytest.raises(NotWriter):
            call()
    reader.clear()  # a no-op on readers, as in vLLM


# ---------------------------------------------------------------- lifecycle


def test_close_unlinks_segment_and_is_idempotent():
    ring = SingleWriterShmRingBuffer(128, create=True)
    writer = SingleWriterShmObjectStorage(64, 1, ring, RawSerde)
    name = ring.handle()[1]
    path = f"/dev/shm/{name}"
    reader_ring = SingleWriterShmRingBuffer(128, name, create=False)
    assert os.path.exists(path)
    reader_ring.close()
    reader_ring.close()
    assert os.path.exists(path)  # readers never unlink
    writer.put("k", b"v")
    writer.close()
    assert not os.path.exists(path)
    writer.close()  # idempotent, FileNotFoundError suppressed


def test_reader_attach_does_not_register_with_resource_tracker(monkeypatch):
    from multiprocessing import resource_tracker

    calls = []
    monkeypatch.setattr(resource_tracker, "register", lambda n, t: calls.append((n, t)))
    ring = SingleWriterShmRingBuffer(64, create=True)
    calls.clear()
    try:
        reader_ring = SingleWriterShmRingBuffer(64, ring.handle()[1], create=False)
        reader_ring.close()
        assert calls == []
    finally:
        ring.close()


def _reader_process(handle, address, monotonic_id, signature, key, out):
    reader = SingleWriterShmObjectStorage.create_from_handle(handle)
    try:
        out.put(("ok", reader.get(address, monotonic_id, signature, key)))
        try:
            reader.get(address + 1, monotonic_id, signature, key)
        except BadSignature as exc:
            out.put(("rejected", type(exc).__name__))
    finally:
        reader.close()


def test_reader_in_second_process_counts_so_writer_can_free():
    import multiprocess

    ctx = multiprocess.get_context("spawn")
    ring = SingleWriterShmRingBuffer(256, create=True)
    writer = SingleWriterShmObjectStorage(100, 1, ring, PickleSerde)
    try:
        value = {"image": list(range(10)), "tag": "mm"}
        address, monotonic_id = writer.put("obj", value)
        signature = writer.get_signature("obj")
        handle = writer.handle()
        handle.reader_lock = ctx.Lock()
        out = ctx.Queue()
        proc = ctx.Process(
            target=_reader_process,
            args=(handle, address, monotonic_id, signature, "obj", out),
        )
        proc.start()
        results = [out.get(timeout=30), out.get(timeout=30)]
        proc.join(timeout=30)
        assert proc.exitcode == 0
        assert results == [("ok", value), ("rejected", "BadSignature")]
        # The reader's count (1 >= 1 * 1) lets the writer reclaim the chunk.
        writer.free_unused()
        assert not writer.is_cached("obj")
        assert os.path.exists(f"/dev/shm/{ring.handle()[1]}")  # child did not unlink
    finally:
        writer.close()
    assert not os.path.exists(f"/dev/shm/{ring.handle()[1]}")


def test_threaded_readers_never_return_recycled_bytes():
    """Fuzz: a writer thread keeps putting payloads tiled with headers of dead
    chunks while two reader threads read every fresh handle once (must
    succeed: n_readers = 2 keeps it alive) and retry dead handles (must fail)."""
    import queue
    import random
    import sys

    B, n_readers, total = 480, 2, 400
    ring = SingleWriterShmRingBuffer(B, create=True)
    writer = SingleWriterShmObjectStorage(100, n_readers, ring, RawSerde)
    lock = threading.Lock()
    handle = ShmObjectStorageHandle(100, n_readers, ring.handle(), RawSerde, lock)
    readers = [SingleWriterShmObjectStorage.create_from_handle(handle) for _ in range(n_readers)]
    fresh = [queue.Queue() for _ in readers]
    dead: list[tuple] = []
    failures: list[str] = []
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)

    def write():
        rnd = random.Random(7)
        live = {}
        for i in range(total):
            tiles = b"".join(
                d[1].to_bytes(4, "little") + (12 + len(d[3])).to_bytes(4, "little") + bytes(4)
                for d in dead[-3:]
            )
            value = (f"{i:08d}".encode() + tiles + b"#" * rnd.randrange(0, 40, 4))[:84]
            key = f"k{i}"
            for _ in range(20000):
                try:
                    address, monotonic_id = writer.put(key, value)
                    break
                except MemoryError:
                    threading.Event().wait(0.0005)
            else:
                failures.append(f"writer starved at {i}")
                return
            item = (key, (address, monotonic_id), writer.get_signature(key), value)
            live[key] = item
            for q in fresh:
                q.put(item)
            for gone in [k for k in live if not writer.is_cached(k)]:
                dead.append((live[gone][1][0], live[gone][1][1], live[gone][2], live[gone][3], gone))
                del live[gone]
        for q in fresh:
            q.put(None)

    def read(idx):
        try:
            _read(idx)
        except Exception as exc:  # surface thread errors in the assertion below
            failures.append(f"reader {idx}: {exc!r}")

    def _read(idx):
        rnd = random.Random(idx)
        reader = readers[idx]
        while True:
            item = fresh[idx].get(timeout=20)
            if item is None:
                return
            key, (address, monotonic_id), signature, value = item
            got = reader.get(address, monotonic_id, signature, key)
            if got != value:
                failures.append(f"fresh {key}: {got!r} != {value!r}")
            for _ in range(3):
                if not dead:
                    break
                address, monotonic_id, signature, value, key = rnd.choice(dead)
                try:
                    got = reader.get(address, monotonic_id, signature, key)
                    failures.append(f"dead handle {key} returned {got!r}")
                except StaleHandle:
                    pass

    threads = [threading.Thread(target=write)] + [
        threading.Thread(target=read, args=(i,)) for i in range(n_readers)
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
        assert failures == []
        assert len(dead) > total // 2  # the ring really was recycled many times
    finally:
        sys.setswitchinterval(old_interval)
        for store in readers + [writer]:
            store.close()


# ------------------------------------------------ segment v2: slots and caps
def _store_with_cap(max_chunks, B=1000):
    ring = SingleWriterShmRingBuffer(B, create=True, max_chunks=max_chunks)
    writer = SingleWriterShmObjectStorage(100, 1, ring, RawSerde)
    reader = SingleWriterShmObjectStorage.create_from_handle(
        ShmObjectStorageHandle(100, 1, ring.handle(), RawSerde, threading.Lock()))
    return writer, reader


def test_live_chunk_cap_is_out_of_space_until_reclaim():
    writer, reader = _store_with_cap(2)
    try:
        a = writer.put("a", b"a")
        writer.put("b", b"b")
        with pytest.raises(OutOfSpace, match="max_chunks=2"):
            writer.put("c", b"c")
        assert sorted(writer.key_index) == ["a", "b"]
        assert reader.get(*a, writer.get_signature("a"), "a") == b"a"
        writer.put("c", b"c")  # the retry's reclaim freed a
        assert sorted(writer.key_index) == ["b", "c"]
    finally:
        reader.close()
        writer.close()


def test_drain_outlives_the_reuse_of_its_ack_word():
    """The model's ``test_drain_outlives_the_reuse_of_its_ack_word``: a drain
    read is not acknowledged, so a pre-clear chunk keeps draining while its
    bytes are intact, however many allocations (and ack words) followed."""
    writer, reader = _store_with_cap(2)
    try:
        writer.put("pad", b"p" * 26)  # chunk 38 at 0
        a = writer.put("a", b"a")  # chunk 13 at 38
        sig = writer.get_signature("a")
        writer.clear()
        for i in range(5):  # allocations 2..6 at address 0, each read and freed
            b = writer.put(f"b{i}", b"b")
            assert reader.get(*b, writer.get_signature(f"b{i}"), f"b{i}") == b"b"
            writer.free_unused()
        assert reader.get(*a, sig, "a") == b"a"
        assert reader.ring_buffer.reader_table.pins() == [0]
    finally:
        reader.close()
        writer.close()


def test_too_many_readers_and_slot_reuse_after_close(make_store):
    writer, reader = make_store(100, 40)
    handle = ShmObjectStorageHandle(40, 1, writer.ring_buffer.handle(), RawSerde, threading.Lock())
    from shmspec.model.errors import TooManyReaders

    with pytest.raises(TooManyReaders):
        SingleWriterShmObjectStorage.create_from_handle(handle)
    reader.close()
    again = SingleWriterShmObjectStorage.create_from_handle(handle)  # the slot is free again
    try:
        writer.put("k", b"v")
        assert again.get(*writer.key_index["k"], writer.get_signature("k"), "k") == b"v"
    finally:
        again.close()


def test_msgpack_serde_without_vllm_names_what_is_missing():
    from shmspec.impl import MsgpackSerde

    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="MsgpackSerde needs vLLM's msgpack classes") as info:
            MsgpackSerde()
        assert info.value.name in ("torch", "vllm")
    else:  # pragma: no cover - only where vLLM is installed
        MsgpackSerde()


def test_a_reader_with_another_serde_than_the_writers_is_refused_and_left_unattached():
    """issue 28: the reader table records the writer's serde family (its most
    basic class below ObjectSerde); vLLM 0.33.0 would let such a reader
    misread every object."""
    import multiprocess

    from shmspec.impl import BufferPickleSerde, PickleSerde
    from shmspec.model.errors import GeometryMismatch

    w = SingleWriterShmObjectStorage(1024, 1, SingleWriterShmRingBuffer(4096, create=True), serde_class=PickleSerde)
    try:
        h = w.handle()
        h.reader_lock = multiprocess.Lock()
        h.serde_class = BufferPickleSerde
        with pytest.raises(GeometryMismatch, match="serde_class='BufferPickleSerde', but the writer .* "
                                                   "recorded 'PickleSerde'"):
            SingleWriterShmObjectStorage.create_from_handle(h)
        h.serde_class = type("RecordingPickleSerde", (PickleSerde,), {})  # a subclass: the same family, accepted
        r = SingleWriterShmObjectStorage.create_from_handle(h)  # and the slot was not taken by the refused one
        assert r.get(*w.put("a", 1), w.get_signature("a"), "a") == 1
        r.close()
    finally:
        w.close()


def _locked_writer(B, max_object_size, n_readers, lock=True):
    ring = SingleWriterShmRingBuffer(B, create=True)
    return SingleWriterShmObjectStorage(max_object_size, n_readers, ring, RawSerde,
                                        threading.Lock() if lock else None)


def test_writer_with_the_lock_frees_a_chunk_after_n_readers_gets():
    """vLLM 0.33.0's own store tests read every chunk ``n_readers`` times
    through a writer built with a reader lock, then fill the ring again: the
    writer's gets make the chunk reclaimable (issue 28 item 6).  On
    2026-12-05's main put 17 of this loop raised OutOfSpace ("waits for 1
    read(s) by reader slots 1, 2": the writer held slot 0)."""
    writer = _locked_writer(4096, 512, 3)
    try:
        for i in range(60):
            value = bytes([i]) * 400
            address, mid = writer.put(f"k{i}", value)
            for n in range(3):
                assert writer.get(address, mid) == value
                assert writer.stand_in_reads(mid) == n + 1
            assert writer.reads(mid) == (0, 0, 0)  # no reader slot was taken
        # n_readers - 1 gets are not enough: the ring fills and the message says who owes
        with pytest.raises(OutOfSpace, match=r"waits for 1 read\(s\) by reader slots? 0"):
            for i in range(60, 120):
                address, mid = writer.put(f"k{i}", bytes(400))
                writer.get(address, mid)
                writer.get(address, mid)
    finally:
        writer.close()


def test_writer_with_the_lock_makes_up_only_the_shortfall():
    """With a reader attached its own reads count in its slot and the
    writer's gets make up the rest; the writer's gets never free a chunk a
    reader still owes more reads of than they cover, and a writer built
    without the lock counts nothing (vLLM: its gets are not counted)."""
    writer = _locked_writer(4096, 512, 2)
    handle = ShmObjectStorageHandle(512, 2, writer.ring_buffer.handle(), RawSerde, threading.Lock())
    reader = SingleWriterShmObjectStorage.create_from_handle(handle)
    try:
        a, m = writer.put("a", b"a" * 100)
        writer.get(a, m)
        writer.get(a, m)  # two stand-in reads before the reader's: its read makes three, two promised
        assert reader.get(a, m, writer.get_signature("a"), "a") == b"a" * 100
        assert writer.reads(m) == (1, 0) and writer.stand_in_reads(m) == 2
        b, n = writer.put("b", b"b" * 100)
        writer.get_cached("b")  # two reads promised per slot: shortfall 2 + 2 = 4
        for _ in range(3):
            writer.get(b, n)
        writer.free_unused()
        assert m not in writer.ring_buffer.metadata and n in writer.ring_buffer.metadata
        sig = writer.get_signature("b")
        writer.get(b, n)
        writer.free_unused()
        assert n not in writer.ring_buffer.metadata
        with pytest.raises(StaleHandle):
            reader.get(b, n, sig, "b")
    finally:
        reader.close()
        writer.close()
    plain = _locked_writer(4096, 512, 1, lock=False)
    try:
        a, m = plain.put("a", b"a")
        plain.get(a, m)
        assert plain.stand_in_reads(m) == 0
        plain.free_unused()
        assert m in plain.ring_buffer.metadata
    finally:
        plain.close()
