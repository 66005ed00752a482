"""Regression: a writer built as vLLM builds it (no ``reader_lock``) must never
let a reader return a wrong object.

vLLM builds its writer as ``SingleWriterShmObjectStorage(max_object_size,
n_readers, ring, serde_class=...)``, without the readers' lock.  impl's
segment-v1 store (HEAD 324345f) fenced reclaims with that lock only when the
writer had it; without it a reader could pass its last liveness check, the
writer reclaim (or clear) and reuse the memory, and the reader's in-band
``reader_count += 1`` land inside the new object, which *other* readers then
got with one word replaced by a small count or one byte incremented.  This
test runs :func:`stress_store.run_stress` (one writer, 4 forked readers, a
64 KiB ring, objects of 64..1984 bytes whose bodies mimic chunk framing,
re-reads, ``clear()`` about every 300 puts, every object digest-checked) with
``writer_lock=False`` and asserts zero wrong objects, no harness problem, no
segment left behind, and enough gets that a stalled run cannot pass.

Measured on the 2-core dev machine against a frozen copy of that v1 store
(20 s runs, default parameters, seeds 0-3, machine also loaded by other
jobs, load average 4-6): 3-28 distinct wrong objects (17-147 wrong gets) per
run in 188k-446k gets, the first one typically 0.2-5 s into the run; 0 in
242k-347k gets with ``writer_lock=True``.  The same load on vLLM 0.33.0's
store: 119 wrong objects in 10 s.

Environment:

* ``SHMSPEC_STRESS_STORE=path/to/module.py``: run against the two classes
  (``SingleWriterShmRingBuffer``, ``SingleWriterShmObjectStorage``) of that
  module file instead of ``shmspec.impl``; it is loaded like the gate's
  ``--target file:PATH`` (in isolation, with stand-ins for ``torch`` and
  ``vllm.logger``).  Point it at a seeded fault, or a frozen copy of an old
  store, to see the test fail: e.g. a module that does
  ``sys.path.insert(0, "/tmp/landed_impl"); from shmspec_landed import
  SingleWriterShmRingBuffer, SingleWriterShmObjectStorage``.
* ``SHMSPEC_STRESS_PUTS``: the main test's load, in puts (default 40,000,
  about 9 s on the quiet 2-core dev machine, 2026-12-04).
* ``SHMSPEC_STRESS_SECONDS``: without ``SHMSPEC_STRESS_PUTS``, run the main
  test for this many seconds instead (a soak; its counts then depend on the
  machine's load).
* ``SHMSPEC_STRESS_SEED``: seed of the writer's choices (default 0).

Every test's load is counted in puts, with a time cap (its hard limit) whose
expiry is a harness problem: what shows that the load ran (gets, a full
ring, clears, stale handles) follows from the work done, not from how fast
the machine was.  The forced fills of :func:`stress_store.run_stress` make
the ring fill and handles go stale in every run, however fast the readers.

The writer's choices (object sizes, when to clear) come from
``random.Random(seed)`` and each reader's (re-reads) from its own seeded RNG;
the interleaving of the processes, and so the counts, are not deterministic.
Each test runs under a SIGALRM hard limit.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import multiprocess
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stress_store import StressSerde, load_store_module, run_stress  # noqa: E402
from helpers import ROOT

STORE_ENV = "SHMSPEC_STRESS_STORE"
SECONDS_ENV = "SHMSPEC_STRESS_SECONDS"
PUTS_ENV = "SHMSPEC_STRESS_PUTS"
SEED_ENV = "SHMSPEC_STRESS_SEED"
DEFAULT_PUTS = 40_000
CAP_SECONDS = 240.0
"""Time cap of a load counted in puts (40,000 puts took 9 s quiet)."""


def _load() -> tuple[int | None, float]:
    """``(puts, seconds)`` of the main test: a put budget with a cap, or a soak."""
    if os.environ.get(PUTS_ENV) or not os.environ.get(SECONDS_ENV):
        return int(os.environ.get(PUTS_ENV) or DEFAULT_PUTS), CAP_SECONDS
    return None, float(os.environ[SECONDS_ENV])


def _seconds() -> float:
    return _load()[1]


def _assert_load_ran(res: dict, info: str) -> None:
    """What a load counted in puts guarantees: every put made, every reader
    got every handle, the ring filled and handles went stale."""
    budget = res["params"]["puts"]
    if budget is not None:
        assert res["puts"] == budget, info
        assert res["gets"] >= budget * res["params"]["readers"], info
    assert res["forced_fills"] >= 1 and res["put_retries"] >= res["forced_fills"], info
    assert res["clears"] > 0 and res["stale"] > 0, info


def _store() -> tuple[type, type, str]:
    path = os.environ.get(STORE_ENV)
    if path:
        ring_cls, storage_cls = load_store_module(path)
        return ring_cls, storage_cls, path
    from shmspec.impl import SingleWriterShmObjectStorage, SingleWriterShmRingBuffer

    return SingleWriterShmRingBuffer, SingleWriterShmObjectStorage, "shmspec.impl"


@pytest.fixture
def hard_limit(request):
    """SIGALRM after the test's budget (its load seconds + 90 s of setup and
    teardown slack); run_stress's own teardown still runs (``finally``)."""
    budget = int(getattr(request, "param", _seconds())) + 90

    def on_alarm(signum, frame):
        raise TimeoutError(f"test exceeded its {budget} s hard limit")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(budget)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _summary(res: dict, where: str) -> str:
    keys = ("gets", "ok", "wrong", "wrong_objects", "damage", "stale", "other_errors", "puts", "put_retries",
            "forced_fills", "clears", "pinned_clears", "seconds")
    lines = [f"{where}: " + ", ".join(f"{k}={res[k]}" for k in keys)]
    lines += [f"  problem: {p}" for p in res["problems"]]
    lines += [f"  wrong: {e}" for e in res["examples"]]
    lines += [f"  other: {e}" for e in res["other_examples"]]
    return "\n".join(lines)


