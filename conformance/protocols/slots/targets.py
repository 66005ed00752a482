"""The slot protocol's targets and the drivers the sessions call.

Target strings (docs/slots.md#targets), ``KIND`` being ``arena`` or ``queue``:

* ``KIND:vllm==X.Y.Z`` (also ``vllm-KIND==X.Y.Z``): that release's
  ``shm_tensor_arena.py`` (with its ``shm_broadcast.py``, which it imports)
  or ``shm_broadcast.py``, fetched into the user cache as the object
  store's file is (range requests on the wheel);
* ``arena:file:PATH`` (a ``shm_tensor_arena.py`` with ``shm_broadcast.py``
  beside it) / ``queue:file:PATH`` (a ``shm_broadcast.py``);
* ``KIND:impl`` (also ``impl-KIND``): ours, :mod:`shmspec.impl.slots`;
* ``KIND:impl-file:PATH``: a module file of impl-shaped classes (a seeded
  fault, :mod:`shmspec.conformance.mutants.slots`).

A driver builds one store (a writer and ``readers`` readers in this
process) and offers the calls a lockstep session makes, in one vocabulary
for vLLM's classes and ours.  Every wait is bounded: a queue call is made
with ``timeout=0`` (vLLM's own bounded check; a ``TimeoutError`` is the
nothing-to-do outcome).
"""

from __future__ import annotations

import contextlib

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ...core.errors import TargetError
from ...targets import slotfiles
from ...targets.loader import NoStoreFile, fetch_store

KINDS = ("arena", "queue")
SGLANG_BROADCAST_FILE = "sglang/srt/distributed/device_communicators/shm_broadcast.py"
"""SGLang's copy of vLLM's queue (its header: adapted from vLLM 0.6.4), in its wheel."""


@dataclass
class SlotTarget:
    """A loaded slot-protocol target: ``kind`` (``arena``/``queue``),
    ``origin`` (``vllm``, ``sglang``, ``file`` or ``impl``), the loaded vLLM modules
    (``files``; for an ``impl-file:`` target its module), and ``source``
    (the file judged)."""

    spec: str
    kind: str
    origin: str
    files: Any = None
    source: Path | None = None
    contract: Any = None

    @property
    def stand_ins(self) -> tuple[str, ...]:
        """The names of the file's own project the loader stood in for (reports list them)."""
        return tuple(getattr(self.files, "stood_in", ()) or ())

    @property
    def torch(self) -> str:
        """Whose tensors an arena target's campaigns use: ``torch X.Y.Z``
        (real CPU torch, installed) or ``stand-in``."""
        if self.kind != "arena":
            return "stand-in"
        if self.origin == "impl":
            real = slotfiles.torch_mode() == "real"
        else:
            real = slotfiles._real_torch(self.files) is not None
        if not real:
            return "stand-in"
        import torch

        return f"torch {torch.__version__}"

    # the contract the model encodes: docs/slots.md, read from vLLM 0.33.0
    profile: Any = field(default_factory=lambda: SimpleNamespace(name="slots-0.33"))

    @property
    def protocol(self) -> str:
        return self.kind

    def __reduce__(self):
        return (load, tuple(self.spec.split(":", 1)))

    def driver(self, readers: int, slots: int, slot_bytes: int) -> Any:
        cls = ArenaDriver if self.kind == "arena" else QueueDriver
        return cls(self, readers, slots, slot_bytes)


def fetch_files(version: str, kind: str) -> tuple[Path, Path | None]:
    """The cached (or fetched) files of vLLM ``version`` for ``kind``.

    Raises:
        NoStoreFile: the release does not ship the file (the arena: before 0.32.0).
        TargetError: bad version or the index unreachable."""
    broadcast, _ = fetch_store(version, member=slotfiles.BROADCAST_FILE)
    arena = fetch_store(version, member=slotfiles.ARENA_FILE)[0] if kind == "arena" else None
    return broadcast, arena


