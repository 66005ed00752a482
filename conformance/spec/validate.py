"""Trace validation: is a run a real store made a behaviour of ``ShmStore.tla``?

A recorded run (:mod:`..concurrency.record`: one event per scheduled step)
becomes ``TraceLog``, a sequence of the spec's steps with what was observed
after each (:func:`spec_steps`), and TLC checks ``tla/ShmStoreTrace.tla``:
the spec's behaviours constrained to that one, with what no process observes
(pins, acks, the drain window, memory) left to TLC to find (the method of
CCF's and etcd's trace validation).  TLC accepts the trace when it reaches a
state that has taken every step; otherwise the step after the deepest one it
reached is where the store *departs* from the spec, and the spec states
reached just before it are reported with what was recorded there
(:class:`Validation`).

Step mapping (impl's read path: pin, check, deserialize, acknowledge; a
process is paused before a yield point and a step runs it to the next one,
so a step is the spec action named by the yield point it leaves):

==============================  =============================================
recorded step                   spec step (``TraceLog[i].act``)
==============================  =============================================
an operation starts             ``none`` (nothing the spec sees yet), or
                                ``refused``: a put that raised OutOfSpace or
                                DuplicateKey, where the spec's writer cannot put
leaves ``pin_scan``             ``scan``: the spec's ``pin_scan(k, n)``, taken
                                here or silently since the step that reached
                                the yield point (impl publishes what the put
                                kills before it and reads the pins after it)
leaves ``pin_wait``             ``pin_wait`` when it reaches ``header_write``,
                                ``wait_more`` when it waits again
leaves ``header_write`` ...     the action of that name (``payload_write``,
                                ``publish``, ``free_step``, ``retire``,
                                ``clear``, ``pin``, ``reader_check``,
                                ``deserialize``, ``counter_increment``,
                                ``unpin``)
leaves ``free_step`` for        ``free_step`` then ``retire``, both in its
neither ``free_step`` nor       interval (a store without impl's ``retire``
``retire``                      yield point)
leaves ``counter_increment``    ``counter_increment`` then ``unpin`` (a store
for anything but ``unpin``      without impl's ``unpin`` yield point)
==============================  =============================================

Units: one spec unit is one byte (``RingUnits`` is the data region's bytes,
``Sizes`` the chunks' bytes, header included), ids are compared modulo
``IdMod`` = 2**31 - 1 (TLC's largest integer; a run would need that many
allocations to tell the difference).  vLLM's read path (no pins; the
writer has no yield points) is not mapped yet: such a trace is refused with
:class:`TraceFormatError`.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ShmspecError
from ..concurrency.record import FORMAT, VERSION, result_text
from .tlavalue import parse_value
from .tlc import TlcError, default_tla_dir, run_tlc

ID_MOD = 2**31 - 1
FIELDS = ("act", "r", "key", "size", "abs", "hid", "haddr", "wpc", "pc", "got", "hasRing", "ring",
          "scanOpen", "scanKey", "scanSize", "p", "lo", "hi", "nxt")
"""Every ``TraceLog`` record has these fields (tla/ShmStoreTrace.tla)."""
SPEC_ACTIONS = ("pin_scan", "pin_wait", "header_write", "payload_write", "publish", "free_step", "retire", "clear",
                "pin", "reader_check", "deserialize", "counter_increment", "unpin")
"""The actions of ShmStore.tla's impl protocol (``Hardened``) a recorded run
can take, in the spec's order: :attr:`Validation.actions` counts them (and
``none``, ``wait_more`` and ``refused``, the steps that take no spec action)."""
SHOWN_VARS = ("wpc", "pc", "hd", "got", "chunks", "pubStart", "pubEnd", "pins", "wwait", "drainLo", "drainHi",
              "drainHw", "puts")
"""The spec variables a departure shows (the others are in ``report.json``'s ``states``)."""


class TraceFormatError(ShmspecError, ValueError):
    """The file is not a trace ``shmspec validate`` reads (one line says why)."""


@dataclass
class Departure:
    """Where a recorded run leaves the spec: ``step`` (0-based index of the
    TraceLog step TLC could not take), ``event`` (the recorded event it came
    from), ``act`` (the spec action), ``states`` (the spec states reached
    just before it: variable -> Python value) and ``recorded`` (the event).
    ``overlapping``: in a free run, the events of other processes whose
    steps ran while this one did (``(index, event)``; the steps TLC tried in
    each order around it)."""

    step: int
    event: int
    act: str
    recorded: dict[str, Any]
    states: list[dict[str, Any]] = field(default_factory=list)
    overlapping: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    def describe(self) -> str:
        more = (f"; {len(self.overlapping)} step(s) of other processes ran while it did"
                if self.overlapping else "")
        return (f"event {self.event}: {_moved(self.recorded)}; the spec cannot take its step "
                f"{self.act!r} from the {len(self.states)} state(s) it reached before it{more}")

    def overlap_lines(self) -> list[str]:
        """One line per :attr:`overlapping` event."""
        return [f"event {j}: {_moved(x, args=True)}" for j, x in self.overlapping]


def _moved(e: dict[str, Any], args: bool = False) -> str:
    """What the process of recorded event ``e`` did in its step (with
    ``args``: the operation's arguments too)."""
    move = f"started {e['op']}" if e["kind"] == "start" else f"left {e['at']} of {e['op']}"
    where = f"reached {e['to']}" if e["to"] else f"ended ({result_text(e.get('result'))})"
    shown = f" {json.dumps(e['args'])}" if args and e.get("args") else ""
    return f"{e['process']} {move}{shown} and {where}"


@dataclass
class Validation:
    """One trace checked: ``verdict`` ``"pass"`` (TLC took every step) or
    ``"fail"`` (``departure`` says where it could not); ``steps`` TraceLog
    steps, ``events`` recorded events, ``unmodelled`` the operation the
    recording stopped at (None: the whole run), TLC's ``distinct`` states
    and ``seconds``."""

    verdict: str
    steps: int
    events: int
    distinct: int
    seconds: float
    departure: Departure | None = None
    unmodelled: dict[str, Any] | None = None
    actions: dict[str, int] = field(default_factory=dict)
    """Spec action (:data:`SPEC_ACTIONS`) -> TraceLog steps that took it
    (what the run reached of the spec)."""

    def to_json(self) -> dict[str, Any]:
        d = self.departure
        return {"verdict": self.verdict, "steps": self.steps, "events": self.events, "distinct": self.distinct,
                "seconds": round(self.seconds, 3), "unmodelled": self.unmodelled, "actions": self.actions,
                "departure": None if d is None else {
                    "step": d.step, "event": d.event, "act": d.act, "recorded": d.recorded,
                    "describe": d.describe(), "states": [_jsonable(s) for s in d.states],
                    "overlapping": [{"event": j, "describe": line}
                                    for (j, _), line in zip(d.overlapping, d.overlap_lines())]}}


def load_trace(path: Path) -> dict[str, Any]:
    """A trace document from ``path`` (the format of :mod:`..concurrency.record`).

    Raises:
        TraceFormatError: unreadable, not JSON, another format or version, or
            a field missing.
    """
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise TraceFormatError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    check_trace(doc, str(path))
    return doc


def check_trace(doc: Any, where: str = "trace") -> None:
    """Raise :class:`TraceFormatError` unless ``doc`` is a trace this version reads."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TraceFormatError(f"{where} is not a shmspec trace (its \"format\" is not {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise TraceFormatError(f"{where} is trace version {doc.get('version')!r}; this shmspec reads {VERSION}")
    if doc.get("spec") != "ShmStore":
        raise TraceFormatError(f"{where} is a trace of spec {doc.get('spec')!r}; validate reads ShmStore traces")
    c = doc.get("constants")
    if not isinstance(c, dict) or not all(k in c for k in ("readers", "ring_bytes", "max_chunks", "hardened")):
        raise TraceFormatError(f"{where}: \"constants\" needs readers, ring_bytes, max_chunks and hardened")
    if not c["hardened"]:
        raise TraceFormatError(f"{where} is a run of vLLM's read path (no pins): validate maps impl's so far")
    if not isinstance(doc.get("events"), list):
        raise TraceFormatError(f"{where}: \"events\" is not a list")
    for i, e in enumerate(doc["events"]):
        if not isinstance(e, dict) or not all(k in e for k in ("process", "op", "kind", "at", "to")):
            raise TraceFormatError(f"{where}: event {i} needs process, op, kind, at and to")


def _step(**kw: Any) -> dict[str, Any]:
    s = {"act": "none", "r": "", "key": "", "size": 0, "abs": 0, "hid": 0, "haddr": 0, "wpc": "", "pc": "",
         "got": "", "hasRing": False, "ring": [], "scanOpen": False, "scanKey": "", "scanSize": 0,
         "p": "writer", "lo": 0, "hi": 0, "nxt": 0}
    s.update(kw)
    return s


def link(steps: list[dict[str, Any]]) -> None:
    """Set each step's ``nxt``: the 1-based index of its process's next step
    (``len(steps) + 1``: none)."""
    after: dict[str, int] = {}
    for j in range(len(steps), 0, -1):
        s = steps[j - 1]
        s["nxt"] = after.get(s["p"], len(steps) + 1)
        after[s["p"]] = j


def firsts(steps: list[dict[str, Any]], readers: list[str]) -> dict[str, int]:
    """The 1-based index of each process's first step (``len(steps) + 1``: none)."""
    out = {p: len(steps) + 1 for p in ("writer", *readers)}
    for j in range(len(steps), 0, -1):
        out[steps[j - 1]["p"]] = j
    return out


_PC_AT = {"pin": "idle", "reader_check": "pinned", "deserialize": "checked", "counter_increment": "read",
          "unpin": "acked", None: "idle"}
"""A reader paused before this yield point (None: its get ended) is at this spec pc."""
_WRITER_WPC = {"pin_wait": "wait", "header_write": "ready", "payload_write": "header", "publish": "payload",
               "free_step": "freeing", "retire": "retire", "pin_scan": "idle", None: "idle"}


def spec_steps(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], list[int]]:
    """The ``TraceLog`` of a trace document and, per step, the index of the
    event it came from (see the module docstring's table).

    Raises:
        TraceFormatError: an event the mapping does not know.
    """
    B = doc["constants"]["ring_bytes"]
    steps: list[dict[str, Any]] = []
    origin: list[int] = []
    scan: tuple[str, int] | None = None  # the put paused at pin_scan: a silent pin_scan may come

    def add(i: int, s: dict[str, Any]) -> None:
        if scan is not None:
            s.update(scanOpen=True, scanKey=scan[0], scanSize=scan[1])
        e = doc["events"][i]
        at = len(steps) + 1  # a controlled schedule's steps: one order
        s.update(p=e["process"], lo=e.get("lo", at), hi=e.get("hi", at))
        steps.append(s)
        origin.append(i)

    for i, e in enumerate(doc["events"]):
        op, kind, at, to = e["op"], e["kind"], e["at"], e["to"]
        res = e.get("result") or {}
        ring = {"hasRing": True, "ring": [list(c) for c in e["ring"]]} if "ring" in e else {}
        if ring and op == "put" and to == "publish" and ring["ring"]:
            ring["ring"].pop()  # impl's writer rings the chunk before it publishes it; the spec's at publish
        if e["process"] == "writer":
            args = e.get("args", {})
            put = {"key": args.get("key", ""), "size": args.get("size", 0)} if op == "put" else {}
            act = "none" if kind == "start" else {"pin_scan": "scan", "pin_wait": "pin_wait"}.get(at, at)
            if act == "pin_wait" and to == "pin_wait":
                act = "wait_more"
            wpc = _WRITER_WPC.get(to, "")
            if act == "free_step" and to not in ("free_step", "retire"):
                # a store without impl's retire yield point: its last free_step
                # retires too, in the same interval
                add(i, _step(act="free_step", wpc="retire"))
                act = "retire"
            if act not in ("none", "scan", "pin_wait", "wait_more", "header_write", "payload_write", "publish",
                           "free_step", "retire", "clear"):
                raise TraceFormatError(f"event {i}: the writer left yield point {at!r}, which ShmStore.tla has no step for")
            extra: dict[str, Any] = {}
            if act == "publish" and "handle" in res:
                address, id_ = res["handle"]
                extra = {"abs": res["abs"], "hid": id_ % ID_MOD, "haddr": address % B}
            elif act == "publish":  # a put that raised at its last step: the spec's publish always issues a handle
                extra = {"abs": -1}
            if act == "none" and to is not None:
                wpc = ""  # an operation's start reaches its first yield point: the spec's writer is idle still
            add(i, _step(act=act, wpc=wpc, **put, **extra, **ring))
            if to == "pin_scan":
                scan = (put["key"], put["size"])
            if act == "scan":
                scan = None
            if op == "put" and to is None and res.get("error") in ("OutOfSpace", "DuplicateKey"):
                add(i, _step(act="refused", **put))
            elif to is None and res.get("error") is not None:
                raise TraceFormatError(f"event {i}: writer {op} raised {res['error']}, which ShmStore.tla has no step for")
        else:
            r = e["process"]
            if kind == "start":
                if to != "pin":
                    raise TraceFormatError(f"event {i}: {r}'s {op} started and reached {to!r}, not pin "
                                           "(validate maps impl's read path so far)")
                add(i, _step(act="none", r=r))
                continue
            if at not in _PC_AT or at is None or to not in _PC_AT:
                raise TraceFormatError(f"event {i}: {r} went from {at!r} to {to!r}: no yield point of impl's read path")
            s = _step(act=at, r=r, pc=_PC_AT[to], got=e.get("got", ""))
            if at == "counter_increment" and to != "unpin":
                # a store without impl's unpin yield point: the ack's step unpins too
                add(i, _step(act="counter_increment", r=r, pc="acked"))
                s = _step(act="unpin", r=r, pc=_PC_AT[to])
            if at == "pin":
                s["abs"] = e["args"]["abs"]
            add(i, s)
    link(steps)
    if doc.get("schedule") == "free":  # ranks: the order of the times, in integers TLC holds (< 2**31)
        rank = {x: j + 1 for j, x in enumerate(sorted({s[f] for s in steps for f in ("lo", "hi")}))}
        for s in steps:
            s["lo"], s["hi"] = rank[s["lo"]], rank[s["hi"]]
    return steps, origin


