"""Single-writer ring buffer over one shared-memory segment.

Drop-in for vLLM 0.32/0.33's ``SingleWriterShmRingBuffer``: same constructor,
attributes and methods, and the same allocation policy, so the same sequence
of allocation sizes yields the same ``(address, monotonic_id)`` handles.
What differs is the segment layout (see :mod:`shmspec.impl.layout`): a
writer-only control block publishes the absolute counters ``abs_start`` /
``abs_end`` that readers use to decide liveness without trusting chunk bytes.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import chain

from shmspec.model.errors import NotWriter, OutOfSpace

from . import layout, segment, yieldpoints
from .layout import bytes_to_int32, candidate_abs, int32_to_bytes

_OOM_MESSAGE = (
    "Not enough space in the data buffer, try calling free_buf() to free up space"
)


class SingleWriterShmRingBuffer:
    """Ring of variable-size chunks in shared memory; one writer, many readers.

    ``SingleWriterShmRingBuffer(data_buffer_size, name=None, create=False)``:
    ``create=True`` makes this process the writer (a new segment of
    ``96 + data_buffer_size`` bytes; ``name=None`` picks a random name);
    ``create=False`` attaches a reader view to the existing segment ``name``.

    Addresses are *virtual* byte offsets into the data region (they may exceed
    ``data_buffer_size``; the physical offset is ``address % data_buffer_size``).
    Ids are modulo ``ID_MAX = 2**31``.

    Allocation (mirrors vLLM 0.11 - 0.33 exactly): a request of ``size`` bytes
    takes a chunk of ``n = size + MD_SIZE`` bytes.  If ``end % B + n > B`` the
    end jumps to the next multiple of ``B``; then if ``end + n - start > B``
    :class:`~shmspec.model.errors.OutOfSpace` (a ``MemoryError``) is raised and
    nothing changes.  Freeing is FIFO (see :meth:`free_buf`); ``clear()`` keeps
    the ids increasing (vLLM >= 0.32 behaviour).

    Writer-private state: ``data_buffer_start/end``, ``metadata`` (id ->
    virtual address of every live chunk), the chunk sizes, and the absolute
    counters.  Readers see ``monotonic_id_start/end`` as published in the
    control block and ``data_buffer_start = data_buffer_end = 0``.
    """

    ID_NBYTES = layout.ID_NBYTES
    SIZE_NBYTES = layout.SIZE_NBYTES
    MD_SIZE = layout.MD_SIZE
    ID_MAX = layout.ID_MAX
    AUTH_SECRET_BYTES = layout.SECRET_BYTES
    CONTROL_OFFSET = layout.CONTROL_OFFSET
    DATA_OFFSET = layout.DATA_OFFSET

    def __init__(self, data_buffer_size: int, name: str | None = None, create: bool = False):
        if (
            not isinstance(data_buffer_size, int)
            or isinstance(data_buffer_size, bool)
            or data_buffer_size <= 0
        ):
            raise ValueError(f"data_buffer_size must be a positive int, got {data_buffer_size!r}")
        self.data_buffer_size = data_buffer_size
        self.is_writer = bool(create)
        self.data_buffer_start = 0
        self.data_buffer_end = 0
        self._closed = False
        self._ctl = None
        self._data = None
        total = layout.segment_size(data_buffer_size)
        if self.is_writer:
            self.metadata: dict[int, int] = {}
            self._sizes: dict[int, int] = {}
            self._abs_start = 0
            self._abs_end = 0
            self._pending: tuple[int, int, int, int] | None = None
            self.shared_memory = segment.create_segment(total, name)
        else:
            if name is None:
                raise ValueError("A reader must be given the segment name to attach to.")
            self.shared_memory = segment.attach_segment(name)
            if self.shared_memory.size < total:
                segment.release_segment(self.shared_memory, unlink=False)
                raise ValueError(
                    f"Segment {name!r} holds {self.shared_memory.size} bytes, "
                    f"expected at least {total}"
                )
        buf = self.shared_memory.buf
        self._ctl = buf[layout.CONTROL_OFFSET : layout.DATA_OFFSET].cast("Q")
        self._data = buf[layout.DATA_OFFSET : total]
        if self.is_writer:
            buf[: layout.SECRET_BYTES] = secrets.token_bytes(layout.SECRET_BYTES)

    # ------------------------------------------------------------------ basics
    def handle(self) -> tuple[int, str]:
        """``(data_buffer_size, segment name)``: what a reader needs to attach."""
        return (self.data_buffer_size, self.shared_memory.name)

    def get_auth_secret(self) -> bytes:
        """The 32 secret bytes at the front of the segment (vLLM >= 0.32)."""
        return bytes(self._region_check(self.shared_memory.buf)[: layout.SECRET_BYTES])

    def int2byte(self, integer: int) -> bytes:
        """Signed 32-bit little-endian bytes of ``integer``."""
        return int32_to_bytes(integer)

    def byte2int(self, byte_data) -> int:
        """Signed little-endian integer from ``byte_data``."""
        return bytes_to_int32(byte_data)

    def _require_writer(self, operation: str) -> None:
        if not self.is_writer:
            raise NotWriter(operation)

    @staticmethod
    def _region_check(view):
        if view is None:
            raise ValueError("Buffer has been closed")
        return view

    @property
    def data_region(self) -> memoryview:
        """View of the ``data_buffer_size`` data bytes (raises once closed)."""
        return self._region_check(self._data)

    # -------------------------------------------------------- control block
    def published_abs_start(self) -> int:
        """``abs_start`` as readers see it (one aligned 8-byte load)."""
        return self._region_check(self._ctl)[layout.SLOT_ABS_START]

    def published_abs_end(self) -> int:
        """``abs_end`` as readers see it (one aligned 8-byte load)."""
        return self._region_check(self._ctl)[layout.SLOT_ABS_END]

    def publish(self) -> None:
        """Writer: make every allocation so far visible to readers (store ``abs_end``)."""
        self._require_writer("publish allocations")
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("publish")
        self._pending = None
        self._region_check(self._ctl)[layout.SLOT_ABS_END] = self._abs_end

    def _publish_start(self) -> None:
        self._region_check(self._ctl)[layout.SLOT_ABS_START] = self._abs_start

    def abs_of(self, monotonic_id: int) -> int:
        """Writer: absolute counter of the live (or pending) chunk ``monotonic_id``."""
        return candidate_abs(monotonic_id, self._abs_end)

    @property
    def monotonic_id_start(self) -> int:
        """Id of the oldest live chunk (== ``monotonic_id_end`` when empty)."""
        abs_start = self._abs_start if self.is_writer else self.published_abs_start()
        return abs_start % self.ID_MAX

    @monotonic_id_start.setter
    def monotonic_id_start(self, value: int) -> None:
        self._jump_ids(value)

    @property
    def monotonic_id_end(self) -> int:
        """Id the next allocation will receive (modulo ``2**31``)."""
        abs_end = self._abs_end if self.is_writer else self.published_abs_end()
        return abs_end % self.ID_MAX

    @monotonic_id_end.setter
    def monotonic_id_end(self, value: int) -> None:
        self._jump_ids(value)

    def _jump_ids(self, value: int) -> None:
        """Writer, empty ring only: make the next id ``value`` (for wrap tests).

        Both absolute counters advance to the next ``k >= abs_end`` with
        ``k % 2**31 == value``; they never move backwards.
        """
        self._require_writer("set monotonic ids")
        if not isinstance(value, int) or not 0 <= value < self.ID_MAX:
            raise ValueError(f"monotonic id must be in [0, 2**31), got {value!r}")
        if (value - self._abs_end) % self.ID_MAX == 0:
            return
        if self._abs_start != self._abs_end:
            raise ValueError("monotonic ids can only be set while the ring is empty")
        target = self._abs_end + (value - self._abs_end) % self.ID_MAX
        self._abs_start = self._abs_end = target
        self._publish_start()
        self._region_check(self._ctl)[layout.SLOT_ABS_END] = target

    def warp(self, start: int, monotonic_id: int) -> None:
        """Writer, empty ring only: the warp hook for boundary tests.

        Puts the ring in the state it would reach after allocating and freeing
        chunks until ``data_buffer_start == data_buffer_end == start`` (bytes,
        ``0 <= start < data_buffer_size``) and the next id is ``monotonic_id``
        (``0 <= monotonic_id < 2**31``), so id wraparound and tail edges are
        reached without 2**31 allocations.  The absolute counters advance as in
        :meth:`_jump_ids` (never backwards) and are published.  Raises
        ``ValueError`` on a non-empty ring or an out-of-range argument;
        ``NotWriter`` on a reader.
        """
        self._require_writer("warp the ring")
        if self._abs_start != self._abs_end or self.metadata:
            raise ValueError("the ring can only be warped while it is empty")
        if not isinstance(start, int) or not 0 <= start < self.data_buffer_size:
            raise ValueError(f"start must be in [0, {self.data_buffer_size}), got {start!r}")
        self._jump_ids(monotonic_id)
        self.data_buffer_start = self.data_buffer_end = start

    # ------------------------------------------------------------ allocation
    def reserve_buf(self, size: int) -> tuple[int, int]:
        """Writer: allocate like :meth:`allocate_buf` but do not publish yet.

        The header ``[id][chunk_size]`` is written and the chunk is recorded in
        ``metadata``; readers cannot see it until :meth:`publish`.  Undo with
        :meth:`rollback_buf`.  Raises ``OutOfSpace`` with nothing changed.
        """
        self._require_writer("allocate buffers")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"Size must be a positive int, got {size!r}")
        data = self.data_region
        B = self.data_buffer_size
        n = size + self.MD_SIZE
        if n > layout.INT32_MAX:
            raise OutOfSpace(f"Chunk of {n} bytes does not fit the int32 size field")
        if self._abs_end - self._abs_start >= self.ID_MAX:
            raise OutOfSpace("Every monotonic id is held by a live chunk")
        end = self.data_buffer_end
        if end % B + n > B:
            new_end = (end // B + 1) * B
        else:
            new_end = end
        if new_end + n - self.data_buffer_start > B:
            raise OutOfSpace(_OOM_MESSAGE)
        monotonic_id = self._abs_end % self.ID_MAX
        header = int32_to_bytes(monotonic_id) + int32_to_bytes(n)
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("header_write")
        offset = new_end % B
        data[offset : offset + self.MD_SIZE] = header
        self._pending = (new_end, monotonic_id, end, self._abs_end)
        self.metadata[monotonic_id] = new_end
        self._sizes[monotonic_id] = n
        self.data_buffer_end = new_end + n
        self._abs_end += 1
        return new_end, monotonic_id

    def rollback_buf(self, address: int, monotonic_id: int) -> None:
        """Writer: undo the latest unpublished :meth:`reserve_buf` entirely.

        Restores ``data_buffer_end``, the next id and ``metadata``; the header
        bytes left behind lie in free space that no published counter covers.
        """
        self._require_writer("roll back allocations")
        pending = self._pending
        if pending is None or pending[0] != address or pending[1] != monotonic_id:
            raise ValueError(f"No unpublished allocation {address}:{monotonic_id} to roll back")
        _, _, previous_end, previous_abs_end = pending
        del self.metadata[monotonic_id]
        del self._sizes[monotonic_id]
        self.data_buffer_end = previous_end
        self._abs_end = previous_abs_end
        self._pending = None

    def allocate_buf(self, size: int) -> tuple[int, int]:
        """Writer: allocate a chunk for ``size`` payload bytes and publish it.

        Returns ``(virtual address, monotonic_id)``.  Raises ``OutOfSpace``
        (``MemoryError``, vLLM's message) when there is no contiguous room,
        with nothing changed; ``NotWriter`` on a reader.
        """
        handle = self.reserve_buf(size)
        self.publish()
        return handle

    def chunk_size(self, monotonic_id: int) -> int:
        """Writer: the chunk size (header included, bytes) of a live chunk."""
        self._require_writer("inspect chunk sizes")
        return self._sizes[monotonic_id]

    @contextmanager
    def access_buf(self, address: int) -> Iterator[tuple[memoryview, tuple[int, int]]]:
        """Yield ``(payload view, (id, chunk_size))`` of the chunk header at ``address % B``.

        Mirrors vLLM's unchecked accessor: the header bytes are trusted, but
        the view is clamped to the data region.  The view is released on exit.
        The object store itself never uses this on the read path.
        """
        data = self.data_region
        B = self.data_buffer_size
        offset = address % B
        header = bytes(data[offset : offset + self.MD_SIZE])
        if len(header) < self.MD_SIZE:
            header = header.ljust(self.MD_SIZE, b"\0")
        chunk_id = bytes_to_int32(header[: self.ID_NBYTES])
        size = bytes_to_int32(header[self.ID_NBYTES :])
        lo = min(offset + self.MD_SIZE, B)
        hi = min(max(offset + size, lo), B)
        with data[lo:hi] as view:
            yield view, (chunk_id, size)

    # --------------------------------------------------------------- freeing
    def free_buf(
        self,
        is_free_fn: Callable[[int, memoryview], bool],
        nbytes: int | None = None,
    ) -> Iterable[int]:
        """Writer: reclaim chunks oldest-first (FIFO, vLLM 0.11 - 0.33 policy).

        While a live chunk remains and fewer than ``nbytes`` (default: the whole
        buffer) have been freed: ``is_free_fn(id, view)`` is asked about the
        oldest chunk (``view`` = its bytes after the 8-byte header); if true it
        is dropped, ``abs_start`` is published at once (before the memory can
        be reused), and ``start`` moves forward (mod ``B``) to the next live
        chunk, or ``start = end = 0`` when none is left; if false, stop.
        Afterwards ``start >= B`` shifts both ``start`` and ``end`` down by ``B``.
        Returns the freed ids in order (may wrap past ``2**31``).
        """
        self._require_writer("free buffers")
        data = self.data_region
        B = self.data_buffer_size
        if nbytes is None:
            nbytes = B
        first_id = self.monotonic_id_start
        freed = 0
        while self._abs_start < self._abs_end and freed < nbytes:
            oldest = self._abs_start % self.ID_MAX
            address = self.metadata[oldest]
            size = self._sizes[oldest]
            offset = address % B
            with data[offset + self.MD_SIZE : offset + size] as view:
                if not is_free_fn(oldest, view):
                    break
            if yieldpoints.HOOK is not None:
                yieldpoints.HOOK("free_step")
            self._abs_start += 1
            self._publish_start()
            del self.metadata[oldest]
            del self._sizes[oldest]
            nxt = self._abs_start % self.ID_MAX
            if self._abs_start < self._abs_end:
                self.data_buffer_start += (self.metadata[nxt] - self.data_buffer_start) % B
            else:
                self.data_buffer_start = self.data_buffer_end = 0
            freed += size
        if self.data_buffer_start >= B:
            self.data_buffer_start -= B
            self.data_buffer_end -= B
        last_id = self.monotonic_id_start
        if last_id >= first_id:
            return range(first_id, last_id)
        return chain(range(first_id, self.ID_MAX), range(0, last_id))

    def clear(self) -> None:
        """Writer: drop every chunk; ids keep increasing (vLLM >= 0.32).

        ``monotonic_id_start = monotonic_id_end``, ``start = end = 0``, and
        ``abs_start = abs_end`` is published before any memory can be reused,
        so no handle issued before the clear resolves after it (CLR).
        """
        self._require_writer("clear the buffer")
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("clear")
        self._abs_start = self._abs_end
        self._publish_start()
        self.metadata.clear()
        self._sizes.clear()
        self._pending = None
        self.data_buffer_start = 0
        self.data_buffer_end = 0

    # ---------------------------------------------------------------- close
    def close(self) -> None:
        """Close the mapping; the writer also unlinks the segment.

        Idempotent; ``FileNotFoundError`` on unlink is ignored (vLLM >= 0.15).
        """
        if self._closed or not hasattr(self, "shared_memory"):
            return
        self._closed = True
        for view in (self._ctl, self._data):
            if view is not None:
                view.release()
        self._ctl = None
        self._data = None
        segment.release_segment(self.shared_memory, unlink=self.is_writer)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