def _assert_clean_run(res: dict, where: str) -> None:
    info = _summary(res, where)
    assert res["problems"] == [], info
    assert res["leaked"] == [], info
    assert multiprocess.active_children() == [], info
    assert len(res["per_reader"]) == res["params"]["readers"], info
    assert all(r["gets"] > 0 for r in res["per_reader"]), info


@pytest.mark.slow
def test_vllm_construction_no_wrong_objects(hard_limit):
    ring_cls, storage_cls, where = _store()
    puts, seconds = _load()
    res = run_stress(ring_cls, storage_cls, seconds=seconds, puts=puts, writer_lock=False,
                     seed=int(os.environ.get(SEED_ENV) or 0))
    info = _summary(res, where)
    print("\n" + info)
    _assert_clean_run(res, where)
    _assert_load_ran(res, info)
    assert res["gets"] == res["ok"] + res["wrong"] + res["stale"] + res["other_errors"], info
    # the property: every get returned the object put under that handle, or the stale-handle error
    assert res["wrong"] == 0, info
    assert res["other_errors"] == 0, info


class _DamagingSerde(StressSerde):
    """Flips one byte of every 500th value a reader deserializes (the store is not involved)."""

    calls = 0

    def deserialize(self, data):
        value = super().deserialize(data)
        type(self).calls += 1
        if type(self).calls % 500 == 0 and isinstance(value, bytes) and len(value) > 40:
            value = value[:40] + bytes([value[40] ^ 0x01]) + value[41:]
        return value


@pytest.mark.slow
@pytest.mark.parametrize("hard_limit", [60], indirect=True)
def test_stress_checker_sees_damaged_objects(hard_limit):
    """The checker itself: a serde that damages values must show up as wrong
    objects, with the right offset and bytes (so a pass above means something)."""
    ring_cls, storage_cls, where = _store()
    res = run_stress(ring_cls, storage_cls, readers=2, seconds=60.0, puts=3000, serde_class=_DamagingSerde)
    info = _summary(res, where)
    _assert_clean_run(res, where)
    assert res["wrong"] > 0 and res["wrong_objects"] > 0, info
    flipped = [e for e in res["examples"]
               if len(e["diffs"]) == 1 and e["diffs"][0][0] == 40
               and int(e["diffs"][0][1], 16) ^ int(e["diffs"][0][2], 16) == 1]
    assert flipped, info


@pytest.mark.parametrize("hard_limit", [60], indirect=True)
@pytest.mark.parametrize("readers,start_method,writer_lock", [
    (1, "fork", False), (8, "fork", False), (2, "spawn", False), (2, "fork", True),
], ids=["1-reader", "8-readers", "spawned", "writer-lock"])
@pytest.mark.slow
def test_other_constructions_no_wrong_objects(hard_limit, readers, start_method, writer_lock):
    """The same load, shorter, in the other constructions users deploy: one
    reader, eight, readers started by spawn, and a writer given the readers'
    lock (impl takes no lock on any path; such a writer's gets would stand
    in for readers' reads if it read, which it does not here)."""
    ring_cls, storage_cls, where = _store()
    res = run_stress(ring_cls, storage_cls, readers=readers, seconds=60.0, puts=4000, start_method=start_method,
                     writer_lock=writer_lock)
    info = _summary(res, f"{where} ({readers} {start_method} readers, writer_lock={writer_lock})")
    _assert_clean_run(res, where)
    _assert_load_ran(res, info)
    assert res["wrong"] == 0 and res["other_errors"] == 0, info


LANDED_READ_PATH = ROOT / "conformance" / "mutants" / "inband_count_unfenced.py"


ROUNDS = 6
"""Rounds of the landed read path's load, each of 60,000 puts with its own
seed, until one returns a wrong object."""


@pytest.mark.slow
@pytest.mark.parametrize("hard_limit", [420], indirect=True)
def test_the_landed_read_path_returns_wrong_objects(hard_limit):
    """The reproducer finds the bug it is for: the seeded fault
    ``inband_count_unfenced`` (impl's segment-v1 read path, an in-band count
    under the readers' lock, with vLLM's lockless writer) returns wrong
    objects under the same load (measured 2026-12-04: 1-2 wrong objects in
    each of three runs of 20,000 puts, seeds 0-2, nothing else running).

    The race needs the writer and a reader on two cores at once.  With both
    cores busy (the suite's other worker), one round of 60,000 puts found
    none (2026-12-04); so rounds of 60,000 puts, each with its own seed, run
    until one finds a wrong object, up to :data:`ROUNDS` (a budget of work:
    a quiet machine stops after the first)."""
    ring_cls, storage_cls = load_store_module(str(LANDED_READ_PATH))
    seen = []
    for seed in range(ROUNDS):
        res = run_stress(ring_cls, storage_cls, seconds=60.0, puts=60_000, writer_lock=False, seed=seed)
        info = _summary(res, f"inband_count_unfenced, round {seed + 1}")
        print("\n" + info)
        _assert_clean_run(res, "inband_count_unfenced")
        seen.append(info)
        if res["wrong_objects"] > 0:
            break
    assert res["wrong_objects"] > 0, seen
