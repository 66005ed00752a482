"""impl/ (segment v2) under resource limits, misuse and interruption.

* (a) a 256 KiB ``/dev/shm`` (a fresh tmpfs in a private mount namespace,
  ``unshare -m``): a ring that does not fit raises ``SharedMemoryFull`` (an
  ``OSError`` with ``ENOSPC`` naming the sizes) at construction, never SIGBUS
  later; a ring that fits works up to reclaim;
* (b) a reader built with another geometry than the writer's is refused
  (``GeometryMismatch``) with nothing left attached and no slot taken;
* (c) SW: two threads hammering one writer while a reader process reads;
* (d) SW: forked copies of a writer or a reader view raise ``WrongProcess``;
* (e) EXC: a ``KeyboardInterrupt`` injected (``sys.settrace``) at every
  'line' event inside impl's code during a put (fitting, and one that must
  reclaim), a free_unused, a clear, a get_cached and a reader's get.

Every wait is bounded; every test runs under a SIGALRM hard limit; every
segment made here is closed, and checked gone from ``/dev/shm``.
"""

from __future__ import annotations

import dis
import gc
import hashlib
import linecache
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import replace
from typing import Any, Callable

import multiprocess
import pytest

import shmspec.impl
from shmspec.conformance.targets.adapter import segment_exists
from shmspec.impl import SingleWriterShmObjectStorage, SingleWriterShmRingBuffer
from shmspec.impl import layout, readers
from shmspec.impl import ring as impl_ring
from shmspec.impl.signing import make_signature
from shmspec.model.errors import (DuplicateKey, GeometryMismatch, StaleHandle, TooManyReaders, UnknownKey,
                                  WrongProcess)

HARD_LIMIT = 60
IMPL_DIR = os.path.dirname(os.path.abspath(shmspec.impl.__file__)) + os.sep


