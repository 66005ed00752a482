"""The queue as it is deployed (docs/slots.md#the-deployed-construction):
vLLM's own ``MessageQueue`` built by its own constructors, the writer in
one process and every reader in a process of its own, the zmq sockets live,
every message through ``enqueue``/``dequeue``.

The construction (:class:`Deployment`):

* the writer process builds ``MessageQueue(n_reader, n_local_reader,
  max_chunk_bytes=, max_chunks=, connect_ip="127.0.0.1")`` as vLLM's engine
  does and hands its ``export_handle()`` to the controller;
* each local reader (``r1``..) and remote reader (``remote1``..) is a
  forked or spawned process that attaches with
  ``MessageQueue.create_from_handle(handle, rank)`` as a worker does (local
  readers spin on the shared flags; remote ones subscribe over tcp);
* all of them run ``wait_until_ready()``, then the writer enqueues a plan of
  messages a user sends: small objects, pickles in band, messages larger
  than a chunk (the overflow path over the local socket), arrays of 1 MiB
  and more pickled out of band (:class:`OutOfBand`: numpy's protocol-5
  reduction, rebuilt zero-copy over the buffer the store hands back), and
  out-of-band arrays larger than a chunk (the first message through
  ``broadcast_object`` on both sides, the rest through
  ``enqueue``/``dequeue``).  Once ``enqueue`` returns, the
  writer's caller reuses the message's buffers (``Deployment.reuse``), as
  an engine's scheduler reuses a tensor's memory for its next step;
* an arena target runs the same queue with its tensor arena on
  (``enable_shm_tensor_arena=True``, ``Deployment.arena``): the plan's
  tensors of 8 MiB and more go to arena slots (or the pickle path when
  none is free), smaller ones out of band, one message carries two, one is
  over the slot size, and one is followed by an object that fails to
  pickle; each reader holds each tensor it receives for some later
  messages (half of them as a derived view only) and drops them out of
  order, as chunked prefill keeps ``prompt_embeds``.

What is judged, from the histories the processes report (the history
checker, :func:`judge`):

* FIFO: every reader receives exactly the sequence the writer enqueued
  (no loss, no duplicate, no reorder);
* NRR: every message's body has the digest the writer put in it, and every
  out-of-band array a reader keeps still has it after the run, when later
  writes have reused its chunk many times over; a dequeue that raises
  (a torn pickle) is NRR too;
* PROG: a wait that times out while every reader it waits on is alive;
  with the arena, a tensor the writer sent down the pickle path although a
  slot was free (read from the flags before the enqueue: only the writer
  claims, so a free slot stays free), and a slot still held at the end,
  once every reader dropped its tensors and flushed its releases;
* NRR, with the arena: a held tensor whose bytes changed before it was
  dropped (its slot rewritten under a live view);
* LIVE: every process reports within its deadline.

Faults (:data:`FAULTS`): a local reader SIGKILLed while it holds a chunk
(inside ``dequeue``, while its message is unpickled), one SIGKILLed between
two reads, and the writer SIGKILLed in the middle of a write (after its
claim, with half a message copied).  The survivors must receive exactly the
messages completed before the fault, in order, and no torn one; every wait
ends with the queue's timeout, and the writer's names (from the flags) the
dead reader and nobody else; the writer never rewrites a chunk the dead
reader had not released.  And one stall (:data:`STALL`): the writer pauses
between an overflow chunk and its frames for longer than the readers'
waits, which end and are called again, as a caller polling with a timeout
does; every reader must still receive every message once, in order.

Three ways to run it (the campaigns of :mod:`.campaigns`):

* under a schedule (``Deployment.schedule``, :func:`_schedule`): every flag
  load and store of every process is a yield point, and the controller
  lets one process at a time run to its next one; the same schedule gives
  the same interleaving, so a finding replays exactly;
* free-running (the OS interleaves; readers take slow steps drawn from
  the seed, so the writer often waits on a full ring; a reader's wait for
  a message ends with the queue's timeout, or :data:`FREE_IDLE_POLLS` of
  its slices after the writer is done: a lost message is PROG);
* with a fault (:data:`FAULTS`).

A free-running load may interleave differently when run again; the fault
scenarios end the same way each time.  The processes' clocks are
``time.monotonic`` (one clock for every process on the machine), so the
trace's steps are ordered by when they started.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import signal
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ...lockstep.session import Step
from ...targets import slotfiles

MiB = 1 << 20
KILLS = ("reader-killed-holding", "reader-killed-between", "writer-killed-mid-write")
"""The process faults of the deployed construction: a process SIGKILLed (see the module docstring)."""
STALL = "writer-stalled-before-send"
"""The writer paused for :data:`STALL_S` between publishing an overflow
chunk and sending its frames (preempted, or in a GC pause): longer than a
reader's dequeue wait, so the reader's wait ends between the two."""
FAULTS = (*KILLS, STALL)
"""The faults of the deployed construction (see the module docstring)."""
KINDS = ("small", "inband", "overflow", "oob", "oob-overflow")
"""Message kinds of a plan (see :func:`plan`)."""
REPORT_TIMEOUT_S = 60.0
"""How long the controller waits for any one process's report (seconds)."""
POLL_S = 0.25
"""A reader's dequeue timeout between checks of the controller's word (seconds)."""
SLOW_STEP_P = 0.3
SLOW_STEPS_S = (0.0005, 0.002, 0.005)
"""After a message, a reader takes a slow step (sleeps one of these, in
seconds) with this chance, drawn from the seed: as a worker runs a model
step between two ``dequeue`` calls, so the writer often finds the ring
full and waits on the slowest reader's flag."""
IDLE_POLLS = 4
"""Timeouts in a row, once the writer has stopped, after which a reader stops waiting."""
FREE_IDLE_POLLS = 8
"""The same for the free-running load (2 s: a remote reader's last message
may still be on its socket when the writer is done; a message lost costs
this, not the whole :attr:`Deployment.timeout`)."""
STALL_S = 4 * POLL_S
"""How long the :data:`STALL` fault pauses the writer once every local
reader has released the overflow chunk (seconds): four of a reader's waits."""


@dataclass(frozen=True)
class Deployment:
    """One deployed construction and load.  Sizes in bytes, times in seconds.

    ``local``/``remote``: reader processes over the ring / over tcp;
    ``start_method``: ``fork`` or ``spawn``; ``messages``: how many the
    writer enqueues; ``chunk_bytes``/``chunks``: the ring (the default
    chunk holds one out-of-band array of 1-2 MiB; vLLM's default is 24 MiB
    x 10); ``timeout``: each ``enqueue``/``dequeue`` wait of the writer and
    the readers; ``fault``: one of :data:`FAULTS` or ``""``, at message
    ``at`` by local reader ``victim`` (0-based)."""

    local: int = 2
    remote: int = 1
    start_method: str = "fork"
    messages: int = 24
    chunk_bytes: int = 2 * MiB + 256 * 1024
    chunks: int = 4
    seed: int = 0
    timeout: float = 10.0
    fault: str = ""
    at: int = 5
    victim: int = 0
    schedule: tuple[int, ...] | None = None
    """Controlled interleavings (:func:`controlled`): every flag load and
    store of every process is a yield point, and these choices (then round
    robin) pick which process takes the next one.  None: free-running."""
    arena: bool = False
    """The queue with its tensor arena (an arena target: vLLM's
    ``MessageQueue(..., enable_shm_tensor_arena=True)``): tensors of
    :data:`ARENA_MIN` bytes and more travel in arena slots, and readers hold
    them across later messages (:data:`HOLDS`).  vLLM turns the arena off
    when the queue has remote readers; so does impl."""
    reuse: bool = True
    """The writer's caller reuses its buffers once ``enqueue`` returns
    (:func:`_reuse`), as an engine's scheduler does."""
    torch: str = ""
    """Whose tensors the arena's runs use: ``stand-in`` or ``torch X.Y.Z``
    (:func:`~shmspec.conformance.targets.slotfiles.torch_mode`); a label."""
    arena_slots: int = 4
    arena_slot_bytes: int = 12 * MiB
    """The arena's geometry (vLLM's default: 8 slots of 256 MiB; scaled as
    the ring's chunks are, the divert threshold :data:`ARENA_MIN` kept)."""

    @property
    def waits(self) -> float | None:
        """The timeout of each wait: none under a schedule (the schedule's
        step budget bounds a run), else :attr:`timeout`."""
        return None if self.schedule is not None else self.timeout

    @property
    def name(self) -> str:
        """The construction's name, as reports print it (:class:`Construction`'s)."""
        return self.as_construction().name

    def as_construction(self) -> Any:
        from ...core.constructions import Construction

        arena = self.arena and not self.remote  # vLLM (and impl) turn the arena off with remote readers
        return Construction(False, self.start_method, self.local, self.remote, True, self.schedule is not None,
                            arena, self.torch if arena else "")

    def labels(self) -> list[str]:
        return [f"r{i + 1}" for i in range(self.local)] + [f"remote{i + 1}" for i in range(self.remote)]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["schedule"] = list(self.schedule) if self.schedule is not None else None
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Deployment":
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if kw.get("schedule") is not None:
            kw["schedule"] = tuple(kw["schedule"])
        return cls(**kw)

    def construction(self) -> dict[str, Any]:
        """``report.json``'s construction entry for it."""
        return self.as_construction().to_json()