ITF_VARS = (*FIELDS, "event")
"""The variables of a recorded run's ITF states (:func:`trace_to_itf`)."""


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _lists(v: Any) -> Any:
    return [_lists(x) for x in v] if isinstance(v, tuple) else v


def trace_to_itf(doc: dict[str, Any], source: str = "") -> dict[str, Any]:
    """A recorded run as an ITF trace (Apalache ADR-015, :mod:`.itf`): one
    state per ``TraceLog`` step (:func:`spec_steps`), its variables
    :data:`ITF_VARS`: the step's fields, the values tla/ShmStoreTrace.tla
    constrains the spec's behaviour to (``ring`` a sequence of
    ``<<address, size, id>>``), and ``event``, the recorded event it came
    from; each state's ``#meta.action`` is its ``act``.  The trace's
    ``#meta`` keeps the document's ``target``, ``construction``,
    ``constants`` and ``unmodelled``.

    Raises:
        TraceFormatError: the document is not a trace this version maps.
    """
    from .itf import trace_to_itf as states_to_itf  # noqa: PLC0415 - only when writing ITF

    check_trace(doc)
    steps, origin = spec_steps(doc)
    states = [{**{f: _tuples(s[f]) for f in FIELDS}, "event": origin[i]} for i, s in enumerate(steps)]
    out = states_to_itf(states, [s["act"] for s in steps], source=source,
                        description=f"a recorded run of {doc.get('target', '?')} as ShmStoreTrace.tla's TraceLog")
    out["#meta"].update({k: doc.get(k) for k in ("target", "construction", "constants", "unmodelled")})
    return out


