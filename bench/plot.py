"""``bench.png`` from ``bench.json``.

``python -m bench.plot [reports/bench/bench.json] [--out reports/bench/bench.png]``

Top two rows: put and get throughput (MB/s, log scale) against object size
(log scale) for impl, vLLM and the plain copy, one panel per reader count.
Bottom row: the ratio impl/vLLM for put and get per reader count (the line at
1.0 is parity), and TLC's distinct states per search second for each config
(when the harness part ran).  Needs matplotlib (``pip install -e '.[bench]'``);
drawn with the Agg backend, no display needed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DEFAULT_OUT, fmt_size

STYLE = {"impl": ("impl", "tab:blue", "o"), "vllm": ("vLLM 0.33.0", "tab:orange", "s"),
         "copy": ("plain copy", "tab:gray", "^")}


def plot(bench: dict[str, Any], out: Path) -> Path:
    """Draw ``bench`` (the ``shmspec.bench/1`` document) into ``out`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = bench.get("store", {}).get("rows", [])
    readers = sorted({r["readers"] for r in rows}) or [1]
    sizes = sorted({r["size"] for r in rows})
    stores = list(bench.get("store", {}).get("stores", {}))
    ncol = max(len(readers), 2)
    fig = plt.figure(figsize=(4.2 * ncol, 11), layout="constrained")
    grid = fig.add_gridspec(3, ncol)
    for i, op in enumerate(("put", "get")):
        for j, n in enumerate(readers):
            ax = fig.add_subplot(grid[i, j])
            for name in stores:
                pts = [(r["size"], r[op][name]["mb_per_s"]) for r in rows
                       if r["readers"] == n and name in r[op]]
                if pts:
                    label, color, marker = STYLE.get(name, (name, None, "o"))
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(sizes, [fmt_size(s) for s in sizes])
            ax.minorticks_off()
            ax.set_title(f"{op}, {n} reader{'s' if n > 1 else ''}" + (" (aggregate)" if op == "get" else ""))
            ax.set_ylabel("MB/s (10^6 B/s)")
            ax.grid(True, which="major", alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize="small")
    ax = fig.add_subplot(grid[2, 0])
    for n in readers:
        for op, style in (("put", "-"), ("get", "--")):
            pts = [(r["size"], r["ratios"][op]["impl_vllm"]) for r in rows
                   if r["readers"] == n and r["ratios"][op]["impl_vllm"] is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=f"{op}, {n} r")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log", base=2)
    if sizes:
        ax.set_xticks(sizes, [fmt_size(s) for s in sizes])
    ax.minorticks_off()
    ax.set_title("impl / vLLM (MB/s ratio; >= 1: impl as fast)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small", ncol=2)
    tlc_rows = bench.get("harness", {}).get("tlc") or []
    if tlc_rows:
        ax = fig.add_subplot(grid[2, 1:])
        names = [r["config"].replace(".cfg", "") for r in tlc_rows]
        ax.barh(names, [r["generated_per_s"] or 0 for r in tlc_rows], color="tab:green", alpha=0.35,
                label="generated")
        ax.barh(names, [r["distinct_per_s"] or 0 for r in tlc_rows], color="tab:green", label="distinct")
        ax.invert_yaxis()
        ax.set_xlabel("states per search second (TLC, 1 worker)")
        ax.set_title("TLC states/s per config")
        ax.legend(fontsize="small")
    machine = bench.get("machine", {})
    fig.suptitle(f"shmspec bench ({bench.get('started', '')}; {machine.get('cpu_count')} CPUs, "
                 f"Python {machine.get('python')}; load {machine.get('load_average')})", fontsize="medium")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.plot", description="Draw bench.png from bench.json.")
    p.add_argument("json", nargs="?", type=Path, default=DEFAULT_OUT / "bench.json")
    p.add_argument("--out", type=Path, default=None, help="PNG to write (default: beside the JSON, bench.png)")
    args = p.parse_args(argv)
    try:
        bench = json.loads(args.json.read_text())
    except (OSError, ValueError) as exc:
        print(f"bench.plot: cannot read {args.json}: {exc}", file=sys.stderr)
        return 2
    try:
        out = plot(bench, args.out or args.json.with_name("bench.png"))
    except ImportError:
        print("bench.plot: needs matplotlib: .venv/bin/python -m pip install -e '.[bench]'", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
