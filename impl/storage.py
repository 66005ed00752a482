"""Key/value object store on top of :class:`SingleWriterShmRingBuffer`.

Drop-in for vLLM 0.32/0.33's ``SingleWriterShmObjectStorage`` (same
constructor, attributes, methods, error types and messages), hardened so that
property NRR holds whatever bytes payloads contain and whatever a reader does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shmspec.model.errors import (
    BadHandleFields,
    BadSignature,
    DuplicateKey,
    LockTimeout,
    MissingReaderLock,
    NotWriter,
    ObjectTooLarge,
    StaleHandle,
    UnknownKey,
)

from . import layout, signing, yieldpoints
from .layout import bytes_to_int32, candidate_abs, generation, int32_to_bytes
from .ring import SingleWriterShmRingBuffer
from .serde import ObjectSerde, PickleSerde

_CHUNK_HEADER_UNPACK = layout.CHUNK_HEADER.unpack_from

LOCK_TIMEOUT = 10.0
"""Seconds a reader (or a writer given the lock) waits for the reader lock
before raising :class:`LockTimeout`.  Module-level so tests and operators can
lower it; read at every acquisition."""


@dataclass
class ShmObjectStorageHandle:
    """Picklable description of a store, from which a reader view is rebuilt.

    ``ring_buffer_handle`` is ``(data_buffer_size, segment name)``;
    ``reader_lock`` must be a process-shared lock for readers (vLLM 0.11+ shape).
    """

    max_object_size: int
    n_readers: int
    ring_buffer_handle: tuple[int, str]
    serde_class: type[ObjectSerde]
    reader_lock: Any | None


class _HoldReaderLock:
    """What :meth:`SingleWriterShmObjectStorage._locked` returns: a context
    manager around the store's ``reader_lock`` (a new one for each ``with``).

    ``__enter__`` reads the store's lock; if there is one it calls
    ``acquire(True, LOCK_TIMEOUT)`` (:data:`LOCK_TIMEOUT` read now) and raises
    :class:`LockTimeout` when that fails.  ``__exit__`` calls ``release()`` on
    the lock it acquired, whether or not the block raised, and never suppresses
    an exception.  No yield point of its own: the lock's ``acquire`` and
    ``release`` are the only calls made, once each, in that order.
    """

    __slots__ = ("_store", "_held")

    def __init__(self, store: "SingleWriterShmObjectStorage"):
        self._store = store
        self._held: Any | None = None

    def __enter__(self) -> None:
        lock = self._store._reader_lock
        if lock is None:
            return None
        if not lock.acquire(True, LOCK_TIMEOUT):
            raise LockTimeout(LOCK_TIMEOUT)
        self._held = lock
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        lock = self._held
        if lock is not None:
            self._held = None
            lock.release()
        return None


def _as_bytes_view(obj: Any) -> memoryview:
    view = memoryview(obj)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _check_serialized(
    data: Any, data_nbytes: Any, metadata: Any, md_nbytes: Any
) -> tuple[list[memoryview], memoryview]:
    """Validate a serde's output before anything is allocated.

    Returns the data pieces and the metadata as flat byte views.  Raises
    ``ValueError`` when types or declared sizes do not match the bytes.
    """
    for name, value in (("data_nbytes", data_nbytes), ("md_nbytes", md_nbytes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"Serializer returned an invalid {name}: {value!r}")
    if isinstance(data, (bytes, bytearray, memoryview)):
        pieces = [_as_bytes_view(data)]
    elif isinstance(data, list):
        try:
            pieces = [_as_bytes_view(item) for item in data]
        except TypeError as exc:
            raise ValueError(f"Unsupported data type for serialization: {exc}") from exc
    else:
        raise ValueError(f"Unsupported data type for serialization: {type(data)}")
    try:
        md_view = _as_bytes_view(metadata)
    except TypeError as exc:
        raise ValueError(f"Unsupported metadata type for serialization: {type(metadata)}") from exc
    total = sum(piece.nbytes for piece in pieces)
    if total != data_nbytes:
        raise ValueError(f"Serializer declared {data_nbytes} data bytes but returned {total}")
    if md_view.nbytes != md_nbytes:
        raise ValueError(
            f"Serializer declared {md_nbytes} metadata bytes but returned {md_view.nbytes}"
        )
    return pieces, md_view


class SingleWriterShmObjectStorage:
    """Single-writer, multi-reader object store in one shared-memory segment.

    ``SingleWriterShmObjectStorage(max_object_size, n_readers, ring_buffer,
    serde_class=PickleSerde, reader_lock=None)``.  The writer view is the one
    whose ``ring_buffer`` was created (``create=True``); it never takes
    ``reader_lock``.  Reader views attach to the same segment and must get a
    process-shared lock, else :class:`MissingReaderLock` (``ValueError("Lock
    must be provided for readers.")``, vLLM 0.11+).

    Sizes are in bytes; ids are modulo ``2**31``.  Object bytes are
    ``4 (reader_count) + md_nbytes + data_nbytes`` and must not exceed
    ``max_object_size``.  Writer-side indexes (vLLM names): ``key_index: key ->
    (address, id)``, ``id_index: id -> key``, ``writer_flag: id -> count``.
    Writer-only operations on a reader raise :class:`NotWriter`.

    A chunk is reclaimable when it is not protected by :meth:`touch` and its
    in-band ``reader_count >= writer_flag[id] * n_readers`` (vLLM >= 0.32).

    Reader ``get`` (and ``touch``, which stops after step d) proceeds:

    a. field validation (:class:`BadHandleFields`, :class:`MissingSignature`);
    b. HMAC check against the generation of the candidate absolute counter
       (:class:`BadSignature`); no byte of the data region is read before this;
    c. liveness ``abs_start <= cand < abs_end`` (:class:`StaleHandle`);
    d. header at ``address % B``: id must match and ``chunk_size`` be sane
       (:class:`StaleHandle`);
    e. the object bytes are copied into private memory;
    f. ``abs_start`` is re-read: a chunk no longer live may have been copied
       torn, so :class:`StaleHandle`;
    g. under the reader lock: liveness re-checked, ``reader_count`` incremented;
    h. the private copy is deserialized.

    Reclaim fence: when the *writer* is also given ``reader_lock`` (the same
    process-shared lock as its readers; :attr:`writer_uses_reader_lock`), it
    holds that lock while it reclaims chunks (:meth:`free_unused`, and so the
    retry inside :meth:`put`) and while it clears.  Step g (re-check and
    increment) is then atomic with respect to every reclaim, so an increment
    can only land on a chunk that is still live: ``reader_count`` counts reads
    that happened (property RC), and no memory is reused under a reader's
    feet.  A writer built *without* the lock (vLLM's own construction) keeps
    one window: a ``clear()`` between step g's re-check and its increment
    lets the increment alter four bytes of memory that may be reused.  The
    value returned is unaffected either way (it comes from the validated
    private copy).

    Memory ordering: the protocol assumes x86-64 (TSO) ordering of the
    writer's plain stores into the segment (header and payload before
    ``abs_end``; ``abs_start`` before any reuse) and of the reader's loads
    (copy before re-check).  The lock adds full barriers around step g.

    Faults (measured with real processes, SIGKILL at named yield points, in
    ``tests/test_faults.py``):

    * A reader killed while it holds ``reader_lock`` (step g) leaves the lock
      held for ever.  From then on every reader ``get`` (of any handle), and
      the writer's :meth:`free_unused`, :meth:`clear` and any :meth:`put` that
      must reclaim, raise :class:`LockTimeout` (kind ``"LockTimeout"``, a
      ``RuntimeError``) after :data:`LOCK_TIMEOUT` seconds instead of
      blocking for ever; nothing is returned or deserialized and the failed
      writer operation changes nothing.  A put that fits without reclaiming
      still succeeds (it takes no lock).  A restarted reader, or a new store
      on the same lock, does not recover; a new store with a new lock does.
      (A writer built without the lock, as vLLM builds it, never waits for it.)
    * A reader killed outside the lock (mid-``get`` before or after step g,
      or between operations) holds nothing, but never counts its pending
      reads (a ``get`` killed after step g has counted): the oldest chunk it
      had not read keeps ``reader_count < writer_flag *
      n_readers`` and pins the FIFO head, so once the ring is full every
      :meth:`put` raises :class:`OutOfSpace` (``MemoryError``) and
      :meth:`free_unused` frees nothing.  Other readers keep getting the
      right objects.  :meth:`clear` reclaims everything regardless of counts
      (handles issued before it become stale) and puts succeed again.
    * A writer killed outside the lock (idle, or mid-:meth:`put` before or
      after writing the header or payload) never published the chunk it was
      writing (``abs_end`` is stored only after all its bytes): a reader
      presenting that chunk's ``(address, id)``, even signed with the
      segment's own secret, gets :class:`StaleHandle`.  Handles issued before
      the kill keep returning their own objects; never another one.  A writer
      killed while it holds the lock (inside a reclaim or :meth:`clear`)
      leaves it held, as a reader would: reads then raise
      :class:`LockTimeout` until a new lock is used.
    * A restarted writer creates a new segment with a new secret; readers
      rebuild from its handle.  A handle from the old store presented to the
      new one raises :class:`BadSignature` before any byte is read, even
      where the new store holds a chunk at the same ``(address, id, key)``.
    * The dead writer does not unlink its segment.  If it registered the
      segment with a ``multiprocessing`` resource tracker of its own (a
      top-level writer process, as vLLM's), that tracker unlinks it once the
      writer is dead, with a "leaked shared_memory" warning; if the tracker
      is shared with a live parent (the harness's ``ProcessPool``), the
      segment stays until the parent removes it (``ProcessPool.shutdown``).
    """

    def __init__(
        self,
        max_object_size: int,
        n_readers: int,
        ring_buffer: SingleWriterShmRingBuffer,
        serde_class: type[ObjectSerde] = PickleSerde,
        reader_lock: Any | None = None,
    ):
        self.max_object_size = max_object_size
        self.n_readers = n_readers
        self.serde_class = serde_class
        self.ring_buffer = ring_buffer
        self.is_writer = ring_buffer.is_writer
        self.flag_bytes = layout.COUNT_NBYTES
        if not self.is_writer and reader_lock is None:
            raise MissingReaderLock()
        self.ser_de = serde_class()
        if self.is_writer:
            self.key_index: dict[str, tuple[int, int]] = {}
            self.id_index: dict[int, str] = {}
            self.writer_flag: dict[int, int] = {}
            self._touched: set[int] = set()
        self._reader_lock = reader_lock

    writer_uses_reader_lock = True
    """The writer fences reclaims with ``reader_lock`` when it is given one
    (see the class docstring); harnesses pass the readers' lock to the writer
    only when this is true (vLLM's writer would count its own reads)."""

    # ---------------------------------------------------------------- helpers
    def _locked(self) -> _HoldReaderLock:
        """``with self._locked():`` holds ``reader_lock`` (if any) for the
        block, or raises :class:`LockTimeout` after :data:`LOCK_TIMEOUT`
        seconds; released however the block exits (a plain class rather than
        a generator, to keep the reader's ``get`` cheap)."""
        return _HoldReaderLock(self)

    def _require_writer(self, operation: str) -> None:
        if not self.is_writer:
            raise NotWriter(operation)

    def _secret(self) -> bytes:
        return self.ring_buffer.get_auth_secret()

    def _signature_for(self, key: str, address: int, monotonic_id: int) -> bytes:
        gen = generation(self.ring_buffer.abs_of(monotonic_id))
        return signing.make_signature(self._secret(), key, address, monotonic_id, gen)

    # ------------------------------------------------------------- writer API
    def put(self, key: str, value: Any) -> tuple[int, int]:
        """Writer: store ``value`` under ``key``; return its handle ``(address, id)``.

        Order (vLLM 0.33): duplicate key -> :class:`DuplicateKey`; serialize;
        over ``max_object_size`` -> :class:`ObjectTooLarge`; allocate, and on
        ``MemoryError`` run :meth:`free_unused` and allocate once more (a second
        :class:`OutOfSpace` propagates).  Any failure after allocation rolls the
        allocation back, so a failed put leaves nothing behind.  The chunk
        becomes visible to readers only when ``abs_end`` is published, after
        all its bytes are written.
        """
        self._require_writer("put objects")
        if not isinstance(key, str):
            raise BadHandleFields(f"key must be a str, got {type(key).__name__}")
        if key in self.key_index:
            raise DuplicateKey(key)
        data, data_nbytes, metadata, md_nbytes = self.ser_de.serialize(value)
        pieces, md_view = _check_serialized(data, data_nbytes, metadata, md_nbytes)
        object_nbytes = self.flag_bytes + md_nbytes + data_nbytes
        if object_nbytes > self.max_object_size:
            raise ObjectTooLarge(object_nbytes, self.max_object_size)
        ring = self.ring_buffer
        try:
            address, monotonic_id = ring.reserve_buf(object_nbytes)
        except MemoryError:
            self.free_unused()
            address, monotonic_id = ring.reserve_buf(object_nbytes)
        try:
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("payload_write")
            region = ring.data_region
            pos = address % ring.data_buffer_size + layout.MD_SIZE
            region[pos : pos + self.flag_bytes] = int32_to_bytes(0)
            pos += self.flag_bytes
            region[pos : pos + md_nbytes] = md_view
            pos += md_nbytes
            for piece in pieces:
                region[pos : pos + piece.nbytes] = piece
                pos += piece.nbytes
        except BaseException:
            ring.rollback_buf(address, monotonic_id)
            raise
        self.writer_flag[monotonic_id] = self.writer_flag.get(monotonic_id, 0) + 1
        self.key_index[key] = (address, monotonic_id)
        self.id_index[monotonic_id] = key
        ring.publish()
        return address, monotonic_id

    def is_cached(self, key: str) -> bool:
        """Writer: whether ``key`` has a live object."""
        self._require_writer("look up keys")
        return key in self.key_index

    def get_cached(self, key: str) -> tuple[int, int]:
        """Writer: handle of cached ``key``; promises one more read per reader.

        Increments ``writer_flag[id]`` and ends a :meth:`touch` protection
        (vLLM >= 0.32).  Unknown key -> :class:`UnknownKey` (a ``KeyError``).
        """
        self._require_writer("look up cached objects")
        if key not in self.key_index:
            raise UnknownKey(key)
        address, monotonic_id = self.key_index[key]
        self.writer_flag[monotonic_id] = self.writer_flag.get(monotonic_id, 0) + 1
        self._touched.discard(monotonic_id)
        return address, monotonic_id

    def get_signature(self, key: str) -> list[int]:
        """Writer: the signature of ``key``'s current handle, 32 ints in [0, 255].

        Unknown key -> :class:`UnknownKey`.
        """
        self._require_writer("sign handles")
        if key not in self.key_index:
            raise UnknownKey(key)
        address, monotonic_id = self.key_index[key]
        return list(self._signature_for(key, address, monotonic_id))

    def release_touches(self) -> None:
        """Writer: end every :meth:`touch` protection (vLLM >= 0.32)."""
        self._require_writer("release touches")
        self._touched.clear()

    def default_is_free_check(self, id: int, buf: memoryview) -> bool:
        """Writer: reclaimable iff untouched and ``reader_count >= writer_flag * n_readers``.

        ``buf`` is the chunk after its 8-byte header (starts with ``reader_count``).
        """
        if id in self._touched:
            return False
        reader_count = bytes_to_int32(buf[: self.flag_bytes])
        return reader_count >= self.writer_flag.get(id, 0) * self.n_readers

    def free_unused(self) -> None:
        """Writer: FIFO-reclaim up to ``2 * max_object_size`` bytes and drop their keys."""
        self._require_writer("free objects")
        with self._locked():
            freed = list(self.ring_buffer.free_buf(self.default_is_free_check, 2 * self.max_object_size))
        for freed_id in freed:
            key = self.id_index.pop(freed_id, None)
            if key is not None:
                self.key_index.pop(key, None)
            self.writer_flag.pop(freed_id, None)
            self._touched.discard(freed_id)

    def clear(self) -> None:
        """Drop every object; ids keep increasing (vLLM >= 0.32).

        On a reader this is a no-op, as in vLLM (its receiver cache calls it).
        """
        if not self.is_writer:
            return
        with self._locked():
            self.ring_buffer.clear()
        self.key_index.clear()
        self.id_index.clear()
        self.writer_flag.clear()
        self._touched.clear()

    # --------------------------------------------------------- verification
    def verify_signature(
        self,
        key: str | None,
        address: int,
        monotonic_id: int,
        signature: list[int] | None,
    ) -> None:
        """Check that ``(address, monotonic_id, signature)`` was issued for ``key``.

        Writer: the handle must also be ``key``'s current entry (vLLM >= 0.32),
        else :class:`BadSignature`.  Reader: only fields and signature are
        checked; the data region is not read.  Raises :class:`BadHandleFields`,
        :class:`MissingSignature` or :class:`BadSignature` (all ``ValueError``).
        """
        signing.validate_handle_fields(address, monotonic_id, signature, key)
        if self.is_writer:
            if key is None or self.key_index.get(key) != (address, monotonic_id):
                raise BadSignature()
            signing.require_signature(signature, key)
            gen = generation(self.ring_buffer.abs_of(monotonic_id))
        else:
            signing.require_signature(signature, key)
            abs_end = self.ring_buffer.published_abs_end()
            gen = generation(candidate_abs(monotonic_id, abs_end))
        signing.check_signature(self._secret(), key, address, monotonic_id, gen, signature)

    def _authenticate(self, address, monotonic_id, signature, key) -> tuple[int, int]:
        """Reader steps a-b; returns ``(candidate abs, abs_end seen)``."""
        signing.validate_handle_fields(address, monotonic_id, signature, key)
        signing.require_signature(signature, key)
        abs_end = self.ring_buffer.published_abs_end()
        cand = candidate_abs(monotonic_id, abs_end)
        signing.check_signature(
            self._secret(), key, address, monotonic_id, generation(cand), signature
        )
        return cand, abs_end

    def _check_live(self, cand: int, abs_end: int, address: int, monotonic_id: int) -> None:
        """Reader steps c/f/g: ``abs_start <= cand < abs_end`` or :class:`StaleHandle`."""
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("reader_check")
        if not (self.ring_buffer.published_abs_start() <= cand < abs_end):
            raise StaleHandle(address, monotonic_id)

    def _check_header(self, address: int, monotonic_id: int) -> int:
        """Reader step d: return the chunk size after checking the header."""
        region = self.ring_buffer.data_region
        B = self.ring_buffer.data_buffer_size
        offset = address % B
        if offset + layout.OBJECT_HEADER > B:
            raise StaleHandle(address, monotonic_id)
        chunk_id, size = _CHUNK_HEADER_UNPACK(region, offset)
        if (
            chunk_id != monotonic_id
            or size < layout.OBJECT_HEADER
            or offset + size > B
            or size - layout.MD_SIZE > self.max_object_size
        ):
            raise StaleHandle(address, monotonic_id)
        return size

    # ------------------------------------------------------------------ reads
    def get(
        self,
        address: int,
        monotonic_id: int,
        signature: list[int] | None = None,
        key: str | None = None,
    ) -> Any:
        """Return the object stored under handle ``(address, monotonic_id)``.

        Reader: steps a-h of the class docstring; the read is counted
        (``reader_count += 1`` under the reader lock).  Raises
        :class:`BadHandleFields`, :class:`MissingSignature`,
        :class:`BadSignature` or :class:`StaleHandle` (all ``ValueError``).

        Writer: ``(address, id)`` must be a live chunk of its private metadata
        (else :class:`StaleHandle`); the signature is not needed and the read
        is not counted (vLLM 0.11+).
        """
        if self.is_writer:
            return self._writer_get(address, monotonic_id)
        cand, abs_end = self._authenticate(address, monotonic_id, signature, key)
        self._check_live(cand, abs_end, address, monotonic_id)
        size = self._check_header(address, monotonic_id)
        region = self.ring_buffer.data_region
        offset = address % self.ring_buffer.data_buffer_size
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("payload_read")
        payload = bytes(region[offset + layout.OBJECT_HEADER : offset + size])
        self._check_live(cand, abs_end, address, monotonic_id)
        count_at = offset + layout.MD_SIZE
        with self._locked():
            self._check_live(cand, abs_end, address, monotonic_id)
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("counter_increment")
            count = bytes_to_int32(region[count_at : count_at + self.flag_bytes])
            region[count_at : count_at + self.flag_bytes] = int32_to_bytes(
                min(count + 1, layout.INT32_MAX)
            )
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("deserialize")
        return self.ser_de.deserialize(memoryview(payload))

    def _writer_get(self, address: Any, monotonic_id: Any) -> Any:
        signing.validate_handle_fields(address, monotonic_id)
        ring = self.ring_buffer
        if (
            ring.metadata.get(monotonic_id) != address
            or ring.abs_of(monotonic_id) >= ring.published_abs_end()
        ):
            raise StaleHandle(address, monotonic_id)
        size = ring.chunk_size(monotonic_id)
        offset = address % ring.data_buffer_size
        payload = bytes(ring.data_region[offset + layout.OBJECT_HEADER : offset + size])
        return self.ser_de.deserialize(memoryview(payload))

    def touch(
        self,
        key: str,
        address: int = 0,
        monotonic_id: int = 0,
        signature: list[int] | None = None,
    ) -> None:
        """Writer: protect ``key``'s chunk from reclaim until the next
        :meth:`get_cached` of it or :meth:`release_touches` (unknown key: no-op).

        Reader: validate the handle only (steps a-d, then liveness once more);
        nothing else is read and nothing is counted.  Raises as :meth:`get`.
        Both mirror vLLM >= 0.32.
        """
        if self.is_writer:
            entry = self.key_index.get(key) if isinstance(key, str) else None
            if entry is not None:
                self._touched.add(entry[1])
            return None
        cand, abs_end = self._authenticate(address, monotonic_id, signature, key)
        self._check_live(cand, abs_end, address, monotonic_id)
        self._check_header(address, monotonic_id)
        self._check_live(cand, abs_end, address, monotonic_id)
        return None

    # ------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the segment (the writer also unlinks it); idempotent."""
        self.ring_buffer.close()

    def handle(self) -> ShmObjectStorageHandle:
        """A picklable :class:`ShmObjectStorageHandle` describing this store."""
        return ShmObjectStorageHandle(
            max_object_size=self.max_object_size,
            n_readers=self.n_readers,
            ring_buffer_handle=self.ring_buffer.handle(),
            serde_class=self.serde_class,
            reader_lock=self._reader_lock,
        )

    @classmethod
    def create_from_handle(cls, handle: ShmObjectStorageHandle) -> "SingleWriterShmObjectStorage":
        """Build a reader view from ``handle`` (attaches to the named segment).

        Called on the class like vLLM's static method; a subclass gets reader
        views of its own class.  ``handle.reader_lock`` None ->
        :class:`MissingReaderLock`, with nothing left attached.
        """
        if handle.reader_lock is None:
            raise MissingReaderLock()
        ring = SingleWriterShmRingBuffer(*handle.ring_buffer_handle)
        try:
            return cls(
                max_object_size=handle.max_object_size,
                n_readers=handle.n_readers,
                ring_buffer=ring,
                serde_class=handle.serde_class,
                reader_lock=handle.reader_lock,
            )
        except BaseException:
            ring.close()
            raise