def steps_from_itf(itf: dict[str, Any]) -> tuple[list[dict[str, Any]], list[int]]:
    """The ``TraceLog`` steps and event indices of an ITF trace :func:`trace_to_itf` wrote.

    Raises:
        ItfError: not an ITF trace, or its states lack the variables :data:`ITF_VARS`.
    """
    from .itf import ItfError, trace_from_itf  # noqa: PLC0415

    missing = [v for v in ITF_VARS if v not in (itf.get("vars") or [])] if isinstance(itf, dict) else list(ITF_VARS)
    if missing:
        raise ItfError(f"not a recorded run's ITF trace: it lacks the variables {missing}")
    states = trace_from_itf(itf)
    return [{f: _lists(st[f]) for f in FIELDS} for st in states], [st["event"] for st in states]


def _tla(v: Any) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "<<" + ", ".join(_tla(x) for x in v) + ">>"
    if isinstance(v, (set, frozenset)):
        return "{" + ", ".join(_tla(x) for x in sorted(v)) + "}"
    raise TypeError(f"no TLA+ form for {v!r}")


def trace_module(runs: list[tuple[dict[str, Any], list[dict[str, Any]]]],
                 invariant: str = "Where") -> tuple[str, str, str]:
    """``(MCTrace.tla, MCTrace.cfg, TraceData.tla)`` texts for ``runs``
    (trace document, its steps), checked one after another: the constants of
    the recorded store (every run's must agree: :func:`batch_key`),
    ``Traces``, and ``invariant`` (an expression of ShmStoreTrace.tla: ``Where``
    or ``ShowAt(T, L)``) as the invariant ``MCCheck``."""
    c = runs[0][0]["constants"]
    steps = [s for _, st in runs for s in st]
    keys = {s["key"] for s in steps if s["key"]} | {s["scanKey"] for s in steps if s["scanKey"]} or {"k"}
    sizes = {s["size"] for s in steps if s["size"]} or {2}
    allocations = max(sum(1 for e in doc["events"] if "handle" in (e.get("result") or {})) for doc, _ in runs)
    gets: dict[tuple[int, str, int], int] = {}
    for n, (_, st) in enumerate(runs):
        for s in st:
            if s["act"] == "pin":
                gets[(n, s["r"], s["abs"])] = gets.get((n, s["r"], s["abs"]), 0) + 1
    defs = {
        "MCReaders": _tla(set(c["readers"])), "MCRingUnits": str(c["ring_bytes"]), "MCSizes": _tla(sizes),
        "MCKeys": _tla(keys), "MCIdMod": str(ID_MOD), "MCMaxPuts": str(allocations + 1),
        "MCMaxReads": str(max(gets.values(), default=1)), "MCMaxChunks": str(c["max_chunks"]),
        "MCFreeBound": str(c.get("free_bytes", c["ring_bytes"])),
    }
    lines = ["---- MODULE MCTrace ----", "EXTENDS ShmStoreTrace", ""]
    lines += [f"{k} == {v}" for k, v in defs.items()]
    # Symmetry (Permutations(Keys)) is not used here, but TLC computes every constant
    # definition before it starts: with a run's hundreds of keys that took 26 s of a 32 s check
    lines += [f"MCCheck == {invariant}", "MCNoSymmetry == {}", "===="]
    data = ["---- MODULE TraceData ----", "EXTENDS Integers, TLC", "Traces == <<"]
    data.append(",\n".join(
        "<<\n" + ",\n".join("  [" + ", ".join(f"{f} |-> {_tla(s[f])}" for f in FIELDS) + "]" for s in st) + "\n>>"
        for _, st in runs))
    data += [">>", "Firsts == <<"]
    data.append(",\n".join("  (" + " @@ ".join(f"{_tla(q)} :> {j}" for q, j in firsts(st, doc["constants"]["readers"]).items())
                           + ")" for doc, st in runs))  # (a reader's name need not be a TLA+ identifier)
    data += [">>", "===="]
    cfg = ["CONSTANTS"]
    cfg += [f"    {name} <- MC{name}" for name in ("Readers", "RingUnits", "Sizes", "Keys", "IdMod", "MaxPuts",
                                                  "MaxReads", "MaxChunks", "FreeBound")]
    cfg += ["    Symmetry <- MCNoSymmetry"]
    cfg += ["    Hardened = TRUE", "    ReadOnce = FALSE", "    ClearResets = FALSE", "    Fenced = TRUE",
            "    ScanPins = TRUE", "    WriterFenced = TRUE", "    Mortal = {}",
            "INIT TraceInit", "NEXT TraceNext", "INVARIANT MCCheck", ""]
    return "\n".join(lines) + "\n", "\n".join(cfg), "\n".join(data) + "\n"


