"""Agreement between the TLA+ spec (run by TLC) and the Python model.

Both describe one transition system: ``tla/ShmStore.tla`` and
:mod:`shmspec.model.atomic`.  This module ties them together:

- :func:`abstract` is the one mapping from a state TLC prints to a model
  :class:`~shmspec.model.atomic.State`: each spec variable goes to the field
  of the same name in snake case; records become tuples in the field order the
  model documents (a chunk ``(abs, addr, size, id, key)``, a memory cell
  ``(id, size, cnt, obj)``, a handle ``(abs, addr, id, obj)``); functions over
  Readers become tuples in sorted reader order (``starts`` and ``acks``, per
  reader, tuples over allocation numbers); ``issued`` becomes a sorted tuple,
  the set of readers ``wwait`` a tuple of booleans in reader order, the
  sequence ``pend`` a tuple.  States are then compared up to the spec's symmetry
  (:func:`~shmspec.model.atomic.canonical`).
- :func:`compare` checks that breadth-first enumeration of the model reaches
  exactly the states TLC reached (``-dump``), and reports counts side by side
  with a sample of any difference.
- :func:`replay_trace` replays a TLC error trace on the model step by step and
  names the first step the model cannot take; :func:`counterexample` turns the
  trace into a :class:`~.gate.Violation` that the gate's report renderer draws.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shmspec.model import atomic
from shmspec.model.atomic import GARBAGE, NO_OBJ, Config, State
from shmspec.model.properties import nrr_message

from ..core.results import Violation
from .tlavalue import parse_dump, parse_value
from .tlc import ConfigFile, TlcResult, TraceState

SAMPLE = 3
"""States shown of each side of a difference."""


def model_config(cf: ConfigFile) -> Config:
    """The model's :class:`Config` from a TLC config's constants.

    Raises:
        ValueError: a constant is missing, unparsable or out of range.
    """
    return Config.from_constants({k: parse_value(v) for k, v in cf.constants.items()})


def abstract(cfg: Config, v: dict[str, Any]) -> State:
    """The model state of a TLC state (``{variable: parsed value}``); see the
    module docstring for the mapping.

    Raises:
        KeyError: a spec variable is missing (the spec and model disagree on
            their variables).
    """
    R = cfg.readers

    def h(x: dict) -> tuple[int, int, int, int]:
        return (x["abs"], x["addr"], x["id"], x["obj"])

    def chunk(c: dict) -> tuple[int, int, int, int, str]:
        return (c["abs"], c["addr"], c["size"], c["id"], c["key"])

    def per_abs(f: dict) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(f[r][a] for a in range(cfg.max_puts)) for r in R)

    mem = v["mem"]
    return State(
        v["start"], v["end"], v["idStart"], v["idEnd"], tuple(chunk(c) for c in v["chunks"]),
        tuple((mem[u]["id"], mem[u]["size"], mem[u]["cnt"], mem[u]["obj"]) for u in range(cfg.ring_units)),
        v["wpc"], v["pubStart"], v["pubEnd"], v["puts"], tuple(sorted(h(x) for x in v["issued"])), v["clearAt"],
        tuple(chunk(c) for c in v["pend"]), tuple(r in v["wwait"] for r in R), v["planned"],
        v["drainLo"], v["drainHi"], v["drainHw"],
        tuple(v["pc"][r] for r in R), tuple(h(v["hd"][r]) for r in R), tuple(v["hsz"][r] for r in R),
        tuple(v["got"][r] for r in R), tuple(v["floor"][r] for r in R), per_abs(v["starts"]),
        tuple(v["pins"][r] for r in R), tuple(v["verdict"][r] for r in R), per_abs(v["acks"]),
    )


@dataclass
class Agreement:
    """TLC's and the model's state spaces of one config, side by side."""

    config: str
    tlc_distinct: int
    tlc_generated: int
    tlc_depth: int
    model_distinct: int
    model_generated: int
    model_depth: int
    only_tlc: int
    only_model: int
    sample_only_tlc: list[State] = field(default_factory=list)
    sample_only_model: list[State] = field(default_factory=list)
    model_violated: list[str] = field(default_factory=list)
    model_seconds: float = 0.0
    symmetric: bool = True
    """TLC ran with the config's SYMMETRY (reader and key permutations), as
    the model always enumerates; without it (the liveness configs) TLC counts
    every permutation apart, and only the sets, taken up to symmetry, compare."""

    @property
    def ok(self) -> bool:
        """The two sets of abstract states are equal (up to symmetry), and so
        are the counts when TLC reduced by symmetry too."""
        return (self.only_tlc == 0 and self.only_model == 0
                and (not self.symmetric or self.tlc_distinct == self.model_distinct))

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config, "agree": self.ok, "symmetric": self.symmetric,
            "tlc": {"distinct": self.tlc_distinct, "generated": self.tlc_generated, "depth": self.tlc_depth},
            "model": {"distinct": self.model_distinct, "generated": self.model_generated, "depth": self.model_depth,
                      "seconds": round(self.model_seconds, 3), "violated": self.model_violated},
            "only_tlc": self.only_tlc, "only_model": self.only_model,
            "sample_only_tlc": [s._asdict() for s in self.sample_only_tlc],
            "sample_only_model": [s._asdict() for s in self.sample_only_model],
        }


def compare(cf: ConfigFile, holds: TlcResult, dump: Path) -> Agreement:
    """Enumerate the model for ``cf`` and compare with TLC's ``dump`` of the
    run ``holds`` (the run that covers the whole state space).

    Raises:
        OSError: the dump file is missing.
        ValueError: the config's constants do not make a model config.
    """
    cfg = model_config(cf)
    tlc_states = {atomic.canonical(cfg, abstract(cfg, v)) for v in parse_dump(dump.read_text())}
    t0 = time.monotonic()
    ex = atomic.explore(cfg)
    seconds = time.monotonic() - t0
    only_tlc = tlc_states - ex.states
    only_model = ex.states - tlc_states
    return Agreement(cf.name, holds.distinct, holds.generated, holds.depth, len(ex.states), ex.generated, ex.depth,
                     len(only_tlc), len(only_model), sorted(only_tlc)[:SAMPLE], sorted(only_model)[:SAMPLE],
                     sorted(ex.violated), seconds, cf.symmetry)


# --------------------------------------------------------------- traces
@dataclass
class TraceReplay:
    """A TLC trace replayed on the model: the model's step (with the
    arguments TLC does not print) for each trace step it could follow, and
    the index of the first trace step it could not take (``None``: it
    followed the whole trace)."""

    states: list[State]
    steps: list[atomic.Step | None]
    model_departs: int | None


def trace_states(cfg: Config, trace: list[TraceState]) -> list[State]:
    """The model states of a TLC trace's states."""
    return [abstract(cfg, s.values()) for s in trace]


