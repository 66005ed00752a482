"""shmspec: reference model and conformance harness for single-writer /
multi-reader shared-memory object stores.

The public API (docs/api.md)::

    shmspec.check(target, profile="ci", ...) -> GateResult
    shmspec.replay(target, violation) -> str | None
    shmspec.GateResult, shmspec.Violation, shmspec.Construction
    shmspec.ShmspecError (base of every harness error), shmspec.UsageError,
    shmspec.TargetError, shmspec.ExitCode (every command's exit status)

Names are loaded on first use (PEP 562), so ``import shmspec`` loads neither
Hypothesis nor multiprocess.  The code lives in three top-level folders of
the repository, installed as subpackages: ``shmspec.model`` (``model/``, the
pure reference semantics), ``shmspec.impl`` (``impl/``, our shared-memory
store) and ``shmspec.conformance`` (``conformance/``, the harness, one
sub-package per layer).  Imports go one way: the model imports nothing of
ours, impl only the model, the harness both.
"""

from __future__ import annotations

__version__ = "0.1.0"

_API = {
    "check": "shmspec.api", "replay": "shmspec.api", "merge": "shmspec.api",
    "GateResult": "shmspec.conformance.core.results", "Violation": "shmspec.conformance.core.results",
    "Construction": "shmspec.conformance.core.constructions",
    "ShmspecError": "shmspec.conformance.core.errors", "UsageError": "shmspec.conformance.core.errors",
    "ExitCode": "shmspec.conformance.core.errors", "TargetError": "shmspec.conformance.core.errors",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import importlib
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'shmspec' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
