"""The harness's own rates: gate steps/s, free-running ops/s, TLC states/s.

``python -m bench.harness [--parts gate,free,tlc] [--profile ci]
[--free-readers 2,4] [--seconds 3] [--config 'MC*.cfg'] [--quick] [--json FILE]``

Everything is measured in this one run and printed as a table:

* **gate** (``shmspec check --target impl --profile ci --concurrency
  controlled``, run as a subprocess with its own report directory, whose
  ``report.json`` is read): *lockstep steps/s* is the steps of every
  ``lockstep`` campaign (core, stale, adversarial, auth, fields, touch, lock)
  over their seconds: model and store driven call by call, outcome, state and
  every property compared after each step; *program steps/s* the same for the
  z3 boundary programs; *scheduled steps/s* the ``controlled`` campaign's
  scheduled steps (a writer and two reader processes on one real segment, one
  yield point per step, checks after each; interleavings drawn by Hypothesis)
  over its seconds, and the same for the ``preemption`` sweep (every
  one-preemption schedule, when the gate has it).  Campaign
  seconds include Hypothesis's own work (generating, shrinking when something
  fails; nothing fails on impl).
* **free** (:func:`shmspec.conformance.concurrency.freerun.run_free` on impl, for each
  reader count): operations per second of the free-running load (writer puts,
  frees, clears; readers get every handle once and re-read some), measured
  from the recorded history (first invoke to last return); the history's
  linearizability verdict is recorded beside it.
* **tlc** (each ``tla/MC*.cfg``): TLC run once on the invariants that must
  hold (the whole state space, as ``shmspec model`` does first), with one
  worker.  Its output is read line by line as it comes, so *search seconds*
  run from "Computing initial states" to TLC's exit, without the JVM's start
  and the parse; *wall seconds* are the whole run.  Distinct and generated
  states per search second, and per wall second, are recorded.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.table import Table

from bench.common import REPO, machine_info, now_iso, parse_ints, unwritable, wide_console, write_json
from shmspec.conformance.core.documents import header
from shmspec.conformance.spec import tlc

PARTS = ("gate", "free", "tlc")


# ---------------------------------------------------------------------- gate
def gate_rates(profile: str = "ci", target: str = "impl", concurrency: str = "controlled",
               timeout: float = 1800.0) -> dict[str, Any]:
    """Run the gate once (subprocess) and derive its rates from ``report.json``.

    Raises:
        RuntimeError: the gate wrote no report (exit status 2 or a crash).
    """
    with tempfile.TemporaryDirectory(prefix="bn_gate_") as tmp:
        rep = Path(tmp) / "report"
        cmd = [sys.executable, "-c", "import sys; from shmspec.conformance.cli import main; sys.exit(main())",
               "check", "--target", target, "--profile", profile, "--concurrency", concurrency,
               "--report-dir", str(rep)]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        wall = time.monotonic() - t0
        path = rep / "report.json"
        if not path.is_file():
            tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-5:])
            raise RuntimeError(f"the gate exited {p.returncode} without a report:\n{tail}")
        report = json.loads(path.read_text())
    camps = report["campaigns"]

    def mode_rate(mode: str) -> dict[str, Any]:
        cs = [c for c in camps if c["mode"] == mode and not c.get("skipped")]
        steps = sum(c["steps"] for c in cs)
        examples = sum(c["examples"] for c in cs)
        seconds = sum(c["seconds"] for c in cs)
        return {"campaigns": [c["name"] for c in cs], "examples": examples, "steps": steps,
                "seconds": round(seconds, 3),
                "steps_per_s": round(steps / seconds, 1) if seconds else None,
                "examples_per_s": round(examples / seconds, 2) if seconds else None}

    return {
        "command": " ".join(["shmspec"] + cmd[3:-2]),
        "target": report["target"],
        "profile": report["profile"],
        "verdict": report["verdict"],
        "exit_status": p.returncode,
        "gate_seconds": report["seconds"],
        "wall_seconds": round(wall, 2),
        "lockstep": mode_rate("lockstep"),
        "program": mode_rate("program"),
        "preemption": mode_rate("preemption"),
        "controlled": mode_rate("controlled"),
        "campaigns": [{"name": c["name"], "mode": c["mode"], "examples": c["examples"], "steps": c["steps"],
                       "seconds": c["seconds"],
                       "steps_per_s": round(c["steps"] / c["seconds"], 1) if c["seconds"] else None}
                      for c in camps],
    }


# ---------------------------------------------------------------------- free
def free_rates(readers_list: list[int], seconds: float, target: str = "impl", seed: int = 0) -> list[dict[str, Any]]:
    """One free-running load per reader count on ``target``; ops/s from its history.
    ``per_process`` maps each process to ``{"ops", "seconds", "ops_per_s"}``
    (bench's key names; the gate report's ``rates`` keep ``ops_per_second``)."""
    from shmspec.conformance.concurrency.freerun import free_config, run_free
    from shmspec.conformance.targets.loader import load_target

    loaded = load_target(target)
    out = []
    for n in readers_list:
        fr = run_free(loaded, free_config(n), seconds, n, seed)
        out.append({"target": loaded.spec, "readers": n, "load_seconds": seconds, "ops": fr.ops,
                    "seconds": fr.seconds, "ops_per_s": fr.ops_per_second, "puts": fr.puts,
                    "out_of_space": fr.out_of_space, "verdict": fr.verdict,
                    "per_process": {name: {"ops": d["ops"], "seconds": d["seconds"], "ops_per_s": d["ops_per_second"]}
                                    for name, d in fr.per_process.items()}})
    return out


# ----------------------------------------------------------------------- tlc
def _run_tlc_timed(cf: tlc.ConfigFile, invariants: list[str], jar: Path, timeout: float = 1800.0) -> dict[str, Any]:
    """TLC on ``cf`` with ``invariants`` (:func:`tlc.run_tlc`, which times the
    search apart from the JVM's start-up)."""
    res = tlc.run_tlc(cf, spec=_spec_for(cf), jar=jar, timeout=timeout, invariants=invariants)
    search = res.search_seconds
    wall = res.seconds
    reported = re.search(r"Finished in (\d+)s", res.output)
    return {
        "config": cf.name, "invariants": invariants, "status": res.status,
        "distinct": res.distinct, "generated": res.generated, "depth": res.depth,
        "wall_seconds": round(wall, 3),
        "search_seconds": round(search, 3) if search is not None else None,
        "tlc_reported_seconds": int(reported.group(1)) if reported else None,
        "distinct_per_s": round(res.distinct / search, 1) if search else None,
        "generated_per_s": round(res.generated / search, 1) if search else None,
        "distinct_per_wall_s": round(res.distinct / wall, 1),
        "generated_per_wall_s": round(res.generated / wall, 1),
    }


def _spec_for(cf: tlc.ConfigFile) -> Path:
    """The ``ShmStore.tla`` beside the config (``tla/``), or one folder up (``tla/deep/``)."""
    spec = cf.path.parent / "ShmStore.tla"
    return spec if spec.is_file() else cf.path.parent.parent / "ShmStore.tla"


def tlc_rates(pattern: str = "MC*.cfg", deep: bool = False, on_config: Any = None) -> list[dict[str, Any]]:
    """TLC states/s for every config matching ``pattern`` (``tla/``, or ``tla/deep/``).

    Raises:
        TlcError: no config, no java or no jar.
    """
    jar = tlc.find_jar()
    out = []
    for cf in tlc.config_files(None, pattern, deep):
        if on_config:
            on_config(cf.name)
        keep = [i for i in cf.invariants if i not in cf.expected]
        out.append(_run_tlc_timed(cf, keep, jar))
    return out


# ---------------------------------------------------------------------- output
def _n(x: Any, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}" if isinstance(x, (int, float)) else str(x)


def tables(section: dict[str, Any]) -> list[Table]:
    out = []
    if section.get("gate"):
        g = section["gate"]
        t = Table(title=f"Gate on {g['target']} (profile {g['profile']}, verdict {g['verdict']}, "
                        f"{g['gate_seconds']:.1f} s)")
        for col, just in (("mode", "left"), ("campaigns", "left"), ("examples", "right"), ("steps", "right"),
                          ("seconds", "right"), ("steps/s", "right"), ("examples/s", "right")):
            t.add_column(col, justify=just)
        for mode in ("lockstep", "program", "preemption", "controlled"):
            m = g.get(mode)
            if not m or not m["campaigns"]:
                continue
            label = {"lockstep": "lockstep", "program": "program (z3 boundary)",
                     "preemption": "scheduled (preemption sweep)",
                     "controlled": "scheduled (controlled, drawn)"}[mode]
            t.add_row(label, ", ".join(m["campaigns"]), _n(m["examples"]), _n(m["steps"]), _n(m["seconds"], 2),
                      _n(m["steps_per_s"], 1), _n(m["examples_per_s"], 2))
        out.append(t)
    if section.get("free"):
        t = Table(title="Free-running load (ops/s from the recorded history)")
        for col in ("target", "readers", "ops", "seconds", "ops/s", "puts", "out of space", "verdict"):
            t.add_column(col, justify="left" if col in ("target", "verdict") else "right")
        for f in section["free"]:
            t.add_row(f["target"], str(f["readers"]), _n(f["ops"]), _n(f["seconds"], 2), _n(f["ops_per_s"], 1),
                      _n(f["puts"]), _n(f["out_of_space"]), f["verdict"])
        out.append(t)
    if section.get("tlc"):
        t = Table(title="TLC (1 worker; search = from initial states to exit)")
        for col in ("config", "status", "distinct", "generated", "depth", "search s", "wall s",
                    "distinct/s", "generated/s", "distinct/wall s"):
            t.add_column(col, justify="left" if col in ("config", "status") else "right")
        for r in section["tlc"]:
            t.add_row(r["config"], r["status"], _n(r["distinct"]), _n(r["generated"]), _n(r["depth"]),
                      _n(r["search_seconds"], 2), _n(r["wall_seconds"], 2), _n(r["distinct_per_s"]),
                      _n(r["generated_per_s"]), _n(r["distinct_per_wall_s"]))
        out.append(t)
    return out


def run(parts: list[str], profile: str = "ci", free_readers: list[int] = (2, 4), seconds: float = 3.0,
        pattern: str = "MC*.cfg", deep: bool = False, log: Any = None) -> dict[str, Any]:
    """The ``harness`` section of ``bench.json`` (only the ``parts`` asked for)."""
    log = log or (lambda msg: None)
    t0 = time.monotonic()
    section: dict[str, Any] = {"started": now_iso()}
    if "gate" in parts:
        log(f"gate: shmspec check --target impl --profile {profile} --concurrency controlled")
        section["gate"] = gate_rates(profile)
    if "free" in parts:
        log(f"free-running load on impl, {seconds:g} s per reader count")
        section["free"] = free_rates(list(free_readers), seconds)
    if "tlc" in parts:
        section["tlc"] = tlc_rates(pattern, deep, on_config=lambda name: log(f"TLC {name}"))
    section["seconds"] = round(time.monotonic() - t0, 2)
    section["units"] = {"steps_per_s": "steps per second", "ops_per_s": "operations per second",
                        "distinct_per_s": "distinct states per search second",
                        "generated_per_s": "generated states per search second", "seconds": "s"}
    return section


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.harness", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default=",".join(PARTS), help="which of gate,free,tlc (default all)")
    p.add_argument("--profile", default="ci", choices=("ci", "dev", "deep"), help="gate profile (default ci)")
    p.add_argument("--free-readers", type=parse_ints, default=None, help="reader counts of the free runs (default 2,4)")
    p.add_argument("--seconds", type=float, default=None, help="seconds of each free-running load (default 3)")
    p.add_argument("--config", default=None, help="TLC configs (glob in tla/, default MC*.cfg)")
    p.add_argument("--deep", action="store_true", help="the tla/deep/ configs (minutes of TLC)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: free runs only, 1 s with 2 readers, and TLC on MC_impl_reread.cfg")
    p.add_argument("--json", type=Path, default=None, help="write the section (and machine info) to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    if args.quick and args.parts == ",".join(PARTS):
        parts = ["free", "tlc"]
    bad = [s for s in parts if s not in PARTS]
    if bad:
        print(f"bench.harness: unknown part {bad[0]!r} (choose from {', '.join(PARTS)})", file=sys.stderr)
        return 2
    if args.json is not None and (why := unwritable(args.json)):
        print(f"bench.harness: --json {args.json}: {why}", file=sys.stderr)
        return 2
    console = wide_console()
    try:
        section = run(parts, args.profile, args.free_readers or ([2] if args.quick else [2, 4]),
                      args.seconds or (1.0 if args.quick else 3.0),
                      args.config or ("MC_impl_reread.cfg" if args.quick else "MC*.cfg"), args.deep,
                      log=lambda m: console.print(f"  {m}", highlight=False))
    except (tlc.TlcError, RuntimeError, subprocess.TimeoutExpired) as exc:
        console.print(f"[red]bench.harness: {exc}[/]")
        return 2
    for t in tables(section):
        console.print(t)
    if args.json:
        write_json(args.json, {**header("shmspec.bench/1", "bench.harness"), "machine": machine_info(), "harness": section})
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
