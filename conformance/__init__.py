"""The conformance harness: one sub-package per layer, each importing only
the layers below it (checked by ``tests/test_layers.py``)::

    cli                      shmspec's command line
    commands                 matrix, mutants, model, prove, spec tests
    runner | reporting       the gate | report.json/html, repro_test.py
    protocols                each store protocol behind one interface (core/protocol.py):
                             ringbuffer (its campaigns, their runners, replays)
    proofs | spec            z3 obligations and boundary programs | the TLA+ bridge
    concurrency              real processes: schedules, sweeps, free runs, faults
    lockstep                 model and target in lockstep, the Hypothesis machine
    targets                  loading a store, the adapter, warp hooks
    core                     errors, exit codes, config, constructions, results

Imports :mod:`shmspec.model` and :mod:`shmspec.impl`; neither imports this.

The modules' flat paths from before the layered packages (commit 9a6edc8, 2026-12-01: ``shmspec.conformance.gate``,
``shmspec.conformance.schedule``, ...: what ``repro_test.py`` files written
then import) still work: each is an alias of the module at its new path (the
same module object), see :data:`MOVED`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

MOVED: dict[str, str] = {
    **{m: f"core.{m}" for m in ("constructions", "interrupt", "serde")},
    **{m: f"targets.{m}" for m in ("loader", "adapter", "warp")},
    **{m: f"lockstep.{m}" for m in ("session", "machine")},
    **{m: f"concurrency.{m}" for m in ("procs", "schedule", "races", "freerun", "faults", "sw", "history")},
    **{m: f"proofs.{m}" for m in ("z3ops", "prove", "boundary")},
    **{m: f"spec.{m}" for m in ("tlc", "tlavalue", "agreement", "spectrace")},
    **{m: f"runner.{m}" for m in ("gate", "replay")},  # runner.replay re-exports protocols.ringbuffer.replay
    "report": "reporting.report",
    **{m: f"commands.{m}" for m in ("matrix", "mutation", "modelcheck", "prove_report")},
}
"""Old module name (under ``shmspec.conformance``) -> its path now.
``spectests`` keeps a file of its own at the old path (``python -m``)."""


class _MovedLoader(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        module = importlib.import_module(self.new)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module):
        # the module at its new path has run already; the import system set
        # its __spec__ to the alias's: give it back its own (reload, pickling
        # by module spec and tracebacks name the new path)
        module.__spec__ = self.own_spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Resolves an old flat module path to the module at its new path."""

    def find_spec(self, fullname, path=None, target=None):
        prefix = __name__ + "."
        if not fullname.startswith(prefix) or fullname[len(prefix):] not in MOVED:
            return None
        new = prefix + MOVED[fullname[len(prefix):]]
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(new))


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedFinder())