def replay_trace(cfg: Config, trace: list[TraceState]) -> TraceReplay:
    """Follow a TLC error trace on the model, step by step (up to symmetry)."""
    states = trace_states(cfg, trace)
    steps: list[atomic.Step | None] = [None]
    if atomic.canonical(cfg, states[0]) != atomic.canonical(cfg, atomic.initial(cfg)):
        return TraceReplay(states, steps, 0)
    cur = atomic.initial(cfg)
    for i in range(1, len(trace)):
        hit = atomic.follow(cfg, cur, trace[i].action, states[i])
        if hit is None:
            return TraceReplay(states, steps, i)
        steps.append(hit[0])
        cur = hit[1]
    return TraceReplay(states, steps, None)


def departs_first(model_departs: int | None, target_departs: int | None) -> str | None:
    """Which of spec, model and target departs first from a spec behaviour:
    ``"model"`` or ``"target"`` (the earlier one), ``"spec"`` when both depart
    at the same step (the spec is then the odd one out), None when the model
    and the target follow it to the end."""
    if model_departs is None and target_departs is None:
        return None
    if target_departs is None or (model_departs is not None and model_departs < target_departs):
        return "model"
    if model_departs is None or target_departs < model_departs:
        return "target"
    return "spec"


def _obj(t: int) -> str:
    return "garbage" if t == GARBAGE else "-" if t == NO_OBJ else f"o{t}"


