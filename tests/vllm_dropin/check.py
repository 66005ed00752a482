#!/usr/bin/env python3
"""Drop-in check: vLLM 0.33.0's multimodal SHM cache on a swapped store module.

Claim checked: replacing vLLM's
``vllm/distributed/device_communicators/shm_object_storage.py`` by a module
that re-exports ``shmspec.impl`` leaves vLLM's multimodal SHM cache
(``vllm.multimodal.cache.shm``) importable and working, and a handle issued
before ``clear()`` reads its own object until its memory is reused.

Run it with an interpreter that has vLLM (``make dropin`` builds
``.venv-vllm`` and runs ``--store impl``)::

    .venv-vllm/bin/python tests/vllm_dropin/check.py --store impl
    .venv-vllm/bin/python tests/vllm_dropin/check.py --store vllm   # vLLM's own module

How the module is swapped: the installed ``vllm`` package is mirrored into a
temporary directory (real directories along
``vllm/distributed/device_communicators/``, symlinks to the installed files
everywhere else) and that directory is put first on ``sys.path``, so ``import
vllm`` loads the mirror.  In the mirror ``shm_object_storage.py`` is a real
file: for ``--store impl`` a shim (``from shmspec.impl import *`` plus the
names vLLM imports, by name), for ``--store vllm`` a copy of the installed
file.  Both stores go through the same mechanism; the installed package is
never modified.

The caches are built as vLLM builds them: the sender by
``processor_cache_from_config`` and each receiver, in its own worker process
(``fork``, vLLM's default ``VLLM_WORKER_MULTIPROC_METHOD``, or ``spawn``), by
``worker_receiver_cache_from_config`` with one shared multiprocessing Lock.
The ``VllmConfig`` is a stand-in with only the attributes these functions
read.  Handles travel to the workers as vLLM sends them, encoded by
``vllm.v1.serial_utils.MsgpackEncoder``.  The workers are started before the
sender exists (in vLLM no worker holds a copy of the sender).

Checks (each printed PASS/FAIL with what it saw):

* ``import``: the swapped module is the one vLLM's cache uses;
* ``build``: the factories return ``ShmObjectStoreSenderCache`` /
  ``ShmObjectStoreReceiverCache`` built on the store under test;
* ``roundtrip``: ``MultiModalKwargsItem`` objects with CPU tensors (float32,
  bfloat16, float16, int64, bool, nested lists, a float; inline and
  out-of-band msgpack buffers) through the sender's ``get_and_update_item``
  and every receiver's ``get_and_update_item`` come back bit-exact;
* ``hit``: a cached hash gives back the same handle, read exactly again;
* ``validate``: the sender accepts its current handles and rejects a forged
  signature; receivers ``touch`` current handles and reject a forged one;
* ``oversize``: an item over ``max_object_size`` is passed through uncached;
* ``drain``: after the sender's ``clear_cache()``, every handle issued before
  it still returns its own object on every receiver until a later put reaches
  its bytes, then raises the stale-handle ``ValueError`` ("has been modified
  or is invalid") and stays stale; no read ever returns another object;
* ``reclaim``: after the clear, puts of three rings' worth of items (each read
  once by every receiver) are all cached (reads free memory) and exact;
* ``close``: closing the sender leaves no segment of this run in /dev/shm.

Exit status: 0 every check passed; 1 a wrong result (a failed check, a hang,
or the swapped module breaks vLLM's import: e.g. a name vLLM imports is
missing from ``shmspec.impl``); 2 vLLM (or shmspec, for ``--store impl``)
cannot be set up in this interpreter.

This file is a script, not a test module: pytest does not collect it (no
``test_`` prefix, no conftest imports it).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_WRONG, EXIT_SETUP = 0, 1, 2

VLLM_VERSION = "0.33.0"
STORE_MODULE = "vllm.distributed.device_communicators.shm_object_storage"
STORE_DIRS = (Path("."), Path("distributed"), Path("distributed/device_communicators"))
STORE_FILE = "shm_object_storage.py"
# every public name of vLLM 0.33.0's module; vllm.multimodal.cache.shm imports
# the first three (nothing else in vLLM 0.33.0 imports the module)
VLLM_IMPORTED = ("MsgpackSerde", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer")
SHIM_NAMES = (*VLLM_IMPORTED, "ObjectSerde", "ShmObjectStorageHandle")
SHIM_TEXT = '''\
# SPDX-License-Identifier: Apache-2.0
# Written by shmspec tests/vllm_dropin/check.py: vLLM's shm_object_storage
# replaced by shmspec.impl.
"""vLLM's ``shm_object_storage`` module, re-exporting ``shmspec.impl``."""

