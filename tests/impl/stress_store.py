"""Stress reproducer: one writer built as vLLM builds it, forked readers, every
object digest-checked.

:func:`run_stress` drives any store with vLLM's public API shape and nothing
else (no yield points, no harness hooks, no writer-private state):

* ``ring = ring_cls(ring_bytes, None, True)``;
* writer ``storage_cls(max_object_size=..., n_readers=readers,
  ring_buffer=ring, serde_class=StressSerde)``, plus ``reader_lock=lock``
  only when ``writer_lock=True`` (vLLM's own writer gets no lock);
* ``readers`` processes forked with ``multiprocess`` after the writer exists,
  each building ``storage_cls.create_from_handle(dataclasses.replace(
  writer.handle(), reader_lock=lock))`` with one shared ``multiprocess.Lock()``.

The writer (the calling process) puts objects under fresh keys, draws their
sizes and its ``clear()`` calls from ``random.Random(seed)``, and sends every
handle ``(address, id, signature, key)`` to every reader over its pipe
(``signature`` from ``writer.get_signature(key)`` when the store signs
handles, i.e. has ``get_signature``).  A ``put`` that raises ``MemoryError``
(ring full; the store has already tried ``free_unused``) is retried at once
until the readers have counted enough reads for a reclaim to succeed.  Each
reader gets every handle it is sent, sometimes twice (a *re-read*), and
sometimes re-reads one of its last few handles.  Every object carries its own
CRC-32, its serial number and its size, so each ``get`` is checked:

* the object put under that handle -> ``ok``;
* ``ValueError`` whose message says the handle "has been modified or is
  invalid" (the stale-handle error) -> ``stale`` (an allowed outcome);
* anything else returned -> ``wrong`` (property NRR broken), with the byte
  ranges where it differs from the object that was put;
* any other exception -> ``other_errors``.

Payloads *mimic framing* (``mimic=True``): their bodies are mostly int32
little-endian words that look like ring chunk headers ``[id][chunk_size]``
and small reader counts, the bytes a store that trusts in-band words could
be fooled by.

Every wait is bounded: the writer waits for reader progress at most
``READER_STALL_TIMEOUT`` seconds at a time (and retries a full ring only
until the run's deadline), readers give up after ``READER_IDLE_TIMEOUT``
seconds without a message, joins are bounded and stragglers are killed.  The
writer is closed in a ``finally`` and ``/dev/shm`` is checked afterwards:
any entry created under the writer's segment name is reported (``leaked``)
and removed.

The returned dict (all sizes in bytes, times in seconds)::

    gets, ok, wrong, stale, other_errors, rereads   -- summed over readers
    wrong_objects: distinct objects (keys) some reader got wrong (one
              damaged object is usually got wrong by several readers)
    puts, put_retries (MemoryError retries), clears, pinned_clears,
    forced_fills (the ring filled on purpose, :func:`run_stress`)
    window_wait_seconds (writer waiting for the slowest reader),
    ring_full_seconds (writer retrying puts on a full ring)
    seconds (load phase), total_seconds (including setup and teardown)
    per_reader: [{gets, ok, wrong, stale, other_errors, rereads}, ...]
    damage: wrong gets by kind (:func:`damage_kind`): "byte+1",
              "small-count-word", "bad-metadata", "other"
    examples: up to ``examples`` damaged objects, earliest first, each as
              first got wrong: reader, key, address, id, size, when
              (seconds since the readers were started), reread (bool),
              kind, diffs [(offset in the value, expected hex, got hex), ...]
    other_examples: up to ``examples`` "Type: message" strings
    params: the arguments of the run
    leaked: names of segments left in /dev/shm (removed since)
    problems: harness-level problems (a reader that died, did not answer,
              a writer that stalled); empty on a clean run

``pinned_clears`` counts ``clear()`` calls the writer made only because the
ring stayed full for ``stall_seconds`` although every reader had processed
every handle: a chunk whose ``reader_count`` can no longer reach its target
(e.g. an increment that landed in the wrong place).  They are part of what
the run observed, not a harness failure.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import random
import struct
import time
import traceback
import zlib
from multiprocessing import resource_tracker
from typing import Any

import multiprocess

STALE_TEXT = "has been modified or is invalid"
"""The stale-handle error's message (vLLM's and impl's ``ValueError``)."""

