"""Loading vLLM's slot-flag stores (docs/slots.md): a release's
``shm_broadcast.py`` (``ShmRingBuffer``, ``MessageQueue``) and, from 0.32.0,
``shm_tensor_arena.py`` (``ShmTensorArena``), or the same files from disk.

The files import torch, numpy, pyzmq and several ``vllm.*`` modules.  They
load here in isolation, as the object store's file does
(:func:`shmspec.conformance.targets.loader.load_file`): while they execute,
those names are satisfied by minimal stand-ins, and afterwards
``sys.modules`` is restored exactly.  The stand-ins are ours and small:

* ``torch``: a CPU tensor over a buffer (:class:`StandInTensor`:
  ``frombuffer``, ``from_numpy``, ``view`` by dtype or shape, ``reshape``,
  ``copy_``, ``fill_``, ``numel``, ``element_size``).  Like torch, a tensor
  keeps a *reference* to the buffer it was made from and no buffer export
  (so vLLM's ``slot_mv.release()`` after a copy succeeds, as with torch), and
  a tensor from ``from_numpy`` keeps its array alive, so a release bound to
  the array's lifetime (``weakref.finalize``) fires when the last tensor or
  view over it is gone, as torch's storage does.
* ``numpy``: ``frombuffer`` (a weak-referenceable array holding an export
  of the buffer, as numpy's does) and the dtype names.
* ``zmq``, ``vllm.envs``, ``vllm.platforms`` (no CUDA: the arena's pinned
  path is not taken), ``vllm.logger`` and the rest: names only.  Any other
  ``torch.*``, ``zmq.*`` or ``vllm.*`` name a release imports resolves to a
  placeholder that raises :class:`StandInMissing` when used.

The queue is built without its sockets (:func:`queue_writer`,
:func:`queue_reader`): the writer as ``MessageQueue.__init__`` leaves its
shared-memory side (``buffer``, ``current_idx``), a reader as
``create_from_handle`` does, with the ``SpinCondition`` replaced by
:class:`StandInSpin` (a reader's wait is vLLM's own bounded check; its
sleep is a yield).  What this leaves out of the construction vLLM deploys:
the zmq notification and the overflow path over the socket (the deployed
construction has them: :mod:`shmspec.conformance.protocols.slots.deployed`,
which loads the files with real pyzmq and installs them in each of its
processes, :func:`install`).

With the ``torch`` extra installed, an arena's files get torch and numpy
for real instead (:func:`torch_mode`, ``SHMSPEC_TORCH``; docs/slots.md#real-torch).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
import types
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ..core.errors import TargetError

BROADCAST_FILE = "vllm/distributed/device_communicators/shm_broadcast.py"
ARENA_FILE = "vllm/distributed/device_communicators/shm_tensor_arena.py"
BROADCAST_MODULE = "vllm.distributed.device_communicators.shm_broadcast"
ARENA_MODULE = "vllm.distributed.device_communicators.shm_tensor_arena"
_STANDIN_ROOTS = ("torch", "numpy", "zmq", "vllm")


class StandInMissing(TargetError):
    """A release used a name the stand-ins leave out (the message names it)."""


# ---- torch and numpy stand-ins -------------------------------------------------

class DType:
    """A torch/numpy dtype stand-in: its name and size in bytes."""

    def __init__(self, name: str, size: int):
        self.name, self.itemsize = name, size

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    __str__ = __repr__


DTYPES = {name: DType(name, size) for name, size in (
    ("uint8", 1), ("int8", 1), ("bool", 1), ("float16", 2), ("bfloat16", 2), ("int16", 2), ("float32", 4),
    ("int32", 4), ("float64", 8), ("int64", 8))}


class StandInTensor:
    """A contiguous CPU tensor over ``nbytes`` bytes at ``offset`` of
    ``source`` (anything with the buffer protocol), read through a fresh
    memoryview at each use (no export is held).  ``keep``: an object the
    tensor keeps alive (the array of ``from_numpy``)."""

    device = types.SimpleNamespace(type="cpu")
    requires_grad = False

    def __init__(self, source: Any, offset: int, nbytes: int, dtype: DType, shape: tuple[int, ...], keep: Any = None):
        self._source, self._offset, self._nbytes = source, offset, nbytes
        self.dtype, self.shape, self._keep = dtype, tuple(shape), keep
        self.layout = _TORCH_STRIDED

    def _mem(self) -> memoryview:
        return memoryview(self._source).cast("B")[self._offset:self._offset + self._nbytes]

    def numel(self) -> int:
        return self._nbytes // self.dtype.itemsize

    def element_size(self) -> int:
        return self.dtype.itemsize

    def is_contiguous(self) -> bool:
        return True

    def detach(self) -> "StandInTensor":
        return self._like(self.dtype, self.shape)

    def _like(self, dtype: DType, shape: tuple[int, ...]) -> "StandInTensor":
        return StandInTensor(self._source, self._offset, self._nbytes, dtype, shape, self._keep)

    def reshape(self, *shape) -> "StandInTensor":
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        if shape == (-1,):
            shape = (self.numel(),)
        return self._like(self.dtype, shape)

    def view(self, *what) -> "StandInTensor":
        if len(what) == 1 and isinstance(what[0], DType):
            dtype = what[0]
            if self._nbytes % dtype.itemsize:
                raise RuntimeError(f"{self._nbytes} bytes do not view as {dtype}")
            return self._like(dtype, (self._nbytes // dtype.itemsize,))
        return self.reshape(*what)

    def fill_(self, value: int) -> "StandInTensor":
        with self._mem() as m:
            m[:] = bytes([value]) * len(m)
        return self

    def copy_(self, src: "StandInTensor") -> "StandInTensor":
        with self._mem() as m, src._mem() as s:
            if len(m) != len(s):
                raise RuntimeError(f"copy_ of {len(s)} bytes into {len(m)}")
            m[:] = s
        return self

    def tobytes(self) -> bytes:
        """The bytes it views now (ours: the harness reads a reader's tensor so)."""
        with self._mem() as m:
            return bytes(m)

    def contiguous(self) -> "StandInTensor":
        return self

    def numpy(self) -> memoryview:
        """A view of its bytes sharing its memory (torch's ``numpy()``
        shares it too): what vLLM's ``_reduce_tensor`` hands pickle as a
        ``PickleBuffer``."""
        return self._mem()

    def __reduce_ex__(self, protocol: int):
        # as numpy pickles an array: with protocol 5 the bytes leave the stream as a PickleBuffer (a store may
        # take it out of band; vLLM's queue reduces its tensors with _reduce_tensor instead, by dispatch table)
        import pickle

        data = pickle.PickleBuffer(self._mem()) if protocol >= 5 else self.tobytes()
        return _rebuild_standin, (data, self.dtype.name, self.shape)


def _rebuild_standin(buf: Any, dtype: str, shape: tuple[int, ...]) -> StandInTensor:
    """A stand-in tensor rebuilt over the buffer pickle hands back (zero copy)."""
    n = memoryview(buf).nbytes
    return StandInTensor(buf, 0, n, DTYPES[dtype], tuple(shape))


class _Parameter(StandInTensor):
    def __new__(cls, t: StandInTensor = None, requires_grad: bool = True):  # noqa: D401 - torch's signature
        obj = object.__new__(cls)
        if t is not None:
            obj.__init__(t._source, t._offset, t._nbytes, t.dtype, t.shape, t._keep)
        return obj

    def __init__(self, *args, **kwargs):
        if len(args) == 6:
            super().__init__(*args)


class StandInArray:
    """``numpy.frombuffer``'s result: holds an export of the buffer (as
    numpy's does) and is weak-referenceable (vLLM binds a release to it)."""

    __slots__ = ("mv", "dtype", "__weakref__")

    def __init__(self, buffer: Any, dtype: DType):
        self.mv, self.dtype = memoryview(buffer).cast("B"), dtype


def _frombuffer(buffer, dtype: DType = DTYPES["uint8"], count: int = -1, offset: int = 0, requires_grad=False):
    n = memoryview(buffer).nbytes - offset if count == -1 else count * dtype.itemsize
    return StandInTensor(buffer, offset, n, dtype, (n // dtype.itemsize,))


def _from_numpy(arr: StandInArray) -> StandInTensor:
    return StandInTensor(arr.mv, 0, arr.mv.nbytes, arr.dtype, (arr.mv.nbytes // arr.dtype.itemsize,), keep=arr)


_TORCH_STRIDED = object()


class StandInSpin:
    """The reader's ``SpinCondition`` without its socket: ``wait`` yields
    (vLLM's caller re-checks the flags and bounds the wait itself)."""

    def __init__(self, is_reader: bool = True):
        self.is_reader = is_reader
        self.notifications = 0

    def wait(self, timeout_ms: int | None = None) -> None:
        os.sched_yield()

    def record_read(self) -> None:
        pass

    def notify(self) -> None:
        self.notifications += 1

    def cancel(self) -> None:
        pass


# ---- the stand-in modules ------------------------------------------------------

class _Placeholder:
    """A name a release imports that the stand-ins leave out."""

    def __init__(self, qualname: str):
        self._qualname = qualname

    def __call__(self, *args, **kwargs):
        raise StandInMissing(f"the stand-in for {self._qualname} is not implemented (the target used it)")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self._qualname}.{name}")

    def __getitem__(self, item):
        return self

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __mro_entries__(self, bases):
        return (object,)


class _PermissiveModule(ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        qual = f"{self.__name__}.{name}"
        project = self.__name__.split(".")[0] in _RECORDED[-1:]
        value = _HELPERS.get(name) if project else None  # a project helper, wherever its module keeps it
        value = value if value is not None else _Placeholder(qual)
        if project and not isinstance(value, ModuleType):
            _STOOD_IN.append(qual)
        setattr(self, name, value)
        return value


# ---- another project's own helpers (SGLang's fork of the queue, ...) --------------

class _EnvStandIn:
    """A project's environment-variable registry (SGLang's ``envs``): every
    variable is unset (``get()`` and ``value`` are None)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return types.SimpleNamespace(get=lambda: None, value=None, name=name)


class _NetworkAddress:
    """SGLang's ``NetworkAddress(host, port)``: ``is_ipv6`` and ``to_tcp()``."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.is_ipv6 = ":" in host

    def to_tcp(self) -> str:
        return f"tcp://[{self.host}]:{self.port}" if self.is_ipv6 else f"tcp://{self.host}:{self.port}"


def _open_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tcp_address(host: str, port: int) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


_HELPERS: dict[str, Any] = {
    "envs": _EnvStandIn(),
    "NetworkAddress": _NetworkAddress,
    "format_tcp_address": _tcp_address,
    "get_local_ip_auto": lambda fallback=None: "127.0.0.1",
    "get_ip": lambda: "127.0.0.1",
    "get_open_port": _open_port,
    "is_valid_ipv6_address": lambda address: ":" in str(address),
    "make_shm_name": lambda prefix="shm": f"psm_{prefix}_{uuid.uuid4().hex[:12]}",
}
"""What a project's own helpers must do for the protocol to run, by name
(SGLang moved them between ``sglang.srt.utils``, ``.utils.network``,
``.environ`` and ``.utils.stale_shm_cleanup`` over its releases); any other
name it imports resolves to a placeholder that raises when called."""
_RECORDED: list[str] = []
"""The project roots whose names the load in progress records (a stack of one)."""
_STOOD_IN: list[str] = []
"""The project names the load in progress stood in for."""


def project_roots(paths: list[Path], real: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The top-level packages a file imports that are neither the standard
    library, nor the stand-ins' (torch, numpy, zmq, vllm), nor installed
    here: the file's own project (``sglang`` for SGLang's copy), whose
    helpers the loader stands in for."""
    import ast

    roots: list[str] = []
    for p in paths:
        try:
            tree = ast.parse(p.read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for n in names:
                root = n.split(".")[0]
                if root in roots or root in _STANDIN_ROOTS or root in real or root in sys.stdlib_module_names:
                    continue
                try:
                    found = importlib.util.find_spec(root) is not None
                except (ImportError, ValueError):
                    found = False
                if not found:
                    roots.append(root)
    return tuple(roots)


def store_kind(path: Path) -> str | None:
    """Which store a source file holds, by its class definitions:
    ``ringbuffer`` (vLLM's object store), ``arena``, ``queue``, or None."""
    import re

    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return None
    if re.search(r"^class SingleWriterShmObjectStorage\b", text, re.MULTILINE):
        return "ringbuffer"
    if re.search(r"^class ShmTensorArena\b", text, re.MULTILINE):
        return "arena"
    if re.search(r"^class (MessageQueue|ShmRingBuffer|ShmRingBufferIO)\b", text, re.MULTILINE):
        return "queue"
    return None


STORE_NAMES = {"ringbuffer": "the object store (SingleWriterShmObjectStorage)",
               "arena": "the tensor arena (ShmTensorArena)",
               "queue": "the broadcast queue (MessageQueue / ShmRingBuffer)"}


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Creates a permissive module for any stand-in root's submodule not given."""

    def __init__(self, roots: tuple[str, ...] = _STANDIN_ROOTS):
        self.roots = roots

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _PermissiveModule(spec.name)
        mod.__path__ = []
        parent = sys.modules.get(spec.name.rpartition(".")[0])
        if parent is not None:
            setattr(parent, spec.name.rpartition(".")[2], mod)
        return mod

    def exec_module(self, module):
        pass


def _module(name: str, **attrs) -> ModuleType:
    mod = _PermissiveModule(name)
    mod.__path__ = []
    for k, v in attrs.items():
        setattr(mod, k, v)
    return mod


def _stand_ins() -> dict[str, ModuleType]:
    torch = _module("torch", Tensor=StandInTensor, frombuffer=_frombuffer, from_numpy=_from_numpy,
                    strided=_TORCH_STRIDED, dtype=DType, **DTYPES)
    torch.nn = _module("torch.nn", Parameter=_Parameter)
    torch.cuda = _module("torch.cuda", Event=type("Event", (), {}))
    torch.distributed = _module("torch.distributed", ProcessGroup=type("ProcessGroup", (), {}))
    numpy = _module("numpy", frombuffer=lambda buffer, dtype=DTYPES["uint8"]: StandInArray(buffer, dtype), **DTYPES)
    zmq = _module("zmq", Context=type("Context", (), {}), Socket=type("Socket", (), {}))
    envs = _module("vllm.envs", VLLM_USE_SPINLOOP_EXT=False, VLLM_RINGBUFFER_WARNING_INTERVAL=60)
    logger = _module("vllm.logger", init_logger=lambda name: logging.getLogger(name))
    dutils = _module("vllm.distributed.utils", sched_yield=os.sched_yield,
                     StatelessProcessGroup=type("StatelessProcessGroup", (), {}))
    platform = types.SimpleNamespace(is_cuda_alike=lambda: False, is_cuda=lambda: False, Event=None)
    platforms = _module("vllm.platforms", current_platform=platform)
    cpu = _module("vllm.utils.cpu_resource_utils", check_cgroup_memory_available=lambda *a, **k: None)
    # the network helpers, where each release keeps them (vllm.utils before 0.11.1, .network_utils after)
    helpers = dict(get_ip=lambda: "127.0.0.1", is_valid_ipv6_address=lambda a: ":" in str(a),
                   get_open_port=_open_port, get_open_zmq_ipc_path=lambda: f"ipc:///tmp/shmspec-{uuid.uuid4().hex}",
                   get_open_zmq_inproc_path=lambda: f"inproc://shmspec-{uuid.uuid4().hex}")
    net = _module("vllm.utils.network_utils", **helpers)
    mods = {m.__name__: m for m in (torch, torch.nn, torch.cuda, torch.distributed, numpy, zmq, envs, logger,
                                    dutils, platforms, cpu, net)}
    for name in ("vllm", "vllm.distributed", "vllm.distributed.device_communicators"):
        mods[name] = _module(name)
    mods["vllm.utils"] = _module("vllm.utils", **helpers)
    for name, mod in mods.items():  # ``import vllm.envs as envs`` reads the attribute of the parent
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(mods[parent], leaf, mod)
    return mods


_LOAD_LOCK = threading.Lock()


@dataclass
class SlotFiles:
    """A release's (or a folder's) slot-flag store modules, loaded:
    ``broadcast`` (``shm_broadcast.py``) and ``arena``
    (``shm_tensor_arena.py``, None where the release has none)."""

    broadcast: ModuleType
    arena: ModuleType | None
    broadcast_path: Path
    arena_path: Path | None
    stood_in: tuple[str, ...] = ()
    """The file's own project's names the loader stood in for (SGLang's
    ``sglang.srt.utils.network.get_open_port``, ...; :func:`project_roots`)."""
    modules: dict[str, ModuleType] | None = None
    """Every module the load put in ``sys.modules`` (the files' and the
    stand-ins they imported), kept for :func:`install`."""


def install(files: SlotFiles) -> None:
    """Put the loaded files and their stand-ins in ``sys.modules`` for good.

    For a process that exists to run the target (the deployed
    construction's writer and readers): the files import more of their own
    at run time (``MessageQueue.__init__`` imports ``shm_tensor_arena``), and
    pickle finds a rebuild function (``_rebuild_arena_tensor``) by its
    module's name.  Never call it in the controller: there ``sys.modules``
    stays as it was."""
    sys.modules.update(files.modules or {})


def _exec(name: str, path: Path, key: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    parent, _, leaf = name.rpartition(".")
    if parent in sys.modules:  # ``from vllm.distributed.device_communicators import shm_tensor_arena`` finds it
        setattr(sys.modules[parent], leaf, module)
    try:
        spec.loader.exec_module(module)
    except TargetError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any import failure is the target's
        raise TargetError(f"{path} failed to import ({key}): {type(exc).__name__}: {exc}") from None
    return module


def load_slot_files(broadcast: str | Path, arena: str | Path | None = None, real: tuple[str, ...] = ()) -> SlotFiles:
    """Execute ``shm_broadcast.py`` (and ``shm_tensor_arena.py``, which
    imports it by its vLLM name) under the stand-ins, in isolation.  A
    file of another project (SGLang's copy) has its own helper imports
    stood in for (:func:`project_roots`; listed in ``stood_in``).
    ``real``: the roots the file gets for real instead (``("zmq",)``: pyzmq,
    for the deployed construction, :mod:`shmspec.conformance.protocols.slots.deployed`).

    Raises:
        TargetError: a file is missing, fails to import, or lacks its class
            (``ShmRingBuffer`` and ``MessageQueue``; ``ShmTensorArena``).
    """
    paths = [Path(broadcast)] + ([Path(arena)] if arena is not None else [])
    for p in paths:
        if not p.is_file():
            raise TargetError(f"target file not found: {p}")
    with _LOAD_LOCK:
        for r in real:  # imported for good: one copy of pyzmq in the process, the target's and ours
            importlib.import_module(r)
        before = dict(sys.modules)
        project = project_roots(paths, real)
        roots = tuple(r for r in _STANDIN_ROOTS if r not in real) + project
        finder = _StandInFinder(roots)
        _RECORDED[:] = list(project)
        _STOOD_IN.clear()
        for k in before:  # a real torch/numpy/zmq/vllm in this process is not what the file gets
            if k.split(".")[0] in roots:
                del sys.modules[k]
        for k, mod in _stand_ins().items():
            if k.split(".")[0] in roots:
                sys.modules[k] = mod

        sys.meta_path.insert(0, finder)
        try:
            b = _exec(BROADCAST_MODULE, paths[0], "shm_broadcast.py")
            a = _exec(ARENA_MODULE, paths[1], "shm_tensor_arena.py") if arena is not None else None
        finally:
            stood_in = list(dict.fromkeys(_STOOD_IN))
            _RECORDED.clear()
            sys.meta_path.remove(finder)
            made = {k: m for k, m in sys.modules.items() if k not in before or m is not before[k]}
            for k in list(sys.modules):
                if k not in before or sys.modules[k] is not before[k]:
                    del sys.modules[k]
            sys.modules.update(before)
    for mod, cls in ((b, "ShmRingBuffer"), (b, _queue_class(b)), (a, "ShmTensorArena")):
        if mod is not None and not isinstance(getattr(mod, cls, None), type):
            raise TargetError(f"{mod.__file__} does not define {cls}")
    return SlotFiles(b, a, paths[0], paths[1] if arena is not None else None, tuple(stood_in), made)


# ---- building the stores as vLLM does --------------------------------------------

class WouldWait(TimeoutError):
    """A release whose ``acquire_write``/``acquire_read`` take no timeout
    (vLLM 0.5.1 - 0.6.4's ``ShmRingBufferIO``) reached its wait: raised from
    its first ``time.sleep``, so the harness never waits for ever."""


class _NoSleep:
    """The ``time`` and ``os`` modules those releases see: ``sleep`` and
    ``sched_yield`` (their waits' only pause) raise :class:`WouldWait`."""

    def __init__(self, module: ModuleType):
        self._module = module

    def __getattr__(self, name: str):
        return getattr(self._module, name)

    @staticmethod
    def sleep(seconds: float = 0) -> None:
        raise WouldWait(f"the release's wait has no timeout (it sleeps {seconds:g} s and checks again, for ever)")

    @staticmethod
    def sched_yield() -> None:
        raise WouldWait("the release's wait has no timeout (it yields and checks again, for ever)")


class StandInSpinTimer:
    """vLLM 0.9.1 - 0.17.1's reader ``_read_spin_timer`` without its sleep policy."""

    def spin(self) -> None:
        os.sched_yield()

    def record_activity(self) -> None:
        pass


def has_timeouts(files: SlotFiles) -> bool:
    """Whether the release's ``acquire_write``/``acquire_read`` take a
    ``timeout`` (vLLM >= 0.6.5; before: they wait for ever)."""
    import inspect

    cls = getattr(files.broadcast, queue_api(files))
    return "timeout" in inspect.signature(cls.acquire_write).parameters


def _queue_class(broadcast: ModuleType) -> str:
    return "ShmRingBufferIO" if hasattr(broadcast, "ShmRingBufferIO") and not hasattr(broadcast, "MessageQueue") \
        else "MessageQueue"


def queue_api(files: SlotFiles) -> str:
    """``"MessageQueue"`` (vLLM >= 0.5.2) or ``"ShmRingBufferIO"`` (0.5.1)."""
    return _queue_class(files.broadcast)


def queue_writer(files: SlotFiles, n_reader: int, chunk_bytes: int, n_chunks: int) -> Any:
    """A ``MessageQueue`` writer's shared-memory side, as its ``__init__``
    leaves it for local readers only (no sockets); on the releases before
    ``MessageQueue``, a ``ShmRingBufferIO`` writer over a new ``ShmRingBuffer``
    (their ``time.sleep`` raises :class:`WouldWait`)."""
    if not has_timeouts(files):
        import time

        files.broadcast.time, files.broadcast.os = _NoSleep(time), _NoSleep(os)
    if queue_api(files) == "ShmRingBufferIO":
        return files.broadcast.ShmRingBufferIO(files.broadcast.ShmRingBuffer(n_reader, chunk_bytes, n_chunks), -1)
    mq = files.broadcast.MessageQueue.__new__(files.broadcast.MessageQueue)
    mq.n_local_reader, mq.n_remote_reader, mq.shutting_down = n_reader, 0, False
    mq.buffer = files.broadcast.ShmRingBuffer(n_reader, chunk_bytes, n_chunks)
    mq.current_idx, mq.tensor_arena, mq.local_socket, mq.remote_socket = 0, None, None, None
    mq._spin_condition = StandInSpin(is_reader=False)
    mq._is_writer, mq._is_local_reader, mq._is_remote_reader, mq.local_reader_rank = True, False, False, -1
    return mq


def queue_reader(files: SlotFiles, writer: Any, rank: int) -> Any:
    """A local reader of ``writer``'s ring, as ``create_from_handle`` builds
    it (rank ``rank``; no sockets)."""
    if queue_api(files) == "ShmRingBufferIO":
        ring = writer.buffer
        return files.broadcast.ShmRingBufferIO(
            files.broadcast.ShmRingBuffer(ring.n_reader, ring.max_chunk_bytes, ring.max_chunks,
                                          ring.shared_memory.name), rank)
    mq = files.broadcast.MessageQueue.__new__(files.broadcast.MessageQueue)
    mq._is_writer, mq._is_local_reader, mq._is_remote_reader = False, True, False
    ring = writer.buffer  # (ShmRingBuffer.handle() is newer than 0.5.2; these fields are in every release)
    mq.buffer = files.broadcast.ShmRingBuffer(ring.n_reader, ring.max_chunk_bytes, ring.max_chunks,
                                              ring.shared_memory.name)
    mq._read_spin_timer = StandInSpinTimer()  # 0.9.1 - 0.17.1
    mq.current_idx, mq.local_reader_rank, mq.tensor_arena = 0, rank, None
    mq.shutting_down, mq.local_socket, mq.remote_socket = False, None, None
    mq._spin_condition = StandInSpin(is_reader=True)
    return mq


def uint8_tensor(data: bytes, files: SlotFiles | None = None) -> Any:
    """A 1-D uint8 tensor holding a copy of ``data`` (the writer's
    message): the stand-in's, or real torch's where ``files`` were loaded
    with it (:func:`torch_roots`)."""
    torch = _real_torch(files)
    if torch is not None:
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return _frombuffer(bytearray(data), DTYPES["uint8"])


def uint8(files: SlotFiles | None = None) -> Any:
    """The uint8 dtype the files' torch has (the stand-in's or torch's)."""
    torch = _real_torch(files)
    return torch.uint8 if torch is not None else DTYPES["uint8"]


def tensor_buffer(t: Any) -> Any:
    """A uint8 tensor's bytes (the stand-in's or torch's) as a buffer, no copy."""
    if isinstance(t, StandInTensor):
        return t._mem()
    return t.detach().contiguous().numpy()


def tensor_bytes(t: Any) -> bytes:
    """The bytes a uint8 tensor (the stand-in's or torch's) views now."""
    return bytes(tensor_buffer(t))


def _real_torch(files: SlotFiles | None) -> Any:
    torch = getattr(getattr(files, "arena", None), "torch", None) if files is not None else None
    return torch if torch is not None and not isinstance(torch, _PermissiveModule) else None


TORCH_ENV = "SHMSPEC_TORCH"
"""``auto`` (the default), ``real`` or ``stand-in``: which torch the arena's files get."""


def torch_mode() -> str:
    """``real`` when CPU torch and numpy are installed (``pip install
    'shmspec[torch]'``) and ``SHMSPEC_TORCH`` is not ``stand-in``; else
    ``stand-in`` (the default install has no torch).

    Raises:
        TargetError: ``SHMSPEC_TORCH=real`` without torch, or another value."""
    want = os.environ.get(TORCH_ENV, "auto") or "auto"
    if want not in ("auto", "real", "stand-in"):
        raise TargetError(f"{TORCH_ENV}={want!r}: use auto, real or stand-in")
    if want == "stand-in":
        return want
    have = all(importlib.util.find_spec(m) is not None for m in ("torch", "numpy"))
    if want == "real" and not have:
        raise TargetError(f"{TORCH_ENV}=real but torch (or numpy) is not installed: pip install 'shmspec[torch]'")
    return "real" if have else "stand-in"


def torch_roots() -> tuple[str, ...]:
    """The roots an arena's files get for real (``load_slot_files(real=)``):
    ``("torch", "numpy")`` in :func:`torch_mode` ``real``, else none."""
    return ("torch", "numpy") if torch_mode() == "real" else ()


__all__ = ["StandInSpinTimer", "TORCH_ENV", "WouldWait", "has_timeouts", "install", "queue_api", "tensor_buffer", "tensor_bytes",
           "torch_mode", "torch_roots", "uint8", "ARENA_FILE", "ARENA_MODULE", "BROADCAST_FILE", "BROADCAST_MODULE", "DTYPES", "SlotFiles", "StandInArray",
           "StandInMissing", "StandInSpin", "StandInTensor", "load_slot_files", "queue_reader", "queue_writer",
           "uint8_tensor"]
