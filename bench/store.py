"""Store throughput: impl against vLLM's newest store, both against a plain copy
and against the physical bound (one memmove per object).

``python -m bench.store [--sizes 1KiB,64KiB,1MiB,16MiB] [--readers 1,2,4]
[--rounds 9] [--objects N] [--stores impl,vllm,copy,physical,zerocopy]
[--serde buffers|pickle|keep] [--reader-malloc default|retain] [--vllm TARGET]
[--quick] [--json FILE]``

Prints one table of measured rates and the ratios impl/vLLM, impl/copy,
vLLM/copy, impl/physical and vLLM/physical, all from this one run; ``--json``
writes the rows.  ``--vllm`` puts any target in the vLLM column
(``vllm==0.11.0`` ... ``vllm==0.33.0``: releases before 0.32 are unsigned, so
their readers get by address and id only; ``file:PATH`` loads a module file).
``--quick`` is a smoke run whose ratios are not measurements.  Exit status 0;
1 when any object a reader got differs from what was put (or a get failed): a
benchmark that reads wrong bytes fast is wrong; 2 when it cannot run (a bad
option or ``--json`` path, checked first; a store that cannot be loaded, a
put that raised, a reader that died), with one line saying why.

Method
------
Five *stores* run side by side on the same payloads:

* ``impl``: :mod:`shmspec.impl`'s store (segment v2, docs/impl-protocol.md);
* ``vllm``: vLLM's newest store (``vllm==0.33.0``'s ``shm_object_storage.py``,
  loaded by :func:`shmspec.conformance.targets.loader.load_target` with stand-ins for
  ``torch`` and ``vllm.logger``; fetched once into the cache);
* ``copy``: a plain shared-memory segment (``multiprocessing.shared_memory``)
  of the ring's size: the writer copies each object's bytes in
  (``buf[o:o+S] = payload``, wrapping like a ring) and each reader copies them
  out into a new object (``bytes(buf[o:o+S])``: an allocation per get, as a
  serde's copy out is).  No header, no serde, no signature, no lock;
* ``physical``: the physical bound, one ``memmove`` of S bytes per object and
  nothing else.  Put: payload -> the object's slot in a plain shared-memory
  ring like ``copy``'s; get: that slot -> one private buffer of S bytes per
  reader, allocated once when the reader attaches and written through before
  any round (so no get allocates or faults a page).  Each copy is
  ``dst[:] = src`` on memoryviews made before the timed window (one
  ``memcpy`` in CPython's memoryview assignment, no Python object per
  copy).  The shared-memory side is reused and prefaulted like the stores'
  segments; its slots are distinct per object, as a store's must be.  A
  physical (or copy) round of small objects takes well under a millisecond,
  so with more than one reader its get window is mostly the readers' start
  skew (each is woken by its own pipe): at 1 KiB with 2 or 4 readers the
  ratios to it bound nothing.
* ``zerocopy``: impl's store again, its readers getting with ``get(...,
  copy=False)`` (issue 28): the value is the payload's view of shared memory
  under a zero-copy lease (``BufferSerde.deserialize_shared``).  A reader
  holds at most 16 values at once (impl's lease entries per reader): it gets
  16 (timed), then digests and drops them (not timed), so its get window is
  the sum of those timed stretches.  ``zero-copy/vLLM`` is its rate over
  vLLM's.  It runs in rounds of its own after the stores' (before the
  physical bound's), as the physical bound does, unless the readers'
  allocator retains freed memory (``--reader-malloc retain``): then every
  store, the bound included, takes its turn in the same rounds
  (``interleaved`` in a row).  Under glibc's default allocator the copying
  gets right after a round that allocated nothing (zerocopy, physical) ran
  2-6x slower (2026-12-06: impl/vLLM 0.17-0.44); with ``retain``, 1.02-1.20.

Processes: this process is the writer; for each reader count N, N reader
processes are forked (``multiprocess``, fork, as ``conformance/concurrency/procs.py``
does) before any segment exists and share one process-shared reader lock,
which each reader view is given (the constructor requires one).  For each
size S the writer creates one real segment per store and the readers attach
to each by name.  Both writers are built as vLLM builds its writer, without
the readers' lock (:func:`shmspec.conformance.targets.adapter.open_writer` asks the
storage class: impl's ``writer_uses_reader_lock`` is False from segment v2
on; vLLM's writer never gets one).  impl's readers take no lock either (the
hazard-pin protocol); vLLM's take the reader lock around their count
increment.  Every segment's pages are faulted in when it is created (writer)
and attached (each reader), with ``madvise(MADV_POPULATE_WRITE)``, as they
are in a long-running store; impl's reader table (``<name>_r``) too: no timed
round pays a first touch of a segment.

Geometry: a round is ``objects`` puts of S bytes (default ``64 MiB / S``,
kept within [4, 1024]; ``--objects`` sets it).  At most 1024 because
impl (segment v2) bounds the live chunks of a ring at ``K = max(1024,
B // 4096)`` (one ack word per chunk and reader), and a round must fit
beside nothing else; vLLM has no such bound, and both run the same rounds.
The ring holds 4/3 of a
round's chunks (rounded up to 64 KiB: 1.5 MiB for 1024 x 1 KiB, about 85 MiB
for 4 x 16 MiB), so from the
second round on every round's puts reclaim the previous round's chunks as
they go (``put`` -> ``MemoryError`` -> ``free_unused`` -> retry, inside the
timed put, as vLLM's sender does).  ``max_object_size`` is
``min(ring, 32 MiB)``.  One warm-up round (fills the ring, faults the pages
in) is run and verified but not timed into the results; then ``--rounds``
rounds.  Within a round the stores take turns (the order rotates each
round), so load that comes and goes hits all of them alike; the physical
bound has rounds of its own after theirs (a get batch right after a physical
one ran 3-4x slower, whichever store it was: the readers' allocator state).
The result per store is the median round; ``impl_vllm_rounds`` gives the
quartiles of impl/vLLM taken round by round (the two ran in the same round),
and a row whose median is below 1.0 while its upper quartile is above is
printed as a tie.

One round, per store:

1. (untimed) the writer makes ``objects`` distinct payloads (a 16-byte tag
   naming store, round and index, then bytes of a random pool) and their CRC32s;
2. **put** (timed, writer): for each payload ``put(key, payload)`` and
   ``get_signature(key)``, the handle a signed store's sender hands to
   readers (vLLM >= 0.32); copy and physical: the copy in;
3. (untimed) the handles (address, id, signature, key, CRC32, size) go to
   every reader over its pipe; each answers ready; then the writer sends go;
4. **get** (timed, readers): each reader gets every handle once, in order
   (the read-once protocol the stores are built for: N readers each read each
   object, so every chunk becomes reclaimable), keeping the objects
   (physical: copying each into its one buffer); the window is from the
   earliest reader's first get to the latest reader's last one
   (``time.perf_counter_ns``, CLOCK_MONOTONIC, which all processes share);
5. (untimed) each reader checks every object it got: a ``bytes`` of the
   right size whose CRC32 is the one the writer computed (physical: the
   slot it copied from, and that its buffer holds the last object).

Put rates are the writer's (objects/s, MB/s = 10**6 bytes/s of payload);
get rates are aggregate over the N readers (N x objects in the window).  The
handshaking (handles over a pipe, ready/go) is outside both timed windows
and costs the same for every store.  On a machine with fewer cores than
N readers, the readers share the cores; that is the same for all four.

Serde (``--serde``; the same class for impl and vLLM, so the comparison is
of the stores, not of serializers):

* ``buffers`` (default): the path vLLM's ``MsgpackSerde`` takes for tensors
  and multimodal items, which is what the store carries at these sizes
  (image and video features): the data goes in as a list of buffers, no copy
  on serialize; metadata is the pickled ``(type name, nbytes, lengths)``
  tuple; ``deserialize`` reads the metadata and copies the data out once
  (``MsgpackDecoder(share_mem=False)``) into a new private ``bytes``.  impl
  (segment v2) hands it a view of shared memory under the reader's hazard
  pin, as vLLM hands it a view (unpinned): one copy per get on both, the
  serde's;
* ``pickle``: :class:`shmspec.impl.serde.PickleSerde`, the byte layout vLLM's
  ``MsgpackSerde`` writes for any other value (``pickle.dumps`` on
  serialize, ``pickle.loads`` on deserialize: one more copy each way);
* ``keep``: ``buffers``, except that the serde declares ``keeps_buffer =
  True`` and ``deserialize`` keeps the buffer it is handed (returns a view of
  it, no copy) when that buffer is a private immutable ``bytes`` object,
  which nobody can overwrite, and copies anything else.  impl honours the
  declaration by handing it a private ``bytes`` copy of the object (impl's
  one copy; the serde keeps it); vLLM ignores it and hands a view of shared
  memory, which the writer reuses once the chunk is freed (keeping it would
  be the NRR bug), so the serde copies.  One copy per get on both, made by
  the store on impl and by the serde on vLLM.

Readers' allocator (``--reader-malloc``): a get's copy lands in a new object
(``bytes``), and with glibc's default allocator a reader that frees a
round's objects gives their pages back (the heap is trimmed; big blocks are
unmapped), so the next round's copies fault fresh zeroed pages in: from
64 KiB on that costs more than the copy itself, and ``physical`` (no
allocation) does not pay it.  ``default`` leaves the allocator as a reader
process gets it; ``retain`` has every reader process call ``mallopt`` (no
trim below 1 GiB, requests up to 32 MiB from the heap), so freed pages are
reused, as in a process that keeps its heap warm.  The same for every store.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import random
import statistics
import struct
import sys
import time
import zlib
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import multiprocess
from rich.table import Table

from shmspec.conformance.core.documents import header
from bench.common import (fmt_size, machine_info, now_iso, parse_ints, parse_sizes, positive_int, ratio, unwritable,
                          wide_console, write_json)
from shmspec.conformance.targets.adapter import data_offset, open_writer
from shmspec.conformance.targets.loader import LoadedTarget, TargetError, load_target
from shmspec.conformance.concurrency.procs import worker_setup
from shmspec.impl import segment as impl_segment
from shmspec.impl.serde import PickleSerde

VLLM_SPEC = "vllm==0.33.0"
"""vLLM's newest store release."""
STORES = ("impl", "vllm", "copy", "physical", "zerocopy")
"""``zerocopy``: impl's store, its readers getting with ``get(..., copy=False)``."""
PLAIN = ("copy", "physical")
"""The stores that are a plain shared-memory segment, not a store class."""
DEFAULT_SIZES = (1024, 64 * 1024, 1024**2, 16 * 1024**2)
DEFAULT_READERS = (1, 2, 4)
DEFAULT_ROUNDS = 9
"""Timed rounds per row unless ``--rounds`` says: enough for the per-round quartiles of impl/vLLM."""
ROUND_BYTES = 64 * 1024**2
MIN_OBJECTS, MAX_OBJECTS = 4, 1024
"""Objects per round by default; at most impl's smallest live-chunk bound
(``layout.default_max_chunks``: ``max(1024, B // 4096)``), so a round of small
objects fits impl's default ring as it fits vLLM's."""
MAX_OBJECT_SIZE = 32 * 1024**2
CHUNK_OVERHEAD = 128
"""Bytes a chunk holds beyond the payload, at most: header 8, reader count 4,
serde metadata and framing (about 50 with either serde)."""
RING_GRAIN = 64 * 1024
TAG_BYTES = 16
MB = 1e6
PLAIN_SPECS = {"copy": "plain shared-memory copy",
               "physical": "one memmove per object (reused, prefaulted buffers)"}