def batch_key(doc: dict[str, Any]) -> tuple:
    """Runs with one key share a TLC run: the spec constants they fix agree."""
    c = doc["constants"]
    return (tuple(sorted(c["readers"])), c["ring_bytes"], c["max_chunks"], bool(c["hardened"]),
            c.get("free_bytes", c["ring_bytes"]))


def validate(doc: dict[str, Any], timeout: float = 600.0) -> Validation:
    """Check one trace document with TLC (see the module docstring).

    Raises:
        TraceFormatError: the document is not a trace this version maps.
        TlcError: TLC could not run, or ran past ``timeout`` seconds.
    """
    return validate_many([doc], timeout)[0]


def validate_many(docs: list[dict[str, Any]], timeout: float = 600.0) -> list[Validation]:
    """Check many trace documents, one TLC run per :func:`batch_key` (the runs
    one after another, each on a fresh store).  When TLC cannot take run
    ``T`` whole, the runs before it validate, a second check prints the spec
    states ``T``'s departing step is reached from, and the runs after it are
    checked again from ``T + 1`` (``seconds``: each run's share of its
    batch's TLC time).

    Raises:
        TraceFormatError: a document is not a trace this version maps (nothing is run).
        TlcError: TLC could not run, or ran past ``timeout`` seconds.
    """
    return _validate(docs, timeout, coverage=False)[0]


