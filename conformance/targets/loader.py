"""Loading targets: ``impl``, ``file:PATH`` and ``vllm==X.Y.Z``.

A *file target* is any Python module file that defines the vLLM-compatible
classes ``SingleWriterShmRingBuffer`` and ``SingleWriterShmObjectStorage``.  It
is executed in isolation: while it loads, ``torch`` and ``vllm.logger`` are
satisfied by minimal stand-ins, and afterwards ``sys.modules`` is restored
exactly (neither the stand-ins nor the module itself stay registered).

A *vllm target* needs one file of that release's wheel,
``vllm/distributed/device_communicators/shm_object_storage.py``, kept in the
user cache (``$SHMSPEC_CACHE_DIR`` or ``~/.cache/shmspec``, as
``vllm/<version>/shm_object_storage.py``, with ``fetch.json`` beside it
recording how it was fetched); the file is then loaded as a file target.
Fetching it:

1. **Range fetch** (first): the release's files are looked up in the index's
   JSON API (``$SHMSPEC_INDEX_URL``, default ``https://pypi.org/pypi``: the
   project page ``<index>/vllm/json``), one wheel is chosen (x86_64 or ``any``
   first) and read through HTTP Range requests (:class:`HttpRangeFile` under
   the stdlib ``zipfile``): only the end of the archive, its central directory
   and the one member are transferred (a few hundred kB of a 250-500 MB
   wheel).  zipfile checks the member's CRC-32.
2. **pip** (fallback, when the JSON API or range requests fail): ``pip
   download --no-deps`` of the whole wheel into a temporary directory (pip's
   own index configuration applies), the member extracted, the wheel deleted.

Errors: :class:`TargetError` (a usage or infrastructure problem; the CLI exits
with status 2 and prints its one-line message).
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from typing import Any
import types
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from shmspec.model.profile import IMPL, PROFILES, VLLM_0_11, VLLM_0_12, VLLM_0_15, VLLM_0_32, Profile, profile_for_vllm

from ..core import paths
from ..core.errors import ShmspecError, TargetError  # noqa: F401 - TargetError re-exported (its home before 2026-12-02)

STORE_FILE = "vllm/distributed/device_communicators/shm_object_storage.py"
REQUIRED = ("SingleWriterShmRingBuffer", "SingleWriterShmObjectStorage")


class NoStoreFile(TargetError):
    """The release exists but ships no store file (no wheel, or a wheel without it)."""


DEFAULT_INDEX_URL = "https://pypi.org/pypi"
HTTP_TIMEOUT = 30.0
"""Seconds to wait for each HTTP connection or read."""


@dataclass
class LoadedTarget:
    """A loaded target: its spec string, module (holding the classes), model profile
    and, for file and vllm targets, the source file."""

    spec: str
    module: ModuleType
    profile: Profile
    source: Path | None = None
    contract: Any = None
    """The contract its module declares (``SHMSPEC_CONTRACT``,
    :mod:`~shmspec.conformance.core.contract`), already applied to ``profile``;
    None when it declares none."""

    def __reduce__(self):
        # A spawned worker gets the target by its spec and loads it afresh
        # (a module is not picklable); the profile travels as it is.
        return (_reload, (self.spec, self.profile, self.contract))

    @property
    def ring_cls(self):
        return self.module.SingleWriterShmRingBuffer

    @property
    def storage_cls(self):
        return self.module.SingleWriterShmObjectStorage


cache_dir = paths.cache_dir  # the old name (``$SHMSPEC_CACHE_DIR`` or the user cache)


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


TARGET_FORMS = ("use impl, impl-leased, file:PATH or vllm==X.Y.Z (the object store); impl-queue, queue:file:PATH, "
                "vllm-queue==X.Y.Z or sglang-queue==X.Y.Z (the broadcast queue); impl-arena, arena:file:PATH or "
                "vllm-arena==X.Y.Z (the tensor arena); queue:/arena:impl-file:PATH (a seeded fault)")
"""Every target form, for the message that answers an unknown one."""


def load_file(path: str | Path, spec: str | None = None, profile: Profile | None = None) -> LoadedTarget:
    """Execute a module file in isolation and check it defines the classes.

    Raises:
        TargetError: the file is missing, fails to import, lacks the classes,
            or holds a slot-flag store (the message names ``queue:file:`` or
            ``arena:file:``).
    """
    path = Path(path)
    if not path.is_file():
        raise TargetError(f"target file not found: {path}")
    from .slotfiles import STORE_NAMES, store_kind

    found = store_kind(path)
    if found in ("queue", "arena"):
        raise TargetError(f"{path} holds {STORE_NAMES[found]}, a slot-flag store: use --target {found}:file:{path}")
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
    profile = profile or detect_profile(module)
    declared = getattr(module, "SHMSPEC_CONTRACT", None)
    contract = None
    if declared is not None:  # the module's own contract (docs/ci.md#contracts)
        from ..core.contract import parse
        from ..core.errors import UsageError
        try:
            contract = parse(declared, profile, f"SHMSPEC_CONTRACT in {path}")
        except UsageError as exc:
            raise TargetError(str(exc)) from None
        profile = contract.apply(profile)
    return LoadedTarget(spec or f"file:{path}", module, profile, path, contract)


def index_url() -> str:
    """Base URL of the package index's JSON API (``$SHMSPEC_INDEX_URL``, default PyPI's)."""
    return (os.environ.get("SHMSPEC_INDEX_URL") or DEFAULT_INDEX_URL).rstrip("/")


def _user_agent() -> str:
    import shmspec

    return f"shmspec/{shmspec.__version__} (+urllib)"


def get_json(url: str, timeout: float = HTTP_TIMEOUT) -> dict:
    """GET ``url`` and parse it as JSON.

    Raises:
        TargetError: unreachable, an HTTP error status, or not JSON.
    """
    req = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": _user_agent()})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise TargetError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise TargetError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None
    except ValueError as exc:
        raise TargetError(f"{url}: not JSON ({exc})") from None


class RangeUnsupported(TargetError):
    """The server answered a Range request with the whole file (or not at all with a part)."""


class HttpRangeFile(io.RawIOBase):
    """A read-only, seekable file over HTTP Range requests (no Content-Length
    trust: the size comes from the first response's ``Content-Range``).

    The first request fetches the last ``tail`` bytes (where a zip archive's
    end record and usually its central directory are) and keeps them; every
    other read is one ``Range: bytes=a-b`` request.  Wrap it in
    ``io.BufferedReader`` (see :func:`open_remote_zip`) so small reads are
    coalesced.  ``bytes_fetched`` and ``requests`` count what went over the
    wire.  Each request honours ``timeout`` (seconds).

    Raises (from the constructor and reads):
        RangeUnsupported: the server ignores Range (HTTP 200) or sends no
            usable ``Content-Range``; nothing more than the headers is read.
        TargetError: unreachable, timed out, an HTTP error, or a short body.
    """

    def __init__(self, url: str, timeout: float = HTTP_TIMEOUT, tail: int = 1 << 16) -> None:
        super().__init__()
        self.url = url
        self.timeout = timeout
        self.bytes_fetched = 0
        self.requests = 0
        self._pos = 0
        data, start, total = self._get(f"-{tail}")
        self.size = total
        self._tail_start = start
        self._tail = data

    def _get(self, spec: str) -> tuple[bytes, int, int]:
        """One request for ``bytes=<spec>``; returns (body, first byte, file size)."""
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={spec}", "Accept-Encoding": "identity",
                                                        "User-Agent": _user_agent()})
        self.requests += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                if resp.status != 206:
                    raise RangeUnsupported(f"{self.url}: range requests not supported (HTTP {resp.status})")
                m = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+)\s*", resp.headers.get("Content-Range", ""))
                if not m:
                    raise RangeUnsupported(f"{self.url}: HTTP 206 without a usable Content-Range")
                first, last, total = (int(g) for g in m.groups())
                body = resp.read()
        except urllib.error.HTTPError as exc:
            raise TargetError(f"{self.url}: HTTP {exc.code} {exc.reason} for range {spec}") from None
        except (urllib.error.URLError, OSError) as exc:  # includes timeouts and IncompleteRead's OSErrors
            raise TargetError(f"cannot fetch {self.url}: {getattr(exc, 'reason', exc)}") from None
        self.bytes_fetched += len(body)
        if len(body) != last - first + 1:
            raise TargetError(f"{self.url}: short response for range {spec} ({len(body)} of {last - first + 1} bytes)")
        return body, first, total

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise OSError(22, "negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, b) -> int:
        n = min(len(b), self.size - self._pos)
        if n <= 0:
            return 0
        if self._pos >= self._tail_start:  # inside the kept tail
            off = self._pos - self._tail_start
            chunk = self._tail[off:off + n]
        else:  # stop where the kept tail begins; the caller reads on
            chunk, _, _ = self._get(f"{self._pos}-{min(self._pos + n, self._tail_start) - 1}")
        b[:len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)


def read_remote_member(url: str, member: str, timeout: float = HTTP_TIMEOUT,
                       buffer_size: int = 1 << 17) -> tuple[bytes, HttpRangeFile]:
    """The bytes of ``member`` of the zip archive at ``url``, read with Range
    requests (end record, central directory, the member).  Returns them and
    the :class:`HttpRangeFile` (its ``bytes_fetched``, ``requests``, ``size``).

    Raises:
        NoStoreFile: the archive has no such member.
        RangeUnsupported: the server does not honour Range.
        TargetError: unreachable, HTTP error, or not a valid zip (CRC included).
    """
    raw = HttpRangeFile(url, timeout)
    try:
        with zipfile.ZipFile(io.BufferedReader(raw, buffer_size)) as zf:
            try:
                return zf.read(member), raw
            except KeyError:
                raise NoStoreFile(f"{url.rsplit('/', 1)[-1]} has no {member}") from None
    except zipfile.BadZipFile as exc:
        raise TargetError(f"{url}: not a valid wheel ({exc})") from None


def pick_wheel(files: list[dict]) -> dict | None:
    """The wheel to read from a release's files (PyPI JSON ``urls`` entries):
    x86_64 or pure-Python first, not yanked first, then the highest build tag;
    None when the release has no wheel.  Every wheel carries the same store file."""
    wheels = [f for f in files if f.get("filename", "").endswith(".whl")]
    if not wheels:
        return None

    def score(f: dict) -> tuple:
        parts = f["filename"][:-4].split("-")
        build = int(re.match(r"\d*", parts[2]).group() or 0) if len(parts) == 6 else 0
        plat = parts[-1]
        return ("x86_64" in plat or plat == "any", not f.get("yanked", False), build)

    return max(wheels, key=score)


def index_releases(index: str | None = None, project: str = "vllm") -> dict[str, list[dict]]:
    """Every release of ``project`` (default vLLM; ``sglang`` for its fork
    of the queue) on the index and its files, from the JSON API's project
    page ``<index>/<project>/json`` (its ``releases`` map; each file's
    ``url`` made absolute, as PyPI may give it relative to that page).

    Raises:
        TargetError: the JSON API is unreachable or has no ``releases``.
    """
    url = f"{(index or index_url()).rstrip('/')}/{project}/json"
    data = get_json(url)
    releases = data.get("releases")
    if not isinstance(releases, dict):
        raise TargetError(f"{url}: no 'releases' in the index's answer")
    return {v: [{**f, "url": urllib.parse.urljoin(url, f.get("url", ""))} for f in fs if isinstance(f, dict)]
            for v, fs in releases.items() if isinstance(fs, list)}


def _store_path(version: str, member: str = STORE_FILE, project: str = "vllm") -> Path:
    return cache_dir() / project / version / member.rsplit("/", 1)[-1]


def _record_path(dest: Path) -> Path:
    # the object store's record keeps its old name (fetch.json); another member's is <file>.fetch.json
    return dest.with_name("fetch.json" if dest.name == "shm_object_storage.py" else f"{dest.name}.fetch.json")


def _check_version(version: str, member: str = STORE_FILE) -> None:
    if not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", version):
        raise TargetError(f"not a vLLM release number: {version!r}")
    if member != STORE_FILE:  # other files (shm_broadcast.py) predate the object store
        return
    try:
        profile_for_vllm(version)
    except ValueError as exc:
        raise TargetError(str(exc)) from None


def fetch_store(version: str, files: list[dict] | None = None, index: str | None = None,
                member: str = STORE_FILE, project: str = "vllm") -> tuple[Path, dict]:
    """The store file of vLLM ``version`` (or another ``member`` of its
    wheel, e.g. ``vllm/distributed/device_communicators/shm_tensor_arena.py``,
    cached as ``vllm/<version>/<file name>``) and how it was obtained.

    From the cache if present; else by range fetch (``files``: the release's
    file entries with absolute URLs, from :func:`index_releases`, looked up
    there when not given), falling back to pip when the JSON API or range
    requests fail.  The record (also kept as ``fetch.json`` beside the file):
    ``method`` (``range`` or ``pip``; ``unknown`` for a file cached before
    records were kept), ``wheel`` (file name), ``wheel_bytes``,
    ``bytes_fetched`` and ``requests`` (range: what went over the wire), and
    ``cached`` (true: nothing was fetched now).  The record of a member
    other than the store file is ``<file name>.fetch.json``.  ``project``:
    another package's wheel (``sglang``: its ``shm_broadcast.py``), cached
    as ``<project>/<version>/<file name>``.

    Raises:
        NoStoreFile: the release has no wheel, or its wheel lacks the file.
        TargetError: bad version, or neither the range fetch nor pip worked.
    """
    if project == "vllm":
        _check_version(version, member)
    elif not re.fullmatch(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?", version):
        raise TargetError(f"not a {project} release number: {version!r}")
    dest = _store_path(version, member, project)
    record_path = _record_path(dest)
    if dest.is_file():
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            record = {"method": "unknown", "wheel": None, "wheel_bytes": None, "bytes_fetched": None, "requests": None}
        return dest, {**record, "cached": True}
    try:
        if files is None:
            files = index_releases(index, project).get(version)
            if files is None:
                raise TargetError(f"{project}=={version} is not on the index")
        wheel = pick_wheel(files)
        if wheel is None:
            raise NoStoreFile(f"{project}=={version} has no wheel on the index")
        data, raw = read_remote_member(wheel["url"], member)
        record = {"method": "range", "wheel": wheel["filename"], "wheel_bytes": raw.size,
                  "bytes_fetched": raw.bytes_fetched, "requests": raw.requests}
    except NoStoreFile:
        raise
    except TargetError as first:
        try:
            data, wheel_name, wheel_bytes = (_pip_fetch(version, member) if project == "vllm" else
                                             _pip_fetch(version, member, project))
        except NoStoreFile:
            raise
        except TargetError as second:
            raise TargetError(f"cannot fetch {project}=={version}: {first}; pip fallback: {second}") from None
        record = {"method": "pip", "wheel": wheel_name, "wheel_bytes": wheel_bytes, "bytes_fetched": wheel_bytes,
                  "requests": None, "range_error": str(first)}
    dest.parent.mkdir(parents=True, exist_ok=True)
    # each process writes its own temporary file, then renames it into place:
    # two processes fetching one release at once (pytest -n) never see a torn file
    tmp_dest = dest.with_suffix(f".{os.getpid()}.tmp")
    tmp_dest.write_bytes(data)
    tmp_dest.replace(dest)
    tmp_record = record_path.with_suffix(f".{os.getpid()}.tmp")
    tmp_record.write_text(json.dumps(record, indent=2) + "\n")
    tmp_record.replace(record_path)
    return dest, {**record, "cached": False}


def _pip_fetch(version: str, member: str = STORE_FILE, project: str = "vllm") -> tuple[bytes, str, int]:
    """The bytes of ``member`` (default: the store file), the wheel's name and size, by ``pip download``
    of the whole wheel into a temporary directory.

    Raises:
        NoStoreFile: the wheel lacks the file.
        TargetError: pip failed or timed out.
    """
    with tempfile.TemporaryDirectory(prefix="shmspec-wheel-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", tmp, f"{project}=={version}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise TargetError(f"pip download {project}=={version} timed out (registry unreachable?)") from None
        wheels = list(Path(tmp).glob(f"{project.replace('-', '_')}-*.whl"))
        if proc.returncode != 0 or not wheels:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise TargetError(f"cannot fetch {project}=={version} from the package registry: {last}")
        with zipfile.ZipFile(wheels[0]) as zf:
            try:
                return zf.read(member), wheels[0].name, wheels[0].stat().st_size
            except KeyError:
                raise NoStoreFile(f"{project}=={version} does not ship {member}") from None


def fetch_vllm(version: str) -> Path:
    """The store file of vLLM ``version``: cached, else range-fetched from the
    index's wheel, else via pip (see :func:`fetch_store`).

    Raises:
        TargetError: bad version, the registry unreachable (both ways), or the
            release ships no store file (:class:`NoStoreFile`).
    """
    return fetch_store(version)[0]


def _reload(spec: str, profile: Profile, contract: Any = None) -> LoadedTarget:
    """``load_target(spec)`` with the profile and contract the pickled target
    had (a spawned worker's or an executor task's copy of the controller's
    target)."""
    t = load_target(spec)
    if t.profile == profile and t.contract == contract:
        return t
    return LoadedTarget(t.spec, t.module, profile, t.source, contract)


def load_target(spec: "str | LoadedTarget") -> LoadedTarget:
    """Resolve a ``--target`` string (a target already loaded is returned as it is).

    Raises:
        TargetError: unknown form, or loading failed.
    """
    if isinstance(spec, LoadedTarget):
        return spec
    if spec == "impl":
        from shmspec import impl

        return LoadedTarget("impl", impl, IMPL)
    if spec == "impl-leased":  # impl with a lease time (the built-in file's docstring)
        return load_file(Path(__file__).resolve().parent / "builtin" / "impl_leased.py", spec)
    if spec.startswith("file:"):
        return load_file(spec[5:], spec)
    if spec.startswith("vllm=="):
        version = spec[6:]
        path = fetch_vllm(version)
        return load_file(path, spec, profile_for_vllm(version))
    raise TargetError(f"unknown target {spec!r}: {TARGET_FORMS}")
