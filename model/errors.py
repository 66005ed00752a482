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
    ``[0, 255]``, key not a str.  Raised before anything is read.

    The message is vLLM 0.33.0's for every handle it rejects (``Invalid SHM
    handle signature for cache key.``: vLLM checks the signature's shape and
    then the HMAC, which no id outside ``[0, 2**31)`` can pass); which field
    was wrong is kept in :attr:`detail`.
    """

    kind = "BadHandleFields"
    MESSAGE = "Invalid SHM handle signature for cache key."

    def __init__(self, detail: str):
        super().__init__(self.MESSAGE)
        self.detail = detail


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


class TooManyReaders(StoreError, ValueError):
    """More reader views than ``n_readers`` (impl segment v2: one slot per reader).

    Each of the ``n_readers`` readers must read every handle once before its
    chunk is reclaimed, so a store cannot count a reader it has no slot for.
    A writer built with the readers' lock holds no slot: its gets stand in
    for readers' (vLLM 0.33.0), so they never raise this.
    """

    kind = "TooManyReaders"

    def __init__(self, n_readers: int):
        super().__init__(
            f"All {n_readers} reader slots of this store are taken (n_readers={n_readers}); "
            "close a reader view or build the store with more readers"
        )
        self.n_readers = n_readers


class GeometryMismatch(StoreError, ValueError):
    """A reader built with arguments that disagree with the segment's recorded
    geometry (``data_buffer_size``, ``n_readers``, ``max_object_size``, bytes)."""

    kind = "GeometryMismatch"

    def __init__(self, name: str, given: object, recorded: object, segment: str = ""):
        where = f" of segment {segment!r}" if segment else ""
        super().__init__(f"Reader built with {name}={given!r}, but the writer{where} recorded {recorded!r}")
        self.name = name


class SharedMemoryFull(StoreError, OSError):
    """The shared-memory filesystem cannot hold a new segment (``ENOSPC``).

    impl reserves every byte of its segments when it creates them, so a
    ``/dev/shm`` that is too small is reported here, at construction, instead
    of killing the process with SIGBUS at a later write.
    """

    kind = "SharedMemoryFull"

    def __init__(self, name: str, nbytes: int, free: int | None):
        import errno

        room = f"{free} bytes free" if free is not None else "free space unknown"
        super().__init__(
            errno.ENOSPC,
            f"Cannot reserve {nbytes} bytes for shared-memory segment {name!r} in /dev/shm ({room}); "
            "enlarge /dev/shm (docker: --shm-size) or build a smaller ring",
        )
        self.nbytes = nbytes
        self.free = free

    def __str__(self) -> str:
        return str(self.strerror)


class ReaderStalled(StoreError, RuntimeError):
    """The writer waited too long (seconds) for a reader to finish reading a
    chunk whose memory it must reuse (impl segment v2: a hazard pin held past
    ``PIN_TIMEOUT``).  The put committed no chunk, index or counter; the
    pre-clear handles its allocation would have reached no longer drain, and a
    reclaim it ran stays done."""

    kind = "ReaderStalled"

    def __init__(self, seconds: float, reader: int, pid: int):
        super().__init__(
            f"Reader slot {reader} (pid {pid}) has been reading a reclaimed chunk for {seconds:g} s; "
            "the writer cannot reuse its memory (is that reader stopped?)"
        )
        self.seconds = seconds
        self.reader = reader
        self.pid = pid


class WrongProcess(StoreError, RuntimeError):
    """A writer or reader view used in a process other than the one that built
    it (a forked copy).  The writer's indexes live in its own process, so a
    copy would allocate over its chunks (SW); a reader's slot belongs to the
    view that claimed it.  Build a reader per process (``create_from_handle``)."""

    kind = "WrongProcess"

    def __init__(self, role: str, owner_pid: int, pid: int):
        super().__init__(
            f"This {role} view was built in process {owner_pid} and cannot be used in process {pid}"
            + (" (one writer per store)" if role == "writer" else "; build one per process with create_from_handle")
        )
        self.owner_pid = owner_pid
        self.pid = pid


class StaleSlot(StoreError, ValueError):
    """A slot-protocol reader was handed a slot that no longer holds the
    message it names: the stub's generation (ids modulo 2**31) is not the
    slot's, or the slot is unwritten or already released by this reader
    (docs/slots.md, NRR).  Raised by impl's ``SlotArena.view`` instead of a
    view of another message's bytes; vLLM 0.33.0's arena has no such check."""

    kind = "StaleSlot"

    def __init__(self, slot: int, generation: int, found: int, why: str = ""):
        super().__init__(f"Slot {slot} generation {generation} is gone (the slot is at generation {found}"
                         f"{'; ' + why if why else ''})")
        self.slot = slot
        self.generation = generation
        self.found = found


class SlotTimeout(StoreError, TimeoutError):
    """A slot-protocol wait ran past its bound (seconds): the queue's writer
    found its next slot unreleased, or a reader found nothing to read
    (docs/slots.md, LIVE).  Subclasses the ``TimeoutError`` vLLM's
    ``MessageQueue`` raises; nothing was claimed or consumed."""

    kind = "SlotTimeout"

    def __init__(self, role: str, slot: int, seconds: float, detail: str = ""):
        super().__init__(f"The {role} waited {seconds:g} s for slot {slot}" + (f": {detail}" if detail else ""))
        self.detail = detail
        self.role = role
        self.slot = slot
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
    TooManyReaders,
    GeometryMismatch,
    SharedMemoryFull,
    ReaderStalled,
    WrongProcess,
    StaleSlot,
    SlotTimeout,
)

ERROR_KINDS: frozenset[str] = frozenset(c.kind for c in ALL_ERRORS)
