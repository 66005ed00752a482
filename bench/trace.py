"""Trace validation's costs (issue 29): recording's share of the controlled
campaign, and TLC's time on one long recorded run.

``python -m bench.trace [--parts overhead,long,free,seeds] [--rounds 2] [--steps 10000]
[--seed 0] [--free-seconds 0.5] [--json FILE] [--trace-out FILE] [--free-trace-out FILE]``

Everything is measured in this one run and printed as a table:

* **overhead**: impl's gate (``shmspec check --target impl --profile ci
  --concurrency controlled``, a subprocess with its own report directory),
  ``rounds`` times without recording and with it (``--validate-traces``),
  alternating.  From each ``report.json``: the ``controlled`` campaign's
  scheduled steps and seconds, and with recording the seconds TLC took
  (``rates.spec_validation.seconds``, inside the campaign's seconds).
  *Recording's cost* is (campaign seconds - TLC seconds) recorded over the
  campaign seconds unrecorded, minus 1, from the rounds' medians; the steps
  must be equal (the same schedules ran: the ci profile's seed is fixed).
* **long**: one random controlled schedule of impl (vLLM's construction: the
  writer without the readers' lock, 2 forked readers) recorded until it has
  ``steps`` events (puts of random sizes, gets of random handles, some
  ``free_unused`` and ``clear``; no zero-copy reads), then checked by
  :func:`shmspec.conformance.spec.validate.validate`: its verdict, TLC's
  seconds and the distinct states.
* **free**: free runs of impl (vLLM's construction; a 512-byte ring and
  objects of at most 96 bytes, so that it wraps and reclaims; no zero-copy
  reads in either setting), ``rounds`` times without recording and with it
  (``run_free(record=True)``), alternating, ``--free-seconds`` each.
  *Recording's cost* is 1 - the recorded runs' median ops/s over the
  unrecorded runs' (a free run's length is fixed: recording shows as fewer
  operations).  The first recorded run is then validated: its verdict, its
  departure if any, TLC's seconds.
* **seeds**: recorded free runs as in *free*, seeds ``seed`` to ``seed +
  rounds - 1``, each validated: its events, spec steps, verdict, departure
  if any, TLC's seconds.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.table import Table

from bench.common import REPO, machine_info, now_iso, positive_int, unwritable, wide_console, write_json
from shmspec.conformance.core.documents import header

PARTS = ("overhead", "long", "free", "seeds")


def _gate(record: bool, timeout: float = 1800.0) -> dict[str, Any]:
    """One ci gate of impl, controlled; the controlled campaign's figures.

    Raises:
        RuntimeError: the gate wrote no report.
    """
    with tempfile.TemporaryDirectory(prefix="bn_trace_") as tmp:
        rep = Path(tmp) / "report"
        cmd = [sys.executable, "-c", "import sys; from shmspec.conformance.cli import main; sys.exit(main())",
               "check", "--target", "impl", "--profile", "ci", "--concurrency", "controlled",
               "--report-dir", str(rep)] + (["--validate-traces"] if record else [])
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        path = rep / "report.json"
        if not path.is_file():
            tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-5:])
            raise RuntimeError(f"the gate exited {p.returncode} without a report:\n{tail}")
        report = json.loads(path.read_text())
    c = next(c for c in report["campaigns"] if c["name"] == "controlled")
    sv = (c.get("rates") or {}).get("spec_validation") or {}
    return {"record": record, "verdict": report["verdict"], "steps": c["steps"], "examples": c["examples"],
            "seconds": c["seconds"], "tlc_seconds": sv.get("seconds", 0.0), "traces": sv.get("traces"),
            "validated": sv.get("validated")}


def overhead(rounds: int) -> dict[str, Any]:
    """Recording's cost in the controlled campaign (see the module docstring)."""
    runs = [_gate(record) for _ in range(rounds) for record in (False, True)]
    plain = [r for r in runs if not r["record"]]
    rec = [r for r in runs if r["record"]]
    same = len({r["steps"] for r in runs}) == 1
    base = statistics.median(r["seconds"] for r in plain)
    recorded = statistics.median(r["seconds"] - r["tlc_seconds"] for r in rec)
    return {"runs": runs, "same_steps": same, "plain_seconds": round(base, 2),
            "recorded_seconds": round(recorded, 2),
            "tlc_seconds": round(statistics.median(r["tlc_seconds"] for r in rec), 2),
            "recording_cost": round(recorded / base - 1, 3) if base else None}


