"""Recorded runs: what a controlled schedule's processes did, step by step,
as a trace that ``shmspec validate`` checks against the TLA+ spec
(:mod:`shmspec.conformance.spec.validate`, docs/trace-validation.md).

A :class:`Recorder` sits in a :class:`~.schedule.ScheduledSession` (``record=True``;
off by default) and keeps one *event* per scheduled step: which process
started or advanced which operation, the yield point it was paused at
(``at``, None for a start) and the one it reached (``to``, None when the
operation ended), the operation's result, whether the bytes a reader
deserialized were its handle's object, and the writer's live chunks after a
writer step.  Nothing is judged here: the events are what the harness
observed, in the order the schedule ran them (a controlled schedule runs one
process at a time, so that order is the order of the steps).

The trace document (``format`` :data:`FORMAT`, version :data:`VERSION`)::

    {"format": "shmspec-trace", "version": 1, "spec": "ShmStore",
     "target": "impl", "construction": "writer unlocked, 2 forked readers",
     "constants": {"readers": ["r1", "r2"], "ring_bytes": 256, "max_chunks": 1024,
                   "hardened": true, "free_bytes": 192},
     "events": [{"process": "writer", "op": "put", "kind": "start", "at": null,
                 "to": "pin_scan", "args": {"key": "k0", "size": 40}}, ...],
     "unmodelled": null}

Event fields: ``args`` of a put are its key and its chunk's bytes (header
included); of a get the handle's ``ref`` and ``abs`` (the allocation that
issued it: the number of successful puts before it).  ``result`` (on the
step that ends an operation): ``{"error": "StaleHandle"}``, ``{"handle":
[address, id], "abs": n}`` for a put, ``{"value": "ok"}`` otherwise.
``got``: ``"own"`` or ``"other"`` on a step that deserialized bytes.
``ring``: ``[[address % ring_bytes, size, id], ...]``, oldest first, after
every writer step.  ``unmodelled`` names the first operation the spec has
no action for (a zero-copy ``keep_get``, whose lease ShmStore.tla does not
model): events stop there and validation covers what came before.

A free run's events (:func:`op_events`, :func:`free_trace`; ``"schedule":
"free"``) carry ``lo`` and ``hi`` too: the ``time.monotonic_ns()`` at which
the step began and ended, less the run's first such time (ns; one clock for
every process of a machine).  The events are sorted by ``lo``; two steps
are ordered only when one ended before the other began, and validation tries
each order of steps that overlap.  A free run's writer reports ``ring`` only
on the step that ends an operation (the ring as the next operation finds it).
"""

from __future__ import annotations

from typing import Any

from ..core.serde import object_nbytes

FORMAT = "shmspec-trace"
VERSION = 1
HEADER_BYTES = 8
"""A chunk's ``[id: int32][chunk_size: int32]`` header."""
MODELLED = frozenset({"put", "get", "free_unused", "clear"})
"""The operations ShmStore.tla has actions for."""


def result_text(res: dict[str, Any] | None) -> str:
    """One line for an event's ``result`` (the forms the module docstring gives)."""
    if not res:
        return "no result"
    if "error" in res:
        return res["error"]
    if "handle" in res:
        return f"handle ({res['handle'][0]}, {res['handle'][1]})"
    return "ok"