READER_IDLE_TIMEOUT = 60.0
"""Seconds a reader waits for its next message before it exits on its own."""
READER_STALL_TIMEOUT = 30.0
"""Seconds the writer waits for the slowest reader to come within ``window``
handles of it before it gives up (a harness problem, not a verdict)."""
JOIN_TIMEOUT = 10.0
"""Seconds the writer waits for each reader's final report and exit."""

_dumps = pickle.dumps  # handles go over the pipes as stdlib pickles (multiprocess's
_loads = pickle.loads  # own Connection.send pickles with dill, ~10x slower)

_HEAD = struct.Struct("<4sIII")  # magic, serial, size, crc32(body)
_MAGIC = b"STRS"
_POOL_BYTES = 256 * 1024


# ------------------------------------------------------------------- serde
class StressSerde:
    """``ObjectSerde``-shaped serde for ``bytes`` values.

    ``serialize(value) -> (value, len, metadata, 8)`` with metadata
    ``b"SSD1" + uint32 len``.  ``deserialize(view)`` copies what it returns
    (``bytes(view[8:])``), so no view of shared memory is ever kept.  It never
    raises: metadata that does not describe the view gives
    ``("bad-metadata", bytes(view))``, which the reader counts as a wrong object.
    """

    MAGIC = b"SSD1"

    def serialize(self, value: bytes) -> tuple[bytes, int, bytes, int]:
        md = self.MAGIC + struct.pack("<I", len(value))
        return value, len(value), md, len(md)

    def deserialize(self, data: memoryview) -> Any:
        raw = bytes(data)
        if len(raw) < 8 or raw[:4] != self.MAGIC or struct.unpack_from("<I", raw, 4)[0] != len(raw) - 8:
            return ("bad-metadata", raw)
        return raw[8:]