def random_run(steps: int, seed: int) -> dict[str, Any]:
    """A random controlled schedule of impl recorded to ``steps`` events; its trace."""
    from shmspec.conformance.concurrency.procs import ProcessPool
    from shmspec.conformance.concurrency.schedule import ScheduledSession, payload
    from shmspec.conformance.core.config import SessionConfig
    from shmspec.conformance.targets.loader import load_target

    rng = random.Random(seed)
    target = load_target("impl")
    config = SessionConfig()
    with ProcessPool(target, config.readers) as pool:
        s = ScheduledSession(pool, target, config, promises=True, record=True)
        n = 0
        while len(s.recorder.events) < steps:
            idle = s.idle_readers()
            choice = rng.random()
            if s.writer_idle() and choice < 0.25:
                op = rng.choices(("put", "free_unused", "clear"), (20, 3, 1))[0]
                args: dict[str, Any] = {}
                if op == "put":
                    n += 1
                    args = {"key": f"k{n}", "data": payload(config, n, rng.randint(0, 100)).hex()}
                s.execute({"process": "writer", "kind": "start", "action": op, "args": args})
            elif idle and s.refs and choice < 0.45:
                ref = rng.choice(s.refs[-6:]).ref
                s.execute({"process": rng.choice(idle), "kind": "start", "action": "get", "args": {"ref": ref}})
            elif s.runnable():
                s.execute({"process": rng.choice(s.runnable()), "kind": "advance"})
        s.finish()
        return s.recorder.doc


def long_run(steps: int, seed: int, trace_out: Path | None = None) -> dict[str, Any]:
    """Record a run of ``steps`` events and validate it (see the module
    docstring); the trace is written to ``trace_out`` when given."""
    from shmspec.conformance.spec.validate import validate

    t0 = time.monotonic()
    doc = random_run(steps, seed)
    recorded = time.monotonic() - t0
    if trace_out is not None:
        trace_out.write_text(json.dumps(doc))
    v = validate(doc, timeout=600.0)
    return {"events": len(doc["events"]), "spec_steps": v.steps, "verdict": v.verdict,
            "departure": v.departure.describe() if v.departure else None, "distinct_states": v.distinct,
            "tlc_seconds": round(v.seconds, 2), "record_seconds": round(recorded, 2),
            "actions": dict(sorted(v.actions.items()))}


def _free_run(seconds: float, seed: int, record: bool) -> Any:
    """One free run of impl as the *free* and *seeds* parts make it (see the
    module docstring): vLLM's construction, a 512-byte ring, objects of at
    most 96 bytes, no zero-copy reads."""
    from shmspec.conformance.concurrency.freerun import FreeLoad, free_config, run_free

    config = free_config(2, data_buffer_size=512, max_object_size=96)
    return run_free(_impl(), config, seconds, 2, seed, load=FreeLoad(p_zero_copy=0.0), record=record)


@functools.cache
def _impl() -> Any:
    """The built-in store, loaded once per bench run."""
    from shmspec.conformance.targets.loader import load_target

    return load_target("impl")


def _validated(trace: dict[str, Any]) -> dict[str, Any]:
    """A recorded run checked by TLC: its events, spec steps, verdict,
    departure (or None), TLC's seconds and distinct states."""
    from shmspec.conformance.spec.validate import validate

    v = validate(trace, timeout=600.0)
    return {"events": len(trace["events"]), "spec_steps": v.steps, "verdict": v.verdict,
            "departure": v.departure.describe() if v.departure else None, "tlc_seconds": round(v.seconds, 2),
            "distinct_states": v.distinct}


def free_overhead(rounds: int, seconds: float, seed: int, trace_out: Path | None = None) -> dict[str, Any]:
    """Recording's cost in free runs and one recorded run's validation (see the module docstring)."""
    runs, first = [], None
    for i in range(rounds):
        for record in (False, True):
            r = _free_run(seconds, seed + i, record)
            runs.append({"record": record, "ops": r.ops, "ops_per_second": r.ops_per_second, "verdict": r.verdict,
                         "events": len(r.trace["events"]) if r.trace else 0})
            if record and first is None:
                first = r.trace
    if trace_out is not None:
        trace_out.write_text(json.dumps(first))
    plain = statistics.median(r["ops_per_second"] for r in runs if not r["record"])
    rec = statistics.median(r["ops_per_second"] for r in runs if r["record"])
    return {"runs": runs, "seconds": seconds, "plain_ops_per_second": plain, "recorded_ops_per_second": rec,
            "recording_cost": round(1 - rec / plain, 3) if plain else None,
            "validated": _validated(first)}