def validate_with_coverage(docs: list[dict[str, Any]], timeout: float = 600.0) -> tuple[list[Validation], Any]:
    """:func:`validate_many` and :func:`spec_coverage` of ``docs`` from the same
    TLC runs (TLC's ``-coverage`` on the checks; the model's counts are cached,
    :func:`~.coverage.model_locations`): ``(validations, Coverage)``.  A run
    that departs counts up to its departure.

    Raises:
        TraceFormatError: a document is not a trace this version maps (nothing is run).
        TlcError: TLC could not run, or ran past ``timeout`` seconds.
    """
    from .coverage import compare, model_locations  # noqa: PLC0415

    results, runs, taken = _validate(docs, timeout, coverage=True)
    text = (default_tla_dir() / "ShmStore.tla").read_text()
    return results, compare(model_locations(timeout), runs, text, [a for a in SPEC_ACTIONS if a not in taken])


def _validate(docs: list[dict[str, Any]], timeout: float, coverage: bool) -> tuple[list[Validation], dict, set[str]]:
    """:func:`validate_many`'s checks; with ``coverage``, also the most times
    each ShmStore.tla expression was evaluated in any batch's check, and the
    spec actions the runs took."""
    from .coverage import locations  # noqa: PLC0415

    mapped = []
    for i, doc in enumerate(docs):
        check_trace(doc, f"trace {i}")
        mapped.append((doc, *spec_steps(doc)))
    out: list[Validation | None] = [None] * len(docs)
    locs: dict[Any, int] = {}
    groups: dict[tuple, list[int]] = {}
    for i, (doc, _, _) in enumerate(mapped):
        groups.setdefault(batch_key(doc), []).append(i)
    for idx in groups.values():
        while idx:
            runs = [mapped[i] for i in idx]
            res, (run, depth, step) = _check(runs, timeout, coverage)
            if coverage:
                for loc, n in locations(res.output).items():
                    locs[loc] = max(locs.get(loc, 0), n)
            share = res.seconds / len(idx)
            done = len(idx) if (run, depth) == (len(runs), len(runs[-1][1]) + 1) else run - 1
            for i in idx[:done]:
                out[i] = _passed(mapped[i], res.distinct / len(idx), share)
            if done == len(idx):
                break
            out[idx[done]] = _departed(mapped[idx[done]], step - 1, depth, timeout)
            idx = idx[done + 1:]
    taken = {a for v in out if v is not None for a, n in v.actions.items() if n}
    return out, locs, taken  # type: ignore[return-value]