@pytest.fixture(autouse=True)
def hard_limit():
    def on_alarm(signum, frame):
        raise TimeoutError(f"test exceeded its {HARD_LIMIT} s hard limit")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(HARD_LIMIT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def stores():
    """Factory ``make(B, max_object_size, n_readers=1)`` -> writer; everything
    made through it (and :func:`reader_of`) is closed afterwards and its
    segments checked gone."""
    made: list[Any] = []
    names: set[str] = set()

    def make(B: int, max_object_size: int, n_readers: int = 1, **ring_kw) -> SingleWriterShmObjectStorage:
        ring = SingleWriterShmRingBuffer(B, create=True, **ring_kw)
        try:
            w = SingleWriterShmObjectStorage(max_object_size, n_readers, ring)
        except BaseException:
            ring.close()
            raise
        made.append(w)
        names.update(segments_of(w))
        return w

    make.made = made
    yield make
    for s in reversed(made):
        s.close()
    left = [n for n in names if segment_exists(n)]
    for n in left:
        os.unlink(os.path.join("/dev/shm", n))
    assert not left, f"segments left behind: {left}"


def segments_of(writer) -> list[str]:
    ring = writer.ring_buffer
    return [ring.shared_memory.name.lstrip("/"), ring.reader_table.shm.name.lstrip("/")]


def reader_of(writer, made: list | None = None, **changes) -> SingleWriterShmObjectStorage:
    handle = replace(writer.handle(), reader_lock=threading.Lock(), **changes)
    view = SingleWriterShmObjectStorage.create_from_handle(handle)
    if made is not None:
        made.append(view)
    return view


def signature(writer, key: str, address: int, monotonic_id: int) -> list[int]:
    """The signature a writer issues for ``(key, address, id)`` of generation 0
    (what ``get_signature`` returns while the handle is the key's current one)."""
    return list(make_signature(writer.ring_buffer.get_auth_secret(), key, address, monotonic_id, 0))


def read(writer, reader, key):
    address, monotonic_id = writer.key_index[key]
    return reader.get(address, monotonic_id, writer.get_signature(key), key)


# ============================================== (a) a small /dev/shm (SHMFULL)
_SMALL_SHM_SCRIPT = r"""
import errno, os, sys, threading
from dataclasses import replace
from shmspec.impl import SingleWriterShmObjectStorage, SingleWriterShmRingBuffer
from shmspec.impl.layout import segment_size, table_size, default_max_chunks
from shmspec.model.errors import SharedMemoryFull

st = os.statvfs("/dev/shm")
assert st.f_blocks * st.f_frsize == 256 * 1024, st    # the private 256 KiB tmpfs
assert os.listdir("/dev/shm") == [], os.listdir("/dev/shm")

def expect_full(fn, nbytes):
    try:
        fn()
    except SharedMemoryFull as exc:
        assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC, exc
        assert str(nbytes) in str(exc) and "bytes free" in str(exc), str(exc)
        return str(exc)
    raise AssertionError("no SharedMemoryFull")

# 1 MiB ring: refused at construction, nothing left behind.
msg = expect_full(lambda: SingleWriterShmRingBuffer(1 << 20, create=True), segment_size(1 << 20))
assert os.listdir("/dev/shm") == [], os.listdir("/dev/shm")
print("BIG", msg, flush=True)

# A ring that fits, a reader table that does not: the table is refused, the
# ring stays the caller's, and a store that fits can then be built on it.
ring = SingleWriterShmRingBuffer(200 * 1024, create=True)
need = table_size(8, default_max_chunks(200 * 1024))
msg = expect_full(lambda: SingleWriterShmObjectStorage(60 * 1024, 8, ring), need)
assert os.listdir("/dev/shm") == [ring.shared_memory.name], os.listdir("/dev/shm")
print("TABLE", msg, flush=True)
w = SingleWriterShmObjectStorage(60 * 1024, 1, ring)
w.close()
assert os.listdir("/dev/shm") == []

# 64 KiB ring: 60 KB objects, one chunk at a time, every put after the first
# reclaims the previous one (read by the reader).
ring = SingleWriterShmRingBuffer(64 * 1024, create=True)
w = SingleWriterShmObjectStorage(62 * 1024, 1, ring)
r = SingleWriterShmObjectStorage.create_from_handle(replace(w.handle(), reader_lock=threading.Lock()))
assert sorted(os.listdir("/dev/shm")) == sorted([ring.shared_memory.name, ring.shared_memory.name + "_r"])
reclaims = 0
for i in range(12):
    value = bytes([i]) * 60_000
    h = w.put(f"k{i}", value)
    if i:
        assert f"k{i - 1}" not in w.key_index   # reclaimed to make room
        reclaims += 1
    assert r.get(*h, w.get_signature(f"k{i}"), f"k{i}") == value
free = os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize
r.close()
w.close()
assert os.listdir("/dev/shm") == []
print("SMALL", reclaims, free, flush=True)

# Control: the failure impl avoids.  A sparse 1 MiB segment (the standard
# library's SharedMemory, as vLLM creates its ring) is created fine, and the
# first write to a page tmpfs cannot back kills the writing process: SIGBUS.
from multiprocessing import resource_tracker, shared_memory
rfd, wfd = os.pipe()
pid = os.fork()
if pid == 0:
    shm = shared_memory.SharedMemory(create=True, size=1 << 20)
    resource_tracker.unregister(shm._name, "shared_memory")  # we unlink it ourselves
    os.write(wfd, shm.name.encode())
    for off in range(0, 1 << 20, 4096):
        shm.buf[off] = 1
    os._exit(0)
os.close(wfd)
_, status = os.waitpid(pid, 0)
name = os.read(rfd, 200).decode()
os.unlink("/dev/shm/" + name)
assert os.listdir("/dev/shm") == []
print("SPARSE", os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1, flush=True)
"""


def test_small_dev_shm_raises_shared_memory_full_not_sigbus():
    """``unshare -m``: a child gets a private 256 KiB tmpfs on /dev/shm.  A
    1 MiB ring raises SharedMemoryFull (OSError, ENOSPC, naming the 1048736
    bytes it needs and the bytes free) at construction and leaves nothing
    behind; a reader table that does not fit is refused the same way; a
    64 KiB ring works there, 60 KB objects reclaimed one after another, and
    the child exits normally (not SIGBUS: exit code 135 / -7).  Control: in
    the same namespace a sparse 1 MiB stdlib SharedMemory (how vLLM creates
    its ring) is created without error and its writer dies of SIGBUS."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("util-linux unshare/mount not available")
    shell = ('mount --make-rprivate / && mount -t tmpfs -o size=256k tmpfs /dev/shm || exit 77; '
             'exec "$0" -c "$1"')
    proc = subprocess.run(["unshare", "-m", "sh", "-c", shell, sys.executable, _SMALL_SHM_SCRIPT],
                          capture_output=True, text=True, timeout=50, cwd=os.path.dirname(IMPL_DIR.rstrip("/")))
    if proc.returncode == 77 or (proc.returncode == 1 and "unshare" in proc.stderr
                                 and ("not permitted" in proc.stderr or "Permission" in proc.stderr)):
        pytest.skip(f"no private mount namespace / tmpfs mount here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode not in (135, -signal.SIGBUS), f"child died of SIGBUS:\n{proc.stderr}"
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert str(layout.segment_size(1 << 20)) in lines["BIG"]
    reclaims, free = map(int, lines["SMALL"].split())
    assert reclaims == 11
    assert int(lines["SPARSE"]) == signal.SIGBUS  # the control: a sparse segment dies of SIGBUS there
    print(f"\n1 MiB ring: {lines['BIG']}\nreader table: {lines['TABLE']}\n"
          f"64 KiB ring: {reclaims} reclaims of 60 KB objects, {free} bytes still free")


# ======================================== (b) geometry mismatch (GeometryMismatch)
def shm_refs(name: str) -> tuple[int, int]:
    """(mappings, open descriptors) of /dev/shm/<name> in this process."""
    path = os.path.join("/dev/shm", name)
    with open("/proc/self/maps") as f:
        maps = sum(1 for line in f if line.rstrip().endswith(path))
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == path:
                fds += 1
        except OSError:
            continue
    return maps, fds


@pytest.mark.parametrize("field,value", [("data_buffer_size", 2048), ("data_buffer_size", 8192),
                                         ("n_readers", 1), ("n_readers", 3),
                                         ("max_object_size", 512), ("max_object_size", 2048)])
def test_reader_with_other_geometry_is_refused_and_leaves_nothing_attached(stores, field, value):
    writer = stores(4096, 1024, n_readers=2)
    ring_name, table_name = segments_of(writer)
    gc.collect()
    refs = (shm_refs(ring_name), shm_refs(table_name))
    if field == "data_buffer_size":
        changes = {"ring_buffer_handle": (value, writer.ring_buffer.shared_memory.name)}
    else:
        changes = {field: value}
    for _ in range(3):
        with pytest.raises(GeometryMismatch) as info:
            reader_of(writer, **changes)
        assert field in str(info.value) and str(value) in str(info.value)
        gc.collect()
        assert (shm_refs(ring_name), shm_refs(table_name)) == refs  # nothing attached
    if field == "data_buffer_size":
        with pytest.raises(GeometryMismatch):
            SingleWriterShmRingBuffer(value, writer.ring_buffer.shared_memory.name)
        gc.collect()
        assert (shm_refs(ring_name), shm_refs(table_name)) == refs
    # No slot was taken: both readers of the real geometry attach, a third is refused.
    r1, r2 = reader_of(writer, stores.made), reader_of(writer, stores.made)
    with pytest.raises(TooManyReaders):
        reader_of(writer)
    h = writer.put("k", b"v")
    for r in (r1, r2):
        assert r.get(*h, writer.get_signature("k"), "k") == b"v"
    assert writer.reads(h[1]) == (1, 1)


# ======================================= (c) two threads hammering one writer (SW)
def _value(key: str, seq: int, size: int) -> bytes:
    return (hashlib.sha256(f"{key}:{seq}".encode()).digest() * (size // 32 + 1))[:size]


def _hammer_reader(handle, lock, inbox, outbox) -> None:
    view = SingleWriterShmObjectStorage.create_from_handle(replace(handle, reader_lock=lock))
    counts = Counter()
    examples = []
    while True:
        try:
            item = inbox.get(timeout=10)
        except Exception:  # noqa: BLE001 - the writer side is gone
            counts["reader_idle_timeout"] += 1
            break
        if item is None:
            break
        key, seq, size, address, monotonic_id, sig = item
        try:
            got = view.get(address, monotonic_id, sig, key)
        except StaleHandle:
            counts["stale"] += 1
            continue
        except Exception as exc:  # noqa: BLE001
            counts["other_error"] += 1
            examples.append(f"{key}@{address}:{monotonic_id}: {type(exc).__name__}: {exc}")
            continue
        if got == _value(key, seq, size):
            counts["ok"] += 1
        else:
            counts["wrong"] += 1
            examples.append(f"{key}@{address}:{monotonic_id}: wrong object")
    view.close()
    outbox.put((dict(counts), examples[:10]))


def check_writer_consistent(w) -> list[str]:
    """SW invariants, read with the writer's own lock held (no operation in flight)."""
    problems = []
    ring = w.ring_buffer
    with w._wlock:
        ki, ii, wf = dict(w.key_index), dict(w.id_index), dict(w.writer_flag)
        md = dict(ring.metadata)
        ctl = ring.control
        if ii != {i: k for k, (_, i) in ki.items()}:
            problems.append(f"id_index is not key_index's inverse: {ii} vs {ki}")
        if md != {i: a for _, (a, i) in ki.items()}:
            problems.append(f"key_index chunks {ki} are not the live chunks {md}")
        if set(wf) != set(md):
            problems.append(f"writer_flag ids {sorted(wf)} != live ids {sorted(md)}")
        if ring._abs_end - ring._abs_start != len(md):
            problems.append(f"abs [{ring._abs_start}, {ring._abs_end}) holds {len(md)} chunks")
        if any(not ring._abs_start <= ring.abs_of(i) < ring._abs_end for i in md):
            problems.append("a live id outside [abs_start, abs_end)")
        if (ctl[layout.CTL_ABS_START], ctl[layout.CTL_ABS_END]) != (ring._abs_start, ring._abs_end):
            problems.append("published abs_start/abs_end differ from the writer's")
        if ctl[layout.CTL_DRAIN_SEQ] & 1:
            problems.append("drain window left mid-update")
    return problems


@pytest.mark.slow
def test_two_threads_hammering_one_writer_stay_consistent(stores):
    """Two threads use one writer at once for 3 s (puts of 48 random keys,
    get_cached, get_signature, touch, release_touches, free_unused, and a
    clear every 0.25 s)
    while a reader process reads every handle they issue.  The only
    exceptions are the expected OutOfSpace (MemoryError), DuplicateKey, and
    UnknownKey for get_cached / get_signature of a key another thread just
    dropped.  A third thread checks the writer's indexes, with the writer's
    own lock held, about every 2 ms: key_index and id_index are inverse,
    every key's chunk is live in the ring's metadata, writer_flag's ids are
    the live ids, the published counters are the writer's.  The reader gets
    only right objects or StaleHandle."""
    writer = stores(16 * 1024, 1024, n_readers=1)
    ctx = multiprocess.get_context("fork")
    lock = ctx.Lock()
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_hammer_reader, args=(writer.handle(), lock, inbox, outbox), daemon=True)
    proc.start()  # before any thread of ours exists
    stop = threading.Event()
    ops: Counter = Counter()
    unexpected: list[str] = []
    problems: list[str] = []
    seqs = Counter()
    seq_lock = threading.Lock()
    sizes: dict = {}
    last_clear = [time.monotonic()]

    def send(key: str, seq: int, size: int, h) -> None:
        inbox.put((key, seq, size, h[0], h[1], signature(writer, key, *h)))

    def do_put(rng: random.Random) -> None:
        key = f"k{rng.randrange(48)}"
        size = rng.randrange(1, 900)
        with seq_lock:
            seqs[key] += 1
            seq = seqs[key]
        try:
            h = writer.put(key, _value(key, seq, size))
        except (MemoryError, DuplicateKey) as exc:
            ops[f"put:{type(exc).__name__}"] += 1
            return
        ops["put"] += 1
        send(key, seq, size, h)
        sizes[(key, h)] = (seq, size)

    def do_cached(rng: random.Random) -> None:
        key = f"k{rng.randrange(48)}"
        try:
            h = writer.get_cached(key)
        except UnknownKey:
            ops["get_cached:UnknownKey"] += 1
            return
        ops["get_cached"] += 1
        meta = sizes.get((key, h))
        if meta is not None:
            send(key, meta[0], meta[1], h)

    def worker(seed: int, weights: dict[str, float]) -> None:
        rng = random.Random(seed)
        names, w = zip(*weights.items())
        while not stop.is_set():
            op = rng.choices(names, w)[0]
            try:
                if op == "put":
                    do_put(rng)
                elif op == "get_cached":
                    do_cached(rng)
                elif op == "get_signature":
                    try:
                        writer.get_signature(f"k{rng.randrange(48)}")
                        ops["get_signature"] += 1
                    except UnknownKey:
                        ops["get_signature:UnknownKey"] += 1
                elif op == "touch":
                    writer.touch(f"k{rng.randrange(48)}")
                    ops["touch"] += 1
                elif op == "release_touches":
                    writer.release_touches()
                    ops["release_touches"] += 1
                elif op == "free_unused":
                    writer.free_unused()
                    ops["free_unused"] += 1
                elif op == "clear":
                    if time.monotonic() - last_clear[0] > 0.25:  # a few clears a second
                        last_clear[0] = time.monotonic()
                        writer.clear()
                        ops["clear"] += 1
                    else:
                        writer.free_unused()
                        ops["free_unused"] += 1
            except Exception as exc:  # noqa: BLE001
                unexpected.append(f"{op}: {type(exc).__name__}: {exc}")
                if len(unexpected) > 20:
                    stop.set()

    def checker() -> None:
        while not stop.is_set():
            problems.extend(check_writer_consistent(writer))
            ops["consistency_checks"] += 1
            if problems:
                stop.set()
            time.sleep(0.001)

    threads = [threading.Thread(target=worker, args=(1, {"put": 10, "get_cached": 3, "get_signature": 1,
                                                         "touch": 2, "release_touches": 1}),
                                daemon=True),
               threading.Thread(target=worker, args=(2, {"put": 6, "get_cached": 2, "free_unused": 3,
                                                         "touch": 1, "release_touches": 1, "clear": 1}),
                                daemon=True),
               threading.Thread(target=checker, daemon=True)]
    try:
        for t in threads:
            t.start()
        stop.wait(3.0)
        stop.set()
        for t in threads:
            t.join(10)
        assert not [t for t in threads if t.is_alive()], "a writer thread did not finish within 10 s"
        inbox.put(None)
        counts, examples = outbox.get(timeout=30)
        proc.join(10)
    finally:
        stop.set()
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    problems.extend(check_writer_consistent(writer))
    print(f"\nops: {dict(ops)}\nreader: {counts}")
    assert not unexpected, unexpected
    assert not problems, problems
    assert counts.get("wrong", 0) == 0 and counts.get("other_error", 0) == 0, (counts, examples)
    assert counts.get("ok", 0) > 100 and ops["put"] > 100 and ops["clear"] > 0 and ops["free_unused"] > 0
    # Still usable.
    writer.clear()
    h = writer.put("final", b"x" * 10)
    r = reader_of(writer, stores.made)
    assert r.get(*h, writer.get_signature("final"), "final") == b"x" * 10


