"""``make bench``: every benchmark, one JSON and one plot.

``python -m bench.run [--out reports/bench] [--parts store,gate,free,tlc]
[--sizes ...] [--readers ...] [--rounds N] [--serde buffers|pickle|keep] [--quick]``

``--quick`` (``make bench QUICK=1``, a minute or two): a smoke run of the
store, free and tlc parts at their smallest (1 KiB and 64 KiB, 1 reader, 2
rounds of 64 objects; one 1 s free run; TLC on MC_impl_reread.cfg).  The
gate part (minutes) is skipped unless ``--parts`` names it, and the skip is
recorded in ``skipped``.  Its ratios are smoke-level, not measurements, and
it says so instead of listing "slower" rows.

Runs :mod:`bench.store` (impl, vLLM's newest store, a plain copy and the
physical bound of one memmove per object; put and get throughput per object
size and reader count), then :mod:`bench.harness`
(gate steps/s, free-running ops/s, TLC states/s per config), prints their
tables and the rows where impl is slower than vLLM, and writes
``<out>/bench.json`` (schema ``shmspec.bench/1``, described in
``reports/README.md``) and ``<out>/bench.png`` (:mod:`bench.plot`; skipped
with a note when matplotlib is missing).  The ``--out`` folder is checked
before anything runs.  Exit status 0; 1 when a reader got an object that
differs from the one put (even if a part also could not run); else 2 when a
part could not run (the others still run and are written; ``errors`` in the
JSON says which) or on a usage error (one line, nothing run).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness, store
from bench.common import (DEFAULT_OUT, SCHEMA, load_average, machine_info, now_iso, parse_ints, parse_sizes, positive_int,
                          unwritable, wide_console, write_json)
from shmspec.conformance.core.documents import header
from shmspec.conformance.targets.loader import TargetError
from shmspec.conformance.spec.tlc import TlcError

PARTS = ("store", "gate", "free", "tlc")
QUICK_SKIP = "gate: skipped by --quick (a ci gate run takes minutes; --quick --parts gate runs it)"


def slower_rows(section: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows (and ops) where impl's MB/s is below vLLM's: ratio impl/vLLM < 1."""
    out = []
    for row in section.get("rows", []):
        for op in ("put", "get"):
            r = row["ratios"][op]["impl_vllm"]
            if r is not None and r < 1.0:
                out.append({"size": row["size"], "size_label": row["size_label"], "readers": row["readers"],
                            "op": op, "impl_vllm": r, "impl_mb_per_s": row[op]["impl"]["mb_per_s"],
                            "vllm_mb_per_s": row[op]["vllm"]["mb_per_s"],
                            "impl_vllm_rounds": row["ratios"][op].get("impl_vllm_rounds")})
    return out


