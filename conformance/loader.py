"""Loading targets: ``impl``, ``file:PATH`` and ``vllm==X.Y.Z``.

A *file target* is any Python module file that defines the vLLM-compatible
classes ``SingleWriterShmRingBuffer`` and ``SingleWriterShmObjectStorage``.  It
is executed in isolation: while it loads, ``torch`` and ``vllm.logger`` are
satisfied by minimal stand-ins, and afterwards ``sys.modules`` is restored
exactly (neither the stand-ins nor the module itself stay registered).

A *vllm target* fetches that release's wheel from the package index with pip
(``pip download --no-deps``) into the user cache
(``$SHMSPEC_CACHE_DIR`` or ``~/.cache/shmspec``), keeps only
``vllm/distributed/device_communicators/shm_object_storage.py`` and deletes the
wheel, then loads that file as a file target.

Errors: :class:`TargetError` (a usage or infrastructure problem; the CLI exits
with status 2 and prints its one-line message).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
import tempfile
import types
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from shmspec.model.profile import IMPL, PROFILES, VLLM_0_11, VLLM_0_12, VLLM_0_15, VLLM_0_32, Profile, profile_for_vllm

STORE_FILE = "vllm/distributed/device_communicators/shm_object_storage.py"
REQUIRED = ("SingleWriterShmRingBuffer", "SingleWriterShmObjectStorage")


class TargetError(Exception):
    """The target cannot be loaded (unknown spec, missing file, no classes, no registry)."""


@dataclass
class LoadedTarget:
    """A loaded target: its spec string, module (holding the classes), model profile
    and, for file and vllm targets, the source file."""

    spec: str
    module: ModuleType
    profile: Profile
    source: Path | None = None

    @property
    def ring_cls(self):
        return self.module.SingleWriterShmRingBuffer

    @property
    def storage_cls(self):
        return self.module.SingleWriterShmObjectStorage


def cache_dir() -> Path:
    return Path(os.environ.get("SHMSPEC_CACHE_DIR") or Path.home() / ".cache" / "shmspec")


def _stand_ins() -> dict[str, ModuleType]:
    torch = types.ModuleType("torch")

    class Tensor:  # only isinstance checks and __name__ are used by the store
        pass

    torch.Tensor = Tensor  # type: ignore[attr-defined]
    vllm = types.ModuleType("vllm")
    vllm.__path__ = []  # type: ignore[attr-defined]
    vlogger = types.ModuleType("vllm.logger")
    vlogger.init_logger = lambda name: logging.getLogger(name)  # type: ignore[attr-defined]
    vllm.logger = vlogger  # type: ignore[attr-defined]
    return {"torch": torch, "vllm": vllm, "vllm.logger": vlogger}


def detect_profile(module: ModuleType) -> Profile:
    """Profile of a file target: ``SHMSPEC_PROFILE`` in the module if set, else by
    the API it offers (signed handles -> vllm-0.32, touch -> 0.12/0.15, else 0.11)."""
    declared = getattr(module, "SHMSPEC_PROFILE", None)
    if declared is not None:
        if declared not in PROFILES:
            raise TargetError(f"module declares unknown SHMSPEC_PROFILE {declared!r}")
        return PROFILES[declared]
    storage = module.SingleWriterShmObjectStorage
    if hasattr(storage, "get_signature"):
        return VLLM_0_32
    if hasattr(storage, "touch"):
        return VLLM_0_15 if hasattr(storage, "close") else VLLM_0_12
    return VLLM_0_11


def load_file(path: str | Path, spec: str | None = None, profile: Profile | None = None) -> LoadedTarget:
    """Execute a module file in isolation and check it defines the classes.

    Raises:
        TargetError: the file is missing, fails to import, or lacks the classes.
    """
    path = Path(path)
    if not path.is_file():
        raise TargetError(f"target file not found: {path}")
    name = f"shmspec_target_{uuid.uuid4().hex[:8]}"
    saved = {k: sys.modules.get(k) for k in ("torch", "vllm", "vllm.logger", name)}
    stand_ins = _stand_ins()
    try:
        for k, mod in stand_ins.items():
            if saved[k] is None:
                sys.modules[k] = mod
        mod_spec = importlib.util.spec_from_file_location(name, path)
        if mod_spec is None or mod_spec.loader is None:
            raise TargetError(f"cannot load {path} as a Python module")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module  # dataclasses need it while executing
        try:
            mod_spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any import failure is the target's
            # (a module that calls sys.exit() at import must not end the gate as if it had passed)
            raise TargetError(f"{path} failed to import: {type(exc).__name__}: {exc}") from None
    finally:
        for k, old in saved.items():
            if old is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = old
    missing = [c for c in REQUIRED if not isinstance(getattr(module, c, None), type)]
    if missing:
        raise TargetError(f"{path} does not define {', '.join(missing)}")
    return LoadedTarget(spec or f"file:{path}", module, profile or detect_profile(module), path)


def fetch_vllm(version: str) -> Path:
    """The store file of vLLM ``version``, from the cache or fetched with pip.

    Raises:
        TargetError: bad version, pip cannot reach the registry, or the wheel
            has no store file.
    """
    if not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", version):
        raise TargetError(f"not a vLLM release number: {version!r}")
    try:
        profile_for_vllm(version)
    except ValueError as exc:
        raise TargetError(str(exc)) from None
    dest = cache_dir() / "vllm" / version / "shm_object_storage.py"
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="shmspec-wheel-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", tmp, f"vllm=={version}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise TargetError(f"pip download vllm=={version} timed out (registry unreachable?)") from None
        wheels = list(Path(tmp).glob("vllm-*.whl"))
        if proc.returncode != 0 or not wheels:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise TargetError(f"cannot fetch vllm=={version} from the package registry: {last}")
        with zipfile.ZipFile(wheels[0]) as zf:
            try:
                data = zf.read(STORE_FILE)
            except KeyError:
                raise TargetError(f"vllm=={version} does not ship {STORE_FILE}") from None
    tmp_dest = dest.with_suffix(".tmp")
    tmp_dest.write_bytes(data)
    tmp_dest.replace(dest)
    return dest


def load_target(spec: str) -> LoadedTarget:
    """Resolve a ``--target`` string.

    Raises:
        TargetError: unknown form, or loading failed.
    """
    if spec == "impl":
        from shmspec import impl

        return LoadedTarget("impl", impl, IMPL)
    if spec.startswith("file:"):
        return load_file(spec[5:], spec)
    if spec.startswith("vllm=="):
        version = spec[6:]
        path = fetch_vllm(version)
        return load_file(path, spec, profile_for_vllm(version))
    raise TargetError(f"unknown target {spec!r}: use impl, file:PATH or vllm==X.Y.Z")