def _handle(h: tuple) -> str:
    """``h<n>(<address>,<id>)``: handles numbered from 1 in put order, as the
    harness names them (the object under ``h<n>`` is ``o<n>``)."""
    return f"h{h[0] + 1}({h[1]},{h[2]})"


def _allocation(s: State, a: int) -> str:
    """Allocation ``a`` as a handle (``h<a+1>(address,id)``) when it is issued,
    live or being put, else ``h<a+1>``."""
    for c in s.issued:
        if c[0] == a:
            return _handle(c)
    for c in s.chunks + s.pend:
        if c[0] == a:
            return _handle((a, c[1], c[3]))
    return f"h{a + 1}"


def _ring(cfg: Config, s: State) -> list[str]:
    """Live chunks as ``id@address:reads`` (address in units; reads: vLLM's
    in-band reader_count, impl's acks summed over readers)."""
    if cfg.hardened:
        return [f"{c[3]}@{c[1]}:{sum(a[c[0]] for a in s.acks)}" for c in s.chunks]
    return [f"{c[3]}@{c[1]}:{s.mem[c[1] % len(s.mem)][2]}" for c in s.chunks]


def _observed(cfg: Config, before: State, after: State, step: atomic.Step | None) -> str:
    if step is None:
        return ""
    if step.process == atomic.WRITER:
        if step.name == "publish":
            return "handle " + _handle(next(h for h in after.issued if h[0] == dict(step.args)["abs"]))
        if step.name == "payload_write":
            return ""
        if step.name == "pin_scan":
            waits = [r for r, w in zip(cfg.readers, after.wwait) if w]
            c = after.pend[0]
            return (f"plans id {c[3]} at {c[1]}; " + (f"waits for the pin of {', '.join(waits)}" if waits
                                                      else "no pin to wait for"))
        if step.name == "pin_wait":
            return "pins released"
        if step.name == "header_write" and cfg.hardened:
            return f"header id {after.pend[0][3]} at {after.pend[0][1]}"
        return f"start={after.start} end={after.end} ids {after.id_start}..{after.id_end}"
    i = cfg.readers.index(step.process)
    parts = [f"{before.pc[i]}→{after.pc[i]}"]
    if after.pins[i] != before.pins[i]:
        parts.append(f"pin h{after.pins[i]}" if after.pins[i] else "unpinned")
    if after.verdict[i] != before.verdict[i] and after.verdict[i] != "none":
        parts.append(after.verdict[i])
    if after.got[i] != before.got[i]:
        parts.append(f"got {_obj(after.got[i])}")
    return " ".join(parts)


MESSAGES = {
    "NRR": nrr_message("a reader", "deserialized", "{got}", "{h}", "{want}"),
    "CLR": "a get that started after clear() deserialized {got} for handle {h}, issued before that clear",
    "CLR-reused": "reader {r} resolves handle {h}, issued before clear(), while allocation {c} put since covers its bytes",
    "RC": "a live chunk's reader_count exceeds the gets started on it",
    "RC-acks": "reader {r} acknowledged {acks} reads of {h} but started {starts} (an ack landed on another allocation)",
    "PROM": "handle {h} is no longer live but reader {r}, promised a read of it, never started one",
}


