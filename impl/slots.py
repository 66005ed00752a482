"""Our slot-flag stores (docs/slots.md): :class:`SlotArena`, the zero-copy
arena (the protocol of vLLM's ``ShmTensorArena``), and :class:`SlotQueue`,
the broadcast ring (the shared-memory path of vLLM's ``MessageQueue``).

One segment each, laid out ``[slot 0 | ... | slot S-1 | row 0 | ... | row
S-1 | generation 0 | ... | generation S-1]``: a slot is ``slot_bytes``
bytes, a row is ``1 + n_reader`` flag bytes ``[written, done_0, ...,
done_{R-1}]`` (vLLM's layout), a generation is 4 bytes little-endian (ids
modulo 2**31; ours alone).  The writer reuses a slot that is unwritten or
done by every reader: it clears ``written`` (the claim), bumps the slot's
generation, copies, resets every reader's flag, fences, sets ``written``,
fences.  A reader reads a slot that is written and not done by it, then
sets its own flag (the release).

What is hardened against vLLM 0.33.0 (each backed by a test in
``tests/impl/test_impl_slots.py``):

* the arena's stub carries the slot's generation; :meth:`SlotArena.view`
  refuses (:class:`~shmspec.model.errors.StaleSlot`) a stub whose slot was
  reused, is unwritten, or was already released by this reader, instead of
  a view of another message's bytes;
* a release is recorded with its generation, so a late one (a view dropped
  after its slot was reused) never releases the new message;
* the reader rank is checked (vLLM's writer-side ``reader_rank=-1`` would
  set the ``written`` flag on a release);
* every wait of the queue is bounded by its ``timeout`` and raises
  :class:`~shmspec.model.errors.SlotTimeout` with nothing claimed or
  consumed; a writer's caller that raises inside ``acquire_write`` leaves the
  slot unpublished (readers never see the partial copy) and the ring where
  it was.

A fence is a lock acquire and release (as vLLM's ``memory_fence``).
"""

from __future__ import annotations

import ctypes
import struct
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Iterator, NamedTuple

from shmspec.model.errors import SlotTimeout, StaleSlot

from .segment import attach_segment, create_segment, release_segment

GEN_MOD = 2**31
"""Generations count modulo 2**31."""
_FENCE = threading.Lock()


def fence() -> None:
    """A full fence (lock acquire and release)."""
    with _FENCE:
        pass


class SlotStub(NamedTuple):
    """What the arena's writer hands its readers for one message: the slot,
    its generation (mod 2**31) and the message's size in bytes."""

    slot: int
    generation: int
    nbytes: int


