"""Session configuration: the store's geometry, what a session checks, and
its construction; and its ``report.json`` form (``config`` of a violation).

Imports nothing of the harness and no third-party package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class SessionConfig:
    """Store geometry for a session (bytes) and what to check."""

    data_buffer_size: int = 256
    max_object_size: int = 96
    n_readers: int = 2
    readers: tuple[str, ...] = ("r1", "r2")
    compare_state: bool = True
    excused: frozenset[str] = frozenset()
    relies_on: tuple[str, ...] | None = None
    """The client rules the store relies on (the declared contract's
    ``relies_on``); None: every rule (SEMANTICS.md)."""
    """Properties recorded but not raised: ``"NRR"``, or ``"CONFORMANCE@put"`` for one action."""
    writer_lock: bool = False
    """The construction: False builds the writer as vLLM does, without the
    readers' lock; True gives it the readers' lock too (vLLM 0.33.0 then
    counts the writer's own gets)."""
    record: bool = False
    """The controlled campaign records each of its sessions as a trace of the
    spec's steps and checks every trace against tla/ShmStore.tla with TLC at
    its end (``shmspec check --validate-traces``; docs/trace-validation.md)."""
    start_method: str = "fork"
    """How the concurrent campaigns start their writer and reader processes:
    ``"fork"`` (copies of the controller) or ``"spawn"`` (fresh interpreters
    that load the target by its spec and attach by segment name, as vLLM's
    spawned workers do).  Lockstep sessions run in one process and ignore it."""

    def excuses(self, prop: str, *where: str | None) -> bool:
        """The excuse rule, one for every session: ``prop`` is recorded, not
        raised, when ``excused`` names it outright or as ``PROP@w`` for one of
        ``where`` (the step's action, e.g. ``put``, or its cause, e.g.
        ``get/cleared``)."""
        return prop in self.excused or any(w is not None and f"{prop}@{w}" in self.excused for w in where)


def config_to_json(c: SessionConfig) -> dict[str, Any]:
    return {
        "data_buffer_size": c.data_buffer_size,
        "max_object_size": c.max_object_size,
        "n_readers": c.n_readers,
        "readers": list(c.readers),
        "compare_state": c.compare_state,
        "excused": sorted(c.excused),
        "writer_lock": c.writer_lock,
        "start_method": c.start_method,
        **({"relies_on": list(c.relies_on)} if c.relies_on is not None else {}),
        **({"record": True} if c.record else {}),
    }


def config_from_json(d: dict[str, Any]) -> SessionConfig:
    return SessionConfig(
        data_buffer_size=d["data_buffer_size"],
        max_object_size=d["max_object_size"],
        n_readers=d["n_readers"],
        readers=tuple(d["readers"]),
        compare_state=d["compare_state"],
        excused=frozenset(d["excused"]),
        writer_lock=bool(d.get("writer_lock", False)),  # reports before 2026-12-01: vLLM's construction
        start_method=str(d.get("start_method", "fork")),
        relies_on=tuple(d["relies_on"]) if d.get("relies_on") is not None else None,
        record=bool(d.get("record", False)),
    )


_config_json = config_to_json  # the name before the layered packages (9a6edc8, 2026-12-01)


__all__ = ["SessionConfig", "config_from_json", "config_to_json"]


def count_or_auto(value: Any, flag: str) -> int:
    """A ``--jobs``/``--workers`` value: ``N >= 1``, or ``auto`` (one per core).

    Raises:
        UsageError: anything else (the one-line CLI error).
    """
    import os  # noqa: PLC0415

    from .errors import UsageError  # noqa: PLC0415

    if value == "auto":
        return os.cpu_count() or 1
    if not str(value).isdigit() or int(value) < 1:
        raise UsageError(f"{flag} takes N >= 1 or auto, not {value!r}")
    return int(value)
