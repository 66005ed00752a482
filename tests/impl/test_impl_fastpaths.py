"""impl's reader fast paths decide exactly as the code they replaced.

* the signature shape check (``signing._signature_shape_ok``) against the
  per-byte reference (``signing._signature_shape_ok_reference``, the former
  inline check) over a table of odd inputs and random ones, and through
  ``validate_handle_fields`` against recorded outcomes;
* the chunk header decoded with ``layout.CHUNK_HEADER`` against the former
  ``bytes_to_int32`` of each half.
"""

from __future__ import annotations

import enum
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmspec.impl import (
    ObjectSerde,
    ShmObjectStorageHandle,
    SingleWriterShmObjectStorage,
    SingleWriterShmRingBuffer,
    layout,
    signing,
)
from shmspec.model.errors import BadHandleFields, StaleHandle

try:  # numpy's scalar types are odd signature bytes worth trying; optional
    import numpy as np
except ImportError:
    np = None

SIG_MESSAGE = "Invalid SHM handle signature for cache key."
SIG_DETAIL = "signature must be a list of 32 ints in [0, 255]"


# ------------------------------------------------------------- signature check
class SubInt(int):
    pass


class Color(enum.IntEnum):
    RED = 7


class SubList(list):
    pass


class LyingLenList(list):
    def __len__(self):
        return 32


class RaisingLenList(list):
    def __len__(self):
        raise RuntimeError("len exploded")


class IndexOnly:
    """Integer-like (``__index__``) but not an int: ``bytes()`` would take it."""

    def __index__(self):
        return 5


class EqualsEverything(type):
    """A metaclass whose classes compare equal to (and hash like) ``int``."""

    def __eq__(cls, other):
        return True

    def __hash__(cls):
        return hash(int)


class FakeIntType(metaclass=EqualsEverything):
    def __index__(self):
        return 5


class ClaimsInt:
    """``isinstance(x, int)`` is true through ``__class__``; compares as 5."""

    @property
    def __class__(self):
        return int

    def __le__(self, other):
        return 5 <= other

    def __ge__(self, other):
        return 5 >= other


class ClaimsIntBadCompare:
    """Passes ``isinstance(x, int)`` through ``__class__``, then cannot be compared."""

    @property
    def __class__(self):
        return int

    def __ge__(self, other):
        raise ArithmeticError("no order")

    __le__ = __ge__


def _with(first, rest=0, n=32):
    return [first] + [rest] * (n - 1)


ODD_SIGNATURES = {
    "zeros": [0] * 32,
    "ff": [255] * 32,
    "range": list(range(200, 232)),
    "random": [random.Random(1).randrange(256) for _ in range(32)],
    "short": [0] * 31,
    "long": [0] * 33,
    "empty": [],
    "256 last": [0] * 31 + [256],
    "-1 first": _with(-1),
    "huge": _with(2**64),
    "huge negative": _with(-(2**70)),
    "true": _with(True),
    "false last": [0] * 31 + [False],
    "all bools": [True] * 32,
    "float": _with(1.0),
    "str": _with("1"),
    "none element": _with(None),
    "int subclass": _with(SubInt(3)),
    "int subclass 300": _with(SubInt(300)),
    "IntEnum": _with(Color.RED),
    "index-only": _with(IndexOnly()),
    "metaclass equal to int": _with(FakeIntType()),
    "all metaclass equal to int": [FakeIntType() for _ in range(32)],
    "claims int": _with(ClaimsInt()),
    "claims int, bad compare": _with(ClaimsIntBadCompare()),
    "list subclass": SubList([1] * 32),
    "list subclass 256": SubList([256] * 32),
    "list subclass lying len": LyingLenList([0] * 3),
    "list subclass raising len": RaisingLenList([0] * 32),
    "tuple": tuple([0] * 32),
    "bytes": bytes(32),
    "bytearray": bytearray(32),
    "str of 32": "a" * 32,
    "dict of 32": dict.fromkeys(range(32)),
    "range object": range(32),
    "nested list": _with([0]),
    "None": None,
    "int": 0,
}
if np is not None:
    ODD_SIGNATURES.update({
        "numpy uint8": _with(np.uint8(3)),
        "numpy int64": _with(np.int64(3)),
        "numpy bool": _with(np.bool_(True)),
        "numpy all uint8": [np.uint8(i) for i in range(32)],
        "numpy array": np.zeros(32, dtype=np.uint8),
    })