# ---- the messages ------------------------------------------------------------------

class OutOfBand:
    """An array as numpy pickles one: with protocol 5 its bytes leave the
    pickle stream as a ``PickleBuffer``, and the rebuilt array is a view of
    whatever buffer the receiving side hands ``pickle.loads`` (zero copy,
    as ``numpy.frombuffer``).  So if a store hands back a view of its
    shared memory, the array a reader keeps aliases it."""

    def __init__(self, data: Any):
        self.mv = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")

    def __reduce_ex__(self, protocol: int):
        if protocol >= 5:
            return _rebuild_oob, (pickle.PickleBuffer(self.mv),)
        return _rebuild_oob, (bytes(self.mv),)

    def __len__(self) -> int:
        return self.mv.nbytes


def _rebuild_oob(buf: Any) -> OutOfBand:
    return OutOfBand(memoryview(buf))


_ME = ""
"""The label of the reader this process is (set in each reader process)."""


class Tripwire:
    """Part of a message: unpickling it SIGKILLs reader ``label``'s process,
    inside its ``dequeue`` (while it holds the chunk, when the message is in
    one), and is a no-op in every other process."""

    def __init__(self, label: str):
        self.label = label

    def __reduce__(self):
        return _trip, (self.label,)


def _trip(label: str) -> None:
    if _ME == label:
        os.kill(os.getpid(), signal.SIGKILL)
    return None


IN_CHUNK = ("small", "inband", "oob")
"""The kinds a controlled run sends: each lies in its chunk, so no process
blocks on a socket between two yield points."""
ARENA_KINDS = ("small", "tensor", "tensor-oob", "tensor-pair", "tensor-oversize", "tensor-poison")
"""Message kinds of an arena plan: a tensor the arena takes (from
:data:`ARENA_MIN` bytes up to its slot size; the pickle path when no slot is
free), a tensor under the threshold (out of band, in the chunk), two arena
tensors in one message, one over the slot size (the pickle path, over the
overflow socket), and a tensor followed by an object that fails to pickle
(the enqueue raises after the tensor was copied into the arena; once per
plan, outside faults and schedules)."""
ARENA_IN_CHUNK = ("small", "tensor", "tensor-oob")
"""The arena kinds a controlled run sends (its chunk holds a tensor that falls back)."""
ARENA_MIN = 8 * MiB
"""vLLM 0.33.0's ``_ARENA_MIN_BYTES``: smaller tensors take the out-of-band path."""
HOLDS = (0, 0, 1, 2, 4)
"""How many later messages a reader holds a tensor it received (drawn from
the seed per tensor): chunked prefill's ``prompt_embeds`` are kept across
steps (vLLM's arena notes), so slots are released out of order.  Half the
held tensors are kept as a derived view only (``reshape(-1)``, the base
dropped): the release must wait for the last view."""
OVER_SOCKET = frozenset({"overflow", "oob-overflow", "tensor", "tensor-pair", "tensor-oversize"})
"""Kinds that may travel over the overflow socket (a tensor the arena does not take is larger than a chunk)."""


class Unpicklable:
    """A part of a message that fails to pickle (``tensor-poison``)."""

    def __reduce__(self):
        raise pickle.PicklingError("shmspec: this part of the message does not pickle (on purpose)")


def plan(dep: Deployment) -> list[str]:
    """The kind of each message (one of :data:`KINDS`): every kind within
    the first five, then drawn from the seed; the fault's message is small
    (its tripwire then fires inside the chunk).  Under a schedule only the
    :data:`IN_CHUNK` kinds."""
    rnd = random.Random(dep.seed * 7919 + 17)
    if dep.arena:
        first = ARENA_IN_CHUNK if dep.schedule is not None else ARENA_KINDS[:-1] if dep.fault else ARENA_KINDS
        pool = tuple(k for k in first if k != "tensor-poison")
    else:
        first = pool = IN_CHUNK if dep.schedule is not None else KINDS
    kinds = [first[i % len(first)] if i < len(first) else rnd.choice(pool) for i in range(dep.messages)]
    if dep.fault == STALL and dep.at < dep.messages:  # over the socket, then one in its chunk
        kinds[dep.at] = "tensor-oversize" if dep.arena else "overflow"
        kinds[dep.at + 1:dep.at + 2] = ["small"] * (dep.at + 1 < dep.messages)
    elif dep.fault and dep.at < dep.messages:
        kinds[dep.at] = "small"
    return kinds


