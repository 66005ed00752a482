"""shmspec benchmarks (``make bench``): scripts that measure and print ratios
from one run.  Not tests: pytest's ``testpaths`` is ``tests/`` only.

* :mod:`bench.store`   -- put/get throughput of impl, vLLM's newest store, a
  plain shared-memory copy and the physical bound (one memmove per object);
* :mod:`bench.harness` -- the gate's own rates (lockstep steps/s, scheduled
  steps/s, free-running ops/s) and TLC states/s per ``tla/MC*.cfg``;
* :mod:`bench.plot`    -- ``bench.png`` from ``bench.json``;
* :mod:`bench.run`     -- all of the above into ``reports/bench/``.

Run each from the repository root: ``.venv/bin/python -m bench.store --help``.
"""
