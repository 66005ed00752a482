"""Seed units on a Ray cluster against local workers, in one run: the same
findings, and the wall-time ratios.

Starts a Ray cluster on this machine (a head node without CPUs and one worker
node of ``--node-cpus``, so every task runs on the worker node, as on a
cluster of two machines), then runs ``shmspec check --seeds K`` three ways:
``--workers 1``, ``--workers N`` and ``--executor ray --address <head>``,
and prints whether the reproducible findings agree (property, campaign,
seed, fingerprint, steps: lockstep, controlled-schedule and fault-scenario
findings), how many free-running findings each run made (the OS's
interleaving: not expected to agree), and each run's time over the
one-worker run's.

    .venv/bin/python -m bench.executors --target vllm==0.33.0 --profile ci --seeds 4

Prints a table and writes ``<out>/executors.json``; exit 1 when the
reproducible findings differ.  Times are wall seconds on whatever else the machine is doing: run
it on a quiet machine and note the date (docs/measurements.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _findings(report: dict) -> list[tuple]:
    """The reproducible findings (lockstep, controlled schedules, fault
    scenarios): what must agree across executors."""
    return [(v["property"], v["campaign"], v["seed"], v["fingerprint"], json.dumps(v["steps"]))
            for v in report["violations"] if v.get("reproducible", True)]


def _free(report: dict) -> list[tuple]:
    """The free-running findings: their interleaving is the OS's, so whether
    a run makes them is not a property of the executor."""
    return [(v["property"], v["campaign"], v["seed"]) for v in report["violations"]
            if not v.get("reproducible", True)]


def _run(args: argparse.Namespace, out: Path, name: str, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "shmspec.conformance.cli", "check", "--target", args.target, "--profile",
           args.profile, "--seeds", str(args.seeds), "--report-dir", str(out / name), *extra]
    if args.concurrency:
        cmd += ["--concurrency", args.concurrency]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    report = json.loads((out / name / "report.json").read_text())
    return {"name": name, "command": " ".join(cmd[3:]), "exit": proc.returncode, "seconds": round(seconds, 1),
            "verdict": report["verdict"], "findings": _findings(report), "free_running": _free(report),
            "last_line": proc.stdout.rstrip().splitlines()[-1] if proc.stdout.strip() else ""}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.executors", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="vllm==0.33.0")
    p.add_argument("--profile", default="ci")
    p.add_argument("--concurrency", default=None)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--workers", type=int, default=2, help="local workers of the second run (default 2)")
    p.add_argument("--node-cpus", type=int, default=2, help="CPUs of the Ray worker node (default 2)")
    p.add_argument("--out", type=Path, default=None, help="reports here (default: a temporary directory)")
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="shmspec-bench-executors-"))
    out.mkdir(parents=True, exist_ok=True)

    from ray.cluster_utils import Cluster

    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    cluster.add_node(num_cpus=args.node_cpus)
    cluster.wait_for_nodes()
    started = time.monotonic() - t0
    try:
        runs = [_run(args, out, "local-1", "--workers", "1"),
                _run(args, out, f"local-{args.workers}", "--workers", str(args.workers)),
                _run(args, out, "ray", "--executor", "ray", "--address", cluster.address)]
    finally:
        cluster.shutdown()
    same = all(r["findings"] == runs[0]["findings"] for r in runs)
    base = runs[0]["seconds"]
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.target}, --profile {args.profile}, --seeds {args.seeds} "
                        f"(Ray: head 0 CPUs + 1 node of {args.node_cpus}, started in {started:.1f} s)")
    for col in ("run", "exit", "verdict", "reproducible findings", "free-running", "same as local-1", "seconds",
                "ratio to local-1"):
        table.add_column(col)
    for r in runs:
        table.add_row(r["name"], str(r["exit"]), r["verdict"], str(len(r["findings"])), str(len(r["free_running"])),
                      "yes" if r["findings"] == runs[0]["findings"] else "NO", f"{r['seconds']:.1f}",
                      f"{r['seconds'] / base:.2f}")
    console = Console(width=max(Console().width, 120))  # the columns stay whole in a log
    console.print(table)
    (out / "executors.json").write_text(json.dumps({"runs": runs, "same_findings": same,
                                                    "cluster_start_seconds": round(started, 1)}, indent=1))
    console.print(f"reproducible findings {'agree' if same else 'DIFFER'}; written {out / 'executors.json'}", highlight=False)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