def _body(dep: Deployment, seq: int, kind: str, tensor: Any = None) -> Any:
    rnd = random.Random((dep.seed << 20) ^ (seq * 2654435761))
    if kind == "small":
        return {"seq": seq, "req": f"req-{seq}", "tokens": [rnd.randrange(50000) for _ in range(1 + seq % 7)]}
    if kind.startswith("tensor"):
        def one(size: int) -> Any:
            block = rnd.randbytes(64 * 1024)
            return tensor(bytearray((block * (size // len(block) + 1))[:size]))

        def arena_sized() -> int:
            return ARENA_MIN + rnd.randrange(max(1, dep.arena_slot_bytes - ARENA_MIN - 64 * 1024))

        if kind == "tensor-oob":
            return one(MiB + rnd.randrange(MiB))
        if kind == "tensor-pair":
            return [one(arena_sized()), one(arena_sized())]
        if kind == "tensor-oversize":
            return one(dep.arena_slot_bytes + 64 * 1024)
        if kind == "tensor-poison":
            return [one(arena_sized()), Unpicklable()]
        return one(arena_sized())
    size = {"inband": dep.chunk_bytes // 4, "overflow": dep.chunk_bytes + 4096,
            "oob": MiB + rnd.randrange(max(1, dep.chunk_bytes - MiB - 128 * 1024)),
            "oob-overflow": dep.chunk_bytes + 64 * 1024}[kind]
    block = rnd.randbytes(64 * 1024)  # a block of its own per message, tiled: fast, and any two messages differ
    data = (block * (size // len(block) + 1))[:size]
    return OutOfBand(bytearray(data)) if kind.startswith("oob") else data


def is_tensor(x: Any) -> bool:
    """A tensor (the stand-in's or torch's), by its surface."""
    return hasattr(x, "element_size") and hasattr(x, "numel")


def digest(body: Any) -> str:
    """The body's digest (blake2b, 16 bytes, hex)."""
    h = hashlib.blake2b(digest_size=16)
    for part in (body if isinstance(body, list) and any(is_tensor(x) for x in body) else [body]):
        if isinstance(part, OutOfBand):
            h.update(part.mv)
        elif isinstance(part, (bytes, bytearray, memoryview)):
            h.update(part)
        elif is_tensor(part):
            h.update(slotfiles.tensor_buffer(part))
        else:
            h.update(repr(part).encode())
    return h.hexdigest()


def tensors_of(body: Any) -> list[Any]:
    """The tensors in a message's body."""
    if is_tensor(body):
        return [body]
    return [x for x in body if is_tensor(x)] if isinstance(body, list) else []


def message(dep: Deployment, seq: int, kind: str, tensor: Any = None) -> tuple:
    """Message ``seq``: ``("shmspec", seq, kind, body, digest, tripwire)``
    (``tensor``: the target's ``frombuffer``, for the arena's kinds)."""
    body = _body(dep, seq, kind, tensor)
    trip = Tripwire(f"r{dep.victim + 1}") if dep.fault == "reader-killed-holding" and seq == dep.at else None
    return ("shmspec", seq, kind, body, digest(body), trip)


def _size(body: Any) -> int:
    tensors = tensors_of(body)
    if tensors:
        return sum(t.numel() * t.element_size() for t in tensors)
    return len(body) if isinstance(body, (bytes, bytearray, OutOfBand)) else len(repr(body))


# ---- the store's API, per target ---------------------------------------------------

def queue_api(target: Any) -> Any:
    """The store's API for the deployed construction, per target: its
    ``MessageQueue`` and ``Handle``; ``row(mq, idx=None)``: the flags of
    chunk ``idx`` (default: the writer's current chunk); ``instrument()``: every flag access a yield point;
    ``install()``: the loaded files in this process's ``sys.modules``
    (a writer or reader process only); for the arena, ``tensor(bytearray)``
    (a uint8 tensor over it), ``scale_arena(dep)`` (the writer's arena
    geometry), ``arena_rows(mq)`` (every arena slot's flags) and
    ``arena_fallbacks(mq)`` (the writer's count of tensors it found no
    free slot for).

    vLLM's (or SGLang's) files load with real pyzmq (torch and vllm.*
    stand in as for the lockstep); impl's is :mod:`shmspec.impl.broadcast`
    (an ``impl-file:`` module: its ``MessageQueue``, else impl's over its
    ``SlotQueue`` or ``SlotArena``)."""
    cached = getattr(target, "_deployed_api", None)
    if cached is not None:
        return cached
    if target.origin == "impl":
        from shmspec.impl import broadcast

        mq = broadcast.MessageQueue
        module = target.files
        if module is not None and isinstance(getattr(module, "MessageQueue", None), type):
            mq = module.MessageQueue
        elif module is not None:
            parts = {"ring_class": module.SlotQueue} if hasattr(module, "SlotQueue") else {}
            parts.update({"arena_class": module.SlotArena} if hasattr(module, "SlotArena") else {})
            mq = type("MessageQueue", (broadcast.MessageQueue,), parts)

        def instrument():
            for cls, name in ((mq.ring_class, str), (mq.arena_class, lambda i: f"a{i}")):
                load, store = cls._flag, cls._set_flag

                def _flag(self, i, j, load=load, name=name):
                    _point("load", name(i), _FLAG_NAMES(j))
                    return load(self, i, j)

                def _set_flag(self, i, j, v, store=store, name=name):
                    store(self, i, j, v)
                    _point("store", name(i), _FLAG_NAMES(j), v)

                cls._flag, cls._set_flag = _flag, _set_flag

        def scale_arena(dep):
            mq.ARENA_SLOTS, mq.ARENA_SLOT_BYTES = dep.arena_slots, dep.arena_slot_bytes

        def arena_rows(q):
            a = q.tensor_arena
            return [a.row(i) for i in range(a.n_slots)]

        def tensor(data):
            if target.kind == "arena" and slotfiles.torch_mode() == "real":
                import torch

                return torch.frombuffer(data, dtype=torch.uint8)
            return slotfiles._frombuffer(data, slotfiles.DTYPES["uint8"])

        api = SimpleNamespace(MessageQueue=mq, Handle=broadcast.Handle, row=lambda q, idx=None: q.buffer.row(q.current_idx if idx is None else idx),
                              instrument=instrument, install=lambda: None, tensor=tensor,
                              scale_arena=scale_arena, arena_rows=arena_rows,
                              arena_fallbacks=lambda q: q.tensor_arena.fallbacks)
    else:
        files = target.files
        arena_path = files.arena_path if target.kind == "arena" else None
        loaded = slotfiles.load_slot_files(files.broadcast_path, arena_path,
                                           real=("zmq",) + (slotfiles.torch_roots() if arena_path else ()))

        def row(q, idx=None):
            with q.buffer.get_metadata(q.current_idx if idx is None else idx) as m:
                return bytes(m)

        def instrument():
            from contextlib import contextmanager

            ring, original = loaded.broadcast.ShmRingBuffer, loaded.broadcast.ShmRingBuffer.get_metadata

            @contextmanager
            def get_metadata(self, idx):
                with original(self, idx) as mv:
                    yield _Flags(mv, idx)

            ring.get_metadata = get_metadata
            # a reader's idle park on the notify socket is the one wait outside the flags: the scheduler
            # interleaves instead (its busy path, sched_yield, is what runs)
            if hasattr(loaded.broadcast, "SpinCondition"):
                loaded.broadcast.SpinCondition.wait = lambda self, timeout_ms=None: None
            if loaded.arena is not None:
                arena, meta = loaded.arena.ShmTensorArena, loaded.arena.ShmTensorArena._meta
                arena._meta = lambda self, idx: _Flags(meta(self, idx), f"a{idx}")

        def scale_arena(dep):
            import inspect

            init = loaded.arena.ShmTensorArena.__init__
            params = [q for q in inspect.signature(init).parameters.values() if q.default is not q.empty]
            given = {"slot_bytes": dep.arena_slot_bytes, "n_slots": dep.arena_slots}
            init.__defaults__ = tuple(given.get(q.name, q.default) for q in params)

        def arena_rows(q):
            a = q.tensor_arena
            buf, size = a.shared_memory.buf, a.metadata_size
            return [bytes(buf[a.metadata_offset + i * size:a.metadata_offset + (i + 1) * size])
                    for i in range(a.n_slots)]

        torch = getattr(loaded.broadcast, "torch", None)
        api = SimpleNamespace(MessageQueue=loaded.broadcast.MessageQueue, Handle=loaded.broadcast.Handle, row=row,
                              instrument=instrument, ring=loaded.broadcast.ShmRingBuffer,
                              install=lambda: slotfiles.install(loaded),
                              tensor=(lambda data: torch.frombuffer(data, dtype=torch.uint8)) if torch else None,
                              scale_arena=scale_arena, arena_rows=arena_rows,
                              arena_fallbacks=lambda q: q.tensor_arena._fallbacks)
    import inspect

    api.timeouts = "timeout" in inspect.signature(api.MessageQueue.enqueue).parameters
    object.__setattr__(target, "_deployed_api", api)
    return api


# ---- yield points (controlled interleavings) ---------------------------------------

_GATE = None
"""This process's connection to the scheduler once armed (None: free-running)."""


def _FLAG_NAMES(j: Any) -> str:
    if isinstance(j, slice):
        return "done_*" if j.start == 1 else f"{j.start}:{j.stop}"
    return "written" if j == 0 else f"done_{j - 1}"


def _point(op: str, slot: int, flag: str, value: Any = None) -> None:
    """A yield point: report the flag access and wait for the scheduler's
    go.  Before a load (its value is read once the process goes on), after
    a store (the store is visible when the others run)."""
    gate = _GATE
    if gate is None:
        return
    gate.send((op, slot, flag, value))
    if not gate.recv():
        raise SchedulerStop(f"stopped by the scheduler at a {op} of {flag}[{slot}]")


class SchedulerStop(BaseException):
    """Raised at a yield point when the scheduler ends the run (its step
    budget is spent): the process reports what it did and exits."""


class _Flags:
    """A slot's metadata row whose every access is a yield point (vLLM's
    ``ShmRingBuffer.get_metadata`` yields it under a schedule)."""

    def __init__(self, mv: memoryview, slot: int):
        self.mv, self.slot = mv, slot

    def __getitem__(self, k):
        _point("load", self.slot, _FLAG_NAMES(k))
        return self.mv[k]

    def __setitem__(self, k, v):
        self.mv[k] = v
        _point("store", self.slot, _FLAG_NAMES(k), v)

    def __len__(self) -> int:
        return len(self.mv)

    def __enter__(self) -> "_Flags":
        return self

    def __exit__(self, *exc) -> None:
        self.mv.release()


def _arm(api: Any, gate: Any) -> None:
    """Make every flag access a yield point (``gate``: the scheduler's
    pipe); ``_arm(None, None)`` disarms (a process about to close)."""
    global _GATE
    if gate is not None:
        api.instrument()
    _GATE = gate


def _handle_json(handle: Any) -> dict[str, Any]:
    """The writer's handle as plain data (the target's ``Handle`` class lives
    in a module loaded in isolation, so it does not pickle by reference): a
    field holding the ring itself (SGLang's ``buffer``) becomes
    ``{"ring": the arguments it pickles with}``; ``segment`` names the
    ring's segment."""
    out: dict[str, Any] = {}
    for f in fields(handle):
        v = getattr(handle, f.name)
        if hasattr(v, "shared_memory") and hasattr(v, "max_chunks"):  # the ring: rebuilt by name, as it pickles
            v = {"ring": list(v.__reduce__()[1])}
        out[f.name] = v
    ring = out.get("buffer")
    seg = out.get("buffer_handle") or (ring.get("ring") if isinstance(ring, dict) else None)
    out["segment"] = seg[-1] if seg else None
    arena = out.get("tensor_arena_handle")
    out["arena_segment"] = arena[-1] if arena else None
    return out


def _handle_of(api: Any, data: dict[str, Any]) -> Any:
    """The target's ``Handle`` rebuilt from :func:`_handle_json`'s data."""
    names = {f.name for f in fields(api.Handle)}
    kw = {k: v for k, v in data.items() if k in names}
    for k, v in kw.items():
        if isinstance(v, dict) and "ring" in v:
            kw[k] = api.ring(*v["ring"])
        elif isinstance(v, list) and k == "buffer_handle":
            kw[k] = tuple(v)
    return api.Handle(**kw)


# ---- the processes -----------------------------------------------------------------

def _writer(conn, target: Any, dep: Deployment, log: str | None = None, gate: Any = None) -> None:
    """The writer process: build, hand over the handle, enqueue the plan."""
    _to_log(log)
    _untracked()
    try:
        api = queue_api(target)
        api.install()
        extra = {}
        if dep.arena:
            api.scale_arena(dep)
            extra["enable_shm_tensor_arena"] = True
        holder = [api.MessageQueue(dep.local + dep.remote, dep.local, max_chunk_bytes=dep.chunk_bytes,
                                   max_chunks=dep.chunks, connect_ip="127.0.0.1", **extra)]
        mq = holder[0]
        arena = getattr(mq, "tensor_arena", None) if dep.arena else None
        conn.send(("handle", _handle_json(mq.export_handle())))
        mq.wait_until_ready()
        _arm(api, gate)
        conn.send(("ready", time.monotonic()))
        events = _Stream(conn)
        for seq, kind in enumerate(plan(dep)):
            msg = message(dep, seq, kind, api.tensor)
            qualifying = sum(1 for t in tensors_of(msg[3])
                             if ARENA_MIN <= _size(t) <= dep.arena_slot_bytes) if arena is not None else 0
            if qualifying:  # before the enqueue: a slot free now stays free until the writer claims it
                free_before = [i for i, r in enumerate(api.arena_rows(mq)) if not r[0] or all(r[1:])]
                fallbacks = api.arena_fallbacks(mq)
            if dep.fault == "writer-killed-mid-write" and seq == dep.at:
                with mq.acquire_write(**_kw(api, dep.timeout)) as buf:  # claimed; half a message copied; killed
                    half = os.urandom(min(4096, len(buf) // 2))
                    buf[0:len(half)] = half
                    conn.send(("dying", seq, time.monotonic()))
                    os.kill(os.getpid(), signal.SIGKILL)
            if dep.fault == STALL and seq == dep.at:
                mq.local_socket = _Stalled(mq, api, dep)
            while True:
                t0 = time.monotonic()
                conn.send(("begin", seq, t0))
                try:
                    if seq == 0:  # the first message as a collective broadcast (no timeout: nothing is full yet)
                        mq.broadcast_object(msg)
                    else:
                        mq.enqueue(msg, **_kw(api, dep.waits))
                except TimeoutError as exc:
                    row = list(api.row(mq))
                    missing = [r for r in range(dep.local) if row[0] and not row[1 + r]]
                    conn.send(("waiting", seq, missing))
                    if conn.recv() == "retry":  # a live reader is only slow: wait again
                        continue
                    events.append(("timeout", seq, kind, t0, time.monotonic(), str(exc) or "TimeoutError", row))
                    break
                except Exception as exc:  # noqa: BLE001 - reported as the writer's error
                    what = "refused" if kind == "tensor-poison" else "error"  # its pickling fails: expected
                    events.append((what, seq, kind, t0, time.monotonic(), f"{type(exc).__name__}: {exc}"))
                    break
                except SchedulerStop as exc:
                    events.append(("stopped", seq, kind, t0, time.monotonic(), str(exc)))
                    break
                events.append(("sent", seq, kind, t0, time.monotonic(), msg[4], _size(msg[3])))
                if dep.reuse:
                    _reuse(msg[3])
                break
            if qualifying and events[-1][0] in ("sent", "refused"):
                events.append(("arena", seq, kind, free_before, qualifying, api.arena_fallbacks(mq) - fallbacks))
            msg = None
            if events[-1][0] not in ("sent", "refused", "arena"):
                break
        _arm(None, None)
        conn.send(("done",))
        conn.recv()  # stay up (sockets open) until every reader has reported
        if dep.arena:  # every slot's flags once every reader has dropped its tensors and flushed (None: no arena,
            # as with remote readers; the controller waits for this answer either way)
            conn.send(("arena-final", [list(r) for r in api.arena_rows(mq)] if arena is not None else None))
        arena = None
        del mq
        _close(holder)
    except BaseException as exc:  # noqa: BLE001 - reported to the controller
        _failed(conn, exc)
    os._exit(0)


class _Stalled:
    """In place of a writer's local socket: its next send waits until every
    local reader has released the chunk just published (each is then in its
    wait for the frames), sleeps :data:`STALL_S`, puts the socket back and
    sends (the send after the overflow chunk's publish, in vLLM's
    ``enqueue`` and impl's alike)."""

    def __init__(self, mq: Any, api: Any, dep: Deployment):
        self._mq, self._sock, self._api, self._dep = mq, mq.local_socket, api, dep

    def __getattr__(self, name: str) -> Any:
        if name not in ("send", "send_multipart"):
            return getattr(self._sock, name)

        def send(*args: Any, **kw: Any) -> Any:
            mq, dep = self._mq, self._dep
            idx, until = (mq.current_idx - 1) % dep.chunks, time.monotonic() + REPORT_TIMEOUT_S / 2
            while not all(self._api.row(mq, idx)[1:1 + dep.local]) and time.monotonic() < until:
                time.sleep(0.001)
            time.sleep(STALL_S)
            mq.local_socket = self._sock
            return getattr(self._sock, name)(*args, **kw)
        return send


def _reuse(body: Any) -> None:
    """The caller reuses its buffers once ``enqueue`` has returned (as an
    engine's scheduler reuses a tensor's memory for the next step): every
    out-of-band array and tensor of the message is overwritten.  A store
    that still reads them afterwards (a zero-copy send in flight on a
    socket) delivers the new bytes; the readers' digests show it."""
    for part in tensors_of(body) or [body]:
        if isinstance(part, OutOfBand) and not part.mv.readonly:
            part.mv[:] = bytes(part.mv.nbytes)
        elif is_tensor(part) and hasattr(part, "fill_"):
            part.fill_(0)


class _Stream(list):
    """A process's events, each sent to the controller as it happens (so a
    process that blocks for ever, or is killed, still leaves its history)."""

    def __init__(self, conn: Any):
        super().__init__()
        self.conn = conn

    def append(self, e: tuple) -> None:
        super().append(e)
        self.conn.send(("event", e))


def _kw(api: Any, timeout: float | None) -> dict[str, Any]:
    """The timeout argument, for a queue whose calls take one (vLLM >= 0.6.5,
    impl); a queue without (SGLang's, vLLM's before 0.6.5) waits for ever."""
    return {"timeout": timeout} if api.timeouts else {}


def _failed(conn: Any, exc: BaseException) -> None:
    """Tell the controller why this process could not go on (best effort:
    the pipe may be gone)."""
    try:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
    except Exception:  # noqa: BLE001
        pass


def _close(holder: list[Any]) -> None:
    """Close the queue in ``holder`` (its only reference) as its owner
    would: impl's ``close()``; vLLM's by collection (its finalizer closes
    the sockets, the ring's ``__del__`` the segment, which the writer
    unlinks)."""
    import gc

    mq = holder.pop()
    if hasattr(mq, "close"):
        mq.close()
    del mq
    gc.collect()


def _untracked() -> None:
    """No resource tracker learns of this process's segments: a tracker
    would unlink them when the process is killed and print warnings at the
    end of the run.  The writer unlinks its ring when it closes; after a
    kill the controller does (:func:`_clean_after_writer`)."""
    from multiprocessing import resource_tracker

    resource_tracker.register = resource_tracker.unregister = lambda name, rtype: None


def _to_log(log: str | None) -> None:
    """A child's stderr (and that of any helper it starts, such as a
    resource tracker) goes to the run's log, never to the console."""
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 2)
        os.close(fd)


def _reader(conn, target: Any, dep: Deployment, handle: dict[str, Any], rank: int, label: str,
            log: str | None = None, gate: Any = None) -> None:
    """A reader process: attach, dequeue until the controller's count, keep
    every out-of-band array and check it again at the end."""
    global _ME
    _ME = label
    _to_log(log)
    _untracked()
    try:
        api = queue_api(target)
        api.install()
        holder = [api.MessageQueue.create_from_handle(_handle_of(api, handle), rank)]
        mq = holder[0]
        mq.wait_until_ready()
        _arm(api, gate)
        events = _Stream(conn)
        kept: list[tuple[int, Any, str]] = []
        held: list[tuple[int, int, Any, str]] = []  # the tensors held: (drop after read n, seq, tensor, digest)
        total = sum(k != "tensor-poison" for k in plan(dep)) if not dep.fault else None  # a poisoned one never comes
        deadline = time.monotonic() + REPORT_TIMEOUT_S
        idle = 0  # timeouts in a row once the count is known
        pace = random.Random(f"{dep.seed}/{label}")
        victim = label == f"r{dep.victim + 1}" and dep.fault == "reader-killed-between"
        reads = 0  # dequeue outcomes in ``events`` (the others are drops)
        # the free load waits in POLL_S slices, up to dep.timeout per message, and stops
        # FREE_IDLE_POLLS slices after the writer is done (a lost message costs 2 s, not the timeout)
        free = not dep.fault and dep.schedule is None and api.timeouts
        writer_done, wait_t0 = False, None

        def drop(due: int | None) -> None:  # check a held tensor again, then let it go (its slot's release)
            for item in [h for h in held if due is None or h[0] <= due]:
                held.remove(item)
                _, seq_, t, want_ = item
                events.append(("drop", seq_, time.monotonic(), digest(t) == want_))
                del t, item

        while total is None or reads < total:
            if victim and reads == dep.at:
                os.kill(os.getpid(), signal.SIGKILL)
            drop(reads)
            t0 = time.monotonic()
            try:
                if reads == 0:  # the writer's first message is a broadcast_object: so is this side's
                    obj = mq.broadcast_object()
                else:
                    obj = mq.dequeue(**_kw(api, POLL_S if dep.fault or free else dep.waits))
            except SchedulerStop as exc:
                events.append(("stopped", reads, t0, time.monotonic(), str(exc)))
                break
            except TimeoutError:
                if free:  # one slice of the wait: the wait goes on until its timeout or the writer is done
                    wait_t0 = t0 if wait_t0 is None else wait_t0
                    if not writer_done and conn.poll():
                        conn.recv()
                        writer_done = True
                    idle += writer_done
                    if idle <= FREE_IDLE_POLLS and time.monotonic() - wait_t0 < dep.timeout:
                        continue
                    events.append(("timeout", reads, wait_t0, time.monotonic(), idle > FREE_IDLE_POLLS))
                    break
                if total is None and conn.poll():
                    total = conn.recv()
                idle += total is not None
                # a message in flight on a socket when the writer died never comes: stop after a second
                if dep.fault and time.monotonic() < deadline and idle <= IDLE_POLLS:
                    continue
                events.append(("timeout", reads, t0, time.monotonic()))
                break
            except Exception as exc:  # noqa: BLE001 - a torn message: judged by the controller; read on
                events.append(("error", reads, t0, time.monotonic(), f"{type(exc).__name__}: {exc}"))
                reads += 1
                if free:  # an outcome: the next wait starts afresh
                    idle, wait_t0 = 0, None
                continue
            reads += 1
            if free:
                idle, wait_t0 = 0, None
            try:
                _, seq, kind, body, want, _trip_ = obj
            except (TypeError, ValueError):
                events.append(("error", reads - 1, t0, time.monotonic(), f"not a message: {type(obj).__name__}"))
                continue
            got = digest(body)
            events.append(("recv", seq, kind, t0, time.monotonic(), want, got == want, _size(body)))
            if isinstance(body, OutOfBand):
                kept.append((seq, body, got))  # checked again at the end against what it was when received
            for t in tensors_of(body):  # held for some later messages, half of them as a derived view only
                view = t.reshape(-1) if pace.random() < 0.5 else t
                held.append((reads + pace.choice(HOLDS), seq, view, digest(view)))
                del t, view
            obj = body = None
            if dep.schedule is None and pace.random() < SLOW_STEP_P:  # a worker's step: the ring fills up
                time.sleep(pace.choice(SLOW_STEPS_S))
        drop(None)
        arena = getattr(mq, "tensor_arena", None)
        if arena is not None:  # the releases of the dropped tensors, as the next dequeue makes them
            arena.flush_releases()
        arena = None
        final = None
        last = next((e for e in reversed(events) if e[0] != "drop"), None)
        if dep.fault and last is not None and last[0] == "recv":  # nothing more may come: the wait must end
            t0 = time.monotonic()
            try:
                obj = mq.dequeue(**_kw(api, POLL_S))
                final = ("extra", t0, time.monotonic(), repr(obj[:3]) if isinstance(obj, tuple) else repr(obj)[:80])
            except TimeoutError:
                final = ("timeout", t0, time.monotonic())
            except Exception as exc:  # noqa: BLE001
                final = ("error", t0, time.monotonic(), f"{type(exc).__name__}: {exc}")
        changed = [seq for seq, body, want in kept if digest(body) != want]
        _arm(None, None)
        conn.send(("done", final, changed))
        kept.clear()  # an array aliasing the ring would keep its mapping from closing
        obj = body = None
        del mq
        _close(holder)
    except BaseException as exc:  # noqa: BLE001 - reported to the controller
        _failed(conn, exc)
    os._exit(0)  # no finalizers: an array that aliases a closed segment must not print at exit


# ---- the controller ----------------------------------------------------------------

@dataclass
class Outcome:
    """What one deployed run did: the processes' reports, exit codes, and
    what the controller saw (``notes``: its own events, such as a kill)."""

    dep: Deployment
    writer: list[tuple] = field(default_factory=list)
    readers: dict[str, tuple] = field(default_factory=dict)
    exitcodes: dict[str, int | None] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    notes: list[tuple] = field(default_factory=list)
    writer_died_at: int | None = None
    seconds: float = 0.0
    log: str = ""
    """The processes' stderr while the run lasts (removed after it; see :attr:`stderr`)."""
    handle: dict[str, Any] | None = None
    """The writer's handle (its segment's and sockets' names)."""
    died: dict[str, float] = field(default_factory=dict)
    """When the controller first saw a process dead (``time.monotonic``)."""
    stderr: str = ""
    """The end of the processes' stderr when a process failed (the log itself is removed)."""
    arena_final: list[list[int]] | None = None
    """Every arena slot's flags ``[written, done_0, ...]`` at the end, once
    every reader dropped its tensors and flushed its releases (arena runs)."""


def _recv(conn, seconds: float) -> Any:
    if not conn.poll(seconds):
        return None
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


def run(target: Any, dep: Deployment) -> Outcome:
    """Run ``dep`` on a queue target once; the processes' histories.

    Raises:
        RuntimeError: the writer could not build the queue (the run could
            not take place: an error, never a pass)."""
    import multiprocess as mp

    import tempfile

    out = Outcome(dep)
    ctx = mp.get_context(dep.start_method)
    t_start = time.monotonic()
    fd, log = tempfile.mkstemp(prefix="shmspec-deployed-", suffix=".log")
    os.close(fd)
    out.log = log
    gates: dict[str, Any] = {}  # under a schedule: label -> the controller's end of its yield-point pipe
    gate_ends: dict[str, Any] = {}
    for label in (["writer", *dep.labels()] if dep.schedule is not None else []):
        gates[label], gate_ends[label] = ctx.Pipe()
    wconn, wchild = ctx.Pipe()
    writer = ctx.Process(target=_writer, args=(wchild, target, dep, log, gate_ends.get("writer")), daemon=True)
    writer.start()
    procs: dict[str, Any] = {"writer": writer}
    conns: dict[str, Any] = {}
    handle = None
    try:
        got = _recv(wconn, REPORT_TIMEOUT_S)
        if not got or got[0] != "handle":
            raise RuntimeError(f"the writer did not build the queue: {got[1] if got else 'no report'}")
        handle = out.handle = got[1]
        local_ranks = list(handle["local_reader_ranks"])
        for i, label in enumerate(dep.labels()):
            rank = local_ranks[i] if i < dep.local else dep.local + (i - dep.local)
            c, child = ctx.Pipe()
            p = ctx.Process(target=_reader, args=(child, target, dep, handle, rank, label, log,
                                                  gate_ends.get(label)), daemon=True)
            p.start()
            procs[label], conns[label] = p, c
        got = _recv(wconn, REPORT_TIMEOUT_S)
        if not got or got[0] != "ready":
            raise RuntimeError(f"the queue did not become ready: {got[1] if got else 'no report'}")
        dead: set[int] = set()
        victim = f"r{dep.victim + 1}"
        bounded = queue_api(target).timeouts
        streams: dict[str, list] = {label: [] for label in conns}
        if dep.schedule is not None:
            _schedule(out, dep, {"writer": wconn, **conns}, gates, streams)
        news = time.monotonic()  # the writer's last report
        while dep.schedule is None:  # the writer's reports: events, done, dying, or a wait to judge
            got = _recv(wconn, POLL_S)
            if got is None:
                now = time.monotonic()
                dead_at = out.died.setdefault(victim, now) if (
                    dep.fault.startswith("reader-killed") and not procs[victim].is_alive()) else None
                quiet = not bounded and dead_at is not None and now - max(news, dead_at) > QUIET_S
                if not quiet and now - news <= REPORT_TIMEOUT_S:
                    continue
                begun = [n for n in out.notes if n[0] == "begin"]
                seq = begun[-1][1] if begun else 0
                if quiet:  # blocked on the dead reader's chunk, and the call takes no timeout
                    out.notes.append(("blocked", "writer", seq, now))
                    writer.kill()
                else:
                    out.failures["writer"] = f"no report within {REPORT_TIMEOUT_S:g} s"
                break
            news = time.monotonic()
            if got[0] == "event":
                out.writer.append(got[1])
                continue
            if got[0] == "begin":
                out.notes.append(("begin", got[1], got[2]))
                continue
            if got[0] == "waiting":
                _, seq, missing = got
                if dep.fault.startswith("reader-killed") and not procs[victim].is_alive():
                    dead.add(dep.victim)
                retry = bool(dep.fault) and bool(missing) and not set(missing) <= dead
                out.notes.append(("waiting", seq, list(missing), sorted(dead), time.monotonic()))
                if retry and time.monotonic() - t_start > REPORT_TIMEOUT_S:
                    retry = False
                wconn.send("retry" if retry else "stop")
                continue
            if got[0] == "dying":
                _, seq, t = got
                out.writer_died_at = seq
                writer.join(REPORT_TIMEOUT_S)
                out.notes.append(("writer-killed", seq, t))
                break
            if got[0] == "failed":
                out.failures["writer"] = got[1]
            break
        sent = sum(1 for e in out.writer if e[0] == "sent")
        for label, c in conns.items():
            if bounded and (dep.fault or dep.schedule is None):  # the writer is done: what it sent
                try:
                    c.send(sent)
                except (BrokenPipeError, OSError):
                    pass
        quiet_until = time.monotonic() + QUIET_S  # one window for every reader at once
        for label, c in conns.items():
            if label in out.readers or label in out.failures:  # (reported under the schedule)
                continue
            while True:
                have = sum(1 for e in streams[label] if e[0] == "recv")
                # a reader whose dequeue takes no timeout, with nothing more to come, waits for ever
                quiet = not bounded and bool(dep.fault) and (have >= sent or not writer.is_alive())
                got = _recv(c, max(0.05, quiet_until - time.monotonic()) if quiet else REPORT_TIMEOUT_S)
                if got is None:
                    if quiet and procs[label].is_alive():
                        out.notes.append(("blocked", label, have, time.monotonic()))
                        out.readers[label] = (list(streams[label]), None, [])
                        procs[label].kill()
                    elif procs[label].is_alive():
                        out.failures[label] = f"no report within {REPORT_TIMEOUT_S:g} s"
                    elif streams[label] and label != victim:
                        out.readers[label] = (list(streams[label]), None, [])
                    break
                if got[0] == "event":
                    streams[label].append(got[1])
                    continue
                if got[0] == "failed":
                    out.failures[label] = got[1]
                else:
                    out.readers[label] = (list(streams[label]), *got[1:])
                break
        if writer.is_alive():
            try:
                wconn.send("exit")
            except (BrokenPipeError, OSError):
                pass
            while dep.arena:  # its arena's flags, once every reader is done
                got = _recv(wconn, 10.0)
                if got is None or got[0] == "arena-final":
                    out.arena_final = got[1] if got else None
                    if got is None:  # the writer never answered: the wait cost its whole 10 s
                        out.notes.append(("arena-final-missing", time.monotonic()))
                    break
    finally:
        for p in procs.values():
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        out.exitcodes = {label: p.exitcode for label, p in procs.items()}
        if handle is not None:
            _clean_after_writer(handle, killed=out.exitcodes.get("writer") not in (0, None))
        out.seconds = time.monotonic() - t_start
        if out.failures:  # what the processes said goes into the finding; the file never stays behind
            try:
                out.stderr = Path(log).read_text(errors="replace")[-2000:]
            except OSError:
                pass
        os.unlink(log)
        out.log = ""
    return out


SPIN_LOADS = 6
"""Loads in a row after which a process (spinning on a flag) hands over."""
MAX_STEPS = 3000
"""Yield points a scheduled run may take before it is stopped."""
AFTER_WRITER_STEPS = 400
"""Yield points the readers may take once the writer is done: a reader
still waiting then waits for a message that never comes (it is stopped;
its history shows what it missed)."""
QUIET_S = 3.0
"""After a fault, how long a process whose queue calls take no timeout may
go without news before it counts as waiting for ever (LIVE) and is killed."""
STUCK_S = 30.0
"""How long the scheduler waits for a process to reach its next yield point (seconds)."""


def _schedule(out: Outcome, dep: Deployment, mains: dict[str, Any], gates: dict[str, Any],
              streams: dict[str, list]) -> None:
    """Run the processes one yield point at a time (see :class:`Deployment`'s
    ``schedule``): wait until every process is at a yield point or done,
    pick the next one, let it run to its next point.  The process that ran
    last goes on, except: right after one of its stores (a decision point)
    the next choice ``c`` says whether it goes on (0) or which other waiting
    process takes over (``c`` places further, by label; once the choices
    are used up, it goes on); after :data:`SPIN_LOADS` loads in a row (a
    spin on a flag) the next process takes over, round robin.  Every
    granted point is recorded in ``out.notes`` as ``("point", label, op,
    slot, flag, value, time)``."""
    from multiprocess.connection import wait

    order = list(gates)
    at: dict[str, tuple] = {}
    running = set(order)
    owner = {id(c): label for label, c in gates.items()} | {id(c): label for label, c in mains.items()}
    last, k, d, loads, writer_done = None, 0, 0, 0, None
    while True:
        deadline = time.monotonic() + STUCK_S
        while running:
            ready = wait([gates[x] for x in running] + [mains[x] for x in running],
                         timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                for x in sorted(running):
                    out.failures[x] = f"stuck outside a yield point for {STUCK_S:g} s"
                return
            for c in ready:
                label = owner[id(c)]
                if label not in running:
                    continue
                try:
                    msg = c.recv()
                except (EOFError, OSError):
                    running.discard(label)  # died (a reader killed by its tripwire: none under a schedule)
                    continue
                if c is not gates[label] and msg[0] in ("event", "begin"):  # still running
                    if msg[0] == "event":
                        (out.writer if label == "writer" else streams[label]).append(msg[1])
                    continue
                running.discard(label)
                if c is gates[label]:
                    at[label] = (*msg, time.monotonic())  # a store is visible from here on
                elif msg[0] == "done" and label != "writer":
                    out.readers[label] = (list(streams[label]), *msg[1:])
                elif msg[0] != "done":
                    out.failures[label] = msg[1]
        if not at:
            return
        if writer_done is None and "writer" not in at and "writer" not in running:
            writer_done = k
        if k >= MAX_STEPS or (writer_done is not None and k - writer_done >= AFTER_WRITER_STEPS):
            for x in list(at):  # stop them: each reports what it did
                at.pop(x)
                gates[x].send(0)
                running.add(x)
            k = MAX_STEPS + AFTER_WRITER_STEPS  # nothing more is granted
            continue
        waiting = [x for x in order if x in at]
        after = order.index(last) + 1 if last in order else 0
        nxt = next((x for x in order[after:] + order[:after] if x in at and x != last), waiting[0])
        if last in at and at[last][0] == "store":  # a decision point: go on, or switch right after the store
            c = dep.schedule[d] if d < len(dep.schedule) else 0
            d += 1
            pick = last if c == 0 else waiting[(waiting.index(last) + c) % len(waiting)]
        elif last in at and loads < SPIN_LOADS:
            pick = last
        else:  # a spinning process (or one that is done) hands over, round robin
            pick = nxt
        loads = loads + 1 if pick == last and at[pick][0] == "load" else (at[pick][0] == "load") * 1
        op, slot, flag, value, arrived = at.pop(pick)
        out.notes.append(("point", pick, op, slot, flag, value, arrived if op == "store" else time.monotonic()))
        gates[pick].send(1)
        running.add(pick)
        last, k = pick, k + 1


def _clean_after_writer(handle: dict[str, Any], killed: bool) -> None:
    """Remove what the writer leaves: its ipc socket files (libzmq 4.3
    leaves a bound ipc path's file on close, and vLLM names each one anew),
    and after a kill its segment, so nothing is left behind."""
    import _posixshmem

    seg = handle.get("segment")
    # the arena's segment too, killed or not: a view a reader still exported at exit keeps its creator's
    # close from unlinking it (vLLM's __del__ swallows the BufferError)
    for name in ([seg] if seg and killed else []) + ([handle["arena_segment"]] if handle.get("arena_segment") else []):
        try:  # by name, without attaching: no resource tracker of ours learns of it
            _posixshmem.shm_unlink(f"/{str(name).lstrip('/')}")
        except FileNotFoundError:
            pass
    for key in ("local_subscribe_addr", "local_notify_addr"):
        addr = handle.get(key) or ""
        if addr.startswith("ipc://"):
            try:
                os.unlink(addr[6:])
            except OSError:
                pass


# ---- the history checker -----------------------------------------------------------

def judge(out: Outcome) -> list[Step]:
    """The run's trace, every step carrying the violations found there
    (``Step.violations``: ``(property, message)``), ordered by start time."""
    dep = out.dep
    raw: list[tuple[float, Step]] = []
    sent = [e for e in out.writer if e[0] == "sent"]
    order = [e[1] for e in sent]
    position = {seq: i for i, seq in enumerate(order)}  # a refused message takes no place in the ring
    digests = {e[1]: e[5] for e in sent}
    kinds = {e[1]: e[2] for e in sent}
    victim = f"r{dep.victim + 1}" if dep.fault.startswith("reader-killed") else None

    def step(t: float, process: str, action: str, args: dict, expected: str, observed: str,
             violations: list[tuple[str, str]] | None = None) -> None:
        raw.append((t, Step(0, process, action, args, expected, observed, {}, list(violations or []),
                            cause=f"{action}/{args.get('kind', '')}".rstrip("/"))))

    # the writer
    # with a reader dead at message `at`, the writer can fill the chunks up to its unreleased one: it stops
    # at at + chunks, or one later where the store released the chunk before unpickling (impl's copy-out)
    expected_stop = max_sent = None
    if victim is not None:
        expected_stop = dep.at + dep.chunks
        max_sent = expected_stop - (dep.fault == "reader-killed-between")
    for e in out.writer:
        kind, seq = e[0], e[1]
        if kind == "sent":
            v = []
            if max_sent is not None and seq > max_sent:
                v.append(("NRR", f"the writer rewrote chunk {seq % dep.chunks} with message {seq}, "
                                 f"which {victim} (killed) never released"))
            step(e[4], "writer", "enqueue", {"seq": seq, "kind": e[2]}, f"message {seq} sent",
                 f"sent ({e[6]} bytes, {e[4] - e[3]:.3f} s)", v)
        elif kind == "timeout":
            row, waited = e[6], e[4] - e[3]
            missing = [f"r{r + 1}" for r in range(dep.local) if row[0] and not row[1 + r]]
            v = []
            if victim is None:
                v.append(("PROG", f"the writer's enqueue of message {seq} timed out although every reader is "
                                  f"alive (flags {row})"))
            elif seq < (expected_stop or 0):
                v.append(("PROG", f"the writer waited on chunk {seq % dep.chunks} at message {seq}: "
                                  f"{victim} had released it before it was killed (flags {row})"))
            elif missing != [victim]:
                v.append(("PROG", f"the writer's wait at message {seq} names {missing or 'nobody'} by the flags; "
                                  f"only {victim} is dead"))
            if waited > dep.timeout + 5:
                v.append(("LIVE", f"the writer's enqueue waited {waited:.1f} s, over its {dep.timeout:g} s timeout"))
            step(e[4], "writer", "enqueue", {"seq": seq, "kind": e[2]},
                 f"timeout naming {victim}" if victim else f"message {seq} sent",
                 f"TimeoutError after {waited:.2f} s: {e[5][:120]}; flags {row} (not released: "
                 f"{', '.join(missing) or 'none'})", v)
        elif kind == "stopped":
            step(e[4], "writer", "enqueue", {"seq": seq, "kind": e[2]}, f"message {seq} sent", e[5],
                 [("PROG", f"the writer's enqueue of message {seq} waited until the scheduler stopped the run "
                           f"({MAX_STEPS} yield points)")])
        elif kind == "error":
            step(e[4], "writer", "enqueue", {"seq": seq, "kind": e[2]}, f"message {seq} sent", e[5],
                 [("PROG", f"the writer's enqueue of message {seq} raised {e[5]}")])
        elif kind == "refused":  # a message that does not pickle: the enqueue raises, nothing is sent
            step(e[4], "writer", "enqueue", {"seq": seq, "kind": e[2]}, "the enqueue raises (part of it does not "
                 "pickle)", f"raised {e[5][:120]}")
        elif kind == "arena":
            _, seq, what, free, qualifying, fell_back = e
            v = []
            if fell_back > max(0, qualifying - len(free)):
                v.append(("PROG", f"the writer fell back to the pickle path for {fell_back} of message {seq}'s "
                                  f"{qualifying} arena tensor(s) although arena slots {free} were free (every "
                                  "reader had released them)"))
            step(raw[-1][0] if raw else 0.0, "writer", "arena", {"seq": seq, "kind": what},
                 f"{min(qualifying, len(free))} of {qualifying} tensor(s) in the arena",
                 f"free slots {free}; fell back for {fell_back}", v)
    for n in out.notes:
        if n[0] == "blocked":
            who = n[1]
            what = (f"the writer's enqueue of message {n[2]}" if who == "writer" else
                    f"{who}'s dequeue after message {n[2] - 1}")
            step(n[3], who, "enqueue" if who == "writer" else "dequeue", {},
                 "the wait ends with the queue's timeout", f"still waiting after {QUIET_S:g} s (killed)",
                 [("LIVE", f"{what} waits for ever: the call takes no timeout"
                           + (f" and {victim} is dead" if victim else " and the writer is dead"))])
        if n[0] == "point":
            _, label, op, slot, flag, value, t = n
            step(t, label, op, {"slot": slot, "flag": flag, **({"value": value} if op == "store" else {})},
                 "", f"{flag}[{slot}]" + (f" := {value}" if op == "store" else ""))
        if n[0] == "writer-killed":
            step(n[2], "writer", "killed", {"seq": n[1]}, "SIGKILL after the claim, half of the message copied",
                 f"exit {out.exitcodes.get('writer')}")
    last_words = [ln for ln in out.stderr.splitlines() if ln.strip()][-1:]
    for label, why in out.failures.items():
        prop = "LIVE" if "no report" in why else "PROG"
        said = f" (the processes' stderr ended: {last_words[0][:160]})" if last_words else ""
        step(time.monotonic(), label, "report", {}, "the process reports its history", why + said,
             [(prop, f"{label}: {why}")])

    # the readers
    for label in dep.labels():
        code = out.exitcodes.get(label)
        if label not in out.readers:
            if label == victim and code == -signal.SIGKILL:
                where = "inside its dequeue" if dep.fault == "reader-killed-holding" else "between two reads"
                step(time.monotonic(), label, "killed", {"seq": dep.at}, f"SIGKILL at message {dep.at}, {where}",
                     f"exit {code}")
            elif label not in out.failures:
                step(time.monotonic(), label, "report", {}, "the process reports its history",
                     f"exited {code} without a report", [("LIVE", f"{label} exited {code} without a report")])
            continue
        events, final, changed = out.readers[label]
        for e in events:
            if e[0] == "drop":
                _, seq, t, ok = e
                step(t, label, "drop", {"seq": seq}, "the tensor unchanged while held",
                     "unchanged" if ok else "CHANGED",
                     [] if ok else [("NRR", f"{label}'s tensor of message {seq} changed while it held it: the writer "
                                            "reused its slot under a live view")])
        events = [e for e in events if e[0] != "drop"]
        seen: set[int] = set()
        for i, e in enumerate(events):
            want = order[i] if i < len(order) else None
            if e[0] == "recv":
                _, seq, kind, t0, t1, claimed, ok, size = e
                v = []
                if not ok or (seq in digests and digests[seq] != claimed):
                    how = (": it came over a socket, so the store most likely still read the writer's buffers after "
                           "enqueue had returned and the caller had reused them (a zero-copy send in flight)"
                           if label.startswith("remote") or kind in OVER_SOCKET else "")
                    v.append(("NRR", f"{label} received message {seq} ({kind}) with other bytes than written{how}"))
                if want is None:
                    v.append(("FIFO", f"{label} received message {seq} after the last one the writer completed"
                                      + (f" ({order[-1]})" if order else "")))
                elif seq > want and (position.get(seq, seq) - i) % dep.chunks == 0 and label.startswith("r"):
                    v.append(("NRR", f"{label} read chunk {want % dep.chunks} expecting message {want} and got "
                                     f"message {seq}: the chunk was rewritten before it had read it (a recycled "
                                     "read)"))
                elif seq != want:
                    what = "again" if seq in seen else ("out of order" if seq > want else "late")
                    lost = " (lost)" if seq > want else ""
                    v.append(("FIFO", f"{label} received message {seq} {what} where message {want} was next{lost}"))
                seen.add(seq)
                step(t1, label, "dequeue", {"seq": seq, "kind": kind},
                     f"message {want}" if want is not None else "timeout (nothing more was written)",
                     f"message {seq} ({size} bytes{', digest ok' if ok else ', DIGEST WRONG'})", v)
            elif e[0] == "stopped":
                v = [] if want is None else [("FIFO", f"{label} never received message {want}: it waited for it "
                                                      f"until the scheduler stopped the run ({e[4]})")]
                step(e[3], label, "dequeue", {}, f"message {want}" if want is not None else "the run's end",
                     "stopped by the scheduler", v)
            elif e[0] == "timeout":
                v = []
                lost = order[i:]
                # the writer killed with the next message's frames still on its socket: they never come,
                # and the messages after it wait behind it (a reader reads in order), so only the
                # first one missing need have gone over a socket (found under load, 2026-12-07); a
                # remote reader gets every message over its socket (found under load the same day)
                in_flight = dep.fault == "writer-killed-mid-write" and bool(lost) and \
                    (label.startswith("remote") or kinds.get(lost[0], "") in OVER_SOCKET)
                if want is not None and not in_flight:
                    prop = "PROG" if not dep.fault else "FIFO"
                    v.append((prop, f"{label}'s dequeue timed out where message {want} was next"))
                elif want is not None:  # on the socket when the writer died: at most once, as any sender's
                    out.notes.append(("lost-in-flight", label, lost))
                step(e[3], label, "dequeue", {}, f"message {want}" if want is not None else "timeout",
                     f"TimeoutError after {e[3] - e[2]:.2f} s"
                     + (" (the writer was done: nothing more came)" if len(e) > 4 and e[4] else ""), v)
            else:
                step(e[3], label, "dequeue", {}, f"message {want}", e[4],
                     [("NRR", f"{label}'s dequeue raised {e[4]} where message {want} was next (a torn read)")])
        if final is not None:
            if final[0] == "extra":
                step(final[2], label, "dequeue", {}, "timeout (nothing more was written)", f"received {final[3]}",
                     [("NRR" if dep.fault == "writer-killed-mid-write" else "FIFO",
                       f"{label} received a message after the last one the writer completed: {final[3]}")])
            elif final[0] == "error":
                step(final[2], label, "dequeue", {}, "timeout (nothing more was written)", final[3],
                     [("NRR", f"{label}'s last dequeue raised {final[3]} (a torn read)")])
            else:
                step(final[2], label, "dequeue", {}, "timeout (nothing more was written)",
                     f"TimeoutError after {final[2] - final[1]:.2f} s")
        received = sum(1 for e in events if e[0] == "recv")
        if received < len(order) and not any(s.violations for t, s in raw if s.process == label) \
                and label != victim and not any(n[0] == "lost-in-flight" and n[1] == label for n in out.notes):
            step(time.monotonic(), label, "dequeue", {}, f"message {order[received]}", "the history ends",
                 [("FIFO", f"{label} received {received} of the {len(order)} messages written")])
        if changed:
            step(time.monotonic(), label, "recheck", {"seqs": changed},
                 "every kept out-of-band array unchanged",
                 f"changed: messages {changed}",
                 [("NRR", f"{label}'s out-of-band arrays of messages {changed} changed after later writes "
                          "reused their chunks (they alias the ring)")])
    if out.arena_final is not None:
        _judge_arena_final(out, step)
    raw.sort(key=lambda ts: ts[0])
    return [replace(s, index=i) for i, (_, s) in enumerate(raw)]


def _judge_arena_final(out: Outcome, step: Any) -> None:
    """PROG at the end of an arena run: every slot is free for the writer
    (unwritten, or released by every reader) once every live reader has
    dropped its tensors and flushed; only a killed reader may hold one."""
    dep = out.dep
    victim = f"r{dep.victim + 1}" if dep.fault.startswith("reader-killed") else None
    live = [r for r in range(dep.local) if f"r{r + 1}" in out.readers and f"r{r + 1}" != victim]
    failed = [e for e in out.writer if e[0] in ("refused", "timeout", "error")
              and e[2] in ("tensor", "tensor-pair", "tensor-poison")]
    for i, row in enumerate(out.arena_final):
        holding = [f"r{r + 1}" for r in live if row[0] and not row[1 + r]]
        v = []
        if holding:
            why = ""
            if failed:
                e = failed[0]
                why = (f"; message {e[1]}'s enqueue raised after its tensor was copied into the arena "
                       f"({e[5][:80]}), so no reader ever received the slot's stub and nobody can release it: "
                       "the slot is lost to the arena for good" if e[0] != "timeout" else
                       f"; message {e[1]}'s enqueue timed out after its tensor was copied into the arena, so no "
                       "reader ever received the slot's stub and nobody can release it: the slot is lost to the "
                       "arena for good")
            v.append(("PROG", f"arena slot {i} is still held for {', '.join(holding)} after every reader dropped "
                              f"its tensors and flushed its releases (flags {row}){why}"))
        step(time.monotonic(), "writer", "arena-final", {"slot": i},
             "free (unwritten, or released by every live reader)", f"flags {row}", v)


__all__ = ["Deployment", "FAULTS", "KINDS", "OutOfBand", "Outcome", "Tripwire", "digest", "judge", "message",
           "plan", "queue_api", "run"]