# ============================================== (d) forked copies (WrongProcess)
def _in_child(fn: Callable[[], str]) -> str:
    """Run ``fn`` in a forked child (which never returns into pytest) and
    return what it reported (or the exception it raised)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(rfd)
            try:
                msg = fn()
            except BaseException as exc:  # noqa: BLE001
                msg = f"raised {type(exc).__name__}: {exc}"
            os.write(wfd, msg.encode()[:4000])
        finally:
            os._exit(0)
    os.close(wfd)
    deadline = time.monotonic() + 10
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("forked child did not finish within 10 s")
        time.sleep(0.01)
    with os.fdopen(rfd, "rb") as f:
        return f.read().decode()


def test_forked_writer_copy_raises_wrong_process_parent_keeps_working(stores):
    writer = stores(4096, 1024, n_readers=1)
    reader = reader_of(writer, stores.made)
    h0 = writer.put("a", b"A")

    def child() -> str:
        out = []
        for name, op in (("put", lambda: writer.put("b", b"B")), ("clear", writer.clear),
                         ("free_unused", writer.free_unused), ("get_cached", lambda: writer.get_cached("a"))):
            try:
                op()
                out.append(f"{name}: ok")
            except WrongProcess as exc:
                out.append(f"{name}: WrongProcess {exc.owner_pid}")
        return "; ".join(out)

    got = _in_child(child)
    assert got == "; ".join(f"{n}: WrongProcess {os.getpid()}" for n in ("put", "clear", "free_unused",
                                                                             "get_cached")), got
    # The parent: unchanged, and it keeps working.
    assert writer.key_index == {"a": h0} and writer.writer_flag == {h0[1]: 1}
    assert read(writer, reader, "a") == b"A"
    h1 = writer.put("b", b"B")
    assert read(writer, reader, "b") == b"B"
    assert h1 == (h0[0] + writer.ring_buffer.chunk_size(h0[1]), 1)


def test_forked_reader_copy_raises_wrong_process_parent_keeps_its_slot(stores):
    writer = stores(4096, 1024, n_readers=1)
    reader = reader_of(writer, stores.made)
    h = writer.put("a", b"A")
    sig = writer.get_signature("a")

    def child() -> str:
        try:
            reader.get(*h, sig, "a")
            res = "get: ok"
        except WrongProcess as exc:
            res = f"get: WrongProcess {exc.owner_pid}"
        reader.close()  # the copy's close gives back nothing of the parent's
        return res

    assert _in_child(child) == f"get: WrongProcess {os.getpid()}"
    assert writer.reads(h[1]) == (0,)
    assert reader.get(*h, sig, "a") == b"A"  # the parent's view still reads, in its slot
    assert writer.reads(h[1]) == (1,)
    assert writer.ring_buffer.reader_table.alive(0)
    with pytest.raises(TooManyReaders):  # the slot is still the parent's
        reader_of(writer)


@pytest.mark.parametrize("how", ["close", "interpreter_exit"])
def test_forked_writer_copy_going_away_does_not_unlink_parents_segments(stores, how):
    """A forked child whose copy of the writer goes away -- an explicit
    ``close()``, or a normal interpreter exit (which finalizes the copy: the
    ring's ``__del__`` closes it) -- must not unlink the parent's live
    segments: the copy raises WrongProcess on every operation, it does not
    own the store.  (A child that ends with ``os._exit``, as multiprocessing's
    fork children do, runs no finalizer and is not affected.)"""
    if how == "interpreter_exit":
        code = ("import os, sys\n"
                "from shmspec.impl import SingleWriterShmRingBuffer, SingleWriterShmObjectStorage\n"
                "w = SingleWriterShmObjectStorage(1024, 1, SingleWriterShmRingBuffer(4096, create=True))\n"
                "names = [w.ring_buffer.shared_memory.name, w.ring_buffer.reader_table.shm.name]\n"
                "print(*names, flush=True)\n"
                "if os.fork() == 0:\n"
                "    sys.exit(0)  # the child: a normal exit\n"
                "os.wait()\n"
                "print(*[os.path.exists('/dev/shm/' + n) for n in names], flush=True)\n"
                "w.close()\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        first, second = out.stdout.splitlines()
        names = first.split()
        for n in names:
            if segment_exists(n):
                os.unlink(os.path.join("/dev/shm", n))
        assert second.split() == ["True", "True"], (
            f"the child's interpreter exit unlinked the parent's live segments {names}: {second}")
        return
    writer = stores(4096, 1024, n_readers=1)
    names = segments_of(writer)
    h = writer.put("a", b"A")

    def child() -> str:
        writer.close()
        return "done"

    assert _in_child(child) == "done"
    gone = [n for n in names if not segment_exists(n)]
    assert not gone, f"the child's copy.close() unlinked the parent's live segments {gone}"
    r = reader_of(writer, stores.made)
    assert r.get(*h, writer.get_signature("a"), "a") == b"A"


# ======================================== (e) asynchronous exceptions (EXC)
_BREAKER_OPS = frozenset({"CALL", "CALL_FUNCTION_EX", "JUMP_BACKWARD", "POP_JUMP_BACKWARD_IF_FALSE",
                          "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
                          "RESUME"})
"""CPython 3.11 instructions after which the interpreter checks for pending
signals (its "eval breaker"): the only places where a real asynchronous
``KeyboardInterrupt`` (raised by the SIGINT handler) appears in a frame."""

_NEUTRAL_OPS = frozenset({
    "NOP", "CACHE", "EXTENDED_ARG", "POP_TOP", "PUSH_NULL", "COPY", "SWAP", "LOAD_FAST", "LOAD_CONST",
    "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_ATTR", "LOAD_METHOD", "STORE_FAST", "KW_NAMES", "PRECALL",
    "COMPARE_OP", "IS_OP", "CONTAINS_OP", "BINARY_OP", "BINARY_SUBSCR", "UNARY_NOT", "UNARY_NEGATIVE",
    "BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP", "BUILD_SLICE", "BUILD_STRING", "FORMAT_VALUE", "UNPACK_SEQUENCE",
    "GET_ITER", "FOR_ITER", "JUMP_FORWARD", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP",
    "RETURN_VALUE",
})
"""Instructions that change nothing but the frame's own stack and locals."""


def _handler(code, offset: int):
    """The exception-table entry covering ``offset`` (None: no handler in this frame)."""
    for entry in dis._parse_exception_table(code):
        if entry.start <= offset < entry.end:
            return (entry.target, entry.depth, entry.lasti)
    return None


class Injector:
    """``sys.settrace`` function raising KeyboardInterrupt at the ``n``-th
    'line' event inside impl's code (``n = 0``: never; count only).

    Each injection is classified.  It is *signal-reachable* when a real
    SIGINT could leave the program in exactly that state: since the frame's
    last signal check (an instruction of :data:`_BREAKER_OPS`, or the
    function's entry) only frame-local instructions ran (:data:`_NEUTRAL_OPS`),
    and the exception handler covering the line's first instruction is the
    one that covers that signal check.  Otherwise it is *trace-only*: e.g. the
    NOP of a ``try:`` line or the exit code of a ``with`` statement (both
    outside the enclosing handler's range in CPython 3.11, where no signal
    can be taken), or a line right after an attribute store that no signal
    check separates from the next call.
    """

    def __init__(self, n: int = 0):
        self.n = n
        self.count = 0
        self.where: tuple | None = None
        self.signal_reachable = False
        self._frames: dict[int, list] = {}  # id(frame) -> [pending offset, last breaker offset, dirty]

    def __call__(self, frame, event, arg):
        if frame.f_code.co_filename.startswith(IMPL_DIR):
            if self.n:
                frame.f_trace_opcodes = True
                self._frames[id(frame)] = [None, 0, False]
            return self.local
        return None

    def _commit(self, frame, state) -> None:
        """The instruction at ``state[0]`` has executed: note a signal check or a side effect."""
        if state[0] is None:
            return
        op = dis.opname[frame.f_code.co_code[state[0]]]
        if op in _BREAKER_OPS:
            state[1], state[2] = state[0], False
        elif op not in _NEUTRAL_OPS:
            state[2] = True
        state[0] = None

    def local(self, frame, event, arg):
        state = self._frames.get(id(frame)) if self.n else None
        if event == "opcode":
            if state is not None:
                self._commit(frame, state)
                state[0] = frame.f_lasti
        elif event == "line":
            if state is not None:
                self._commit(frame, state)
            self.count += 1
            if self.count == self.n:
                code = frame.f_code
                self.signal_reachable = (not state[2]) and _handler(code, frame.f_lasti) == _handler(code, state[1])
                text = linecache.getline(code.co_filename, frame.f_lineno).strip()
                self.where = (os.path.basename(code.co_filename), frame.f_lineno, code.co_name, text,
                              "dirty" if state[2] else dis.opname[code.co_code[state[1]]])
                raise KeyboardInterrupt(f"injected at line event {self.n}")
        elif event == "return":
            self._frames.pop(id(frame), None)
        return self.local

    @property
    def label(self) -> str:
        f, line, fn, text, why = self.where
        if self.signal_reachable:
            kind = "signal-reachable"
        elif why == "dirty":
            kind = "trace-only: a side effect since the last signal check"
        else:
            kind = f"trace-only: other handler than at the last signal check ({why})"
        return f"#{self.n} {f}:{line} {fn}: {text!r} [{kind}]"


def run_traced(fn: Callable[[], Any], injector: Injector) -> tuple[bool, Any]:
    """``(completed, result)``.  The KeyboardInterrupt is dropped here with
    its traceback (whose frames would keep views of the segments exported)."""
    old = sys.gettrace()
    sys.settrace(injector)
    try:
        return True, fn()
    except KeyboardInterrupt:
        return False, None
    finally:
        sys.settrace(old)


VALUE_SIZE = 100
EXC_B = 1024
EXC_MAX_OBJECT = 256


def value_of(key: str) -> bytes:
    return (key.encode() * VALUE_SIZE)[:VALUE_SIZE]


def full_state(w) -> dict:
    """What must be exactly as before or as after: indexes, touches, ring
    pointers and ids, chunk metadata and ack bases, published control words."""
    ring = w.ring_buffer
    ctl = ring.control
    return {
        "key_index": dict(w.key_index),  # settles an interrupted change first
        "id_index": dict(w.id_index),
        "writer_flag": dict(w.writer_flag),
        "touched": sorted(w._touched),
        "ring": (ring.data_buffer_start, ring.data_buffer_end, ring.monotonic_id_start, ring.monotonic_id_end),
        "metadata": dict(ring.metadata),
        "sizes": dict(ring._sizes),
        "ack_bases": dict(ring._base),
        "published": {n: ctl[getattr(layout, "CTL_" + n.upper())]
                      for n in ("abs_start", "abs_end", "drain_lo", "drain_hi", "drain_hw")},
        "drain_seq_odd": ctl[layout.CTL_DRAIN_SEQ] & 1,
    }


class Scenario:
    """A fresh store (one reader, in this process), a setup, and the operation under test."""

    def __init__(self, name: str, setup: Callable, op: Callable, op_key: str | None = None):
        self.name, self.setup, self.op, self.op_key = name, setup, op, op_key

    def build(self, stores_made: list):
        ring = SingleWriterShmRingBuffer(EXC_B, create=True)
        w = SingleWriterShmObjectStorage(EXC_MAX_OBJECT, 1, ring)
        r = reader_of(w)
        stores_made.extend([r, w])
        self.setup(w, r)
        return w, r


def _put(w, key):
    return w.put(key, value_of(key))


def _read(w, r, key):
    assert read(w, r, key) == value_of(key)


def _fill(w, r):
    i = 0
    while True:
        try:
            _put(w, f"k{i}")
        except MemoryError:
            return i
        i += 1


def setup_put(w, r):
    _put(w, "a")
    _put(w, "b")
    _read(w, r, "a")


def setup_put_reclaim(w, r):
    _fill(w, r)  # nobody has read anything: the put that does not fit raises and changes nothing
    for i in range(3):
        _read(w, r, f"k{i}")  # k0..k2 reclaimable, k3 on not


def setup_free(w, r):
    for i in range(5):
        _put(w, f"k{i}")
    for i in range(3):
        _read(w, r, f"k{i}")
    w.touch("k4")


def setup_clear(w, r):
    for i in range(3):
        _put(w, f"k{i}")
    _read(w, r, "k0")
    w.clear()
    _put(w, "n0")
    _put(w, "n1")
    _read(w, r, "n0")


SCENARIOS = {
    "put": Scenario("put", setup_put, lambda w, r: _put(w, "c"), "c"),
    "put_reclaim": Scenario("put_reclaim", setup_put_reclaim, lambda w, r: _put(w, "new"), "new"),
    "free_unused": Scenario("free_unused", setup_free, lambda w, r: w.free_unused()),
    "clear": Scenario("clear", setup_clear, lambda w, r: w.clear()),
    "get_cached": Scenario("get_cached", setup_put, lambda w, r: w.get_cached("b")),
}


def lock_free_elsewhere(lock, timeout: float = 0.2) -> bool:
    got = []

    def probe():
        ok = lock.acquire(timeout=timeout)
        got.append(ok)
        if ok:
            lock.release()

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 5)
    return bool(got and got[0])


