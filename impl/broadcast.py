"""Our broadcast queue with vLLM 0.33.0's ``MessageQueue`` surface
(docs/slots.md#our-stores-shmspecimplslots), so that code written for
vLLM's queue, and shmspec's deployed-construction campaigns, run on it
unchanged: ``MessageQueue(n_reader, n_local_reader, local_reader_ranks,
max_chunk_bytes, max_chunks, connect_ip)``, ``export_handle()``,
``create_from_handle(handle, rank)``, ``wait_until_ready()``,
``enqueue(obj, timeout)``, ``dequeue(timeout)``, ``broadcast_object(obj)``,
``acquire_write``/``acquire_read`` and ``shutdown()``.

Local readers share one :class:`~shmspec.impl.slots.SlotQueue` ring (its
hardening: bounded waits, a caller's exception leaves a write unpublished,
a read released in a ``finally``); remote readers, and local readers for a
message too large for a chunk (the *overflow* path), get it over pyzmq
PUB/SUB sockets (ipc for local readers, tcp for remote ones), as vLLM's do.

A message is pickled with protocol 5; a buffer of at least
``oob_threshold`` bytes (default 1 MiB, vLLM's) travels out of band.  In a
chunk the layout is ours: ``[overflow u8][count u16 LE]`` then ``count``
frames ``[length u32 LE][bytes]`` (the pickle stream first).  What differs
from vLLM 0.33.0, each backed by ``tests/impl/test_broadcast.py``:

* every out-of-band buffer *and* the pickle stream are copied out of the
  chunk before the chunk is released, so no value a reader keeps aliases
  memory the writer reuses (vLLM copies the out-of-band buffers and
  unpickles the stream in place, which is safe for pickle's own objects);
* a message sent over a socket (the overflow path, remote readers) is
  copied into zmq's messages before ``enqueue`` returns, so the caller may
  reuse its buffers at once (vLLM 0.33.0 sends them zero-copy, and a reader
  may receive what the caller wrote next: the deployed construction's
  writer reuses them, as a scheduler does);
* a writer's :class:`~shmspec.model.errors.SlotTimeout` names the local
  readers that have not released the chunk it waits on (vLLM raises a
  bare ``TimeoutError``);
* readers wait on the ring's flags with short sleeps (no notification
  socket), every wait bounded by its ``timeout``;
* a local reader's ``dequeue`` that times out after it read an overflow
  chunk, before the frames came over the socket, owes those frames: its
  next ``dequeue`` returns that message first (vLLM 0.33.0's returns the
  message after it, and the late frames for the next overflow chunk: the
  deployed construction's ``writer-stalled-before-send`` run).

The tensor arena (``enable_shm_tensor_arena=True``, vLLM 0.33.0's option;
off when the queue has remote readers, as vLLM's): an out-of-band buffer
of at least ``ARENA_MIN_BYTES`` (8 MiB) that fits a slot is copied once
into a :class:`~shmspec.impl.slots.SlotArena` slot and travels as a stub;
the reader's value is a zero-copy, read-only view of the slot that holds
it (a lease) until the value and every view of it are collected, and the
release is made at the reader's next ``dequeue``.  Any protocol-5
out-of-band buffer qualifies (numpy arrays; CPU torch tensors, which are
reduced to one when torch is loaded), not only torch tensors.  What
differs from vLLM 0.33.0: an enqueue that raises after its buffers were
copied into the arena (a later part of the message fails to pickle, or
the ring's wait times out) takes its slots back, where vLLM's stay
written and are never released (no reader ever gets their stubs).
"""

from __future__ import annotations

import copyreg
import io
import os
import pickle
import struct
import sys
import tempfile
import uuid
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import zmq

from shmspec.model.errors import SlotTimeout

from .slots import SlotArena, SlotQueue, SlotStub

OOB_THRESHOLD = 1024 * 1024
"""Buffers of at least this many bytes travel out of band (vLLM's 1 MiB)."""
_HEAD = struct.Struct("<BH")
_LEN = struct.Struct("<I")
_STUB = struct.Struct("<IIQ")
"""An arena frame: the slot, its generation and the buffer's size in bytes."""
INLINE, IN_ARENA = 0, 1
"""An out-of-band frame's kind (the second frame of a message lists them, one byte each)."""