# ---------------------------------------------------------------- payloads
def make_pool(seed: int, mimic: bool, max_object_size: int, readers: int) -> bytes:
    """The bytes object bodies are cut from (deterministic in ``seed``).

    ``mimic``: int32 LE words, about 35 % small counts ``0 .. 4 * readers``,
    35 % header-like pairs ``[small id][chunk_size in 12 .. max_object_size]``,
    30 % random words.  Otherwise plain random bytes.
    """
    rng = random.Random(f"pool-{seed}")
    nbytes = max(_POOL_BYTES, 2 * max_object_size + 4096)
    if not mimic:
        return rng.randbytes(nbytes)
    words: list[int] = []
    fake_id = rng.randrange(1000)
    while len(words) * 4 < nbytes:
        r = rng.random()
        if r < 0.35:
            words.append(rng.randrange(4 * readers + 1))
        elif r < 0.70:
            fake_id += 1
            words.append(fake_id)
            words.append(rng.randrange(12, max(13, max_object_size)))
        else:
            words.append(rng.getrandbits(32))
    words = words[: nbytes // 4]
    return struct.pack(f"<{len(words)}I", *words)


def make_payload(pool: bytes, serial: int, size: int) -> bytes:
    """Object ``serial`` of ``size`` bytes (>= 16): ``[STRS][serial][size][crc][body]``."""
    body_len = size - _HEAD.size
    start = ((serial * 2654435761) % (len(pool) - body_len)) & ~3
    body = pool[start : start + body_len]
    return _HEAD.pack(_MAGIC, serial, size, zlib.crc32(body)) + body


def check_payload(value: Any, serial: int, size: int) -> bool:
    """Whether ``value`` is object ``serial`` of ``size`` bytes, intact."""
    if type(value) is not bytes or len(value) != size:
        return False
    magic, got_serial, got_size, crc = _HEAD.unpack_from(value)
    return (
        magic == _MAGIC and got_serial == serial and got_size == size and zlib.crc32(value[_HEAD.size :]) == crc
    )


def diff_runs(expected: bytes, got: bytes, limit: int = 4) -> list[tuple[int, str, str]]:
    """Up to ``limit`` differing byte runs ``(offset, expected hex, got hex)``."""
    runs: list[tuple[int, str, str]] = []
    n = min(len(expected), len(got))
    i = 0
    while i < n and len(runs) < limit:
        if expected[i] != got[i]:
            j = i
            while j < n and j - i < 16 and expected[j] != got[j]:
                j += 1
            runs.append((i, expected[i:j].hex(), got[i:j].hex()))
            i = j
        else:
            i += 1
    if len(expected) != len(got) and len(runs) < limit:
        runs.append((n, f"len={len(expected)}", f"len={len(got)}"))
    return runs


def damage_kind(expected: bytes, got: bytes) -> str:
    """How ``got`` differs from ``expected``: ``"byte+1"`` (one byte, one more),
    ``"small-count-word"`` (every difference inside one 4-byte window that now
    holds an int32 LE below 256), ``"bad-metadata"`` is decided by the caller,
    else ``"other"``."""
    if len(expected) != len(got):
        return "other"
    diff = [i for i in range(len(got)) if expected[i] != got[i]]
    if not diff:
        return "other"
    lo, hi = diff[0], diff[-1]
    if lo == hi and got[lo] == (expected[lo] + 1) % 256:
        return "byte+1"
    if hi - lo < 4:
        for o in range(max(0, hi - 3), lo + 1):
            if o + 4 <= len(got) and int.from_bytes(got[o : o + 4], "little") < 256:
                return "small-count-word"
    return "other"


# ------------------------------------------------------------------ reader
def _reader_main(
    index: int,
    storage_cls: type,
    handle: Any,
    conn: Any,
    progress: Any,
    pool: bytes,
    signed: bool,
    reread_p: float,
    back_reread_p: float,
    seed: int,
    max_examples: int,
    t0: float,
) -> None:
    """One reader process: get every handle it is sent, check every object."""
    stats = {"gets": 0, "ok": 0, "wrong": 0, "stale": 0, "other_errors": 0, "rereads": 0}
    wrong_serials: set[int] = set()
    kinds: dict[str, int] = {}
    examples: list[dict] = []
    others: list[str] = []
    store = None
    rng = random.Random(f"reader-{seed}-{index}")
    recent: list[tuple] = []

    def one_get(msg: tuple, reread: bool) -> None:
        serial, size, address, mid, sig, key = msg
        stats["gets"] += 1
        if reread:
            stats["rereads"] += 1
        try:
            value = store.get(address, mid, sig, key) if signed else store.get(address, mid)
        except ValueError as exc:
            if STALE_TEXT in str(exc):
                stats["stale"] += 1
            else:
                stats["other_errors"] += 1
                if len(others) < max_examples:
                    others.append(f"{type(exc).__name__}: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - every outcome is counted
            stats["other_errors"] += 1
            if len(others) < max_examples:
                others.append(f"{type(exc).__name__}: {exc}")
            return
        if check_payload(value, serial, size):
            stats["ok"] += 1
            return
        stats["wrong"] += 1
        got = value[1] if isinstance(value, tuple) else value
        if not isinstance(got, bytes):
            got = repr(got).encode()
        expected = make_payload(pool, serial, size)
        kind = "bad-metadata" if isinstance(value, tuple) else damage_kind(expected, got)
        kinds[kind] = kinds.get(kind, 0) + 1
        new_object = serial not in wrong_serials
        if len(wrong_serials) < 100_000:
            wrong_serials.add(serial)
        if new_object and len(examples) < max_examples:
            examples.append(
                {
                    "reader": index,
                    "key": key,
                    "address": address,
                    "id": mid,
                    "size": size,
                    "when": round(time.monotonic() - t0, 3),
                    "reread": reread,
                    "kind": kind,
                    "diffs": diff_runs(expected, got),
                }
            )

    try:
        try:
            store = storage_cls.create_from_handle(handle)
        except Exception as exc:  # noqa: BLE001
            conn.send(("error", f"cannot attach: {type(exc).__name__}: {exc}"))
            return
        conn.send(("ready",))
        done = 0
        while True:
            if not conn.poll(READER_IDLE_TIMEOUT):
                return
            msg = _loads(conn.recv_bytes())
            if msg[0] == "stop":
                break
            h = msg[1]
            one_get(h, False)
            if rng.random() < reread_p:
                one_get(h, True)
            if recent and rng.random() < back_reread_p:
                one_get(rng.choice(recent), True)
            recent.append(h)
            if len(recent) > 8:
                del recent[0]
            done += 1
            progress[index] = done
        conn.send(("result", stats, examples, others, sorted(wrong_serials), kinds))
    except (BrokenPipeError, EOFError, OSError):
        return
    except BaseException:  # noqa: BLE001 - report, never hang the writer
        try:
            conn.send(("error", traceback.format_exc()))
        except Exception:  # noqa: BLE001
            pass
    finally:
        if store is not None:
            try:
                store.close()
            except Exception:  # noqa: BLE001
                pass


# ------------------------------------------------------------------ writer
def _shm_entries(name: str) -> set[str]:
    base = name.lstrip("/")
    try:
        return {e for e in os.listdir("/dev/shm") if e.startswith(base)}
    except FileNotFoundError:
        return set()


def run_stress(
    ring_cls: type,
    storage_cls: type,
    *,
    readers: int = 4,
    seconds: float = 20.0,
    ring_bytes: int = 64 * 1024,
    max_object_size: int = 2 * 1024,
    min_size: int = 64,
    max_size: int | None = None,
    rereads: bool = True,
    reread_p: float = 0.5,
    back_reread_p: float = 0.05,
    clears: bool = True,
    clear_every: int = 300,
    mimic: bool = True,
    writer_lock: bool = False,
    window: int = 128,
    stall_seconds: float = 3.0,
    seed: int = 0,
    examples: int = 5,
    serde_class: type | None = None,
    start_method: str = "fork",
    puts: int | None = None,
    fill_every: int = 1000,
) -> dict[str, Any]:
    """Run the stress load and return the counts (module docstring).

    The load ends after ``puts`` puts when that is given (a budget of work:
    the counts that show the load ran do not depend on the machine's load),
    with ``seconds`` as a cap whose expiry is a harness problem; without
    ``puts`` it ends after ``seconds``.

    Forced fills (every ``fill_every`` puts from the first, 0: none): the
    writer puts without sending the handles until the ring is full (a
    ``MemoryError``, counted in ``put_retries`` and ``forced_fills``), then
    sends them.  Odd-numbered fills (the first, third, ...) first
    ``clear()`` the ring, so every reader gets every handle of the fill
    stale; even-numbered ones let the readers read a full ring while the
    writer retries.  So a run of any length exercises the full ring, a
    clear and stale handles however fast the readers are.

    Object sizes (the whole value, bytes) are drawn uniformly from
    ``[min_size, max_size]`` (default ``max_object_size - 64``, leaving room
    for the count and the serde's 8 metadata bytes).  ``rereads``: readers
    re-read a handle at once with probability ``reread_p`` and one of their
    last 8 handles with probability ``back_reread_p``.  ``clears``: after each
    put the writer calls ``clear()`` with probability ``1 / clear_every``.
    ``window``: how many handles a reader may lag behind before the writer
    waits for it.  ``serde_class`` (default :class:`StressSerde`) must
    produce and return the same ``bytes`` values (a subclass, e.g. one that
    damages values on purpose to test the checker).
    """
    if serde_class is None:
        serde_class = StressSerde
    if max_size is None:
        max_size = max_object_size - 64
    if not 16 <= min_size <= max_size:
        raise ValueError(f"object sizes must satisfy 16 <= min_size <= max_size, got {min_size}, {max_size}")
    params = {
        "readers": readers, "seconds": seconds, "ring_bytes": ring_bytes, "max_object_size": max_object_size,
        "min_size": min_size, "max_size": max_size, "rereads": rereads, "reread_p": reread_p,
        "back_reread_p": back_reread_p, "clears": clears, "clear_every": clear_every, "mimic": mimic,
        "writer_lock": writer_lock, "window": window, "seed": seed, "puts": puts, "fill_every": fill_every,
    }
    t_begin = time.monotonic()
    rng = random.Random(seed)
    pool = make_pool(seed, mimic, max_object_size, readers)
    signed = hasattr(storage_cls, "get_signature")
    resource_tracker.ensure_running()  # one tracker, started before any fork
    ctx = multiprocess.get_context(start_method)
    lock = ctx.Lock()
    progress = ctx.RawArray("q", readers)
    procs: list[Any] = []
    conns: list[Any] = []
    problems: list[str] = []
    per_reader: list[dict] = []
    wrong_examples: list[dict] = []
    other_examples: list[str] = []
    wrong_objects: set[int] = set()
    damage: dict[str, int] = {}
    counts = {"puts": 0, "put_retries": 0, "clears": 0, "pinned_clears": 0, "forced_fills": 0}
    waits = {"window_wait_seconds": 0.0, "ring_full_seconds": 0.0}
    load_seconds = 0.0
    writer = None
    seg_name = None  # a fresh random name: every /dev/shm entry under it is this run's
    try:
        ring = ring_cls(ring_bytes, None, True)
        seg_name = ring.shared_memory.name if hasattr(ring, "shared_memory") else None
        kwargs = dict(max_object_size=max_object_size, n_readers=readers, ring_buffer=ring, serde_class=serde_class)
        if writer_lock:
            kwargs["reader_lock"] = lock
        try:
            writer = storage_cls(**kwargs)
        except BaseException:
            ring.close()
            raise
        if seg_name is None:
            seg_name = writer.handle().ring_buffer_handle[1]
        reader_handle = dataclasses.replace(writer.handle(), reader_lock=lock)
        t0 = time.monotonic()
        for i in range(readers):
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=_reader_main,
                name=f"stress-r{i}",
                args=(i, storage_cls, reader_handle, child, progress, pool, signed,
                      reread_p if rereads else 0.0, back_reread_p if rereads else 0.0,
                      seed, examples, t0),
                daemon=True,
            )
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        for i, (c, p) in enumerate(zip(conns, procs)):
            if not c.poll(JOIN_TIMEOUT):
                raise RuntimeError(f"reader {i} did not attach within {JOIN_TIMEOUT:g} s")
            msg = c.recv()
            if msg[0] != "ready":
                raise RuntimeError(f"reader {i}: {msg[1]}")

        def min_progress() -> int:
            return min(progress[i] for i in range(readers))

        def check_alive() -> None:
            for i, p in enumerate(procs):
                if not p.is_alive():
                    raise RuntimeError(f"reader {i} died (exit code {p.exitcode})")

        t_load = time.monotonic()
        deadline = t_load + seconds
        next_alive_check = t_load + 0.5
        serial = 0
        size = rng.randint(min_size, max_size)
        filling = False  # a forced fill: puts whose handles wait in ``pending``
        pending: list[bytes] = []
        next_fill = 0 if fill_every > 0 else None

        def flush() -> None:
            for m in pending:
                for c in conns:
                    c.send_bytes(m)
            pending.clear()

        while True:
            now = time.monotonic()
            if puts is not None and counts["puts"] >= puts:
                break
            if now >= deadline:
                if puts is not None:
                    problems.append(f"the load made {counts['puts']} of its {puts} puts within its "
                                    f"{seconds:g} s cap")
                break
            if now >= next_alive_check:
                check_alive()
                next_alive_check = now + 0.5
            if not filling and next_fill is not None and counts["puts"] >= next_fill:
                filling = True
                next_fill += fill_every
            if not filling and serial - min_progress() >= window:
                wait_until = now + READER_STALL_TIMEOUT
                while serial - min_progress() >= window:
                    if time.monotonic() > wait_until:
                        check_alive()
                        raise RuntimeError(f"readers stalled: {list(progress)} of {serial} handles after "
                                           f"{READER_STALL_TIMEOUT:g} s")
                    time.sleep(0.0005)
                waits["window_wait_seconds"] += time.monotonic() - now
                continue
            key = f"k{serial}"
            value = make_payload(pool, serial, size)
            ring_full_since = None
            t_put = None
            while True:
                try:
                    address, mid = writer.put(key, value)
                    if t_put is not None:
                        waits["ring_full_seconds"] += time.monotonic() - t_put
                    break
                except MemoryError:
                    counts["put_retries"] += 1
                    if filling:  # the ring is full: end the forced fill
                        filling = False
                        counts["forced_fills"] += 1
                        if counts["forced_fills"] % 2 == 1:
                            writer.clear()
                            counts["clears"] += 1
                        flush()
                    t = time.monotonic()
                    if t_put is None:
                        t_put = t
                    if t >= deadline:
                        address = None
                        break
                    if min_progress() < serial:
                        ring_full_since = None
                        time.sleep(0)  # readers still have handles to count: retry at once
                        continue
                    # every reader has processed every handle and the ring is still full
                    if ring_full_since is None:
                        ring_full_since = t
                    elif t - ring_full_since > stall_seconds:
                        writer.clear()
                        counts["pinned_clears"] += 1
                        ring_full_since = None
                    time.sleep(0.0002)
            if address is None:
                break
            sig = writer.get_signature(key) if signed else None
            msg = _dumps(("h", (serial, size, address, mid, sig, key)))
            if filling:
                pending.append(msg)
            else:
                for c in conns:
                    c.send_bytes(msg)
            counts["puts"] += 1
            serial += 1
            size = rng.randint(min_size, max_size)
            draw = rng.random()  # drawn on every put: the writer's choices do not depend on the fills
            if clears and not filling and draw * clear_every < 1.0:
                writer.clear()
                counts["clears"] += 1
        flush()
        load_seconds = time.monotonic() - t_load
    except Exception as exc:  # noqa: BLE001 - reported, teardown below
        problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        for c in conns:
            try:
                c.send_bytes(_dumps(("stop",)))
            except (BrokenPipeError, OSError):
                pass
        end_wait = time.monotonic() + JOIN_TIMEOUT
        for i, (c, p) in enumerate(zip(conns, procs)):
            try:
                if c.poll(max(0.1, end_wait - time.monotonic())):
                    msg = c.recv()
                    if msg[0] == "result":
                        per_reader.append(msg[1])
                        wrong_examples.extend(msg[2])
                        other_examples.extend(msg[3])
                        wrong_objects.update(msg[4])
                        for k, v in msg[5].items():
                            damage[k] = damage.get(k, 0) + v
                    else:
                        problems.append(f"reader {i}: {msg[1]}")
                else:
                    problems.append(f"reader {i} sent no result within {JOIN_TIMEOUT:g} s")
            except (EOFError, OSError) as exc:
                problems.append(f"reader {i} hung up: {type(exc).__name__}")
        for p in procs:
            p.join(max(0.1, end_wait - time.monotonic()))
            if p.is_alive():
                problems.append(f"{p.name} killed at teardown")
                p.kill()
                p.join(5.0)
        for c in conns:
            c.close()
        if writer is not None:
            try:
                writer.close()
            except Exception as exc:  # noqa: BLE001
                problems.append(f"writer.close() raised {type(exc).__name__}: {exc}")
        leaked: list[str] = []
        if seg_name is not None:
            leaked = sorted(_shm_entries(seg_name))
            for entry in leaked:
                try:
                    os.unlink(os.path.join("/dev/shm", entry))
                except OSError:
                    pass
    totals = {k: sum(r[k] for r in per_reader) for k in ("gets", "ok", "wrong", "stale", "other_errors", "rereads")}
    wrong_examples.sort(key=lambda e: e["when"])
    first_seen: dict[str, dict] = {}
    for e in wrong_examples:  # one example per damaged object, earliest first
        first_seen.setdefault(e["key"], e)
    wrong_examples = list(first_seen.values())
    return {
        **totals,
        "wrong_objects": len(wrong_objects),
        "damage": damage,
        **counts,
        **{k: round(v, 3) for k, v in waits.items()},
        "seconds": round(load_seconds, 3),
        "total_seconds": round(time.monotonic() - t_begin, 3),
        "per_reader": per_reader,
        "examples": wrong_examples[:examples],
        "other_examples": other_examples[:examples],
        "params": params,
        "leaked": leaked,
        "problems": problems,
    }


def load_store_module(path: str) -> tuple[type, type]:
    """``(SingleWriterShmRingBuffer, SingleWriterShmObjectStorage)`` from a module file
    (loaded like the gate's ``--target file:PATH``)."""
    from shmspec.conformance.targets.loader import load_file

    target = load_file(path)
    return target.ring_cls, target.storage_cls


if __name__ == "__main__":  # python tests/impl/stress_store.py [module.py] [seconds] [writer_lock]
    import json
    import sys

    if len(sys.argv) > 1 and sys.argv[1] not in ("", "impl"):
        ring_cls, storage_cls = load_store_module(sys.argv[1])
    else:
        from shmspec.impl import SingleWriterShmObjectStorage as storage_cls  # noqa: N813
        from shmspec.impl import SingleWriterShmRingBuffer as ring_cls  # noqa: N813
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    wl = len(sys.argv) > 3 and sys.argv[3].lower() in ("1", "true", "yes", "lock")
    res = run_stress(ring_cls, storage_cls, seconds=secs, writer_lock=wl)
    res.pop("per_reader")
    print(json.dumps(res, indent=1))
