"""``bench.png`` from ``bench.json``.

``python -m bench.plot [reports/bench/bench.json] [--out reports/bench/bench.png]``

Top two rows: put and get throughput (MB/s, log scale) against object size
(log scale) for impl, vLLM (its release from ``store.stores.vllm``), the
plain copy and the physical bound (one memmove per object), one panel per
reader count.  Bottom row: the ratio impl/vLLM for
put and get per reader count (the line at 1.0 is parity; when vLLM ran), and
TLC's distinct states per search second for each config (when the harness
part ran).  Panels without data are left out, not drawn empty.  Needs matplotlib (``pip install -e '.[bench]'``);
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

STYLE = {"impl": ("impl", "tab:blue", "o"), "vllm": ("vLLM", "tab:orange", "s"),
         "copy": ("plain copy", "tab:gray", "^"), "physical": ("physical bound", "black", "v")}


def store_label(name: str, spec: str | None) -> str:
    """The legend's name of a store: ``vllm`` with spec ``vllm==0.11.0`` ->
    ``"vLLM 0.11.0"``, another spec (``file:...``) -> ``"vLLM (file:...)"``,
    no spec -> ``"vLLM"``; ``impl`` -> ``"impl"``, ``copy`` -> ``"plain copy"``,
    ``physical`` -> ``"physical bound"``."""
    label = STYLE.get(name, (name, None, None))[0]
    if name != "vllm" or not spec:
        return label
    if spec.startswith("vllm=="):
        return f"{label} {spec[len('vllm=='):]}"
    return f"{label} ({spec})"


def title(bench: dict[str, Any]) -> str:
    """``shmspec bench (<started>; <n> CPUs, Python <v>; load <1, 5, 15 min>)``:
    ``started`` is the run's, else the store or harness section's (a
    bench.store or bench.harness JSON); parts that are unknown are left out."""
    machine = bench.get("machine", {})
    started = (bench.get("started") or bench.get("store", {}).get("started")
               or bench.get("harness", {}).get("started"))
    facts = ", ".join(x for x in (f"{machine['cpu_count']} CPUs" if machine.get("cpu_count") else None,
                                  f"Python {machine['python']}" if machine.get("python") else None) if x)
    load = f"load {machine['load_average']}" if machine.get("load_average") else None
    inside = "; ".join(x for x in (started, facts, load) if x)
    quick = " -- quick run: smoke-level, not measurements" if bench.get("quick") else ""
    return f"shmspec bench ({inside}){quick}" if inside else f"shmspec bench{quick}"


def _size_axis(ax: Any, sizes: list[int]) -> None:
    ax.set_xscale("log", base=2)
    if sizes:
        ax.set_xticks(sizes, [fmt_size(s) for s in sizes])
    ax.minorticks_off()
    ax.set_xlabel("object size")


def _rate_axis(ax: Any) -> None:
    """Log y axis with labels even when the data spans less than a decade
    (ticks at 1, 2, 5 x 10^k then, plain numbers)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_yscale("log")
    ax.minorticks_off()
    lo, hi = ax.get_ylim()
    if lo > 0 and hi / lo < 100:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def plot(bench: dict[str, Any], out: Path) -> Path:
    """Draw ``bench`` (:func:`draw`) into ``out`` (PNG, 90 dpi); returns ``out``.

    Raises:
        ImportError: matplotlib is missing.
    """
    import matplotlib.pyplot as plt

    fig = draw(bench)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def draw(bench: dict[str, Any]) -> Any:
    """The figure (a matplotlib ``Figure``, Agg backend) of ``bench`` (the
    ``shmspec.bench/1`` document, or a bench.store / bench.harness JSON).
    Panels without data are not drawn: throughput rows only when there are
    store rows, the ratio panel only when vLLM ran beside impl, the TLC panel
    only when TLC ran.  The caller closes it.

    Raises:
        ImportError: matplotlib is missing.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    section = bench.get("store", {})
    rows = section.get("rows", [])
    specs = section.get("stores", {})
    readers = sorted({r["readers"] for r in rows})
    sizes = sorted({r["size"] for r in rows})
    ratio_pts = {(n, op): [(r["size"], r["ratios"][op]["impl_vllm"]) for r in rows
                           if r["readers"] == n and r["ratios"][op]["impl_vllm"] is not None]
                 for n in readers for op in ("put", "get")}
    has_ratio = any(ratio_pts.values())
    tlc_rows = bench.get("harness", {}).get("tlc") or []
    bottom = [x for x, on in (("ratio", has_ratio), ("tlc", bool(tlc_rows))) if on]
    # columns: each reader count's panel spans len(bottom) columns, each bottom panel the rest equally
    span = max(len(bottom), 1)
    ncol = max(len(readers), 1) * span
    nrows = (2 if rows else 0) + (1 if bottom else 0)
    fig = plt.figure(figsize=(max(4.6 * ncol / span, 4.6 * len(bottom), 5.0), 3.7 * max(nrows, 1) + 0.4),
                     layout="constrained")
    if nrows == 0:
        fig.text(0.5, 0.5, "no store rows and no TLC rows in this JSON", ha="center")
    grid = fig.add_gridspec(max(nrows, 1), ncol)
    for i, op in enumerate(("put", "get") if rows else ()):
        for j, n in enumerate(readers):
            ax = fig.add_subplot(grid[i, j * span:(j + 1) * span])
            for name in specs:
                pts = [(r["size"], r[op][name]["mb_per_s"]) for r in rows if r["readers"] == n and name in r[op]]
                if pts:
                    _, color, marker = STYLE.get(name, (name, None, "o"))
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color,
                            label=store_label(name, specs.get(name)))
            _size_axis(ax, sizes)
            _rate_axis(ax)
            ax.set_title(f"{op}, {n} reader{'s' if n > 1 else ''}" + (" (aggregate)" if op == "get" else ""))
            ax.set_ylabel("MB/s (10^6 B/s)")
            ax.grid(True, which="major", alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize="small")
    width = ncol // max(len(bottom), 1)
    for k, kind in enumerate(bottom):
        ax = fig.add_subplot(grid[nrows - 1, k * width:(k + 1) * width if k + 1 < len(bottom) else ncol])
        if kind == "ratio":
            for (n, op), pts in ratio_pts.items():
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "-" if op == "put" else "--", marker="o",
                            label=f"{op}, {n} r")
            ax.axhline(1.0, color="black", linewidth=0.8)
            _size_axis(ax, sizes)
            ax.set_title(f"impl / {store_label('vllm', specs.get('vllm'))} (MB/s ratio; >= 1: impl as fast)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="x-small", ncol=2)
        else:
            names = [r["config"].replace(".cfg", "") for r in tlc_rows]
            ax.barh(names, [r["generated_per_s"] or 0 for r in tlc_rows], color="tab:green", alpha=0.35,
                    label="generated")
            ax.barh(names, [r["distinct_per_s"] or 0 for r in tlc_rows], color="tab:green", label="distinct")
            ax.invert_yaxis()
            ax.set_xlabel("states per search second (TLC, 1 worker)")
            ax.set_title("TLC states/s per config")
            ax.legend(fontsize="small")
    fig.suptitle(title(bench), fontsize="medium")
    return fig


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
