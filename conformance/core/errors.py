"""The harness's error base and exit codes.

Every error the harness raises about its own input or run derives from
:class:`ShmspecError` (a bad target spec, a schedule that cannot run, TLC
failing, a TLA+ value that does not parse), so a caller can catch them all
in one clause.  The store's own errors are another taxonomy:
:mod:`shmspec.model.errors` (``StoreError`` and its subclasses), shared by
the model, impl and the adapters, never raised for a harness fault.

:class:`ExitCode` is what every ``shmspec`` command exits with.
"""

from __future__ import annotations

from enum import IntEnum


class ShmspecError(Exception):
    """Base of every harness error (not of a store's errors)."""


class UsageError(ShmspecError, ValueError):
    """A bad argument to the Python API (an unknown gate profile, concurrency
    mode or start method; a reader count out of range).  The CLI rejects the
    same input with exit code 2 before anything runs."""


class TargetError(ShmspecError):
    """The target cannot be loaded (unknown spec, missing file, no classes, no
    registry), whatever its store protocol."""


class ExitCode(IntEnum):
    """Exit status of every ``shmspec`` command (a public interface: stable).

    * ``PASS`` (0): every property checked held (``check``, ``matrix``,
      ``mutants``: every seeded fault caught; ``model``/``prove``: every
      config/obligation gave its expected result);
    * ``FAIL`` (1): a property was violated (``check``), a release or fault
      failed (``matrix``, ``mutants``), a config or obligation did not give
      its expected result (``model``, ``prove``);
    * ``ERROR`` (2): the command could not run (bad input, a target that does
      not load, TLC missing); one line on stderr says why;
    * ``UNKNOWN`` (3): a budget ran out before a verdict (never reported as
      pass);
    * ``INTERRUPTED`` (130): SIGINT or SIGTERM; no verdict is printed.
    """

    PASS = 0
    FAIL = 1
    ERROR = 2
    UNKNOWN = 3
    INTERRUPTED = 130


__all__ = ["ExitCode", "ShmspecError", "TargetError", "UsageError"]