@dataclass
class Handle:
    """What a reader process needs to attach (picklable): the local readers'
    ranks, the ring's ``(n_reader, chunk_bytes, n_chunks, segment name)`` and
    the two sockets' addresses (None where there are no such readers)."""

    local_reader_ranks: list[int] = field(default_factory=list)
    buffer_handle: tuple[int, int, int, str] | None = None
    local_subscribe_addr: str | None = None
    remote_subscribe_addr: str | None = None
    tensor_arena_handle: tuple[int, int, int, str] | None = None
    """The arena's ``(n_reader, slot_bytes, n_slots, segment name)``, or None (no arena)."""


class MessageQueue:
    """One writer, ``n_reader`` readers of which ``n_local_reader`` share the
    ring (see the module docstring); chunk and buffer sizes in bytes.

    Raises (constructor):
        ValueError: a reader count below 0, more local readers than readers,
            or ``local_reader_ranks`` of another length.
        SharedMemoryFull: ``/dev/shm`` cannot hold the ring.
        zmq.ZMQError: a socket cannot bind.
    """

    ARENA_SLOTS = 8
    ARENA_SLOT_BYTES = 256 * 1024 * 1024
    ARENA_MIN_BYTES = 8 * 1024 * 1024
    """The arena's geometry (bytes) and its divert threshold: vLLM 0.33.0's."""

    def __init__(self, n_reader: int, n_local_reader: int, local_reader_ranks: list[int] | None = None,
                 max_chunk_bytes: int = 1024 * 1024 * 24, max_chunks: int = 10, connect_ip: str | None = None,
                 oob_threshold: int = OOB_THRESHOLD, enable_shm_tensor_arena: bool = False):
        if not 0 <= n_local_reader <= n_reader:
            raise ValueError(f"n_local_reader must be in 0..n_reader ({n_reader}), not {n_local_reader}")
        ranks = list(range(n_local_reader)) if local_reader_ranks is None else list(local_reader_ranks)
        if len(ranks) != n_local_reader:
            raise ValueError(f"{len(ranks)} local reader ranks for {n_local_reader} local readers")
        self.n_local_reader, self.n_remote_reader = n_local_reader, n_reader - n_local_reader
        self.oob_threshold = oob_threshold
        self._is_writer, self._is_local_reader, self._is_remote_reader = True, False, False
        self.local_reader_rank = -1
        self.shutting_down = False
        self._context = zmq.Context()
        self.buffer: SlotQueue | None = None
        self.tensor_arena: SlotArena | None = None
        self.local_socket = self.remote_socket = None
        local_addr = remote_addr = None
        try:
            if n_local_reader:
                self.buffer = self.ring_class(n_local_reader, max_chunk_bytes, max_chunks)
                if enable_shm_tensor_arena and not self.n_remote_reader:  # a remote reader cannot map it
                    self.tensor_arena = self.arena_class(n_local_reader, self.ARENA_SLOT_BYTES, self.ARENA_SLOTS)
                self.local_socket = self._context.socket(zmq.XPUB)
                self.local_socket.setsockopt(zmq.XPUB_VERBOSE, True)
                local_addr = f"ipc://{tempfile.gettempdir()}/shmspec-mq-{os.getpid()}-{uuid.uuid4().hex[:12]}"
                self.local_socket.bind(local_addr)
            if self.n_remote_reader:
                self.remote_socket = self._context.socket(zmq.XPUB)
                self.remote_socket.setsockopt(zmq.XPUB_VERBOSE, True)
                ip = connect_ip or "127.0.0.1"
                if ":" in ip:
                    self.remote_socket.setsockopt(zmq.IPV6, 1)
                    ip = f"[{ip}]"
                self.remote_socket.bind(f"tcp://{ip}:0")
                port = self.remote_socket.getsockopt(zmq.LAST_ENDPOINT).decode().rsplit(":", 1)[1]
                remote_addr = f"tcp://{ip}:{port}"
        except BaseException:
            self.handle = None
            self.close()
            raise
        self.handle = Handle(ranks, self.buffer.handle() if self.buffer is not None else None, local_addr,
                             remote_addr, self.tensor_arena.handle() if self.tensor_arena is not None else None)

    # ---- construction --------------------------------------------------------------

    def export_handle(self) -> Handle:
        return self.handle

    ring_class = SlotQueue
    """The local readers' ring (a seeded fault may put another one here)."""
    arena_class = SlotArena
    """The tensor arena's class (likewise)."""

    @classmethod
    def create_from_handle(cls, handle: Handle, rank: int) -> "MessageQueue":
        """A reader of the queue ``handle`` describes: local (over the ring)
        when ``rank`` is one of its ``local_reader_ranks``, else remote."""
        self = cls.__new__(cls)
        self.handle, self._is_writer, self.shutting_down = handle, False, False
        self.oob_threshold = OOB_THRESHOLD
        self._context = zmq.Context()
        self.buffer, self.local_socket, self.remote_socket = None, None, None
        self.tensor_arena = None
        self.n_local_reader = len(handle.local_reader_ranks)
        self.n_remote_reader = 0
        try:
            if rank in handle.local_reader_ranks:
                self._is_local_reader, self._is_remote_reader = True, False
                self.local_reader_rank = handle.local_reader_ranks.index(rank)
                n, chunk, chunks, name = handle.buffer_handle
                self.buffer = self.ring_class(n, chunk, chunks, name=name, reader_rank=self.local_reader_rank)
                arena = getattr(handle, "tensor_arena_handle", None)
                if arena is not None:
                    n, slot, slots, name = arena
                    self.tensor_arena = self.arena_class(n, slot, slots, name=name, reader_rank=self.local_reader_rank)
                self.local_socket = self._subscriber(handle.local_subscribe_addr)
            else:
                if handle.remote_subscribe_addr is None:
                    raise ValueError(f"rank {rank} is not a local reader and the queue has no remote readers")
                self._is_local_reader, self._is_remote_reader = False, True
                self.local_reader_rank = -1
                self.remote_socket = self._subscriber(handle.remote_subscribe_addr)
        except BaseException:
            self.close()
            raise
        return self

    def _subscriber(self, addr: str) -> Any:
        sock = self._context.socket(zmq.SUB)
        if addr.startswith("tcp://["):
            sock.setsockopt(zmq.IPV6, 1)
        sock.setsockopt_string(zmq.SUBSCRIBE, "")
        sock.connect(addr)
        return sock

    def wait_until_ready(self) -> None:
        """Collective: the writer waits for every reader's subscription and
        answers ``READY`` on each socket; a reader waits for that answer."""
        if self._is_writer:
            for sock, n in ((self.local_socket, self.n_local_reader), (self.remote_socket, self.n_remote_reader)):
                for _ in range(n):
                    sock.recv()
                if n:
                    sock.send(b"READY")
        else:
            got = (self.local_socket if self._is_local_reader else self.remote_socket).recv()
            if got != b"READY":
                raise RuntimeError(f"expected READY from the writer, got {bytes(got[:16])!r}")

    @property
    def current_idx(self) -> int:
        """The ring position of this process (-1 for a remote reader)."""
        return self.buffer.current_idx if self.buffer is not None else -1

    # ---- the flag protocol (SlotQueue's) -------------------------------------------

    @contextmanager
    def acquire_write(self, timeout: float | None = None) -> Iterator[memoryview]:
        """The next chunk, writable (see :meth:`SlotQueue.acquire_write`).

        Raises:
            SlotTimeout: not released within ``timeout`` s; its message names
                the local readers holding the chunk."""
        try:
            cm = self.buffer.acquire_write(timeout)
            chunk = cm.__enter__()
        except SlotTimeout as exc:
            row = self.buffer.row(self.buffer.current_idx)
            missing = [self.handle.local_reader_ranks[r] for r in range(self.n_local_reader) if not row[1 + r]]
            raise SlotTimeout("writer", self.buffer.current_idx, exc.seconds,
                              f"readers {missing} have not released it") from None
        try:
            yield chunk
        except BaseException as exc:
            if not cm.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            cm.__exit__(None, None, None)

    def acquire_read(self, timeout: float | None = None, indefinite: bool = False) -> Any:
        return self.buffer.acquire_read(None if indefinite else timeout)

    # ---- messages ------------------------------------------------------------------

    def _frames(self, obj: Any) -> tuple[list[Any], list[SlotStub]]:
        """``obj`` as frames ``[pickle stream, frame kinds, buffer...]`` and
        the arena slots it was copied into (taken back if the pickling fails)."""
        frames: list[Any] = [b"", b""]
        kinds = bytearray()
        written: list[SlotStub] = []
        arena = self.tensor_arena

        def out_of_band(buf: pickle.PickleBuffer) -> bool:
            raw = buf.raw()
            if raw.nbytes < self.oob_threshold:
                return True  # in band
            stub = None
            if arena is not None and self.ARENA_MIN_BYTES <= raw.nbytes <= arena.slot_bytes:
                stub = arena.write(raw)  # None: no free slot, it travels as a frame
            if stub is not None:
                written.append(stub)
                frames.append(_STUB.pack(*stub))
            else:
                frames.append(raw)
            kinds.append(IN_ARENA if stub is not None else INLINE)
            return False

        try:
            with io.BytesIO() as bio:
                pickler = pickle.Pickler(bio, protocol=5, buffer_callback=out_of_band)
                torch = sys.modules.get("torch")
                if isinstance(getattr(torch, "Tensor", None), type):  # CPU tensors out of band, as vLLM's queue
                    pickler.dispatch_table = {**copyreg.dispatch_table, torch.Tensor: _reduce_tensor}
                pickler.dump(obj)
                frames[0] = bio.getvalue()
        except BaseException:
            self._take_back(written)
            raise
        frames[1] = bytes(kinds)
        return frames, written

    def _take_back(self, written: list[SlotStub]) -> None:
        """Free the arena slots of a message that is not sent (no reader has its stubs)."""
        for stub in written:
            self.tensor_arena.take_back(stub)

    def _loads(self, head: Any, kinds: Any, oob: list[Any]) -> Any:
        """The message from its frames; an arena frame becomes a view of its slot."""
        buffers = []
        for kind, frame in zip(bytes(kinds), oob):
            if kind == IN_ARENA:
                if self.tensor_arena is None:
                    raise RuntimeError("an arena frame reached a reader without the arena")
                buffers.append(self.tensor_arena.view(SlotStub(*_STUB.unpack(bytes(frame)))))
            else:
                buffers.append(frame)
        return pickle.loads(head, buffers=buffers)

    def enqueue(self, obj: Any, timeout: float | None = None) -> None:
        """Send ``obj`` to every reader.

        Raises:
            SlotTimeout: a local reader did not release the next chunk within
                ``timeout`` s (nothing sent to anyone; its arena slots freed).
            pickle.PicklingError (or the object's own error): it cannot be
                pickled (nothing sent; its arena slots freed)."""
        if not self._is_writer:
            raise RuntimeError("only the writer can enqueue")
        frames, written = self._frames(obj)
        if self.buffer is not None:
            size = _HEAD.size + sum(_LEN.size + memoryview(f).nbytes for f in frames)
            overflow = size > self.buffer.slot_bytes
            try:
                with self.acquire_write(timeout) as chunk:
                    if overflow:
                        chunk[0] = 1
                    else:
                        _HEAD.pack_into(chunk, 0, 0, len(frames))
                        at = _HEAD.size
                        for f in frames:
                            n = memoryview(f).nbytes
                            _LEN.pack_into(chunk, at, n)
                            chunk[at + _LEN.size:at + _LEN.size + n] = f
                            at += _LEN.size + n
            except BaseException:
                self._take_back(written)
                raise
            if overflow:  # after the chunk is published: a reader finds the flag, then the frames
                self._send(self.local_socket, frames)
        if self.remote_socket is not None:
            self._send(self.remote_socket, frames)

    def _send(self, sock: Any, frames: list[Any]) -> None:
        """Send a message's frames, copied into zmq's messages before this
        returns: the caller may reuse its buffers once ``enqueue`` returns."""
        sock.send_multipart(frames, copy=True)

    def dequeue(self, timeout: float | None = None, indefinite: bool = False) -> Any:
        """The next message.  A local reader first releases the arena slots
        whose values it has dropped since (:meth:`SlotArena.flush_releases`).

        Raises:
            SlotTimeout / TimeoutError: nothing within ``timeout`` s.  Nothing
                is lost: if the wait ended between an overflow chunk and its
                frames on the socket, the next dequeue returns that message.
            StaleSlot: an arena frame names a slot reused since (never happens
                with the writer's own frames).
            RuntimeError: called on the writer."""
        if self._is_local_reader:
            if self.tensor_arena is not None:
                self.tensor_arena.flush_releases()
            if self._owed:  # an overflow chunk read by a dequeue that timed out before its frames came
                return self._owed_frames(timeout)
            with self.acquire_read(timeout, indefinite) as chunk:
                overflow, count = _HEAD.unpack_from(chunk, 0)
                if not overflow:
                    frames, at = [], _HEAD.size
                    for _ in range(count):
                        (n,) = _LEN.unpack_from(chunk, at)
                        frames.append(bytearray(chunk[at + _LEN.size:at + _LEN.size + n]))  # copied out
                        at += _LEN.size + n
            if not overflow:
                return self._loads(frames[0], frames[1], frames[2:])
            self._owed += 1  # the chunk is released: its frames are owed to this reader until they come
            return self._owed_frames(timeout)
        if self._is_remote_reader:
            return self._recv(self.remote_socket, timeout)
        raise RuntimeError("only readers can dequeue")

    _owed = 0
    """Overflow chunks this local reader has read whose frames have not
    come yet (a dequeue timed out between the two): the next dequeue
    returns those first, so a timeout loses and reorders nothing."""

    def _owed_frames(self, timeout: float | None) -> Any:
        got = self._recv(self.local_socket, timeout)
        self._owed -= 1
        return got

    def _recv(self, sock: Any, timeout: float | None) -> Any:
        if not sock.poll(None if timeout is None else max(0, int(timeout * 1000))):
            raise TimeoutError(f"no message on the socket within {timeout} s")
        head, kinds, *oob = sock.recv_multipart(copy=False)
        return self._loads(head.buffer, kinds.buffer, [f.buffer for f in oob])  # frames own their memory

    def broadcast_object(self, obj: Any = None) -> Any:
        if self._is_writer:
            self.enqueue(obj)
            return obj
        return self.dequeue()

    def shutdown(self) -> None:
        self.shutting_down = True

    def close(self) -> None:
        """Close the sockets and the ring (the writer unlinks it); idempotent."""
        for sock in (self.local_socket, self.remote_socket):
            if sock is not None:
                sock.close(linger=0)
        self.local_socket = self.remote_socket = None
        if self.buffer is not None:
            self.buffer.close()
            self.buffer = None
        if getattr(self, "tensor_arena", None) is not None:
            self.tensor_arena.close()
            self.tensor_arena = None
        if getattr(self, "_context", None) is not None:
            self._context.term()
            self._context = None
        addr = self.handle.local_subscribe_addr if self._is_writer and getattr(self, "handle", None) else None
        if addr and addr.startswith("ipc://"):  # libzmq 4.3 leaves a bound ipc path's file
            try:
                os.unlink(addr[6:])
            except FileNotFoundError:
                pass


def _reduce_tensor(tensor: Any) -> Any:
    """A CPU tensor's bytes as a protocol-5 out-of-band buffer (torch's own
    reduction copies them into the pickle stream); other tensors as torch
    reduces them."""
    import torch

    if tensor.device.type == "cpu" and tensor.layout == torch.strided and not tensor.requires_grad:
        try:
            raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
        except RuntimeError:  # a tensor that cannot be viewed so (the conjugate bit set, ...)
            pass
        else:
            return _rebuild_tensor, (pickle.PickleBuffer(raw), tuple(tensor.shape), str(tensor.dtype)[6:])
    return tensor.__reduce_ex__(5)


def _rebuild_tensor(buf: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """The tensor over the buffer pickle hands back (zero copy; read-only
    over an arena slot, which torch warns of and which it stays)."""
    import torch

    if not memoryview(buf).nbytes:
        return torch.empty(shape, dtype=getattr(torch, dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given buffer is not writable"
        return torch.frombuffer(buf, dtype=torch.uint8).view(getattr(torch, dtype)).view(shape)


__all__ = ["Handle", "IN_ARENA", "INLINE", "MessageQueue", "OOB_THRESHOLD"]