def check_usable(w, r, sc: Scenario) -> list[str]:
    """Every cached key reads back its own object; the op's key can be put
    (again) if it is not cached; a fresh put and read work."""
    problems = []
    for key in list(w.key_index):
        try:
            got = read(w, r, key)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"cached {key!r} unreadable: {type(exc).__name__}: {exc}")
            continue
        if got != value_of(key):
            problems.append(f"cached {key!r} reads a wrong object")
    for key in filter(None, [sc.op_key, "fresh"]):
        if key in w.key_index:
            continue
        try:
            w.free_unused()
            _put(w, key)
            _read(w, r, key)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"put/read of {key!r} after the injection: {type(exc).__name__}: {exc}")
    problems += check_writer_consistent(w)
    return problems


def close_all(w, r) -> None:
    names = segments_of(w)
    r.close()
    w.close()
    assert not [n for n in names if segment_exists(n)]


def explore(sc: Scenario, made: list) -> dict:
    """Inject at every line event of ``sc.op``; returns a summary."""
    w, r = sc.build(made)
    before = full_state(w)
    # The reference run: the states after each committed change (intent) of the op.
    steps: list[tuple[str, dict]] = []
    do = w._do

    def spy(intent):
        do(intent)
        steps.append((intent[0], full_state(w)))

    w._do = spy
    counter = Injector(0)
    done, _ = run_traced(lambda: sc.op(w, r), counter)
    del w._do
    assert done
    after = full_state(w)
    assert after != before
    close_all(w, r)
    points = counter.count
    outcomes: Counter = Counter()
    reachable = 0
    failures: list[str] = []
    artifacts: list[str] = []
    n = 0
    while True:
        n += 1
        w, r = sc.build(made)
        assert full_state(w) == before
        inj = Injector(n)
        completed, res = run_traced(lambda: sc.op(w, r), inj)
        if inj.where is None:
            assert completed, res
            assert full_state(w) == after
            break
        where = inj.label
        reachable += inj.signal_reachable
        problems = []
        if completed:
            problems.append("KeyboardInterrupt swallowed: the operation returned normally")
        if readers._FENCE_LOCK.locked():
            problems.append("readers._FENCE_LOCK left held: every later fence() of this process blocks for ever")
            readers._FENCE_LOCK.release()
        if not lock_free_elsewhere(w._wlock):
            problems.append("the writer's lock is left held: other threads' writer operations block for ever")
        if getattr(w, "_depth", 0) != 0:
            problems.append(f"writer operation depth left at {w._depth}: interrupted changes are never settled")
        state = full_state(w)
        if state == before:
            outcomes["as before"] += 1
        elif state == after:
            outcomes["as after"] += 1
        else:
            step = next((f"#{i + 1} of {len(steps)} ({kind})" for i, (kind, st) in enumerate(steps)
                         if st == state), None)
            if step is not None and "(reclaim)" in step:
                # impl's contract: a put's reclaim is a free_unused of its own (vLLM's put
                # frees, then allocates once more); interrupted after it, the put leaves the
                # reclaim done (only chunks whose every read was made) and is otherwise as before
                outcomes["as after its reclaim only"] += 1
            elif step is not None:
                outcomes[f"as after committed change {step} only"] += 1
                problems.append(f"state neither as before nor as after: as after the op's committed change "
                                f"{step} only")
            else:
                diff = {k: (before[k], state[k], after[k]) for k in state if state[k] not in (before[k], after[k])}
                outcomes["neither (inconsistent)"] += 1
                problems.append(f"state neither as before nor as after nor after any committed change; "
                                f"(before, now, after) where it matches neither: {diff}")
        problems += check_usable(w, r, sc)
        if problems:
            (failures if inj.signal_reachable else artifacts).append(f"{where}: " + "; ".join(problems))
        # a leaked RLock is this thread's: give it back so close() and the next store are unaffected
        while w._wlock._is_owned():
            w._wlock.release()
        close_all(w, r)
    close_all(w, r)
    return {"points": points, "reachable": reachable, "outcomes": dict(outcomes), "failures": failures,
            "artifacts": artifacts}