def load(kind: str, spec: str) -> SlotTarget:
    """Resolve ``spec`` (``impl``, ``vllm==X.Y.Z`` or ``file:PATH``) as a
    ``kind`` target (``arena``/``queue``); its ``spec`` becomes ``KIND:SPEC``.

    Raises:
        TargetError: an unknown form, a missing file, or loading failed."""
    full = f"{kind}:{spec}"
    if kind == "arena":
        slotfiles.torch_mode()  # a bad SHMSPEC_TORCH is a usage error before anything runs
    if spec == "impl":
        return SlotTarget(full, kind, "impl")
    if spec.startswith("vllm=="):
        broadcast, arena = fetch_files(spec.split("==", 1)[1], kind)
        files = slotfiles.load_slot_files(broadcast, arena, real=slotfiles.torch_roots() if arena else ())
        return SlotTarget(full, kind, "vllm", files, arena or broadcast)
    if spec.startswith("sglang=="):
        if kind == "arena":
            raise TargetError("SGLang ships no tensor arena: use queue:sglang==X.Y.Z (or sglang-queue==X.Y.Z)")
        path, _ = fetch_store(spec.split("==", 1)[1], member=SGLANG_BROADCAST_FILE, project="sglang")
        return SlotTarget(full, kind, "sglang", slotfiles.load_slot_files(path), path)
    if spec.startswith("impl-file:"):
        return SlotTarget(full, kind, "impl", _load_impl_file(Path(spec[10:]), kind), Path(spec[10:]))
    if spec.startswith("file:"):
        path = Path(spec[5:])
        found = slotfiles.store_kind(path) if path.is_file() else None
        if found is not None and found != kind:
            use = "file:" if found == "ringbuffer" else f"{found}:file:"
            raise TargetError(f"{path} holds {slotfiles.STORE_NAMES[found]}, not {slotfiles.STORE_NAMES[kind]}: "
                              f"use --target {use}{path}")
        if kind == "arena":
            files = slotfiles.load_slot_files(path.with_name("shm_broadcast.py"), path, real=slotfiles.torch_roots())
        else:
            files = slotfiles.load_slot_files(path)
        return SlotTarget(full, kind, "file", files, path)
    raise TargetError(f"unknown {kind} target {spec!r}: use {kind}:impl, {kind}:vllm==X.Y.Z, "
                      + ("" if kind == "arena" else "queue:sglang==X.Y.Z, ")
                      + f"{kind}:file:PATH or {kind}:impl-file:PATH"
                      + (" (a shm_tensor_arena.py with shm_broadcast.py beside it)" if kind == "arena" else
                         " (a shm_broadcast.py)"))