# What validate_handle_fields answers for each entry: True (accepted), False
# (rejected: BadHandleFields) or the exception it lets through (type, message).
# Recorded by running this table through the per-byte check at commit 071d333,
# before the fast path existed; every entry not listed was rejected.
EXPECTED = {
    "zeros": True,
    "ff": True,
    "range": True,
    "random": True,
    "int subclass": True,
    "IntEnum": True,
    "claims int": True,
    "list subclass": True,
    "list subclass lying len": True,  # len() says 32; the elements seen are ints
    "list subclass raising len": (RuntimeError, "len exploded"),
    "claims int, bad compare": (ArithmeticError, "no order"),
}


def _outcome(fn, value):
    try:
        return ("value", fn(value))
    except Exception as exc:  # the check's own exceptions are part of its behaviour
        return ("raised", type(exc), str(exc))


@pytest.mark.parametrize("name", list(ODD_SIGNATURES))
def test_signature_fast_path_agrees_with_reference(name):
    value = ODD_SIGNATURES[name]
    fast = _outcome(signing._signature_shape_ok, value)
    reference = _outcome(signing._signature_shape_ok_reference, value)
    assert fast == reference


@pytest.mark.parametrize("name", [n for n in ODD_SIGNATURES if ODD_SIGNATURES[n] is not None])
def test_signature_outcomes_through_validate_handle_fields(name):
    value = ODD_SIGNATURES[name]
    expected = EXPECTED.get(name, False)
    if expected is True:
        signing.validate_handle_fields(0, 0, value, "k")
    elif expected is False:
        with pytest.raises(BadHandleFields) as info:
            signing.validate_handle_fields(0, 0, value, "k")
        assert str(info.value) == SIG_MESSAGE and info.value.detail == SIG_DETAIL
    else:
        exc_type, message = expected
        with pytest.raises(exc_type) as info:
            signing.validate_handle_fields(0, 0, value, "k")
        assert str(info.value) == message


def test_fast_path_is_taken_for_plain_signatures(monkeypatch):
    """A list of 32 plain ints in range never reaches the per-byte check."""

    def boom(signature):
        raise AssertionError("slow path used")

    monkeypatch.setattr(signing, "_signature_shape_ok_reference", boom)
    assert signing._signature_shape_ok([0] * 32)
    assert signing._signature_shape_ok(list(range(224, 256)))
    with pytest.raises(AssertionError):
        signing._signature_shape_ok([True] * 32)


_ELEMENTS = st.one_of(
    st.integers(-3, 260),
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.sampled_from([SubInt(1), SubInt(999), Color.RED, None, "x"]
                    + ([np.uint8(1), np.int64(-1)] if np is not None else [])),
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.lists(st.integers(0, 255), min_size=30, max_size=34),
        st.lists(_ELEMENTS, min_size=30, max_size=34),
        st.lists(st.integers(0, 255), min_size=32, max_size=32).flatmap(
            lambda xs: st.tuples(st.integers(0, 31), _ELEMENTS).map(
                lambda p: xs[: p[0]] + [p[1]] + xs[p[0] + 1 :]
            )
        ),
    ),
    st.sampled_from([list, SubList, tuple]),
)
def test_signature_fast_path_agrees_on_random_lists(items, container):
    value = container(items)
    assert _outcome(signing._signature_shape_ok, value) == _outcome(
        signing._signature_shape_ok_reference, value
    )


