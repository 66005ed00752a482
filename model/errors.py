"""The one error taxonomy shared by the model, the store (impl/) and the harness.

Every class subclasses the built-in exception the vLLM store raises for the same
situation (``ValueError``, ``MemoryError``, ``KeyError``), so code written
against vLLM's ``SingleWriterShmObjectStorage`` keeps working with impl/.  The
harness compares outcomes by :attr:`StoreError.kind`, a stable string that also
appears in traces and ``report.json``.

Messages mirror vLLM 0.33.0 (``shm_object_storage.py``) where vLLM has one.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of the taxonomy.  ``kind`` is the stable name used in observations."""

    kind: str = "StoreError"


class DuplicateKey(StoreError, ValueError):
    """``put`` of a key that is already cached (property DUP).

    vLLM message: ``Key '<key>' already exists in the storage.``
    """

    kind = "DuplicateKey"

    def __init__(self, key: str):
        super().__init__(f"Key '{key}' already exists in the storage.")
        self.key = key


class ObjectTooLarge(StoreError, ValueError):
    """Serialized object (4 count bytes + metadata + data) over ``max_object_size`` (SIZE)."""

    kind = "ObjectTooLarge"

    def __init__(self, nbytes: int, max_object_size: int):
        super().__init__(
            f"Serialized object size ({nbytes} bytes) exceeds "
            f"max object size ({max_object_size} bytes)"
        )
        self.nbytes = nbytes
        self.max_object_size = max_object_size


class OutOfSpace(StoreError, MemoryError):
    """No contiguous room in the ring, even after FIFO reclaim (OOM)."""

    kind = "OutOfSpace"

    def __init__(self, message: str = "Not enough space in the data buffer"):
        super().__init__(message)


class StaleHandle(StoreError, ValueError):
    """The handle's chunk was freed, cleared or never existed (NRR, CLR).

    vLLM message: ``Data for address:id '<address>:<id>' has been modified or is invalid.``
    """

    kind = "StaleHandle"

    def __init__(self, address: object, monotonic_id: object):
        super().__init__(
            f"Data for address:id '{address}:{monotonic_id}' has been modified or is invalid."
        )
        self.address = address
        self.monotonic_id = monotonic_id


class MissingReaderLock(StoreError, ValueError):
    """A reader view built without a lock (LOCK).

    vLLM message: ``Lock must be provided for readers.``
    """

    kind = "MissingReaderLock"

    def __init__(self) -> None:
        super().__init__("Lock must be provided for readers.")


class BadSignature(StoreError, ValueError):
    """A signed handle whose signature does not match (AUTH; vLLM >= 0.32).

    vLLM message: ``Invalid SHM handle signature for cache key.``
    """

    kind = "BadSignature"

    def __init__(self, message: str = "Invalid SHM handle signature for cache key."):
        super().__init__(message)


class MissingSignature(BadSignature):
    """A reader call without signature or key where handles are signed (AUTH).

    vLLM message: ``Missing SHM handle signature for cache key.``
    """

    kind = "MissingSignature"

    def __init__(self) -> None:
        super().__init__("Missing SHM handle signature for cache key.")


class BadHandleFields(StoreError, ValueError):
    """Handle fields of the wrong type or range: address not an int in
    ``[0, 2**64)``, id not an int in ``[0, 2**31)``, signature not 32 ints in
    ``[0, 255]``, key not a str.  Raised before anything is read."""

    kind = "BadHandleFields"

    def __init__(self, message: str):
        super().__init__(f"Invalid SHM handle fields: {message}")


class UnknownKey(StoreError, KeyError):
    """``get_cached`` / ``get_signature`` of a key that is not cached (vLLM raises KeyError)."""

    kind = "UnknownKey"

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


class NotWriter(StoreError, RuntimeError):
    """A writer-only operation called on a reader view (vLLM asserts instead)."""

    kind = "NotWriter"

    def __init__(self, operation: str):
        super().__init__(f"Only the writer can {operation}.")


class LockTimeout(StoreError, RuntimeError):
    """The reader lock could not be taken within the store's timeout (seconds).

    A reader killed while holding the lock leaves it held for ever (a POSIX
    semaphore has no owner to recover it); impl/ reports that as this error
    instead of blocking the caller for ever.  Not raised by vLLM, which blocks.
    """

    kind = "LockTimeout"

    def __init__(self, seconds: float, holder: str = "reader lock"):
        super().__init__(
            f"Could not take the {holder} within {seconds:g} s "
            "(a reader may have died while holding it; the store must be rebuilt)"
        )
        self.seconds = seconds


ALL_ERRORS: tuple[type[StoreError], ...] = (
    DuplicateKey,
    ObjectTooLarge,
    OutOfSpace,
    StaleHandle,
    MissingReaderLock,
    BadSignature,
    MissingSignature,
    BadHandleFields,
    UnknownKey,
    NotWriter,
    LockTimeout,
)

ERROR_KINDS: frozenset[str] = frozenset(c.kind for c in ALL_ERRORS)