def _load_impl_file(path: Path, kind: str) -> Any:
    """A module file defining impl-shaped classes (``SlotArena`` or
    ``SlotQueue``: a seeded fault of :mod:`shmspec.conformance.mutants.slots`)."""
    import importlib.util
    import uuid

    if not path.is_file():
        raise TargetError(f"target file not found: {path}")
    spec = importlib.util.spec_from_file_location(f"shmspec_slot_target_{uuid.uuid4().hex[:8]}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any import failure is the target's
        raise TargetError(f"{path} failed to import: {type(exc).__name__}: {exc}") from None
    cls = "SlotArena" if kind == "arena" else "SlotQueue"
    mq = getattr(module, "MessageQueue", None)
    if not isinstance(getattr(module, cls, None), type) and isinstance(mq, type):
        # a fault of the MessageQueue surface: its ring (or arena) for the lockstep
        setattr(module, cls, mq.arena_class if kind == "arena" else mq.ring_class)
    if not isinstance(getattr(module, cls, None), type):
        raise TargetError(f"{path} does not define {cls} or MessageQueue")
    return module


# ---- drivers ------------------------------------------------------------------------

class _Driver:
    """What both drivers share: the geometry, the metadata rows read from the
    writer's segment, and closing impl's stores (vLLM's close in ``__del__``)."""

    w: Any
    r: list[Any]

    def __init__(self, target: SlotTarget, readers: int, slots: int, slot_bytes: int):
        self.target, self.readers, self.slots, self.slot_bytes = target, readers, slots, slot_bytes

    def _buf(self) -> memoryview:
        raise NotImplementedError

    def rows(self) -> list[bytes]:
        """Every slot's flags ``[written, done_0, ...]`` as the segment holds them."""
        m = self.slot_bytes * self.slots
        buf, size = self._buf(), 1 + self.readers
        return [bytes(buf[m + i * size:m + (i + 1) * size]) for i in range(self.slots)]

    def close(self) -> None:
        if self.target.origin == "impl":
            for s in [*self.r, self.w]:
                s.close()
        else:  # vLLM's __del__ closes (and the writer unlinks); not when views are still exported
            for s in [*self.r, self.w]:
                _close_foreign(s)
        self.r, self.w = [], None


class ArenaDriver(_Driver):
    """One arena: a writer and ``readers`` readers (this process)."""

    def __init__(self, target: SlotTarget, readers: int, slots: int, slot_bytes: int):
        super().__init__(target, readers, slots, slot_bytes)
        if target.origin == "impl":
            SlotArena = _impl(target).SlotArena

            self.w = SlotArena(readers, slot_bytes, slots)
            self.r = [SlotArena(readers, slot_bytes, slots, name=self.w.name, reader_rank=k) for k in range(readers)]
        else:
            cls = target.files.arena.ShmTensorArena
            self.w = cls(readers, slot_bytes, slots)
            self.r = [cls(*self.w.handle(), reader_rank=k) for k in range(readers)]

    def write(self, data: bytes) -> tuple[int | None, Any]:
        """``(slot or None, the stub its readers get)``."""
        if self.target.origin == "impl":
            stub = self.w.write(data)
            return (None, None) if stub is None else (stub.slot, stub)
        idx = self.w.write_tensor(slotfiles.uint8_tensor(data, self.target.files))
        return idx, (None if idx is None else (idx, len(data)))

    def view(self, r: int, stub: Any) -> Any:
        """Reader ``r``'s zero-copy view of a stub's message."""
        if self.target.origin == "impl":
            return self.r[r].view(stub)
        idx, n = stub
        return self.r[r].get_tensor(idx, n, slotfiles.uint8(self.target.files), (n,))

    def derive(self, view: Any) -> Any:
        """A second view sharing the first one's memory (a slice or ``.view``)."""
        return view[:] if isinstance(view, memoryview) else view.view((view.numel(),))

    @staticmethod
    def read(view: Any) -> bytes:
        return bytes(view) if isinstance(view, memoryview) else slotfiles.tensor_bytes(view)

    def flush(self, r: int) -> None:
        self.r[r].flush_releases()

    def _buf(self) -> memoryview:
        return self.w.buf if self.target.origin == "impl" else self.w.shared_memory.buf

    def slot_data(self, i: int, n: int) -> bytes:
        return bytes(self._buf()[i * self.slot_bytes:i * self.slot_bytes + n])


class QueueDriver(_Driver):
    """One queue ring: a writer and ``readers`` readers (this process); a
    block (``acquire_write``/``acquire_read``) stays open between calls."""

    def __init__(self, target: SlotTarget, readers: int, slots: int, slot_bytes: int):
        super().__init__(target, readers, slots, slot_bytes)
        self.open: dict[Any, tuple[Any, memoryview]] = {}  # "w" or reader -> (context manager, its buffer)
        if target.origin == "impl":
            SlotQueue = _impl(target).SlotQueue

            self.w = SlotQueue(readers, slot_bytes, slots)
            self.r = [SlotQueue(readers, slot_bytes, slots, name=self.w.name, reader_rank=k) for k in range(readers)]
        else:
            self.w = slotfiles.queue_writer(target.files, readers, slot_bytes, slots)
            self.r = [slotfiles.queue_reader(target.files, self.w, k) for k in range(readers)]
        # vLLM 0.5.1 - 0.6.4: no timeout argument; their first sleep (or yield) raises WouldWait instead
        self.bounded = target.origin == "impl" or slotfiles.has_timeouts(target.files)
        self.unbounded_waits = 0

    def begin(self, who: Any) -> bool:
        """Enter ``acquire_write`` (``who == "w"``) or reader ``who``'s
        ``acquire_read`` with ``timeout=0``; False: it timed out."""
        store = self.w if who == "w" else self.r[who]
        args = {"timeout": 0} if self.bounded else {}
        cm = store.acquire_write(**args) if who == "w" else store.acquire_read(**args)
        try:
            buf = cm.__enter__()
        except TimeoutError as exc:
            if isinstance(exc, slotfiles.WouldWait):
                self.unbounded_waits += 1
            return False
        self.open[who] = (cm, buf)
        return True

    def fill(self, data: bytes) -> None:
        buf = self.open["w"][1]
        buf[0:4] = len(data).to_bytes(4, "little")
        buf[4:4 + len(data)] = data

    def data(self, r: int) -> bytes:
        buf = self.open[r][1]
        n = int.from_bytes(bytes(buf[0:4]), "little")
        return bytes(buf[4:4 + min(n, self.slot_bytes - 4)])

    def end(self, who: Any, raised: bool = False) -> None:
        """Leave the block normally, or by a caller's exception (``raised``)."""
        cm, _ = self.open.pop(who)
        if not raised:
            cm.__exit__(None, None, None)
            return
        exc = _CallerError("the caller raised inside the block")
        try:
            cm.__exit__(type(exc), exc, None)
        except _CallerError:
            pass

    def _buf(self) -> memoryview:
        return self.w.buf if self.target.origin == "impl" else self.w.buffer.shared_memory.buf

    def close(self) -> None:
        for who in list(self.open):
            try:
                self.end(who, raised=True)
            except Exception:  # noqa: BLE001 - closing a half-run session
                pass
        super().close()


def _close_foreign(store: Any) -> None:
    """Close a vLLM (or fork) store's segment before its ``__del__`` does.

    With a zero-copy view still exported, vLLM's ``__del__`` swallows the
    ``BufferError`` and skips the writer's unlink (the segment outlives the
    run: resource_tracker warnings at exit), and the segment's own
    ``__del__`` raises later inside some garbage collection.  Here such a
    segment is unlinked by its creator and held until its views are gone
    (:func:`shmspec.impl.segment.defer_close`)."""
    from shmspec.impl import segment

    shm = getattr(store, "shared_memory", None) or getattr(getattr(store, "buffer", None), "shared_memory", None)
    if shm is None:
        return
    segment.retry_unclosed()
    try:
        shm.close()
    except BufferError:
        segment.defer_close(shm)
        if getattr(store, "is_creator", False) or getattr(getattr(store, "buffer", None), "is_creator", False):
            with contextlib.suppress(FileNotFoundError):
                shm.unlink()


def _impl(target: SlotTarget) -> Any:
    if target.files is not None:  # impl-file: a module of impl-shaped classes
        return target.files
    from shmspec.impl import slots

    return slots


class _CallerError(Exception):
    """The exception a session raises inside a block (a caller's failure)."""


__all__ = ["ArenaDriver", "KINDS", "SGLANG_BROADCAST_FILE", "NoStoreFile", "QueueDriver", "SlotTarget", "fetch_files", "load"]