def _message(cfg: Config, invariant: str, last: State) -> str | None:
    """What the last state of a counterexample breaks, in words."""
    R = cfg.readers
    for r, (g, h) in enumerate(zip(last.got, last.hd)):
        if invariant == "NRR" and g not in (NO_OBJ, h[3]):
            return MESSAGES["NRR"].format(got=_obj(g), h=_handle(h), want=_obj(h[3])) + f" (reader {R[r]})"
        if invariant == "CLR" and g not in (NO_OBJ, h[3]) and h[0] < last.floor[r]:
            return MESSAGES["CLR"].format(got=_obj(g), h=_handle(h)) + f" (reader {R[r]})"
        if invariant == "CLR" and last.pc[r] == "checked" and h[0] < last.clear_at and atomic._reused(cfg, last, r):
            written = last.chunks + (last.pend if cfg.hardened and last.wpc in ("header", "payload") else ())
            c = next(c for c in written if c[0] >= last.clear_at)
            return MESSAGES["CLR-reused"].format(r=R[r], h=_handle(h), c=f"h{c[0] + 1}@{c[1]}")
    if invariant == "RC":
        for r, (acks, starts) in enumerate(zip(last.acks, last.starts)):
            for a, (n, m) in enumerate(zip(acks, starts)):
                if n > m:
                    return MESSAGES["RC-acks"].format(r=R[r], acks=n, h=_allocation(last, a), starts=m)
        return MESSAGES["RC"]
    if invariant == "PROM":
        for r in range(len(R)):
            for h in last.issued:
                if h[0] >= last.clear_at and last.starts[r][h[0]] == 0 and not last.pub_start <= h[0] < last.pub_end:
                    return MESSAGES["PROM"].format(h=_handle(h), r=R[r])
    if invariant == "PROGLive":  # the lasso's last state repeats for ever
        for c in last.chunks:
            dead = [R[r] for r in range(len(R)) if last.pc[r] == "dead"]
            unread = [R[r] for r in range(len(R)) if last.starts[r][c[0]] == 0 and R[r] not in dead]
            stuck = [R[r] for r in range(len(R)) if last.pc[r] not in ("idle", "dead") and last.hd[r][0] == c[0]]
            why = "; ".join(([f"{', '.join(unread)} never reads it"] if unread else [])
                            + ([f"{', '.join(stuck)} started a get of it and never finishes"] if stuck else []))
            if why:
                return (f"allocation h{c[0] + 1} stays in the ring for ever: {why}, so it is never reclaimed and "
                        f"blocks the FIFO head (PROG's client rule broken: every promised read made)")
            if dead:  # the store's: a dead reader's promised reads never forfeited
                return (f"allocation h{c[0] + 1} stays in the ring for ever: {', '.join(dead)} died before its read "
                        "of it counted, and the store never forfeits a dead reader's promised reads, so it is never "
                        "reclaimed and blocks the FIFO head")
            return f"allocation h{c[0] + 1} stays in the ring for ever, every reader having read it"
    return None


def counterexample(cf: ConfigFile, invariant: str, result: TlcResult, replay: TraceReplay) -> Violation:
    """A TLC counterexample as a gate :class:`~.gate.Violation` (concurrency
    ``"spec"``): one lane step per trace step, with the process and arguments
    recovered by the model, what the step changed, and the live chunks."""
    cfg = model_config(cf)
    states = replay.states
    steps = []
    for i, ts in enumerate(result.trace):
        step = replay.steps[i] if i < len(replay.steps) else None
        prev = states[i - 1] if i else states[0]
        changed = {k: t for k, t in ts.variables.items() if i and result.trace[i - 1].variables.get(k) != t}
        steps.append({
            "index": i, "process": step.process if step else ("-" if i == 0 else "?"), "kind": "step",
            "action": ts.action, "args": {k: (_handle(v) if k == "handle" else v) for k, v in step.args} if step else {},
            "yield_point": None, "observed": _observed(cfg, prev, states[i], step) if i else "initial state",
            "ring": _ring(cfg, states[i]), "changed": changed,
            "model": "departs" if replay.model_departs == i else ("ok" if step or i == 0 else "not reached"),
            "violations": [],
        })
    msg = _message(cfg, invariant, states[-1]) or f"{invariant} violated after {len(steps) - 1} steps"
    steps[-1]["violations"] = [{"property": invariant, "message": msg}]
    return Violation(invariant, msg, f"tlc {cf.name}", 0, steps,
                     {"config": cf.name, "constants": cf.constants,
                      "model_departs": replay.model_departs}, concurrency="spec")


__all__ = ["Agreement", "TraceReplay", "abstract", "compare", "counterexample", "departs_first", "model_config", "replay_trace",
           "trace_states"]
