"""Constructions: how a store's processes are built, as a dimension of the gate.

A property holds only for the constructions it was checked in.  A
:class:`Construction` names three choices a deployment makes:

* ``writer_lock``: whether the writer is given the readers' lock (vLLM builds
  its writer without it; with it, vLLM 0.33.0 counts the writer's own gets);
* ``start_method``: whether reader processes are forked from the process that
  built the store, or spawned (fresh interpreters that load the store's module
  and attach by segment name, as vLLM's spawned engine and worker processes
  do); the writer is always forked from the controller (see
  :data:`START_METHODS`);
* ``n_readers``: one reader (``reader_count`` reaches ``n_readers`` at the
  first read) or several.

The gate runs every campaign in its *primary* construction (``shmspec check
--writer-lock --start-method --readers``; by default :data:`VLLM`) and the
``constructions`` campaign in each one of :data:`CONSTRUCTIONS` that is not
the primary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .config import SessionConfig


START_METHODS: tuple[str, ...] = ("fork", "spawn")
"""How reader processes may be started (multiprocess start methods)."""
MAX_READERS = 4
"""Readers a construction may have (``--readers`` 1..MAX_READERS)."""


@dataclass(frozen=True)
class Construction:
    """One way to build the store's processes (see the module docstring)."""

    writer_lock: bool = False
    start_method: str = "fork"
    n_readers: int = 2
    remote_readers: int = 0
    """The slot queue's deployed construction: readers over tcp."""
    deployed: bool = False
    """The slot queue's deployed construction (docs/slots.md#the-deployed-construction):
    the writer and every reader a process of its own, built by the store's own
    constructors, sockets live, messages through ``enqueue``/``dequeue``."""
    scheduled: bool = False
    """Deployed, under a schedule: every flag access a yield point."""
    arena: bool = False
    """Deployed with the queue's tensor arena (``enable_shm_tensor_arena``)."""
    torch: str = ""
    """With the arena: whose tensors (``stand-in`` or ``torch X.Y.Z``)."""

    @property
    def name(self) -> str:
        """``"writer unlocked, 2 forked readers"`` and so on (``start_method``
        ``"one-process"``: the slot protocols' lockstep, writer and readers
        built in the controller's process)."""
        if self.deployed:
            method = "forked" if self.start_method == "fork" else "spawned"
            remote = (f", {self.remote_readers} remote reader{'s' if self.remote_readers != 1 else ''} over tcp"
                      if self.remote_readers else "")
            return (f"deployed: writer process, {self.n_readers} {method} local "
                    f"reader{'s' if self.n_readers != 1 else ''}{remote}; sockets live, enqueue/dequeue"
                    + (f"; tensor arena on ({self.torch or 'stand-in'} tensors)" if self.arena else "")
                    + ("; scheduled at every flag access" if self.scheduled else ""))
        if self.start_method == "one-process":
            return f"writer and {self.n_readers} reader{'s' if self.n_readers != 1 else ''} in one process"
        readers = f"{self.n_readers} {'forked' if self.start_method == 'fork' else 'spawned'} " \
                  f"reader{'s' if self.n_readers != 1 else ''}"
        return f"writer {'locked' if self.writer_lock else 'unlocked'}, {readers}"

    def config(self, base: SessionConfig) -> SessionConfig:
        """``base`` built this way (readers ``r1``..``rN``)."""
        return replace(base, writer_lock=self.writer_lock, start_method=self.start_method,
                       n_readers=self.n_readers, readers=tuple(f"r{i + 1}" for i in range(self.n_readers)))

    @classmethod
    def of(cls, config: SessionConfig | dict[str, Any]) -> "Construction":
        """The construction of a session config, or of a report's ``config``
        dict (keys missing in reports written before 2026-12-01 mean vLLM's
        construction: writer unlocked, readers forked, two of them)."""
        if isinstance(config, SessionConfig):
            return cls(config.writer_lock, config.start_method, config.n_readers)
        dep = config.get("deployment")
        if dep:  # a slot queue's deployed run (its readers' start method and counts)
            return cls(False, str(dep.get("start_method", "fork")), int(dep.get("local", 2)),
                       int(dep.get("remote", 0)), True, dep.get("schedule") is not None, bool(dep.get("arena")),
                       str(dep.get("torch") or ""))
        return cls(bool(config.get("writer_lock", False)), str(config.get("start_method", "fork")),
                   int(config.get("n_readers", 2)))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Construction":
        """The construction :meth:`to_json` wrote (``report.json``'s ``construction``)."""
        torch = str(d.get("torch") or "")
        return cls(bool(d.get("writer_lock", False)), str(d.get("start_method", "fork")), int(d.get("n_readers", 2)),
                   int(d.get("remote_readers", 0)), bool(d.get("deployed", False)), bool(d.get("scheduled", False)),
                   bool(d.get("arena", False)), "" if torch == "stand-in" else torch)

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "writer_lock": self.writer_lock, "start_method": self.start_method,
               "n_readers": self.n_readers}
        if self.deployed:
            out.update(deployed=True, remote_readers=self.remote_readers, scheduled=self.scheduled)
            if self.arena:
                out.update(arena=True, torch=self.torch or "stand-in")
        return out


VLLM = Construction()
"""vLLM's: the writer without the readers' lock, two forked readers."""

CONSTRUCTIONS: tuple[Construction, ...] = (
    VLLM,
    Construction(start_method="spawn"),
    Construction(n_readers=1),
    Construction(writer_lock=True),
)
"""Every construction the gate checks: vLLM's, its readers spawned, one
reader, and the writer given the readers' lock."""


def others(primary: Construction) -> tuple[Construction, ...]:
    """The constructions of :data:`CONSTRUCTIONS` other than ``primary``."""
    return tuple(c for c in CONSTRUCTIONS if c != primary)


__all__ = ["CONSTRUCTIONS", "Construction", "MAX_READERS", "START_METHODS", "VLLM", "others"]