# ----------------------------------------------------------------- the header
def test_chunk_header_struct_decodes_as_bytes_to_int32():
    assert layout.CHUNK_HEADER.size == layout.MD_SIZE
    rng = random.Random(5)
    samples = [bytes(8), b"\xff" * 8, b"\x00\x00\x00\x80\xff\xff\xff\x7f"]
    samples += [rng.randbytes(8) for _ in range(500)]
    for raw in samples:
        view = memoryview(b"\xaa" * 3 + raw + b"\x55")
        expected = (
            layout.bytes_to_int32(raw[: layout.ID_NBYTES]),
            layout.bytes_to_int32(raw[layout.ID_NBYTES :]),
        )
        assert layout.CHUNK_HEADER.unpack_from(view, 3) == expected
        assert layout.CHUNK_HEADER.pack(*expected) == raw


class RawSerde(ObjectSerde):
    def serialize(self, value):
        return value, len(value), b"", 0

    def deserialize(self, data):
        return bytes(data)


def test_check_header_on_a_real_segment():
    ring = SingleWriterShmRingBuffer(256, create=True)
    writer = SingleWriterShmObjectStorage(100, 1, ring, RawSerde)
    reader = SingleWriterShmObjectStorage.create_from_handle(
        ShmObjectStorageHandle(100, 1, ring.handle(), RawSerde, threading.Lock())
    )
    try:
        address, monotonic_id = writer.put("k", b"v" * 20)
        assert reader._check_header(address, monotonic_id) == layout.OBJECT_HEADER + 20
        with pytest.raises(StaleHandle):
            reader._check_header(address, monotonic_id + 1)
        # a negative chunk_size (sign bit set) is insane, not huge
        offset = address % ring.data_buffer_size
        region = ring.data_region
        saved = bytes(region[offset : offset + layout.MD_SIZE])
        region[offset + layout.ID_NBYTES : offset + layout.MD_SIZE] = layout.int32_to_bytes(-20)
        with pytest.raises(StaleHandle):
            reader._check_header(address, monotonic_id)
        region[offset : offset + layout.MD_SIZE] = saved
        assert reader.get(address, monotonic_id, writer.get_signature("k"), "k") == b"v" * 20
    finally:
        reader.close()
        writer.close()


# ------------------------------------------------ reader handle fields + bytes
def _fields_then_bytes(address, monotonic_id, signature, key):
    """What the read path did before ``reader_handle_bytes``: the full field
    check, then ``bytes(signature)`` (inside ``check_signature``)."""
    signing.validate_handle_fields(address, monotonic_id, signature, key)
    return bytes(signature)


ODD_ADDRESSES = [0, 2**64 - 1, 2**64, -1, True, SubInt(5), Color.RED, 1.0, "1"]
ODD_IDS = [0, 2**31 - 1, 2**31, -1, False, SubInt(3), Color.RED, 2.0]
ODD_KEYS = ["k", "", type("SubStr", (str,), {})("k"), b"k", 5]


@pytest.mark.parametrize("name", [n for n in ODD_SIGNATURES if ODD_SIGNATURES[n] is not None])
def test_reader_handle_bytes_agrees_with_fields_then_bytes(name):
    signature = ODD_SIGNATURES[name]
    for address in ODD_ADDRESSES:
        for monotonic_id in ODD_IDS:
            for key in ODD_KEYS:
                fast = _outcome(lambda s: signing.reader_handle_bytes(address, monotonic_id, s, key), signature)
                reference = _outcome(lambda s: _fields_then_bytes(address, monotonic_id, s, key), signature)
                assert fast == reference, (address, monotonic_id, key)


@given(secret=st.binary(min_size=1, max_size=100), key=st.text(max_size=40),
       address=st.integers(0, 2**64 - 1), monotonic_id=st.integers(0, 2**31 - 1),
       gen=st.integers(0, 2**64 - 1))
@pytest.mark.slow
@settings(max_examples=300, deadline=None)
def test_signer_signs_the_bytes_make_signature_does(secret, key, address, monotonic_id, gen):
    signer = signing.Signer(secret)
    expected = signing.make_signature(secret, key, address, monotonic_id, gen)
    assert signer.sign(key, address, monotonic_id, gen) == expected
    signer.check(key, address, monotonic_id, gen, list(expected))
    with pytest.raises(signing.BadSignature):
        signer.check(key, address, monotonic_id, gen, [expected[0] ^ 1, *expected[1:]])