"""``stores`` in the JSON: what ran in the columns that are not a store class."""
QUICK_NOTE = ("quick run: ratios are not measurements (smoke-level: 2 rounds of 64 objects swing ~2x "
              "between runs); run without --quick to compare stores")
"""Printed under a ``--quick`` table, in place of any reading of its ratios."""
WAIT = 300.0
"""Seconds the writer waits for a reader's answer before it gives up."""


# ---------------------------------------------------------------------- serdes
class BufferSerde:
    """``ObjectSerde``-compatible serde for bytes-like values, shaped like
    vLLM's ``MsgpackSerde`` on tensors: no copy on serialize (the value goes
    in as a list of one buffer), one copy out on deserialize."""

    def serialize(self, value: Any) -> tuple[list[memoryview], int, bytes, int]:
        view = memoryview(value).cast("B")
        md = pickle.dumps(("buffers", view.nbytes, [view.nbytes]), protocol=pickle.HIGHEST_PROTOCOL)
        return [view], view.nbytes, md, len(md)

    def deserialize(self, data: memoryview) -> bytes:
        type_name, nbytes, _lengths = pickle.loads(data)  # stops at the metadata's STOP opcode
        if type_name != "buffers" or not 0 <= nbytes <= len(data):
            raise ValueError(f"not a BufferSerde object: {type_name!r}, {nbytes!r}")
        return bytes(data[len(data) - nbytes:])

    def deserialize_shared(self, data: memoryview) -> memoryview:
        """impl's ``get(copy=False)`` (the ``zerocopy`` store): the payload's view of shared memory."""
        type_name, nbytes, _lengths = pickle.loads(data)
        if type_name != "buffers" or not 0 <= nbytes <= len(data):
            raise ValueError(f"not a BufferSerde object: {type_name!r}, {nbytes!r}")
        return data[len(data) - nbytes:]