def select_parts(text: str, quick: bool) -> tuple[list[str], list[str]]:
    """``--parts`` (comma list) -> (parts to run, ``skipped`` entries): with
    ``quick`` and the default (every part), the gate is skipped and says so.

    Raises:
        ValueError: an unknown part.
    """
    parts = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in parts if s not in PARTS]
    if bad:
        raise ValueError(f"unknown part {bad[0]!r} (choose from {', '.join(PARTS)})")
    if quick and parts == list(PARTS):
        return [x for x in parts if x != "gate"], [QUICK_SKIP]
    return parts, []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for bench.json and bench.png")
    p.add_argument("--parts", default=",".join(PARTS), help="which of store,gate,free,tlc (default all)")
    p.add_argument("--sizes", type=parse_sizes, default=None, help="object sizes (default 1KiB,64KiB,1MiB,16MiB)")
    p.add_argument("--readers", type=parse_ints, default=None, help="reader process counts (default 1,2,4)")
    p.add_argument("--rounds", type=positive_int, default=None, help="timed rounds per store row, at least 1 (default 5)")
    p.add_argument("--serde", choices=tuple(store.SERDES), default="buffers")
    p.add_argument("--quick", action="store_true",
                   help="smoke run of the store, free and tlc parts (a minute or two; the gate part is skipped "
                        "unless --parts names it, recorded in `skipped`); its ratios are not measurements")
    args = p.parse_args(argv)
    try:
        parts, skipped = select_parts(args.parts, args.quick)
    except ValueError as exc:
        print(f"bench.run: {exc}", file=sys.stderr)
        return 2
    if why := unwritable(args.out, is_dir=True):
        print(f"bench.run: --out {args.out}: {why}", file=sys.stderr)
        return 2
    console = wide_console()
    log = lambda m: console.print(f"  {m}", highlight=False)  # noqa: E731
    doc: dict[str, Any] = {**header(SCHEMA, "bench"), "started": now_iso(), "quick": args.quick,
                           "machine": machine_info()}
    console.print(f"[bold]shmspec bench[/]: {', '.join(parts)}; {doc['machine']['cpu_count']} CPUs, "
                  f"load {doc['machine']['load_average']}")
    t0 = time.monotonic()
    wrong_bytes = False
    errors: list[str] = []
    if "store" in parts:
        quick = args.quick
        try:
            doc["store"] = store.run(
                args.sizes or ([1024, 64 * 1024] if quick else list(store.DEFAULT_SIZES)),
                args.readers or ([1] if quick else list(store.DEFAULT_READERS)),
                args.rounds if args.rounds is not None else (2 if quick else 5), list(store.STORES), args.serde,
                64 if quick else None,
                on_row=lambda r: log(f"store {r['size_label']:>7} x{r['readers']} done"))
        except (TargetError, store.BenchError, ValueError) as exc:
            errors.append(f"store: {exc}")
            console.print(f"[red]bench: store: {exc}[/]")
        else:
            console.print(store.table(doc["store"], args.quick))
            wrong = store.problems(doc["store"])
            for line in wrong:
                console.print(f"[bold red]WRONG BYTES[/] {line}")
            wrong_bytes = bool(wrong)
    hparts = [x for x in parts if x in harness.PARTS]
    if hparts:
        doc["harness"] = {}
        for part in hparts:  # one at a time, so a part that cannot run leaves the others' numbers
            try:
                sec = harness.run([part], free_readers=[2] if args.quick else [2, 4],
                                  seconds=1.0 if args.quick else 3.0,
                                  pattern="MC_impl_reread.cfg" if args.quick else "MC*.cfg", log=log)
            except (TlcError, RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                errors.append(f"{part}: {exc}")
                console.print(f"[red]bench: {part}: {exc}[/]")
                continue
            doc["harness"].setdefault("started", sec["started"])
            doc["harness"][part] = sec[part]
            doc["harness"]["units"] = sec["units"]
            doc["harness"]["seconds"] = round(doc["harness"].get("seconds", 0) + sec["seconds"], 2)
        for t in harness.tables(doc["harness"]):
            console.print(t)
    doc["errors"] = errors
    doc["skipped"] = skipped
    doc["seconds"] = round(time.monotonic() - t0, 1)
    doc["load_average_end"] = load_average()
    if "store" in doc:
        slow = slower_rows(doc["store"])
        doc["summary"] = {"impl_at_least_as_fast": not slow, "slower_rows": slow,
                          "min_impl_vllm": min((r["ratios"][op]["impl_vllm"] for r in doc["store"]["rows"]
                                                for op in ("put", "get")
                                                if r["ratios"][op]["impl_vllm"] is not None), default=None)}
        if args.quick:
            console.print(store.QUICK_NOTE, highlight=False)
        elif slow:
            console.print("[bold]impl slower than vLLM[/] (impl/vLLM < 1): " + "; ".join(
                f"{r['size_label']} x{r['readers']} {r['op']} {r['impl_vllm']:.2f}" for r in slow))
        else:
            console.print("impl is at least as fast as vLLM in every row")
    out = args.out
    write_json(out / "bench.json", doc)
    console.print(f"wrote {out / 'bench.json'} ({doc['seconds']:.0f} s; load at the end {doc['load_average_end']})")
    try:
        from bench.plot import plot

        console.print(f"wrote {plot(doc, out / 'bench.png')}")
    except ImportError:
        console.print("[yellow]no plot: matplotlib is missing (.venv/bin/python -m pip install -e '.[bench]')[/]")
    return exit_code(wrong_bytes, errors)


def exit_code(wrong_bytes: bool, errors: list[str]) -> int:
    """1 when a reader got wrong bytes (that wins), else 2 when a part could not run, else 0."""
    return 1 if wrong_bytes else (2 if errors else 0)


if __name__ == "__main__":
    sys.exit(main())