@pytest.fixture
def exc_made():
    made: list = []
    yield made
    for s in reversed(made):  # close_all already closed (and checked) all but a failing test's last store
        s.close()


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_keyboard_interrupt_at_every_line_leaves_store_before_or_after(exc_made, name):
    """EXC: for every N, KeyboardInterrupt at the N-th 'line' event inside
    impl's code during the operation (a fresh store each time), until the
    operation completes without an injection.  After each injection (and
    the settle that reading ``key_index`` does) the store must be exactly as
    before the call or exactly as after an uninterrupted call -- or, for a
    put that reclaimed, as after its reclaim alone (impl's contract: the
    reclaim is a ``free_unused`` of its own, of chunks every reader has read) -- (indexes,
    touches, ring pointers, ids, metadata, ack bases, published control
    words), with no lock left held, and fully usable: every cached key reads
    back its own object, the op's key can be put again if it is not cached.
    Problems at trace-only injection points (see :class:`Injector`) are
    reported but not held against impl."""
    sc = SCENARIOS[name]
    t0 = time.monotonic()
    summary = explore(sc, exc_made)
    seconds = time.monotonic() - t0
    print(f"\n[{name}] {summary['points']} injection points ({summary['reachable']} signal-reachable) in "
          f"{seconds:.1f} s; outcomes {summary['outcomes']}; {len(summary['failures'])} failing, "
          f"{len(summary['artifacts'])} trace-only with problems")
    for a in summary["artifacts"]:
        print("  trace-only:", a)
    for f in summary["failures"]:
        print("  FAIL:", f)
    assert not summary["failures"], "\n".join(summary["failures"])