def _actions(steps: list[dict[str, Any]]) -> dict[str, int]:
    actions: dict[str, int] = {}
    for s in steps:
        a = "pin_scan" if s["act"] == "scan" else s["act"]  # TraceLog's scan is the spec's pin_scan
        actions[a] = actions.get(a, 0) + 1
    return actions


def _passed(run: tuple, distinct: float, seconds: float) -> Validation:
    doc, steps, _ = run
    return Validation("pass", len(steps), len(doc["events"]), round(distinct), seconds,
                      unmodelled=doc.get("unmodelled"), actions=_actions(steps))


def spec_coverage(docs: list[dict[str, Any]], timeout: float = 600.0) -> Any:
    """Which parts of ShmStore.tla's steps the recorded runs ``docs`` reach,
    against the model (:mod:`.coverage`): the checks of
    :func:`validate_with_coverage`, its :class:`~.coverage.Coverage`.

    Raises:
        TraceFormatError: a document is not a trace this version maps.
        TlcError: TLC could not run, or ran past ``timeout`` seconds.
    """
    return validate_with_coverage(docs, timeout)[1]


def _tlc(runs: list[tuple[dict[str, Any], list[dict[str, Any]]]], timeout: float, invariant: str,
         coverage: bool = False):
    module, cfg, data = trace_module(runs, invariant)
    n = sum(len(st) for _, st in runs)
    with tempfile.TemporaryDirectory(prefix="shmspec-validate-") as tmp:
        d = Path(tmp)
        for name in ("ShmStore.tla", "ShmStoreTrace.tla"):
            shutil.copy(default_tla_dir() / name, d / name)
        (d / "MCTrace.tla").write_text(module)
        (d / "MCTrace.cfg").write_text(cfg)
        (d / "TraceData.tla").write_text(data)
        # the client compiler starts sooner; a long trace's search is faster with the server compiler
        res = run_tlc(d / "MCTrace.cfg", spec=d / "MCTrace.tla", timeout=timeout, properties=[], quick=n < 2000,
                      coverage=coverage)
    if res.status != "ok":
        _raise_tlc(res)
    return res