def free_seeds(rounds: int, seconds: float, seed: int) -> list[dict[str, Any]]:
    """One recorded free run per seed, each validated (see the module docstring)."""
    out = []
    for s in range(seed, seed + rounds):
        r = _free_run(seconds, s, record=True)
        out.append({"seed": s, "history_check": r.verdict, **_validated(r.trace)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.trace", description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--rounds", type=positive_int, default=2, help="gates per setting (overhead), free runs per setting (free), seeds (seeds)")
    ap.add_argument("--steps", type=positive_int, default=10_000, help="events of the long run")
    ap.add_argument("--seed", type=int, default=0, help="the long run's schedule seed; the first free run's (free, seeds)")
    ap.add_argument("--free-seconds", type=float, default=0.5, help="seconds of each free run (free)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--free-trace-out", type=Path, default=None, help="write the first recorded free run's trace "
                    "here (shmspec validate reads it)")
    ap.add_argument("--trace-out", type=Path, default=None, help="write the long run's trace here "
                    "(shmspec validate reads it)")
    a = ap.parse_args(argv)
    parts = [p.strip() for p in a.parts.split(",") if p.strip()]
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        ap.error(f"--parts takes {', '.join(PARTS)}; got {a.parts!r}")
    if a.json is not None and (why := unwritable(a.json)):
        ap.error(f"--json: {why}")
    for flag, path in (("--trace-out", a.trace_out), ("--free-trace-out", a.free_trace_out)):
        if path is not None and (why := unwritable(path)):
            ap.error(f"{flag}: {why}")
    if not 0 < a.free_seconds <= 60:
        ap.error(f"--free-seconds takes a number of seconds in (0, 60]; got {a.free_seconds}")
    console = wide_console()
    out: dict[str, Any] = {**header("shmspec.bench/1", "bench.trace"), "measured": now_iso(), "machine": machine_info()}
    if "overhead" in parts:
        o = out["overhead"] = overhead(a.rounds)
        t = Table(title="recording in impl's controlled campaign (ci, controlled)")
        for col in ("recorded", "verdict", "steps", "campaign s", "TLC s", "campaign - TLC s"):
            t.add_column(col)
        for r in o["runs"]:
            t.add_row("yes" if r["record"] else "no", r["verdict"], str(r["steps"]), f"{r['seconds']:.2f}",
                      f"{r['tlc_seconds']:.2f}", f"{r['seconds'] - r['tlc_seconds']:.2f}")
        console.print(t)
        console.print(f"recording's cost: {o['recording_cost']:+.1%} of the campaign "
                      f"(medians {o['recorded_seconds']} s recorded without TLC, {o['plain_seconds']} s unrecorded;"
                      f" same steps: {o['same_steps']})")
    if "long" in parts:
        g = out["long"] = long_run(a.steps, a.seed, a.trace_out)
        console.print(f"long run: {g['events']} events -> {g['spec_steps']} spec steps, {g['verdict']}"
                      f"{' (' + g['departure'] + ')' if g['departure'] else ''}; TLC {g['tlc_seconds']} s, "
                      f"{g['distinct_states']} distinct states; recorded in {g['record_seconds']} s")
    if "free" in parts:
        f = out["free"] = free_overhead(a.rounds, a.free_seconds, a.seed, a.free_trace_out)
        t = Table(title=f"recording in free runs of impl ({a.free_seconds} s each; 512-byte ring)")
        for col in ("recorded", "history check", "ops", "ops/s", "events"):
            t.add_column(col)
        for r in f["runs"]:
            t.add_row("yes" if r["record"] else "no", r["verdict"], str(r["ops"]), f"{r['ops_per_second']:.0f}",
                      str(r["events"]))
        console.print(t)
        g = f["validated"]
        console.print(f"recording's cost: {f['recording_cost']:+.1%} of the free run's ops/s (medians "
                      f"{f['recorded_ops_per_second']:.0f} recorded, {f['plain_ops_per_second']:.0f} unrecorded); "
                      f"the first recorded run: {g['events']} events -> {g['spec_steps']} spec steps, {g['verdict']}"
                      f"{' (' + g['departure'] + ')' if g['departure'] else ''}; TLC {g['tlc_seconds']} s")
    if "seeds" in parts:
        rows = out["seeds"] = free_seeds(a.rounds, a.free_seconds, a.seed)
        t = Table(title=f"recorded free runs of impl, validated ({a.free_seconds} s each; 512-byte ring)")
        for col in ("seed", "history check", "events", "spec steps", "verdict", "TLC s", "departure"):
            t.add_column(col)
        for r in rows:
            t.add_row(str(r["seed"]), r["history_check"], str(r["events"]), str(r["spec_steps"]), r["verdict"],
                      f"{r['tlc_seconds']:.1f}", r["departure"] or "")
        console.print(t)
    if a.json is not None:
        write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