def test_keyboard_interrupt_in_a_reader_get_leaves_no_pin(exc_made, monkeypatch):
    """A reader's get interrupted at any line event: it returns the object or
    raises, counts its read at most once, leaves no hazard pin behind (a pin
    left on a chunk that is reclaimed later would make every put wait
    PIN_TIMEOUT and raise ReaderStalled), and the view keeps working."""
    monkeypatch.setattr(impl_ring, "PIN_TIMEOUT", 0.2)
    sc = Scenario("get", setup_put, None)
    failures, trace_only = [], []
    n = 0
    points = None
    while True:
        n += 1
        w, r = sc.build(exc_made)
        address, monotonic_id = w.key_index["a"]
        sig = w.get_signature("a")
        inj = Injector(n)
        completed, res = run_traced(lambda: r.get(address, monotonic_id, sig, "a"), inj)
        if inj.where is None:
            assert completed and res == value_of("a")
            points = n - 1
            close_all(w, r)
            break
        where = inj.label
        problems = []
        if readers._FENCE_LOCK.locked():
            problems.append("readers._FENCE_LOCK left held (every later fence() blocks for ever)")
            readers._FENCE_LOCK.release()
        reads = w.reads(monotonic_id)[0]
        if reads not in (1, 2):  # setup read "a" once
            problems.append(f"reads of 'a' = {reads - 1} after one interrupted get")
        pin = r.ring_buffer.reader_table.pins()[r._slot]
        if pin:
            problems.append(f"hazard pin {pin:#x} left behind (the writer would wait for it, then ReaderStalled)")
        if r._rlock.locked():
            problems.append("the view's read lock is left held: every later get of this view blocks for ever")
            r._rlock.release()
        try:
            assert r.get(address, monotonic_id, sig, "a") == value_of("a")
        except Exception as exc:  # noqa: BLE001
            problems.append(f"the view no longer reads: {type(exc).__name__}: {exc}")
        if problems:
            (failures if inj.signal_reachable else trace_only).append(f"{where}: " + "; ".join(problems))
        close_all(w, r)
    print(f"\n[reader get] {points} injection points, {len(failures)} failing, "
          f"{len(trace_only)} trace-only with problems")
    for f in trace_only:
        print("  trace-only:", f)
    for f in failures:
        print("  FAIL:", f)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("where", ["fallocate", "table"])