_AT = re.compile(r'<<\s*"shmspec-at",\s*(\d+),\s*(\d+),\s*(\d+)\s*>>')
_STATE = re.compile(r'<<\s*"shmspec-state",')


def _check(runs: list[tuple], timeout: float, coverage: bool = False) -> tuple[Any, tuple[int, int, int]]:
    """TLC on ``runs``; its result and the furthest ``(run, steps taken + 1,
    first step still to take)`` (1-based) a state reached."""
    res = _tlc([(d, st) for d, st, _ in runs], timeout, "Where", coverage=coverage)
    return res, max((int(a), int(b), int(c)) for a, b, c in _AT.findall(res.output))


def _departed(run: tuple, step: int, depth: int, timeout: float) -> Validation:
    """Run ``run`` departs at its ``step`` (0-based), reached from states that took ``depth - 1`` steps."""
    doc, steps, origin = run
    res = _tlc([(doc, steps)], timeout, f"ShowAt(1, {depth})")
    states = [dict(v[1]) for v in _printed(res.output, _STATE)]
    ev = doc["events"]
    e = ev[origin[step]]
    overlapping = ([(j, x) for j, x in enumerate(ev) if x["process"] != e["process"] and x["lo"] <= e["hi"]
                    and x["hi"] >= e["lo"]] if doc.get("schedule") == "free" else [])
    dep = Departure(step, origin[step], steps[step]["act"], e, states, overlapping)
    return Validation("fail", len(steps), len(doc["events"]), res.distinct, res.seconds, departure=dep,
                      unmodelled=doc.get("unmodelled"), actions=_actions(steps))


def _printed(out: str, head: re.Pattern) -> list[Any]:
    """Every value TLC's PrintT printed that starts with ``head`` (one line or,
    through TLC's own pretty-printer, several)."""
    values = []
    m = head.search(out)
    while m:
        i = m.start()
        depth, j = 0, i
        while True:
            if out.startswith("<<", j) or out[j] in "[{(":
                depth += 1
                j += 2 if out.startswith("<<", j) else 1
                continue
            if out.startswith(">>", j) or out[j] in "]})":
                depth -= 1
                j += 2 if out.startswith(">>", j) else 1
                if depth == 0:
                    break
                continue
            if out[j] == '"':
                j = out.index('"', j + 1) + 1
                continue
            j += 1
        values.append(parse_value(out[i:j]))
        m = head.search(out, j)
    return values


def _raise_tlc(res: Any) -> None:
    tail = "\n".join(res.output.strip().splitlines()[-8:])
    raise TlcError(f"TLC could not check the trace ({res.status}, exit {res.exit_code}):\n{tail}")


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted((_jsonable(x) for x in v), key=repr)
    return v


def shown(state: dict[str, Any]) -> dict[str, Any]:
    """The variables of a spec state a departure shows (:data:`SHOWN_VARS`)."""
    return {k: _jsonable(state[k]) for k in SHOWN_VARS if k in state}


__all__ = ["Departure", "FIELDS", "ID_MOD", "ITF_VARS", "SPEC_ACTIONS", "TraceFormatError", "Validation", "batch_key",
           "check_trace", "firsts", "link", "load_trace", "shown", "spec_coverage", "spec_steps", "steps_from_itf", "trace_module", "trace_to_itf",
           "validate", "validate_many", "validate_with_coverage"]
