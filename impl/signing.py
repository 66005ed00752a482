"""Handle signatures and handle-field validation.

A handle is ``(address, monotonic_id)`` plus, for readers, the ``signature``
and the cache ``key`` it was issued for (vLLM >= 0.32 signs handles).  Our
signature is::

    HMAC-SHA256(secret, sha256(key.encode("utf-8"))
                        + address.to_bytes(8, "little")      # unsigned
                        + monotonic_id.to_bytes(4, "little") # unsigned
                        + generation.to_bytes(8, "little"))  # unsigned

returned to callers as a ``list`` of 32 ints in ``[0, 255]`` (vLLM's shape).
``generation = abs // 2**31`` of the chunk's absolute allocation counter
(see :mod:`shmspec.impl.layout`); vLLM 0.32/0.33 signs only key, address and
id, so after the 31-bit id space wraps an old vLLM handle can verify again --
ours cannot.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from itertools import repeat
from operator import is_

from shmspec.model.errors import BadHandleFields, BadSignature, MissingSignature

from .layout import ID_MAX

SIGNATURE_BYTES = 32
ADDRESS_LIMIT = 2**64


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _signature_shape_ok_reference(signature: object) -> bool:
    """The signature rule, one Python-level test per byte: a ``list`` (or
    subclass) of exactly 32 ints (int subclasses allowed, ``bool`` not) in
    ``[0, 255]``.  :func:`_signature_shape_ok` must agree with it on every input."""
    return (
        isinstance(signature, list)
        and len(signature) == SIGNATURE_BYTES
        and all(_is_int(b) and 0 <= b <= 255 for b in signature)
    )


def _signature_shape_ok(signature: object) -> bool:
    """Same verdict (and exceptions) as :func:`_signature_shape_ok_reference`, cheaper.

    Fast path, C-level builtins only and no user code: an exact ``list`` of 32
    elements whose types are all exactly ``int`` (compared by identity, so
    ``bool``, int subclasses and ``__index__`` types are not taken here), in
    range iff ``bytes()`` accepts them.  Anything the fast path does not prove
    valid goes to the reference check, which decides.
    """
    if (
        type(signature) is list
        and len(signature) == SIGNATURE_BYTES
        and all(map(is_, map(type, signature), repeat(int)))
    ):
        try:
            bytes(signature)
        except (TypeError, ValueError):
            pass  # out of range (or the list changed under us): the reference decides
        else:
            return True
    return _signature_shape_ok_reference(signature)


def validate_handle_fields(
    address: object,
    monotonic_id: object,
    signature: object = None,
    key: object = None,
) -> None:
    """Check field types and ranges; raise :class:`BadHandleFields` (a ``ValueError``).

    ``address``: int (not bool) in ``[0, 2**64)``; ``monotonic_id``: int in
    ``[0, 2**31)``; ``signature``: ``None`` or a list of exactly 32 ints in
    ``[0, 255]``; ``key``: ``None`` or ``str``.  Reads no shared memory.
    """
    if not _is_int(address) or not 0 <= address < ADDRESS_LIMIT:
        raise BadHandleFields(f"address must be an int in [0, 2**64), got {address!r}")
    if not _is_int(monotonic_id) or not 0 <= monotonic_id < ID_MAX:
        raise BadHandleFields(
            f"monotonic_id must be an int in [0, 2**31), got {monotonic_id!r}"
        )
    if signature is not None:
        if not _signature_shape_ok(signature):
            raise BadHandleFields("signature must be a list of 32 ints in [0, 255]")
    if key is not None and not isinstance(key, str):
        raise BadHandleFields(f"key must be a str, got {type(key).__name__}")


def reader_handle_bytes(address: object, monotonic_id: object, signature: object, key: object) -> bytes:
    """:func:`validate_handle_fields` for a reader's signed handle, returning
    the signature as ``bytes`` (what :meth:`Signer.check` compares).

    Fast path, C-level checks only: exact ``int`` address and id in range,
    exact ``str`` key, and an exact ``list`` of 32 exact ``int`` elements that
    ``bytes()`` accepts.  Anything else goes to :func:`validate_handle_fields`,
    which decides (and raises); the bytes are then taken once, after it."""
    if (
        type(address) is int
        and 0 <= address < ADDRESS_LIMIT
        and type(monotonic_id) is int
        and 0 <= monotonic_id < ID_MAX
        and type(key) is str
        and type(signature) is list
        and len(signature) == SIGNATURE_BYTES
        and all(map(is_, map(type, signature), repeat(int)))
    ):
        try:
            return bytes(signature)
        except (TypeError, ValueError):
            pass  # out of range (or the list changed under us): the full check decides
    validate_handle_fields(address, monotonic_id, signature, key)
    return bytes(signature)


def require_signature(signature: object, key: object) -> None:
    """Raise :class:`MissingSignature` when ``signature`` or ``key`` is ``None``."""
    if signature is None or key is None:
        raise MissingSignature()


def make_signature(
    secret: bytes, key: str, address: int, monotonic_id: int, generation: int
) -> bytes:
    """The 32-byte HMAC-SHA256 signature of one handle (see module docstring)."""
    message = (
        hashlib.sha256(key.encode("utf-8")).digest()
        + int(address).to_bytes(8, "little", signed=False)
        + int(monotonic_id).to_bytes(4, "little", signed=False)
        + int(generation).to_bytes(8, "little", signed=False)
    )
    return hmac.new(secret, message, hashlib.sha256).digest()


_IPAD = bytes(b ^ 0x36 for b in range(256))
_OPAD = bytes(b ^ 0x5C for b in range(256))
_HANDLE_TAIL = struct.Struct("<QIQ")
"""address (8), monotonic_id (4), generation (8): unsigned little-endian, as in
:func:`make_signature`."""


class Signer:
    """:func:`make_signature` and :func:`check_signature` for one secret, with
    HMAC's key schedule done once (RFC 2104): the SHA-256 states after the
    inner and outer padded key are kept and copied for each signature, so a
    signature costs two state copies and three compressions instead of a new
    HMAC object.  The bytes are exactly :func:`make_signature`'s."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret: bytes):
        block = (hashlib.sha256(secret).digest() if len(secret) > 64 else bytes(secret)).ljust(64, b"\0")
        self._inner = hashlib.sha256(block.translate(_IPAD))
        self._outer = hashlib.sha256(block.translate(_OPAD))

    def sign(self, key: str, address: int, monotonic_id: int, generation: int) -> bytes:
        inner = self._inner.copy()
        inner.update(hashlib.sha256(key.encode("utf-8")).digest())
        inner.update(_HANDLE_TAIL.pack(address, monotonic_id, generation))
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def check(self, key: str, address: int, monotonic_id: int, generation: int,
              signature: list[int]) -> None:
        """Constant-time comparison; raise :class:`BadSignature` on mismatch."""
        if not hmac.compare_digest(bytes(signature), self.sign(key, address, monotonic_id, generation)):
            raise BadSignature()


def check_signature(
    secret: bytes,
    key: str,
    address: int,
    monotonic_id: int,
    generation: int,
    signature: list[int],
) -> None:
    """Constant-time comparison; raise :class:`BadSignature` on mismatch."""
    expected = make_signature(secret, key, address, monotonic_id, generation)
    if not hmac.compare_digest(bytes(signature), expected):
        raise BadSignature()