def test_an_interrupt_while_a_writer_is_built_leaves_no_segment(where, monkeypatch):
    """A KeyboardInterrupt (a cancelled run's SIGTERM, as the CLI turns it)
    landing while the writer's segments are being made: in the ring's
    reservation (posix_fallocate), or once the reader table exists but
    before its view does.  The half-made segment is unlinked.  Seen
    2026-12-02: a reader table left in /dev/shm by a gate cancelled in its
    lockstep campaigns."""
    import uuid

    from shmspec.impl import readers, segment

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    name = f"shmspec_t_{uuid.uuid4().hex[:8]}"
    if where == "fallocate":
        monkeypatch.setattr(segment.os, "posix_fallocate", interrupt)
        with pytest.raises(KeyboardInterrupt):
            shmspec.impl.SingleWriterShmRingBuffer(4096, name=name, create=True)
        assert not segment_exists(name)
        return
    ring = shmspec.impl.SingleWriterShmRingBuffer(4096, name=name, create=True)
    try:
        monkeypatch.setattr(readers.ReaderTable, "__init__", interrupt)
        with pytest.raises(KeyboardInterrupt):
            shmspec.impl.SingleWriterShmObjectStorage(max_object_size=1024, n_readers=1, ring_buffer=ring)
        assert segment_exists(name) and not segment_exists(readers.table_name(name))
    finally:
        ring.close()
    assert not segment_exists(name)
