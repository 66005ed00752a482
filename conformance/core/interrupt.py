"""A signal that stopped the run, remembered where its KeyboardInterrupt can be lost.

The CLI's handler for SIGTERM and SIGINT calls :func:`record` and raises
``KeyboardInterrupt``.  Python swallows an exception raised inside a garbage
collection callback or a ``__del__`` ("Exception ignored in ..."), and the
run would go on to a verdict.  :func:`check` is called at the start of every
drawn step (lockstep and scheduled), between campaigns and fault-scenario
steps: it raises ``KeyboardInterrupt`` again while a recorded signal is
pending, so a swallowed interrupt stops the run within one step.  It is
never called from cleanup code (``finally`` blocks, ``close``), so an
interrupt that propagates normally does not break the cleanup it unwinds
through.
"""

from __future__ import annotations

SIGNALS: list[int] = []
"""Signal numbers recorded since :func:`reset` (the CLI resets at each command)."""


def record(signum: int) -> None:
    SIGNALS.append(signum)


def reset() -> None:
    SIGNALS.clear()


def check() -> None:
    """Raise ``KeyboardInterrupt`` when a signal was recorded."""
    if SIGNALS:
        raise KeyboardInterrupt(f"signal {SIGNALS[0]} (its first KeyboardInterrupt may have been swallowed)")