from shmspec.impl import *  # noqa: F401,F403
from shmspec.impl import (  # noqa: F401  the names vLLM's module defines, by name
{names}
)
'''.format(names="\n".join(f"    {n}," for n in SHIM_NAMES))

STALE_TEXT = "has been modified or is invalid"
RING_GB = 1 / 1024  # 1 MiB ring: int(RING_GB * GiB_bytes) == 2**20
MAX_OBJECT_MB = 1  # vLLM's option is whole MiB
WORLD_SIZE = 2  # two workers, two receivers (n_readers == world_size)
REPLY_TIMEOUT = 60.0  # seconds for one worker request
READY_TIMEOUT = 240.0  # seconds for a worker to import vLLM and attach
WORKER_IDLE = 600.0  # a worker that hears nothing this long exits


class SetupError(Exception):
    """vLLM or shmspec cannot be set up in this interpreter (exit 2)."""


class DropinError(Exception):
    """The swapped module breaks vLLM's import (exit 1)."""


# --------------------------------------------------------------- reporting
class Report:
    def __init__(self) -> None:
        self.checks: list[dict[str, Any]] = []
        self.info: dict[str, Any] = {}

    def add(self, name: str, ok: bool, detail: str, **data: Any) -> bool:
        self.checks.append({"check": name, "ok": bool(ok), "detail": detail, **data})
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
        return ok

    def note(self, key: str, value: Any) -> None:
        self.info[key] = value
        print(f"  {key}: {value}", flush=True)

    @property
    def failed(self) -> int:
        return sum(not c["ok"] for c in self.checks)


# ---------------------------------------------------- VllmConfig stand-in
class MultiModalConfigStandIn:
    """What the SHM caches and the factories read of ``MultiModalConfig``."""

    def __init__(self, cache_gb: float, max_object_mb: int) -> None:
        self.mm_processor_cache_gb = cache_gb
        self.mm_processor_cache_type = "shm"
        self.mm_shm_cache_max_object_size_mb = max_object_mb


class ModelConfigStandIn:
    supports_multimodal_inputs = True

    def __init__(self, mm: MultiModalConfigStandIn) -> None:
        self._mm = mm

    def get_multimodal_config(self) -> MultiModalConfigStandIn:
        return self._mm


class ParallelConfigStandIn:
    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        # read by vllm.multimodal.cache.factories._get_cache_type
        self._api_process_count = 1
        self.data_parallel_size = 1
        self.data_parallel_external_lb = False


class VllmConfigStandIn:
    def __init__(self, world_size: int, cache_gb: float, max_object_mb: int) -> None:
        self.model_config = ModelConfigStandIn(MultiModalConfigStandIn(cache_gb, max_object_mb))
        self.parallel_config = ParallelConfigStandIn(world_size)


def make_config() -> VllmConfigStandIn:
    return VllmConfigStandIn(WORLD_SIZE, RING_GB, MAX_OBJECT_MB)


# ------------------------------------------------------------------ digests
def _norm(value: Any) -> Any:
    if isinstance(value, slice):
        return ("slice", value.start, value.stop, value.step)
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    return value


def _field_repr(field: Any) -> str:
    import dataclasses

    attrs = {f.name: _norm(getattr(field, f.name)) for f in dataclasses.fields(field)}
    return f"{type(field).__name__}{sorted(attrs.items())!r}"


def _digest_nested(h: Any, x: Any) -> None:
    import torch

    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        h.update(f"T:{t.dtype}:{tuple(t.shape)}:".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(x, (list, tuple)):
        h.update(f"L{len(x)}[".encode())
        for v in x:
            _digest_nested(h, v)
        h.update(b"]")
    else:
        h.update(f"V:{type(x).__name__}:{x!r}".encode())


def digest_item(item: Any) -> str:
    """Exact identity of a MultiModalKwargsItem: keys, field kinds and
    parameters, and every tensor's dtype, shape and bytes."""
    h = hashlib.sha256()
    h.update(type(item).__name__.encode())
    for key in sorted(item.keys()):
        elem = item[key]
        h.update(f"K:{key}:{_field_repr(elem.field)}:".encode())
        _digest_nested(h, elem.data)
    return h.hexdigest()


def describe_item(item: Any) -> str:
    import torch

    parts = []
    for key in sorted(item.keys()):
        d = item[key].data
        if isinstance(d, torch.Tensor):
            parts.append(f"{key}:{str(d.dtype).removeprefix('torch.')}{list(d.shape)}")
        elif isinstance(d, list):
            parts.append(f"{key}:list[{len(d)}]")
        else:
            parts.append(f"{key}:{d!r}")
    return "{" + ", ".join(parts) + "}"


# -------------------------------------------------------------------- items
def make_item(kind: str, seed: int) -> Any:
    """A MultiModalKwargsItem of a fixed serialized size per kind.

    ``image`` (about 40 KB): float32 pixel values (flat field), an int64 grid
    (inline msgpack), a bfloat16 embedding (shared field), a nested list of
    float16 tensors and a float.  ``audio`` (about 23 KB): float32 features and
    a bool mask.  ``big``: over max_object_size."""
    import torch
    from vllm.multimodal.inputs import (
        MultiModalBatchedField,
        MultiModalFieldElem,
        MultiModalFlatField,
        MultiModalKwargsItem,
        MultiModalSharedField,
    )

    g = torch.Generator().manual_seed(seed)

    def elem(data: Any, field: Any) -> Any:
        return MultiModalFieldElem(data=data, field=field)

    if kind == "image":
        return MultiModalKwargsItem({
            "pixel_values": elem(torch.randn(50, 196, generator=g),
                                 MultiModalFlatField(slices=[slice(0, 50)], dim=0)),
            "image_grid_thw": elem(torch.randint(1, 64, (3,), generator=g, dtype=torch.int64),
                                   MultiModalBatchedField()),
            "image_embeds": elem(torch.randn(16, 9, generator=g).to(torch.bfloat16),
                                 MultiModalSharedField(batch_size=1)),
            "patches": elem([torch.randn(3, 5, generator=g).to(torch.float16),
                             torch.randn(2, 4, generator=g).to(torch.float16)],
                            MultiModalBatchedField()),
            "second_per_grid_ts": elem(float(seed) + 0.5, MultiModalBatchedField()),
        })
    if kind == "audio":
        return MultiModalKwargsItem({
            "input_features": elem(torch.randn(80, 72, generator=g), MultiModalBatchedField()),
            "feature_attention_mask": elem(torch.rand(72, generator=g) > 0.3,
                                           MultiModalSharedField(batch_size=1)),
        })
    if kind == "big":
        n = MAX_OBJECT_MB * 2**20 // 4 + 1024
        return MultiModalKwargsItem({
            "pixel_values": elem(torch.randn(n, generator=g), MultiModalBatchedField()),
        })
    raise ValueError(kind)


# ------------------------------------------------------ module swap (mirror)
def build_mirror(vllm_dir: Path, store: str, root: Path) -> Path:
    """Mirror ``vllm_dir`` as ``root/vllm``; returns the mirror's store file.

    Real directories along STORE_DIRS, symlinks to the installed entries
    elsewhere (their __pycache__ too, but not the store directory's, so the
    swapped file's bytecode is written into the mirror only)."""
    dst = root / "vllm"
    for i, rel in enumerate(STORE_DIRS):
        (dst / rel).mkdir(parents=True, exist_ok=True)
        nxt = STORE_DIRS[i + 1].name if i + 1 < len(STORE_DIRS) else None
        last = nxt is None
        for entry in os.scandir(vllm_dir / rel):
            if entry.name == nxt or (last and entry.name in (STORE_FILE, "__pycache__")):
                continue
            os.symlink(entry.path, dst / rel / entry.name)
    target = dst / STORE_DIRS[-1] / STORE_FILE
    if store == "vllm":
        shutil.copyfile(vllm_dir / STORE_DIRS[-1] / STORE_FILE, target)
    elif store.startswith("file:"):
        shutil.copyfile(store[5:], target)
    else:
        target.write_text(SHIM_TEXT)
    return target


def locate(report: Report, expect_version: str | None) -> Path:
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SetupError(f"no vllm package for {sys.executable} (make dropin installs it into .venv-vllm)")
    vllm_dir = Path(list(spec.submodule_search_locations)[0])
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    report.note("python", f"{sys.executable} ({sys.version.split()[0]})")
    report.note("vllm", f"{version} at {vllm_dir}")
    if not (vllm_dir / STORE_DIRS[-1] / STORE_FILE).is_file():
        raise SetupError(f"{vllm_dir} has no {STORE_DIRS[-1] / STORE_FILE}")
    if expect_version and version != expect_version:
        raise SetupError(f"vllm {version} installed, {expect_version} expected (--vllm-version)")
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        raise SetupError(f"torch does not import: {type(exc).__name__}: {exc}") from None
    report.note("torch", torch.__version__)
    return vllm_dir


def _frames_in(exc: BaseException, paths: list[str]) -> bool:
    tb = traceback.extract_tb(exc.__traceback__)
    return any(any(fr.filename.startswith(p) for p in paths) for fr in tb)


def _original_imports_ok() -> tuple[bool, str]:
    """Does vLLM's cache import with vLLM's own module (fresh interpreter,
    the installed package, no mirror)?"""
    code = ("import warnings; warnings.simplefilter('ignore');"
            "import vllm.multimodal.cache.shm, vllm.multimodal.cache.factories, vllm.v1.serial_utils")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300, env=env, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return False, "timed out"
    return p.returncode == 0, (p.stderr.strip().splitlines() or [""])[-1]


def import_swapped(report: Report, store: str, root: Path, store_file: Path) -> dict[str, Any]:
    import importlib

    shmspec_paths: list[str] = []
    if store == "impl":
        import importlib.util

        if importlib.util.find_spec("shmspec") is None:
            raise SetupError(f"shmspec is not installed for {sys.executable} (pip install -e .)")
        try:
            impl = importlib.import_module("shmspec.impl")
        except Exception as exc:  # noqa: BLE001
            raise DropinError(f"shmspec.impl does not import: {type(exc).__name__}: {exc}") from exc
        shmspec_paths = [str(Path(impl.__file__).parent)]
        report.note("shmspec.impl", str(Path(impl.__file__).parent))
        missing = [n for n in SHIM_NAMES if not hasattr(impl, n)]
        if missing:
            report.note("shmspec.impl lacks", ", ".join(missing))
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        mods = {name: importlib.import_module(name) for name in (
            "vllm", "vllm.envs", "vllm.multimodal.cache.shm", "vllm.multimodal.cache.factories",
            "vllm.multimodal.inputs", "vllm.v1.serial_utils", STORE_MODULE)}
    except Exception as exc:  # noqa: BLE001
        text = f"{type(exc).__name__}: {exc}"
        tb = "".join(traceback.format_exception(exc)[-6:])
        if store == "vllm":
            raise SetupError(f"vLLM's cache does not import: {text}\n{tb}") from None
        if store.startswith("file:") and _frames_in(exc, [str(store_file)]):
            raise DropinError(f"vLLM's cache does not import with {store[5:]}: {text}\n{tb}") from None
        if _frames_in(exc, [str(store_file)] + shmspec_paths):
            raise DropinError(f"vLLM's cache does not import with the shim: {text}\n{tb}") from None
        ok, last = _original_imports_ok()
        if ok:
            raise DropinError(f"vLLM's cache imports with vLLM's module but not with the shim: {text}\n{tb}") from None
        raise SetupError(f"vLLM's cache does not import (with vLLM's own module either: {last}): "
                         f"{text}\n{tb}") from None
    store_mod = mods[STORE_MODULE]
    shm = mods["vllm.multimodal.cache.shm"]
    problems = []
    if Path(mods["vllm"].__file__).parent != root / "vllm":
        problems.append(f"vllm loaded from {mods['vllm'].__file__}, not the mirror")
    if Path(store_mod.__file__) != store_file:
        problems.append(f"store module loaded from {store_mod.__file__}, not {store_file}")
    for name in VLLM_IMPORTED:
        if getattr(shm, name, None) is not getattr(store_mod, name, None):
            problems.append(f"vllm.multimodal.cache.shm.{name} is not the store module's")
    if store == "impl":
        import shmspec.impl as impl

        for name in SHIM_NAMES:
            if getattr(store_mod, name, None) is not getattr(impl, name, object()):
                problems.append(f"{STORE_MODULE}.{name} is not shmspec.impl.{name}")
    origin = {n: getattr(getattr(shm, n), "__module__", "?") for n in VLLM_IMPORTED}
    report.add("import", not problems,
               "; ".join(problems) or f"{store_file} ({'shim' if store == 'impl' else 'copy'}); "
               f"vllm.multimodal.cache.shm uses " + ", ".join(f"{k} from {v}" for k, v in origin.items()))
    return mods


# ------------------------------------------------------------------ workers
def worker_main(rank: int, conn: Any, lock: Any) -> None:
    """A vLLM worker stand-in: waits for ``attach`` (the sender exists by
    then), builds its receiver cache with the shared lock, then serves
    ``get`` / ``touch`` requests until ``stop``."""
    import warnings

    warnings.simplefilter("ignore")
    cache = None
    try:
        if not conn.poll(WORKER_IDLE):
            return
        msg = conn.recv()
        if msg[0] != "attach":
            return
        from vllm.multimodal.cache.factories import worker_receiver_cache_from_config
        from vllm.multimodal.inputs import MultiModalKwargsItem
        from vllm.v1.serial_utils import MsgpackDecoder
        import vllm.distributed.device_communicators.shm_object_storage as store_mod

        cache = worker_receiver_cache_from_config(make_config(), lock)
        decoder = MsgpackDecoder(MultiModalKwargsItem)
        inner = getattr(cache, "_shm_cache", None)
        conn.send(("ready", {
            "pid": os.getpid(),
            "cache": type(cache).__name__,
            "storage": f"{type(inner).__module__}.{type(inner).__name__}",
            "store_file": store_mod.__file__,
            "serde": f"{type(inner.ser_de).__module__}.{type(inner.ser_de).__name__}" if inner else None,
        }))
    except BaseException as exc:  # noqa: BLE001
        conn.send(("fail", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        return
    while True:
        if not conn.poll(WORKER_IDLE):
            return
        msg = conn.recv()
        op = msg[0]
        if op == "stop":
            conn.send(("bye",))
            return
        try:
            mm_hash, bufs = msg[1], msg[2]
            handle_item = decoder.decode(bufs)
            if op == "get":
                out = cache.get_and_update_item(handle_item, mm_hash)
                conn.send(("ok", digest_item(out), describe_item(out)))
            elif op == "touch":
                cache.touch_receiver_cache_item(mm_hash, handle_item)
                conn.send(("ok", None, None))
            else:
                conn.send(("err", "ProtocolError", f"unknown op {op!r}", False))
        except Exception as exc:  # noqa: BLE001
            conn.send(("err", type(exc).__name__, str(exc), isinstance(exc, ValueError)))


class Worker:
    def __init__(self, ctx: Any, rank: int, lock: Any) -> None:
        self.rank = rank
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(rank, child, lock),
                                name=f"dropin-receiver-{rank}", daemon=True)
        self.proc.start()
        child.close()
        self.info: dict[str, Any] = {}

    def request(self, msg: tuple, timeout: float | None = None) -> tuple:
        timeout = REPLY_TIMEOUT if timeout is None else timeout
        self.conn.send(msg)
        if not self.conn.poll(timeout):
            state = "alive" if self.proc.is_alive() else f"exited {self.proc.exitcode}"
            raise TimeoutError(f"receiver {self.rank} ({state}) did not answer {msg[0]!r} in {timeout:.0f}s")
        return self.conn.recv()

    def attach(self) -> None:
        reply = self.request(("attach",), READY_TIMEOUT)
        if reply[0] != "ready":
            raise RuntimeError(f"receiver {self.rank} could not build its cache: {reply[1]}\n{reply[2]}")
        self.info = reply[1]

    def stop(self) -> None:
        try:
            if self.proc.is_alive():
                self.conn.send(("stop",))
                if self.conn.poll(5):
                    self.conn.recv()
        except (OSError, EOFError, BrokenPipeError):
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


# ------------------------------------------------------------------- checks
class Run:
    def __init__(self, report: Report, mods: dict[str, Any], workers: list[Worker]) -> None:
        self.report = report
        self.mods = mods
        self.workers = workers
        from vllm.v1.serial_utils import MsgpackEncoder

        self.encoder = MsgpackEncoder()
        self.expected: dict[str, str] = {}  # mm_hash -> digest
        self.by_digest: dict[str, str] = {}  # digest -> mm_hash
        self.sender: Any = None

    # helpers
    def wire(self, handle_item: Any) -> list[bytes]:
        return [bytes(b) for b in self.encoder.encode(handle_item)]

    def put(self, mm_hash: str, item: Any) -> tuple[Any, tuple[int, int, list[int]] | None]:
        self.expected[mm_hash] = d = digest_item(item)
        self.by_digest[d] = mm_hash
        out, updates = self.sender.get_and_update_item((item, []), mm_hash)
        if updates != []:
            raise AssertionError(f"prompt updates changed: {updates!r}")
        return out, self.handle_of(out)

    @staticmethod
    def handle_of(item: Any) -> tuple[int, int, list[int]] | None:
        if item is None or "address" not in item:
            return None
        return item["address"].data, item["monotonic_id"].data, item["signature"].data

    def read(self, worker: Worker, mm_hash: str, handle_item: Any) -> tuple:
        return worker.request(("get", mm_hash, self.wire(handle_item)))

    def classify(self, mm_hash: str, reply: tuple) -> str:
        """'own', 'stale', 'other:<hash>', 'wrong' or 'error:<type>: <msg>'."""
        if reply[0] == "ok":
            if reply[1] == self.expected[mm_hash]:
                return "own"
            other = self.by_digest.get(reply[1])
            return f"other:{other}" if other else f"wrong:{reply[2]}"
        _, etype, text, is_value_error = reply
        if is_value_error and STALE_TEXT in text:
            return "stale"
        return f"error:{etype}: {text}"

    # phases
    def build(self, ctx_method: str) -> None:
        from vllm.multimodal.cache.factories import processor_cache_from_config
        from vllm.multimodal.cache.shm import ShmObjectStoreSenderCache

        self.sender = processor_cache_from_config(make_config())
        inner = self.sender._shm_cache
        ring = inner.ring_buffer
        problems = []
        if not isinstance(self.sender, ShmObjectStoreSenderCache):
            problems.append(f"sender is {type(self.sender).__name__}")
        for w in self.workers:
            w.attach()
            if w.info.get("cache") != "ShmObjectStoreReceiverCache":
                problems.append(f"receiver {w.rank} is {w.info.get('cache')}")
            if w.info.get("storage") != f"{type(inner).__module__}.{type(inner).__name__}":
                problems.append(f"receiver {w.rank} storage {w.info.get('storage')}")
        self.ring_size = ring.data_buffer_size
        self.report.add("build", not problems, "; ".join(problems) or (
            f"sender {type(self.sender).__name__} on {type(inner).__module__}."
            f"{type(inner).__name__} (serde {type(inner.ser_de).__module__}.{type(inner.ser_de).__name__}, "
            f"ring {self.ring_size} B, max object {inner.max_object_size} B, n_readers {inner.n_readers}); "
            f"{len(self.workers)} receivers ({ctx_method}): "
            + ", ".join(f"pid {w.info['pid']} {w.info['cache']}" for w in self.workers)))

    def roundtrip(self) -> None:
        self.pre: list[tuple[str, Any, tuple[int, int, list[int]]]] = []
        plan = [("audio", 0), ("audio", 1)] + [("image", i) for i in range(8)]
        problems, reads = [], 0
        for n, (kind, i) in enumerate(plan):
            mm_hash = f"pre-{kind}-{i}"
            item = make_item(kind, 1000 + n)
            out, handle = self.put(mm_hash, item)
            if handle is None:
                problems.append(f"{mm_hash}: sender did not cache it (returned the item itself)")
                continue
            self.pre.append((mm_hash, out, handle))
            for w in self.workers:
                verdict = self.classify(mm_hash, self.read(w, mm_hash, out))
                reads += 1
                if verdict != "own":
                    problems.append(f"{mm_hash} on receiver {w.rank}: {verdict}")
        sizes = sorted({describe_item(make_item(k, 0)) for k in ("audio", "image")})
        self.report.add("roundtrip", not problems, "; ".join(problems[:6]) or (
            f"{len(self.pre)} items put, {reads} receiver reads bit-exact "
            f"(items: {' and '.join(sizes)}); handles (address, id): "
            + ", ".join(f"({h[0]}, {h[1]})" for _, _, h in self.pre)))

    def hit(self) -> None:
        mm_hash, out0, h0 = self.pre[0]
        problems = []
        if not self.sender.is_cached_item(mm_hash):
            problems.append("is_cached_item is False for a cached hash")
        out, updates = self.sender.get_and_update_item(None, mm_hash)
        h = self.handle_of(out)
        if h != h0:
            problems.append(f"hit gave handle {h}, the put gave {h0}")
        else:
            for w in self.workers:
                verdict = self.classify(mm_hash, self.read(w, mm_hash, out))
                if verdict != "own":
                    problems.append(f"receiver {w.rank}: {verdict}")
        stats = self.sender.make_stats()
        self.report.add("hit", not problems, "; ".join(problems) or (
            f"cached {mm_hash} gave the same handle {h0[:2]}, read exactly by every receiver; "
            f"stats hits={stats.hits} total={stats.total}"))

    def validate(self) -> None:
        from vllm.multimodal.inputs import MultiModalKwargsItem

        problems = []
        for mm_hash, out, _ in self.pre:
            try:
                self.sender.validate_input_item(out, mm_hash)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"sender rejects its own handle for {mm_hash}: {exc}")
        mm_hash, out, (address, mid, sig) = self.pre[-1]
        forged = MultiModalKwargsItem(dict(out))
        bad = list(sig)
        bad[0] ^= 1
        forged["signature"] = type(out["signature"])(data=bad, field=out["signature"].field)
        try:
            self.sender.validate_input_item(forged, mm_hash)
            problems.append("sender accepts a forged signature")
        except ValueError:
            pass
        for w in self.workers:
            r = w.request(("touch", mm_hash, self.wire(out)))
            if r[0] != "ok":
                problems.append(f"receiver {w.rank} touch of a current handle: {r[1]}: {r[2]}")
            r = self.read(w, mm_hash, forged)
            if r[0] == "ok" or not r[3] or "signature" not in r[2]:
                problems.append(f"receiver {w.rank} on a forged signature: {r[1:]!r}")
        self.report.add("validate", not problems, "; ".join(problems) or (
            f"sender validates {len(self.pre)} current handles and rejects a forged signature; "
            "receivers touch a current handle and reject a forged one (ValueError)"))

    def oversize(self) -> None:
        item = make_item("big", 7)
        out, updates = self.sender.get_and_update_item((item, []), "pre-big")
        ok = out is item and not self.sender.is_cached_item("pre-big")
        self.report.add("oversize", ok, (
            f"an item over max_object_size ({describe_item(item)}) is returned as is, uncached"
            if ok else f"returned {type(out).__name__} {self.handle_of(out)}, "
            f"cached={self.sender.is_cached_item('pre-big')}"))

    def drain(self) -> None:
        """clear_cache(), then post-clear puts; every pre-clear handle is read
        on every receiver before the first put and after each put."""
        R = self.ring_size
        addrs = [h[0] for _, _, h in self.pre]
        kinds = [m.split("-")[1] for m, _, _ in self.pre]
        stride: dict[str, set[int]] = {}
        for i in range(len(addrs) - 1):
            stride.setdefault(kinds[i], set()).add(addrs[i + 1] - addrs[i])
        layout_ok = all(len(v) == 1 for v in stride.values()) and set(stride) == {"audio", "image"}
        size = {k: next(iter(v)) for k, v in stride.items()} if layout_ok else {}
        extents = ({m: (h[0] % R, h[0] % R + size[kinds[i]]) for i, (m, _, h) in enumerate(self.pre)}
                   if layout_ok else {})
        self.report.note("drain layout", (
            f"pre-clear chunks at {[a % R for a in addrs]}, chunk bytes {size}"
            if layout_ok else f"chunk strides per kind not constant ({stride}): reuse judged loosely"))

        self.sender.clear_cache()
        problems: list[str] = []
        if any(self.sender.is_cached_item(m) for m, _, _ in self.pre):
            problems.append("a pre-clear hash is still cached after clear_cache()")
        for m, out, _ in self.pre[:1]:
            try:
                self.sender.validate_input_item(out, m)
                problems.append("sender still validates a pre-clear handle")
            except ValueError:
                pass
        written: list[tuple[int, int]] = []  # post-clear chunk extents
        state = {m: "own" for m, _, _ in self.pre}
        counts = {"own": 0, "stale": 0}
        timeline = []
        step = 0
        post: list[tuple[str, Any]] = []

        def reused(m: str) -> bool | None:
            if not layout_ok:
                return None
            lo, hi = extents[m]
            return any(a < hi and lo < b for a, b in written)

        def sweep(label: str) -> None:
            row = []
            for m, out, _ in self.pre:
                exp = reused(m)
                for w in self.workers:
                    v = self.classify(m, self.read(w, m, out))
                    if v in counts:
                        counts[v] += 1
                    if v.startswith(("other:", "wrong:")):
                        problems.append(f"{label}: {m} on receiver {w.rank} returned ANOTHER object ({v})")
                    elif v.startswith("error:"):
                        problems.append(f"{label}: {m} on receiver {w.rank} raised {v[6:]}")
                    elif exp is False and v != "own":
                        problems.append(f"{label}: {m} on receiver {w.rank} is {v} before its bytes were reused")
                    elif exp is True and v != "stale":
                        problems.append(f"{label}: {m} on receiver {w.rank} is {v} after its bytes were reused")
                    elif exp is None and state[m] == "stale" and v != "stale":
                        problems.append(f"{label}: {m} on receiver {w.rank} resolved again after being stale")
                    if v == "stale":
                        state[m] = "stale"
                row.append("S" if state[m] == "stale" else "o")
            timeline.append(f"{label}:{''.join(row)}")

        sweep("clear")
        while step < 64:
            step += 1
            m = f"post-audio-{step}"
            out, h = self.put(m, make_item("audio", 5000 + step))
            if h is None:
                problems.append(f"post-clear put {step}: not cached")
                break
            post.append((m, out))
            a = h[0] % R
            if layout_ok:
                written.append((a, a + size["audio"]))
            for w in self.workers:
                v = self.classify(m, self.read(w, m, out))
                if v != "own":
                    problems.append(f"post-clear {m} on receiver {w.rank}: {v}")
            sweep(f"put{step}@{a}")
            if all(s == "stale" for s in state.values()) and (not layout_ok or all(reused(x) for x in state)):
                break
        sweep("final")
        self.post = post
        if any(s != "stale" for s in state.values()):
            problems.append(f"after {step} post-clear puts not every pre-clear handle is stale: {state}")
        more = f" (+{len(problems) - 8} more)" if len(problems) > 8 else ""
        self.report.add("drain", not problems, "; ".join(problems[:8]) + more or (
            f"clear_cache(): {len(self.pre)} pre-clear handles x {len(self.workers)} receivers; "
            f"{counts['own']} reads returned their own object (bytes not yet reused), "
            f"{counts['stale']} raised ValueError '{STALE_TEXT}' (bytes reused), none another object; "
            f"{step} post-clear puts, all read exactly"), timeline=timeline)
        print("  drain timeline (o = own object, S = stale; one letter per pre-clear handle):")
        for t in timeline:
            print(f"    {t}")

    def reclaim(self) -> None:
        R = self.ring_size
        problems = []
        n, uncached, wrapped, last = 0, 0, 0, None
        total = 0
        i = 0
        while total < 3 * R and i < 400:
            i += 1
            kind = "image" if i % 3 else "audio"
            m = f"wrap-{kind}-{i}"
            item = make_item(kind, 9000 + i)
            out, h = self.put(m, item)
            n += 1
            if h is None:
                uncached += 1
                continue
            if last is not None and h[0] % R < last:
                wrapped += 1
            last = h[0] % R
            total += len(b"".join(self.wire(item)))
            for w in self.workers:
                v = self.classify(m, self.read(w, m, out))
                if v != "own":
                    problems.append(f"{m} on receiver {w.rank}: {v}")
        if uncached:
            problems.append(f"{uncached} of {n} puts were not cached (MemoryError although every item was read)")
        if not wrapped:
            problems.append("the ring never wrapped")
        cached = sum(self.sender.is_cached_item(f"wrap-{'image' if j % 3 else 'audio'}-{j}") for j in range(1, i + 1))
        self.report.add("reclaim", not problems, "; ".join(problems[:6]) or (
            f"{n} puts (~{total // 1024} KiB, {total / R:.1f} rings) all cached and read exactly by every "
            f"receiver; the ring wrapped {wrapped} times; {cached} still cached at the end"))

    def close(self, name: str) -> None:
        self.sender.close()
        # drop the sender now: at interpreter exit vLLM's ring __del__ runs
        # close() again with its module globals gone (a TypeError on stderr)
        self.sender = None
        gc.collect()
        left = sorted(p.name for p in Path("/dev/shm").glob(f"{name}*")) if Path("/dev/shm").is_dir() else []
        self.report.add("close", not left, f"left in /dev/shm: {left}" if left else
                        f"sender.close(): no segment named {name}* left in /dev/shm")


# --------------------------------------------------------------------- main
def run(args: argparse.Namespace, report: Report, name: str, root: Path) -> int:
    vllm_dir = locate(report, args.vllm_version)
    store_file = build_mirror(vllm_dir, args.store, root)
    what = {"impl": "shim re-exporting shmspec.impl", "vllm": f"copy of vLLM's {STORE_FILE}"}.get(
        args.store, f"copy of {args.store[5:]}")
    report.note("store module", f"{store_file} ({what})")
    mods = import_swapped(report, args.store, root, store_file)
    ctx = multiprocessing.get_context(args.start_method)
    lock = ctx.Lock()  # as vllm.v1.executor.multiproc_executor: one Lock for all workers
    workers: list[Worker] = []
    run_ = None
    try:
        workers = [Worker(ctx, r, lock) for r in range(WORLD_SIZE)]
        run_ = Run(report, mods, workers)
        try:
            run_.build(args.start_method)
        except Exception as exc:  # noqa: BLE001
            report.add("build", False, f"{type(exc).__name__}: {exc}")
            return EXIT_WRONG
        for phase in (run_.roundtrip, run_.hit, run_.validate, run_.oversize, run_.drain, run_.reclaim):
            try:
                phase()
            except Exception as exc:  # noqa: BLE001
                report.add(phase.__name__, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
                if isinstance(exc, TimeoutError):
                    break
    finally:
        for w in workers:
            w.stop()
        if run_ is not None and run_.sender is not None:
            try:
                run_.close(name)
            except Exception as exc:  # noqa: BLE001
                report.add("close", False, f"{type(exc).__name__}: {exc}")
    return EXIT_WRONG if report.failed else EXIT_OK


class _Deadline(BaseException):
    pass


def main(argv: list[str] | None = None) -> int:
    global REPLY_TIMEOUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="impl", metavar="impl|vllm|file:PATH",
                    help="impl: the module is a shim re-exporting shmspec.impl; vllm: vLLM's own "
                         "module; file:PATH: that file in its place (e.g. a mutant, to see a check fail)")
    ap.add_argument("--start-method", choices=("fork", "spawn"), default="fork",
                    help="how the receiver workers start (vLLM's default: fork)")
    ap.add_argument("--vllm-version", default=VLLM_VERSION,
                    help=f"the vLLM version expected (default {VLLM_VERSION}; '' accepts any)")
    ap.add_argument("--timeout", type=float, default=900, help="overall limit in seconds")
    ap.add_argument("--reply-timeout", type=float, default=REPLY_TIMEOUT,
                    help=f"seconds a receiver may take over one request (default {REPLY_TIMEOUT:.0f})")
    ap.add_argument("--json", type=Path, help="also write the checks as JSON here")
    ap.add_argument("--keep-mirror", action="store_true", help="keep the temporary package mirror")
    args = ap.parse_args(argv)
    REPLY_TIMEOUT = args.reply_timeout
    if args.store not in ("impl", "vllm") and not (args.store.startswith("file:") and Path(args.store[5:]).is_file()):
        ap.error(f"--store {args.store!r}: impl, vllm or file:PATH of an existing file")

    import warnings

    warnings.simplefilter("ignore")
    t0 = time.monotonic()
    report = Report()
    name = f"shmspec_dropin_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    os.environ["VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME"] = name  # read by vllm.envs, inherited by workers
    # vLLM's CUDA wheel on a machine without an accelerator resolves
    # UnspecifiedPlatform, whose pin_memory is "available": MsgpackDecoder
    # (share_mem=False) then pins every out-of-band tensor it decodes and fails
    # ("Cannot access accelerator device").  VLLM_TARGET_DEVICE=cpu selects
    # vLLM's CpuPlatform (no pinning), as a CPU deployment of vLLM runs.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    root = Path(tempfile.mkdtemp(prefix="shmspec-dropin-"))
    print(f"vLLM drop-in check: --store {args.store}, receivers by {args.start_method}, segment {name}", flush=True)

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Deadline()

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(args.timeout)))
    code = EXIT_WRONG
    try:
        code = run(args, report, name, root)
    except SetupError as exc:
        print(f"SETUP {exc}", flush=True)
        code = EXIT_SETUP
    except DropinError as exc:
        report.add("import", False, str(exc))
        code = EXIT_WRONG
    except _Deadline:
        report.add("deadline", False, f"not finished within --timeout {args.timeout:.0f}s")
        code = EXIT_WRONG
    finally:
        signal.alarm(0)
        if args.keep_mirror:
            print(f"  mirror kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
        for p in Path("/dev/shm").glob(f"{name}*") if Path("/dev/shm").is_dir() else []:
            p.unlink(missing_ok=True)  # only this run's segments (unique name)
    passed = len(report.checks) - report.failed
    verdict = {EXIT_OK: "OK", EXIT_WRONG: "WRONG", EXIT_SETUP: "SETUP"}[code]
    print(f"dropin --store {args.store}: {passed} passed, {report.failed} failed "
          f"in {time.monotonic() - t0:.1f}s -> exit {code} ({verdict})", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"store": args.store, "start_method": args.start_method,
                                         "exit": code, "info": report.info, "checks": report.checks},
                                        indent=2, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main())
