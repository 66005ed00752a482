"""One reader view, one process: impl's ``get`` against ``get(..., copy=False)``
of a 16 MiB float64 numpy array through :class:`~shmspec.impl.BufferPickleSerde`.

``python -m bench.zerocopy [--mib 16] [--gets 200]``: prints microseconds per
get of each (best of 5 batches) and their ratio, both from this run
(docs/measurements.md, 2026-12-06).  Every value is compared with the array
put.  Exit 0; 1 when a value differs.
"""

from __future__ import annotations

import argparse
import sys
import time

import multiprocess
import numpy as np

from shmspec.impl import BufferPickleSerde, SingleWriterShmObjectStorage, SingleWriterShmRingBuffer


def per_get_us(view, handle, copy: bool, gets: int) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(gets):
            value = view.get(*handle, copy=copy)
            del value
        best = min(best, (time.perf_counter() - t0) / gets)
    return best * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.zerocopy", description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=16, help="array size in MiB (default 16)")
    p.add_argument("--gets", type=int, default=200, help="gets per batch (default 200)")
    args = p.parse_args(argv)
    array = np.random.default_rng(0).random(args.mib * 2**20 // 8)
    writer = SingleWriterShmObjectStorage(args.mib * 2**20 + 4096, 1,
                                          SingleWriterShmRingBuffer(2 * args.mib * 2**20 + 65536, create=True),
                                          serde_class=BufferPickleSerde)
    handle_ = writer.handle()
    handle_.reader_lock = multiprocess.Lock()
    reader = SingleWriterShmObjectStorage.create_from_handle(handle_)
    try:
        address, monotonic_id = writer.put("a", array)
        handle = (address, monotonic_id, writer.get_signature("a"), "a")
        if not all(np.array_equal(reader.get(*handle, copy=c), array) for c in (True, False)):
            print("bench.zerocopy: a value differs from the array put")
            return 1
        copied = per_get_us(reader, handle, True, args.gets)
        shared = per_get_us(reader, handle, False, args.gets)
    finally:
        reader.close()
        writer.close()
    print(f"{args.mib} MiB array: get {copied:.1f} us, get(copy=False) {shared:.1f} us, "
          f"ratio {copied / shared:.1f}x (best of 5 x {args.gets} gets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