class Recorder:
    """Events of one scheduled session (see the module docstring).

    ``readers``: reader names; ``ring_bytes``: the data region (bytes);
    ``hardened``: the target's read path pins and acknowledges (impl), else
    vLLM's; ``max_chunks``: impl's live-chunk bound ``K``; ``free_bytes``:
    the most one ``free_unused`` reclaims (bytes; vLLM's and impl's ``2 *
    max_object_size``; default ``ring_bytes``, no bound)."""

    def __init__(self, target: str, construction: str, readers: tuple[str, ...], ring_bytes: int,
                 hardened: bool, max_chunks: int, free_bytes: int | None = None) -> None:
        self.doc: dict[str, Any] = {
            "format": FORMAT, "version": VERSION, "spec": "ShmStore", "target": target,
            "construction": construction,
            "constants": {"readers": list(readers), "ring_bytes": ring_bytes, "max_chunks": max_chunks,
                          "hardened": hardened, "free_bytes": ring_bytes if free_bytes is None else free_bytes},
            "events": [], "unmodelled": None}
        self.allocations = 0
        self.abs_of: dict[str, int] = {}
        """handle ref -> the allocation that issued it."""
        self._put_events: list[dict] = []

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.doc["events"]

    def step(self, proc: str, kind: str, action: str, args: dict, at: str | None, to: str | None,
             result: dict | None, got: str | None, ring: list[list[int]] | None) -> None:
        """One scheduled step (``ScheduledSession`` calls it after each)."""
        if self.doc["unmodelled"] is not None:
            return
        if action not in MODELLED:
            self.doc["unmodelled"] = {"event": len(self.events), "process": proc, "op": action}
            return
        ev: dict[str, Any] = {"process": proc, "op": action, "kind": kind, "at": at, "to": to}
        if action == "put":
            if kind == "start":
                self._put_events = []
            ev["args"] = {"key": args["key"], "size": HEADER_BYTES + object_nbytes(bytes.fromhex(args["data"]))}
            self._put_events.append(ev)
        elif action == "get":
            ev["args"] = {"ref": args["ref"], "abs": self.abs_of[args["ref"]]}
        if result is not None:
            if result.get("error") is not None:
                ev["result"] = {"error": result["error"]}
            elif action == "put":
                address, id_ = result["value"]["handle"]
                ev["result"] = {"handle": [address, id_], "abs": self.allocations}
                self.abs_of[f"h{self.allocations + 1}"] = self.allocations
                self.allocations += 1
                size = next((s for a, s, i in ring or () if i == id_), None)
                if size is not None:  # the store's own chunk size, should it differ from the harness's
                    for e in self._put_events:
                        e["args"]["size"] = size
            else:
                ev["result"] = {"value": "ok"}
        if got is not None:
            ev["got"] = got
        if ring is not None:
            ev["ring"] = ring
        self.events.append(ev)


def op_events(process: str, op: str, args: dict[str, Any], t0: int, marks: list[tuple[int, str]], t1: int,
              result: dict[str, Any] | None, got: str | None = None,
              ring: list[list[int]] | None = None) -> list[dict[str, Any]]:
    """The events of one operation a free-running process made: it began at
    ``t0`` (ns), reached the yield points ``marks`` (``(ns, name)``, in order)
    and returned at ``t1`` with ``result`` (this module's result forms).
    ``got`` goes on the step that leaves ``deserialize``; ``ring`` (the
    writer's live chunks after the operation) on the last step."""
    bounds = [(t0, None), *marks, (t1, None)]
    out = []
    for k in range(len(bounds) - 1):
        (lo, at), (hi, to) = bounds[k], bounds[k + 1]
        ev: dict[str, Any] = {"process": process, "op": op, "kind": "start" if k == 0 else "advance",
                              "at": at, "to": to, "lo": lo, "hi": hi}
        if args:
            ev["args"] = args
        if got is not None and at == "deserialize":
            ev["got"] = got
        out.append(ev)
    out[-1]["result"] = result
    if ring is not None:
        out[-1]["ring"] = ring
    return out


def free_trace(target: str, construction: str, readers: tuple[str, ...], ring_bytes: int, hardened: bool,
               max_chunks: int, free_bytes: int, events: list[dict[str, Any]]) -> dict[str, Any]:
    """A free run's trace document: every process's :func:`op_events`, sorted by
    ``lo`` (a stable sort: a process's own events keep their order), their
    times made relative to the first."""
    origin = min((e["lo"] for e in events), default=0)
    evs = sorted(events, key=lambda e: e["lo"])
    for e in evs:
        e["lo"] -= origin
        e["hi"] -= origin
    rec = Recorder(target, construction, readers, ring_bytes, hardened, max_chunks, free_bytes)
    rec.doc["schedule"] = "free"
    rec.doc["events"] = evs
    return rec.doc


__all__ = ["FORMAT", "HEADER_BYTES", "MODELLED", "Recorder", "VERSION", "free_trace", "op_events", "result_text"]