class KeepingBufferSerde(BufferSerde):
    """:class:`BufferSerde` that keeps a private ``bytes`` buffer (returns a
    view into it, no copy) and copies a view of anything else, such as
    shared memory (``--serde keep``).  It declares ``keeps_buffer``, so impl
    hands it a private ``bytes`` copy; vLLM hands it a view of shared memory,
    which it copies."""

    keeps_buffer = True

    def deserialize(self, data: memoryview) -> bytes | memoryview:
        type_name, nbytes, _lengths = pickle.loads(data)
        if type_name != "buffers" or not 0 <= nbytes <= len(data):
            raise ValueError(f"not a BufferSerde object: {type_name!r}, {nbytes!r}")
        tail = data[len(data) - nbytes:]
        return tail if type(data.obj) is bytes else bytes(tail)


SERDES = {"buffers": BufferSerde, "pickle": PickleSerde, "keep": KeepingBufferSerde}


# ------------------------------------------------------------------- geometry
@dataclass(frozen=True)
class Geometry:
    """One size's setup (bytes): objects per round, ring size, max object size."""

    size: int
    objects: int
    ring_bytes: int
    max_object_size: int


def geometry(size: int, objects: int | None = None) -> Geometry:
    """Objects per round (``ROUND_BYTES / size`` within [4, 1024] unless given)
    and a ring of 4/3 of a round's chunks rounded up to 64 KiB: it cannot hold
    two rounds, so every round after the first reclaims the one before."""
    if size < TAG_BYTES:
        raise ValueError(f"objects must be at least {TAG_BYTES} bytes, got {size}")
    n = objects or max(MIN_OBJECTS, min(MAX_OBJECTS, ROUND_BYTES // size))
    chunk = size + CHUNK_OVERHEAD
    ring = -(-(n * chunk * 4 // 3) // RING_GRAIN) * RING_GRAIN
    ring = max(ring, 2 * chunk)
    return Geometry(size, n, ring, min(ring, max(MAX_OBJECT_SIZE, chunk)))


def make_payloads(store_idx: int, round_no: int, g: Geometry, pool: bytes) -> list[bytes]:
    """``g.objects`` distinct payloads of ``g.size`` bytes: a 16-byte tag
    (store, round, index) then a slice of ``pool`` at a varying offset."""
    body = g.size - TAG_BYTES
    span = len(pool) - body
    out = []
    for i in range(g.objects):
        off = (i * 4099 + round_no * 131 + store_idx * 17) % span
        out.append(struct.pack("<IIQ", store_idx, round_no, i) + pool[off:off + body])
    return out


MADV_POPULATE_WRITE = 23
"""Linux >= 5.14: fault every page of a mapping in, writable, without changing it."""


def prefault(shm: Any, first: int = 0) -> None:
    """Map every page of the segment ``shm`` into this process now, so no
    timed round pays a first-touch fault (a long-running store's pages are all
    resident).  ``madvise(MADV_POPULATE_WRITE)``; where the kernel lacks it,
    read the whole segment and rewrite the zeros of ``[first:]`` (call only on
    a fresh segment there)."""
    try:
        shm._mmap.madvise(MADV_POPULATE_WRITE)
        return
    except (AttributeError, OSError, ValueError):
        pass
    buf = shm.buf
    zlib.crc32(buf)
    step = 1 << 20
    for off in range(first, len(buf), step):
        end = min(off + step, len(buf))
        buf[off:end] = bytes(end - off)


# --------------------------------------------------------------- reader side
@dataclass
class _Plain:
    """A reader's view of a ``copy`` or ``physical`` segment; ``dst`` is the
    physical store's one private buffer of the row's object size (written
    through once, so its pages are resident before any round)."""

    shm: Any
    dst: memoryview | None = None

    def close(self) -> None:
        if self.dst is not None:
            self.dst.release()
            self.dst = None
        self.shm.close()


READER_MALLOC = ("default", "retain")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
RETAIN_TRIM, RETAIN_MMAP = 2**30, 32 * 1024**2
"""``--reader-malloc retain``: glibc keeps up to 1 GiB of freed heap mapped
(no trim) and serves requests up to 32 MiB (glibc's largest mmap threshold)
from the heap, so a reader's next objects reuse pages already faulted in."""


def set_reader_malloc(mode: str) -> None:
    """In a reader process: ``default`` leaves glibc's allocator as it is;
    ``retain`` sets ``mallopt(M_TRIM_THRESHOLD)`` and ``M_MMAP_THRESHOLD``
    (fixed thresholds, no dynamic adjustment).  Raises ``OSError`` where
    glibc's ``mallopt`` is missing or refuses."""
    if mode == "default":
        return
    import ctypes

    libc = ctypes.CDLL(None)
    for param, value in ((M_TRIM_THRESHOLD, RETAIN_TRIM), (M_MMAP_THRESHOLD, RETAIN_MMAP)):
        if not libc.mallopt(param, value):
            raise OSError(f"mallopt({param}, {value}) refused")


def _prefault_table(view: Any) -> None:
    """Fault in the pages of impl's reader table (segment v2), if the view has one."""
    table = getattr(view.ring_buffer, "reader_table", None)
    shm = getattr(table, "shm", None)
    if shm is not None:
        prefault(shm, len(shm.buf))


def _open_view(kind: str, target: LoadedTarget | None, lock: Any, serde: type, fields: dict) -> Any:
    if kind in PLAIN:
        shm = impl_segment.attach_segment(fields["segment"])
        prefault(shm, len(shm.buf))  # read only: the writer owns the bytes
        plain = _Plain(shm)
        if kind == "physical":
            plain.dst = memoryview(bytearray(fields["size"]))
            plain.dst[:] = b"\xa5" * fields["size"]  # touch every page now: no fault in a timed get
        return plain
    handle = target.module.ShmObjectStorageHandle(
        max_object_size=fields["max_object_size"], n_readers=fields["n_readers"],
        ring_buffer_handle=(fields["ring_bytes"], fields["segment"]), serde_class=serde, reader_lock=lock)
    view = target.storage_cls.create_from_handle(handle)
    shm = view.ring_buffer.shared_memory
    prefault(shm, len(shm.buf))
    _prefault_table(view)
    return view


def _close_view(kind: str, view: Any) -> None:
    if kind in PLAIN:
        view.close()
        return
    try:  # vLLM < 0.15's views have no close(): close the mapping itself
        closer = getattr(view, "close", None) or view.ring_buffer.shared_memory.close
        closer()
    except Exception:  # noqa: BLE001 - teardown is best effort
        pass


@dataclass(frozen=True)
class _Digest:
    """What a ``zerocopy`` reader keeps of a value it gave back: its length and CRC32."""

    nbytes: int
    crc: int


LEASE_BATCH = 16
"""A ``zerocopy`` reader holds at most this many values at once (impl's
``MAX_LEASES``): it gets that many (timed), digests and drops them (untimed)."""


def _check(obj: Any, crc: int, size: int) -> str | None:
    """None when ``obj`` is the object put (bytes, or with ``--serde keep`` a
    view of bytes, or for ``physical`` a view of the slot it copied from, of
    ``size`` with CRC ``crc``), else why not."""
    if isinstance(obj, _Digest):
        n, got = obj.nbytes, obj.crc
    elif not isinstance(obj, (bytes, bytearray, memoryview)):
        return f"got {type(obj).__name__}, not bytes"
    else:
        n, got = len(obj), None
    if n != size:
        return f"got {n} bytes, put {size}"
    got = zlib.crc32(obj) if got is None else got
    if got != crc:
        return f"CRC32 {got:08x} != {crc:08x} put"
    return None


def _read_batch(kind: str, view: Any, handles: list[tuple]) -> tuple[int, int, list]:
    """Get every handle once, in order; return the window and the objects (or errors)."""
    got: list[Any] = []
    append = got.append
    if kind == "copy":
        buf = view.shm.buf
        t0 = time.perf_counter_ns()
        for off, _, _, _, _, size in handles:
            append(bytes(buf[off:off + size]))
        t1 = time.perf_counter_ns()
        return t0, t1, got
    if kind == "physical":  # one memmove per object into the one private buffer
        buf, dst = view.shm.buf, view.dst
        got = [buf[off:off + size] for off, _, _, _, _, size in handles]
        t0 = time.perf_counter_ns()
        for src in got:
            dst[:] = src
        t1 = time.perf_counter_ns()
        if got and dst != got[-1]:
            got[-1] = ValueError("the private buffer does not hold the last object copied")
        return t0, t1, got
    if kind == "zerocopy":
        return _zero_copy_batch(view, handles)
    get = view.get
    t0 = time.perf_counter_ns()
    for address, monotonic_id, sig, key, _, _ in handles:
        try:  # vLLM < 0.32 is unsigned: get(address, id), no signature or key
            append(get(address, monotonic_id, sig, key) if sig is not None else get(address, monotonic_id))
        except Exception as exc:  # noqa: BLE001 - recorded and reported as a failed get
            append(exc)
    t1 = time.perf_counter_ns()
    return t0, t1, got


def _zero_copy_batch(view: Any, handles: list[tuple]) -> tuple[int, int, list]:
    """impl's ``get(..., copy=False)`` of every handle, :data:`LEASE_BATCH` at a
    time: the gets are timed, digesting and dropping the values (which ends
    their leases) is not; the window is the first get's start plus the time
    the gets took."""
    got: list[Any] = []
    get = view.get
    start, spent = None, 0
    for i in range(0, len(handles), LEASE_BATCH):
        part: list[Any] = []
        append = part.append
        t0 = time.perf_counter_ns()
        for address, monotonic_id, sig, key, _, _ in handles[i:i + LEASE_BATCH]:
            try:
                append(get(address, monotonic_id, sig, key, copy=False))
            except Exception as exc:  # noqa: BLE001 - recorded and reported as a failed get
                append(exc)
        spent += time.perf_counter_ns() - t0
        start = t0 if start is None else start
        got.extend(v if isinstance(v, Exception) else _Digest(len(v), zlib.crc32(v)) for v in part)
        del part, append
    return start or 0, (start or 0) + spent, got


def _reader_main(conn: Any, name: str, targets: dict[str, LoadedTarget | None], lock: Any,
                 serde: type, parent_pid: int, malloc: str = "default") -> None:
    worker_setup(parent_pid)
    set_reader_malloc(malloc)
    views: dict[str, tuple[str, Any]] = {}
    while True:
        msg = conn.recv()
        if msg[0] == "attach":
            _, store, fields = msg
            try:
                views[store] = (store, _open_view(store, targets.get(store), lock, serde, fields))
                conn.send(("attached", None))
            except Exception as exc:  # noqa: BLE001
                conn.send(("attached", f"{type(exc).__name__}: {exc}"))
        elif msg[0] == "detach":
            for kind, view in views.values():
                _close_view(kind, view)
            views.clear()
            conn.send(("detached",))
        elif msg[0] == "batch":
            _, store, handles = msg
            kind, view = views[store]
            gc.collect()
            conn.send(("ready",))
            if conn.recv()[0] != "go":
                return
            t0, t1, got = _read_batch(kind, view, handles)
            bad = errors = 0
            first = None
            for obj, h in zip(got, handles):
                if isinstance(obj, Exception):
                    errors += 1
                    why = f"get raised {type(obj).__name__}: {obj}"
                else:
                    why = _check(obj, h[4], h[5])
                    bad += why is not None
                if why and first is None:
                    first = f"{name}: handle {h[:2]} key {h[3]!r}: {why}"
            if kind == "physical":  # views of the segment: released before it may be closed
                for src in got:
                    if type(src) is memoryview:
                        src.release()
            del got
            conn.send(("done", t0, t1, len(handles), bad, errors, first))
        elif msg[0] == "exit":
            for kind, view in views.values():
                _close_view(kind, view)
            return


# --------------------------------------------------------------- writer side
class _Store:
    """The writer's side of one store on one segment."""

    def __init__(self, kind: str, target: LoadedTarget | None, g: Geometry, n_readers: int, lock: Any,
                 serde: type):
        self.kind = kind
        self.g = g
        self.pos = 0
        self.rounds = 0
        if kind in PLAIN:
            self.shm = impl_segment.create_segment(g.ring_bytes, None)
            self.writer = None
            self.segment = self.shm.name
            prefault(self.shm)
        else:
            self.shm = None
            self.writer = open_writer(target, g.ring_bytes, g.max_object_size, n_readers, lock, serde)
            self.segment = self.writer.ring_buffer.shared_memory.name
            rb = self.writer.ring_buffer
            prefault(rb.shared_memory, data_offset(rb))
            _prefault_table(self.writer)
            self.signed = target.profile.signed
        self.fields = {"segment": self.segment, "ring_bytes": g.ring_bytes,
                       "max_object_size": g.max_object_size, "n_readers": n_readers, "size": g.size}

    def put_batch(self, payloads: list[bytes], keys: list[str]) -> tuple[int, list[tuple]]:
        """Put every payload (timed); return nanoseconds and ``(address, id, sig, key)`` per object."""
        out = []
        if self.kind == "physical":
            return self._memmove_batch(payloads)
        if self.kind == "copy":
            buf, size, ring = self.shm.buf, self.g.size, self.g.ring_bytes
            pos = self.pos
            gc.collect()
            t0 = time.perf_counter_ns()
            for p in payloads:
                if pos + size > ring:
                    pos = 0
                buf[pos:pos + size] = p
                out.append((pos, 0, None, None))
                pos += size
            t1 = time.perf_counter_ns()
            self.pos = pos
            return t1 - t0, out
        w = self.writer
        put, sign = w.put, (w.get_signature if self.signed else None)
        gc.collect()
        t0 = time.perf_counter_ns()
        try:
            for key, p in zip(keys, payloads):
                address, monotonic_id = put(key, p)
                out.append((address, monotonic_id, sign(key) if sign else None, key))
        except Exception as exc:  # noqa: BLE001 - the store cannot carry this row: one line, exit 2
            raise BenchError(f"{self.kind}: put {len(out) + 1} of {len(payloads)} ({fmt_size(self.g.size)}) "
                             f"raised {type(exc).__name__}: {exc}") from exc
        t1 = time.perf_counter_ns()
        return t1 - t0, out

    def _memmove_batch(self, payloads: list[bytes]) -> tuple[int, list[tuple]]:
        """physical: one memmove per payload into its slot (views made untimed)."""
        buf, size, ring = self.shm.buf, self.g.size, self.g.ring_bytes
        pos = self.pos
        out, dsts = [], []
        for _ in payloads:
            if pos + size > ring:
                pos = 0
            dsts.append(buf[pos:pos + size])
            out.append((pos, 0, None, None))
            pos += size
        srcs = [memoryview(p) for p in payloads]
        pairs = list(zip(dsts, srcs))
        gc.collect()
        t0 = time.perf_counter_ns()
        for dst, src in pairs:
            dst[:] = src
        t1 = time.perf_counter_ns()
        for dst, src in pairs:
            dst.release()
            src.release()
        self.pos = pos
        return t1 - t0, out

    def close(self) -> None:
        if self.shm is not None:
            impl_segment.release_segment(self.shm, unlink=True)
        elif self.writer is not None:
            closer = getattr(self.writer, "close", None) or getattr(self.writer.ring_buffer, "close", None)
            if closer is not None:
                closer()
        self.writer = self.shm = None
        gc.collect()  # vLLM < 0.15 has no close(): its ring unlinks the segment in __del__


@dataclass
class Tally:
    """Per store, per row: timed seconds per round and verification counts."""

    put_ns: list[int] = field(default_factory=list)
    get_ns: list[int] = field(default_factory=list)
    verified: int = 0
    mismatches: int = 0
    errors: int = 0
    first_problem: str | None = None


class BenchError(RuntimeError):
    """A reader died, did not answer in time, or could not attach; or the
    writer's put raised (the store cannot carry the row)."""


def _recv(conn: Any, proc: Any, what: str, timeout: float = WAIT) -> tuple:
    deadline = time.monotonic() + timeout
    while not conn.poll(0.5):
        if not proc.is_alive():
            raise BenchError(f"reader {proc.name} died while the writer waited for it to {what}")
        if time.monotonic() > deadline:
            raise BenchError(f"reader {proc.name} did not {what} within {timeout:g} s")
    return conn.recv()


class Readers:
    """N forked reader processes, driven over pipes."""

    def __init__(self, n: int, targets: dict[str, LoadedTarget | None], serde: type, malloc: str = "default"):
        resource_tracker.ensure_running()  # one tracker for every process (see conformance/concurrency/procs.py)
        self.ctx = multiprocess.get_context("fork")
        self.lock = self.ctx.Lock()
        self.procs, self.conns = [], []
        for i in range(n):
            parent, child = self.ctx.Pipe()
            p = self.ctx.Process(target=_reader_main, name=f"bench-r{i + 1}",
                                 args=(child, f"r{i + 1}", targets, self.lock, serde, os.getpid(), malloc),
                                 daemon=True)
            p.start()
            child.close()
            self.procs.append(p)
            self.conns.append(parent)

    def attach(self, store: str, fields: dict) -> None:
        for c in self.conns:
            c.send(("attach", store, fields))
        for c, p in zip(self.conns, self.procs):
            _, err = _recv(c, p, f"attach to {store}")
            if err:
                raise BenchError(f"reader {p.name} cannot attach to {store}: {err}")

    def detach(self) -> None:
        for c in self.conns:
            c.send(("detach",))
        for c, p in zip(self.conns, self.procs):
            _recv(c, p, "detach")

    def read(self, store: str, handles: list[tuple]) -> tuple[int, list[tuple]]:
        """Hand out the batch, start every reader at once; return the window (ns) and the answers."""
        for c in self.conns:
            c.send(("batch", store, handles))
        for c, p in zip(self.conns, self.procs):
            _recv(c, p, "take the batch")
        for c in self.conns:
            c.send(("go",))
        answers = [_recv(c, p, "read the batch") for c, p in zip(self.conns, self.procs)]
        window = max(a[2] for a in answers) - min(a[1] for a in answers)
        return window, answers

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(("exit",))
            except (BrokenPipeError, OSError):
                pass
        for p in self.procs:
            p.join(5.0)
            if p.is_alive():
                p.kill()
                p.join(5.0)
        for c in self.conns:
            c.close()


def _round(stores: dict[str, _Store], order: list[str], readers: Readers, round_no: int, g: Geometry,
           pool: bytes, tallies: dict[str, Tally], timed: bool) -> None:
    for name in order:
        s = stores[name]
        idx = STORES.index(name)
        payloads = make_payloads(idx, round_no, g, pool)
        crcs = [zlib.crc32(p) for p in payloads]
        keys = [f"s{idx}-r{round_no}-{i}" for i in range(g.objects)]
        put_ns, handles = s.put_batch(payloads, keys)
        del payloads
        batch = [(*h, crc, g.size) for h, crc in zip(handles, crcs)]
        get_ns, answers = readers.read(name, batch)
        t = tallies[name]
        for _, _, _, n, bad, errors, first in answers:
            t.verified += n
            t.mismatches += bad
            t.errors += errors
            t.first_problem = t.first_problem or first
        if timed:
            t.put_ns.append(put_ns)
            t.get_ns.append(get_ns)


def _rates(ns_list: list[int], objects: int, size: int) -> dict[str, Any]:
    med = statistics.median(ns_list) / 1e9
    return {"objects_per_s": round(objects / med, 1), "mb_per_s": round(objects * size / med / MB, 1),
            "seconds": [round(ns / 1e9, 6) for ns in ns_list]}


def run_row(size: int, readers: Readers, n_readers: int, targets: dict[str, LoadedTarget | None],
            serde: type, rounds: int, objects: int | None, seed: int = 0,
            interleave: bool = False) -> dict[str, Any]:
    """One (size, readers) row: every store in ``targets`` for ``rounds`` timed
    rounds; ``interleave``: the physical bound and the zerocopy store take
    their turns in the stores' rounds (else they run rounds of their own after
    them)."""
    g = geometry(size, objects)
    pool = random.Random(seed + size).randbytes(size + 64 * 1024)
    stores: dict[str, _Store] = {}
    tallies = {name: Tally() for name in targets}
    try:
        for name, target in targets.items():
            stores[name] = _Store(name, target, g, n_readers, readers.lock, serde)
            readers.attach(name, stores[name].fields)
        # The physical bound runs in rounds of its own after the stores': a get
        # batch right after a physical one ran 3-4x slower, whichever store it
        # was (2026-12-01, 1 MiB x 1: 50-60 ms vs 15-18 ms; the readers'
        # allocator state), which would rate the store that follows it.
        # So does the zerocopy store's (2026-12-06: impl/vLLM gets 0.17-0.44 with zerocopy in the
        # rotation, 0.98-1.02 without): it allocates nothing, so the copying store after it pays fresh pages.
        # With the readers' allocator retaining freed memory (--reader-malloc retain) neither effect shows
        # (2026-12-06: impl/vLLM 1.02 and 1.20, impl/physical 0.92 at 16 MiB, every store in one rotation),
        # so there every store, the bound included, takes its turn in the same rounds.
        alone = () if interleave else ("zerocopy", "physical")
        names = [n for n in targets if n not in alone]
        for r in range(rounds + 1 if names else 0):  # round 0: warm-up, verified but not timed
            order = names[r % len(names):] + names[:r % len(names)]
            _round(stores, order, readers, r, g, pool, tallies, timed=r > 0)
        for name in alone:
            if name in targets:
                for r in range(rounds + 1):
                    _round(stores, [name], readers, r, g, pool, tallies, timed=r > 0)
    finally:
        try:
            readers.detach()
        finally:
            for s in stores.values():
                s.close()
    row: dict[str, Any] = {"size": size, "size_label": fmt_size(size), "readers": n_readers,
                           "objects": g.objects, "rounds": rounds, "warmup_rounds": 1,
                           "ring_bytes": g.ring_bytes, "max_object_size": g.max_object_size,
                           "interleaved": bool(interleave),
                           "put": {}, "get": {}, "ratios": {}, "verified": {}}
    for name, t in tallies.items():
        row["put"][name] = _rates(t.put_ns, g.objects, size)
        row["get"][name] = _rates(t.get_ns, g.objects * n_readers, size)
        row["verified"][name] = {"objects": t.verified, "mismatches": t.mismatches, "errors": t.errors,
                                 "first_problem": t.first_problem}
    for op in ("put", "get"):
        rate = {name: row[op][name]["mb_per_s"] for name in tallies}
        row["ratios"][op] = {"impl_vllm": ratio(rate.get("impl"), rate.get("vllm")),
                             "impl_copy": ratio(rate.get("impl"), rate.get("copy")),
                             "vllm_copy": ratio(rate.get("vllm"), rate.get("copy")),
                             "impl_physical": ratio(rate.get("impl"), rate.get("physical")),
                             "vllm_physical": ratio(rate.get("vllm"), rate.get("physical")),
                             "zerocopy_vllm": ratio(rate.get("zerocopy"), rate.get("vllm"))}
        if "impl" in tallies and "vllm" in tallies:
            row["ratios"][op]["impl_vllm_rounds"] = paired_spread(
                getattr(tallies["impl"], f"{op}_ns"), getattr(tallies["vllm"], f"{op}_ns"))
    return row


def paired_spread(impl_ns: list[int], vllm_ns: list[int]) -> dict[str, float] | None:
    """impl/vLLM per round (the two ran in the same round, one after the
    other): ``{"q1", "median", "q3"}`` of ``vllm_ns[r] / impl_ns[r]`` (rates'
    ratio = inverse of times'), 3 places; None with fewer than 2 rounds.  The
    quartiles say how far one round's ratio moves, so a median ratio near 1.0
    reads as a tie, not a loss or a win."""
    pairs = [v / i for i, v in zip(impl_ns, vllm_ns) if i > 0]
    if len(pairs) < 2:
        return None
    q1, med, q3 = statistics.quantiles(pairs, n=4, method="inclusive")
    return {"q1": round(q1, 3), "median": round(med, 3), "q3": round(q3, 3)}


def ties(section: dict[str, Any]) -> list[str]:
    """One line per row and op whose impl/vLLM is below 1.0 while its rounds'
    quartiles reach above 1.0: within one run's round-to-round spread."""
    out = []
    for row in section["rows"]:
        for op in ("put", "get"):
            r = row["ratios"][op]
            spread = r.get("impl_vllm_rounds")
            if r.get("impl_vllm") is not None and r["impl_vllm"] < 1.0 and spread and spread["q3"] >= 1.0:
                out.append(f"{row['size_label']} x{row['readers']} {op}: impl/vLLM {r['impl_vllm']:.2f}, "
                           f"per-round quartiles {spread['q1']:.2f}-{spread['q3']:.2f}")
    return out


def run(sizes: list[int], readers_list: list[int], rounds: int, stores: list[str], serde_name: str = "buffers",
        objects: int | None = None, vllm_spec: str = VLLM_SPEC, on_row: Any = None,
        reader_malloc: str = "default") -> dict[str, Any]:
    """Every row; returns the ``store`` section of ``bench.json``.

    Raises:
        TargetError: vLLM's store cannot be loaded.
        BenchError: a reader process failed.
    """
    unknown = [s for s in stores if s not in STORES]
    if unknown:
        raise ValueError(f"unknown store {unknown[0]!r} (choose from {', '.join(STORES)})")
    if reader_malloc not in READER_MALLOC:
        raise ValueError(f"unknown reader malloc mode {reader_malloc!r} (choose from {', '.join(READER_MALLOC)})")
    serde = SERDES[serde_name]
    targets: dict[str, LoadedTarget | None] = {}
    for name in STORES:
        if name in stores:
            targets[name] = load_target("impl") if name in ("impl", "zerocopy") else (
                load_target(vllm_spec) if name == "vllm" else None)  # copy, physical: no store class
    t0 = time.monotonic()
    started = now_iso()
    rows = []
    for n in readers_list:
        readers = Readers(n, targets, serde, reader_malloc)
        try:
            for size in sizes:
                row = run_row(size, readers, n, targets, serde, rounds, objects,
                              interleave=reader_malloc == "retain")
                rows.append(row)
                if on_row:
                    on_row(row)
        finally:
            readers.close()
    return {
        "started": started,
        "seconds": round(time.monotonic() - t0, 2),
        "serde": serde_name,
        "reader_malloc": reader_malloc,
        "stores": {name: (t.spec if t is not None else PLAIN_SPECS[name]) for name, t in targets.items()},
        "method": ("writer = this process, N forked reader processes, one real segment per store; per round the "
                   "writer puts `objects` distinct payloads (put + get_signature), then every reader gets every "
                   "handle once; put rate = writer's, get rate = aggregate over readers (earliest first get to "
                   "latest last get); median of `rounds` rounds after one warm-up; every object got is checked "
                   "against the CRC32 of what was put; physical = one memmove of S bytes per object (put: "
                   "payload -> its slot of a shared-memory ring; get: slot -> one reused, prefaulted private "
                   "buffer of S bytes per reader)"),
        "units": {"objects_per_s": "objects per second", "mb_per_s": "10**6 payload bytes per second",
                  "seconds": "timed seconds of each round", "size": "bytes", "ring_bytes": "bytes"},
        "rows": rows,
    }


# --------------------------------------------------------------------- output
def _fmt_rate(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _fmt_ratio(x: float | None, bold_below_one: bool = False) -> str:
    if x is None:
        return "-"
    s = f"{x:.2f}"
    return f"[bold red]{s}[/]" if bold_below_one and x < 1.0 else s


RATIO_COLUMNS = (("impl_vllm", "impl/vLLM"), ("impl_copy", "impl/copy"), ("vllm_copy", "vLLM/copy"),
                 ("impl_physical", "impl/physical"), ("vllm_physical", "vLLM/physical"),
                 ("zerocopy_vllm", "zero-copy/vLLM"))
"""The ratio columns of the table: the ``ratios`` key of a row and its heading."""


def table(section: dict[str, Any], quick: bool = False) -> Table:
    """The rows as a rich table (rates and ratios); ``quick`` marks its ratios smoke-level in the title."""
    stores = list(section["stores"])
    malloc = section.get("reader_malloc", "default")
    t = Table(title=f"Store throughput (serde {section['serde']}"
                    + (f"; reader malloc {malloc}" if malloc != "default" else "")
                    + "; MB/s = 10^6 B/s; median of rounds)"
                    + (" -- QUICK RUN: smoke-level ratios, not measurements" if quick else ""))
    for col in ("size", "readers", "op"):
        t.add_column(col, no_wrap=True)
    t.add_column("objects", justify="right")
    for name in stores:
        label = {"vllm": "vLLM", "zerocopy": "zero-copy"}.get(name, name)
        if name not in PLAIN:
            t.add_column(f"{label} obj/s", justify="right")
        t.add_column(f"{label} MB/s", justify="right")
    for _, col in RATIO_COLUMNS:
        t.add_column(col, justify="right")
    for row in section["rows"]:
        for op in ("put", "get"):
            cells = [row["size_label"], str(row["readers"]), op,
                     str(row["objects"] * (row["readers"] if op == "get" else 1))]
            for name in stores:
                if name not in PLAIN:
                    cells.append(_fmt_rate(row[op][name]["objects_per_s"]))
                cells.append(_fmt_rate(row[op][name]["mb_per_s"]))
            r = row["ratios"][op]
            cells += [_fmt_ratio(r.get(key), key == "impl_vllm") for key, _ in RATIO_COLUMNS]
            t.add_row(*cells, end_section=op == "get")
    return t


def problems(section: dict[str, Any]) -> list[str]:
    """One line per store and row whose readers got a wrong object or a failed get."""
    out = []
    for row in section["rows"]:
        for name, v in row["verified"].items():
            if v["mismatches"] or v["errors"]:
                out.append(f"{name} {row['size_label']} x{row['readers']}: {v['mismatches']} wrong objects, "
                           f"{v['errors']} failed gets of {v['objects']}; first: {v['first_problem']}")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=parse_sizes, default=None, help="object sizes (default 1KiB,64KiB,1MiB,16MiB)")
    p.add_argument("--readers", type=parse_ints, default=None, help="reader process counts (default 1,2,4)")
    p.add_argument("--rounds", type=positive_int, default=None,
                   help=f"timed rounds per row, at least 1, after one warm-up (default {DEFAULT_ROUNDS})")
    p.add_argument("--objects", type=positive_int, default=None,
                   help="objects per round (default 64 MiB / size, within [4, 1024])")
    p.add_argument("--stores", default=",".join(STORES),
                   help="which of impl,vllm,copy,physical,zerocopy (default all; zerocopy: impl read with "
                        "get(copy=False))")
    p.add_argument("--serde", choices=tuple(SERDES), default="buffers", help="serde for impl and vLLM (default buffers)")
    p.add_argument("--reader-malloc", choices=READER_MALLOC, default="default",
                   help="readers' allocator: glibc's default, or retain freed memory (no trim; default default)")
    p.add_argument("--vllm", default=VLLM_SPEC, metavar="TARGET",
                   help=f"the store in the vllm column: any target spec (default {VLLM_SPEC}; file:PATH works too)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 1KiB,64KiB, 1 reader, 2 rounds of at most 64 objects (unless set)")
    p.add_argument("--json", type=Path, default=None, help="write the rows (and machine info) to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quick = args.quick
    sizes = args.sizes or ([1024, 64 * 1024] if quick else list(DEFAULT_SIZES))
    readers = args.readers or ([1] if quick else list(DEFAULT_READERS))
    rounds = args.rounds if args.rounds is not None else (2 if quick else DEFAULT_ROUNDS)
    objects = args.objects if args.objects is not None else (64 if quick else None)
    if args.json is not None and (why := unwritable(args.json)):
        print(f"bench.store: --json {args.json}: {why}", file=sys.stderr)
        return 2
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    console = wide_console()
    console.print(f"[bold]bench.store[/]: sizes {', '.join(fmt_size(s) for s in sizes)}; readers "
                  f"{', '.join(map(str, readers))}; {rounds} rounds; stores {', '.join(stores)}; "
                  f"serde {args.serde}; reader malloc {args.reader_malloc}; load {os.getloadavg()[0]:.2f}")
    try:
        section = run(sizes, readers, rounds, stores, args.serde, objects, args.vllm,
                      on_row=lambda r: console.print(f"  {r['size_label']:>7} x{r['readers']} done", highlight=False),
                      reader_malloc=args.reader_malloc)
    except (TargetError, BenchError, ValueError) as exc:
        console.print(f"[red]bench.store: {exc}[/]")
        return 2
    console.print(table(section, quick))
    if quick:
        console.print(QUICK_NOTE, highlight=False)
    else:
        for line in ties(section):
            console.print(f"[yellow]tie[/] {line}", highlight=False)
    bad = problems(section)
    for line in bad:
        console.print(f"[bold red]WRONG BYTES[/] {line}")
    if args.json:
        write_json(args.json, {**header("shmspec.bench/1", "bench.store"), "machine": machine_info(), "store": section})
        console.print(f"wrote {args.json}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