class _Segment:
    """The shared layout of both stores (see the module docstring)."""

    def __init__(self, n_reader: int, slot_bytes: int, n_slots: int, name: str | None, reader_rank: int):
        for what, v in (("n_reader", n_reader), ("slot_bytes", slot_bytes), ("n_slots", n_slots)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{what} must be a positive int, not {v!r}")
        if name is not None and not 0 <= reader_rank < n_reader:
            raise ValueError(f"reader_rank must be in 0..{n_reader - 1} for a reader, not {reader_rank}")
        self.n_reader, self.slot_bytes, self.n_slots = n_reader, slot_bytes, n_slots
        self.reader_rank = reader_rank if name is not None else -1
        self.row_size = 1 + n_reader
        self.meta_offset = slot_bytes * n_slots
        self.gen_offset = self.meta_offset + self.row_size * n_slots
        self.total_bytes = self.gen_offset + 4 * n_slots
        self.is_creator = name is None
        self.shm = create_segment(self.total_bytes, None) if name is None else attach_segment(name)
        if self.shm.size < self.total_bytes:
            release_segment(self.shm, unlink=False)
            raise ValueError(f"segment {name} has {self.shm.size} bytes, the geometry needs {self.total_bytes}")
        self.buf = self.shm.buf

    @property
    def name(self) -> str:
        return self.shm.name

    def handle(self) -> tuple[int, int, int, str]:
        """``(n_reader, slot_bytes, n_slots, segment name)``: a reader's constructor arguments."""
        return (self.n_reader, self.slot_bytes, self.n_slots, self.shm.name)

    def row(self, i: int) -> bytes:
        """Slot ``i``'s flags ``[written, done_0, ...]`` as they are now."""
        o = self.meta_offset + i * self.row_size
        return bytes(self.buf[o:o + self.row_size])

    def _flag(self, i: int, j: int) -> int:
        return self.buf[self.meta_offset + i * self.row_size + j]

    def _set_flag(self, i: int, j: int, v: int) -> None:
        self.buf[self.meta_offset + i * self.row_size + j] = v

    def generation(self, i: int) -> int:
        return struct.unpack_from("<I", self.buf, self.gen_offset + 4 * i)[0]

    def _free(self, i: int) -> bool:
        fence()
        return not self._flag(i, 0) or all(self._flag(i, 1 + r) for r in range(self.n_reader))

    def _readable(self, i: int) -> bool:
        fence()
        return bool(self._flag(i, 0)) and not self._flag(i, 1 + self.reader_rank)

    def _claim(self, i: int) -> int:
        self._set_flag(i, 0, 0)
        gen = (self.generation(i) + 1) % GEN_MOD
        struct.pack_into("<I", self.buf, self.gen_offset + 4 * i, gen)
        fence()
        return gen

    def _publish(self, i: int) -> None:
        for r in range(self.n_reader):
            self._set_flag(i, 1 + r, 0)
        fence()
        self._set_flag(i, 0, 1)
        fence()

    def _release(self, i: int) -> None:
        self._set_flag(i, 1 + self.reader_rank, 1)
        fence()

    def close(self) -> None:
        """Detach (the creator also unlinks).  Views still held keep the
        mapping; it is closed when they are gone (a BufferError is ignored)."""
        if self.buf is None:
            return
        self.buf = None
        try:
            release_segment(self.shm, unlink=self.is_creator)
        except BufferError:  # views still held: the name is gone, the mapping dies with them
            pass


class SlotArena(_Segment):
    """The zero-copy arena: one writer, ``n_reader`` readers, ``n_slots``
    slots of ``slot_bytes`` bytes.

    The writer never blocks: :meth:`write` returns None when the message is
    over ``slot_bytes`` or no slot is free (the caller's fallback, nothing
    changed).  A reader's :meth:`view` is a read-only memoryview of the slot;
    the slot is released once the view is dropped (its finalizer queues the
    release) and :meth:`flush_releases` runs, as in vLLM 0.33.0.

    Raises (constructor):
        ValueError: a size below 1, a reader rank outside ``0..n_reader-1``,
            or a segment smaller than the geometry.
        SharedMemoryFull: ``/dev/shm`` cannot hold the segment.
    """

    def __init__(self, n_reader: int, slot_bytes: int, n_slots: int, name: str | None = None, reader_rank: int = -1):
        super().__init__(n_reader, slot_bytes, n_slots, name, reader_rank)
        self._next = 0
        self.fallbacks = 0
        self._pending: list[tuple[int, int]] = []  # (slot, generation) dropped, not yet flushed

    def write(self, data) -> SlotStub | None:
        """Copy ``data`` (any buffer, ``nbytes`` <= ``slot_bytes``) into a
        free slot, probing every slot from the one after the last write.

        Returns: its stub, or None (fallback: too large, or no free slot)."""
        src = memoryview(data).cast("B")
        n = src.nbytes
        if n > self.slot_bytes or self.reader_rank != -1:
            self.fallbacks += 1
            return None
        for probe in range(self.n_slots):
            i = (self._next + probe) % self.n_slots
            if not self._free(i):
                continue
            gen = self._claim(i)
            self.buf[i * self.slot_bytes:i * self.slot_bytes + n] = src
            self._publish(i)
            self._next = (i + 1) % self.n_slots
            return SlotStub(i, gen, n)
        self.fallbacks += 1
        return None

    def take_back(self, stub: SlotStub) -> bool:
        """Free a slot the writer wrote for a message it did not send (no
        reader has the stub): unset ``written`` if the slot still holds that
        generation and no reader has released it.  Returns whether it did.

        Raises:
            ValueError: called on a reader."""
        if self.reader_rank != -1:
            raise ValueError("only the writer can take a slot back")
        slot, gen, _ = stub
        if self.generation(slot) != gen or not self._flag(slot, 0) or any(
                self._flag(slot, 1 + r) for r in range(self.n_reader)):
            return False
        self._set_flag(slot, 0, 0)
        fence()
        return True

    def view(self, stub: SlotStub) -> memoryview:
        """A read-only zero-copy view of the stub's message.

        Raises:
            StaleSlot: the slot was reused since (another generation), is
                unwritten, or this reader already released it.
            ValueError: not a reader, or a stub outside the geometry."""
        slot, gen, n = stub
        if self.reader_rank < 0:
            raise ValueError("the writer cannot view a slot; build a reader with reader_rank")
        if not 0 <= slot < self.n_slots or not 0 <= n <= self.slot_bytes:
            raise ValueError(f"stub {tuple(stub)} is outside the arena ({self.n_slots} slots of {self.slot_bytes} bytes)")
        found = self.generation(slot)
        if found != gen:
            raise StaleSlot(slot, gen, found, "reused")
        if not self._readable(slot):
            raise StaleSlot(slot, gen, found, "unwritten" if not self._flag(slot, 0) else "already released")
        # The view's exporter is a ctypes array over the slot (weak-referenceable,
        # unlike a memoryview): every view derived from the one returned keeps
        # it alive, so the release is queued only once the last view is gone.
        holder = (ctypes.c_ubyte * n).from_buffer(self.buf, slot * self.slot_bytes)
        weakref.finalize(holder, self._pending.append, (slot, gen))
        return memoryview(holder).cast("B").toreadonly()

    def flush_releases(self) -> list[int]:
        """Release the slots whose views were dropped (a release of a slot
        reused since is dropped, not applied); returns the slots released."""
        done = []
        while self._pending:
            slot, gen = self._pending.pop()
            if self.generation(slot) == gen and self._flag(slot, 0):
                self._set_flag(slot, 1 + self.reader_rank, 1)
                done.append(slot)
        fence()
        return done


class SlotQueue(_Segment):
    """The broadcast ring: one writer, ``n_reader`` readers, ``n_chunks``
    chunks of ``chunk_bytes`` bytes, each reader receiving every message in
    order.  Messages are length-prefixed (4 bytes) inside the chunk.

    Raises (constructor): as :class:`SlotArena`.
    """

    def __init__(self, n_reader: int, chunk_bytes: int, n_chunks: int, name: str | None = None,
                 reader_rank: int = -1):
        super().__init__(n_reader, chunk_bytes, n_chunks, name, reader_rank)
        self.current_idx = 0

    def _wait(self, ready, role: str, timeout: float | None) -> None:
        start = time.monotonic()
        while not ready(self.current_idx):
            elapsed = time.monotonic() - start
            if timeout is not None and elapsed >= timeout:
                raise SlotTimeout(role, self.current_idx, elapsed)
            time.sleep(0 if elapsed < 0.001 else 0.0001)

    @contextmanager
    def acquire_write(self, timeout: float | None = None) -> Iterator[memoryview]:
        """The writer's next chunk, writable, once every reader released it.

        Raises:
            SlotTimeout: not released within ``timeout`` seconds (nothing claimed).
            ValueError: called on a reader."""
        if self.reader_rank != -1:
            raise ValueError("only the writer can acquire a chunk to write")
        self._wait(self._free, "writer", timeout)
        i = self.current_idx
        self._claim(i)
        with self.buf[i * self.slot_bytes:(i + 1) * self.slot_bytes] as chunk:
            yield chunk  # a caller's exception leaves the chunk claimed and unpublished
        self._publish(i)
        self.current_idx = (i + 1) % self.n_slots

    @contextmanager
    def acquire_read(self, timeout: float | None = None) -> Iterator[memoryview]:
        """This reader's next chunk, read-only; released when the block
        ends, also when the caller raises (the message is consumed).

        Raises:
            SlotTimeout: nothing to read within ``timeout`` seconds (nothing consumed).
            ValueError: called on the writer."""
        if self.reader_rank < 0:
            raise ValueError("only a reader can acquire a chunk to read")
        self._wait(self._readable, f"reader {self.reader_rank}", timeout)
        i = self.current_idx
        try:
            with self.buf[i * self.slot_bytes:(i + 1) * self.slot_bytes] as chunk, chunk.toreadonly() as ro:
                yield ro
        finally:
            self._release(i)
            self.current_idx = (i + 1) % self.n_slots

    def enqueue(self, data, timeout: float | None = None) -> None:
        """Write one message (bytes; at most ``chunk_bytes - 4``).

        Raises:
            ValueError: too large.  SlotTimeout: as :meth:`acquire_write`."""
        src = memoryview(data).cast("B")
        if src.nbytes > self.slot_bytes - 4:
            raise ValueError(f"message of {src.nbytes} bytes over the chunk's {self.slot_bytes - 4}")
        with self.acquire_write(timeout) as chunk:
            chunk[4:4 + src.nbytes] = src
            struct.pack_into("<I", chunk, 0, src.nbytes)

    def dequeue(self, timeout: float | None = None) -> bytes:
        """Read this reader's next message (a copy).

        Raises:
            SlotTimeout: as :meth:`acquire_read`."""
        with self.acquire_read(timeout) as chunk:
            (n,) = struct.unpack_from("<I", chunk, 0)
            return bytes(chunk[4:4 + min(n, self.slot_bytes - 4)])


__all__ = ["GEN_MOD", "SlotArena", "SlotQueue", "SlotStub", "fence"]
