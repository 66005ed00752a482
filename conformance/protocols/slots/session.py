"""Lockstep sessions of the slot protocol: one store (a driver from
:mod:`.targets`) and its model (:mod:`shmspec.model.slotapi`) run call by
call; after every call each property of docs/slots.md is judged.

The checks, by property:

* NRR: every view a reader holds still shows its message's bytes; no write
  lands in a slot some reader has not released;
* FIFO: a reader receives each message, in order, once (the queue: what a
  read returns is the next message; a read where none is readable, or an
  arena view refused while its message is intact, is a finding);
* PROG: the arena falls back only with no slot free, the queue's writer
  times out only with its slot unreleased, a reader only with nothing to
  read (a fallback's expected column names the readers holding the slots);
* FALLBACK: an oversized message falls back, and a fallback changes nothing;
* DISJ: a write changes its own slot only (every other written slot still
  holds its message's bytes);
* CONFORMANCE: the metadata rows equal the ones the model's ledger implies
  after every call (``compare_state``); the other properties are judged from
  the ledger (what the clients did), so one divergence of the flags does not
  surface again as NRR or FIFO.

Every queue call is made with ``timeout=0``; LIVE (a call returning within
:data:`CALL_BOUND_S`) is judged on each call's duration.
"""

from __future__ import annotations

import time
from typing import Any

from shmspec.model.slotapi import ArenaModel, QueueModel

from ...core.config import SessionConfig
from ...lockstep.session import Call, PropertyViolation, Step

SLOTS = 3
SLOT_BYTES = 24
"""The session geometry: 3 slots of 24 bytes (the queue frames a message
with a 4-byte length, so its largest is 20 bytes)."""
CALL_BOUND_S = 2.0
"""LIVE: seconds a call may take (every wait is ``timeout=0`` or none)."""
SEVERITY = {"NRR": 1, "DISJ": 2, "FIFO": 3, "FALLBACK": 4, "PROG": 5, "LIVE": 6, "CONFORMANCE": 7}


def payload(msg: int, size: int, seed: int) -> bytes:
    """Message ``msg``'s bytes: ``size`` bytes, the first one ``msg`` mod 256."""
    return bytes([msg % 256] + [(seed + 31 * msg + 7 * k) % 256 for k in range(1, size)]) if size else b""


class _Session:
    model: Any

    def __init__(self, target: Any, config: SessionConfig):
        self.target, self.config = target, config
        self.readers = config.n_readers
        # before the driver: an unclosed session (a failing example Hypothesis keeps in a traceback) is freed
        # attribute by attribute in this order, so its views go before the stores they map
        self.held: list[list[list[Any]]] = [[] for _ in range(self.readers)]  # arena: [msg, slot, view]
        self.driver = target.driver(self.readers, SLOTS, SLOT_BYTES)
        self.trace: list[Step] = []

    closed = False
    """Set by :meth:`close` (the gate's replays close a session its run left open)."""

    def close(self) -> None:
        """Release every held view, then close the stores (once)."""
        if self.closed:
            return
        self.closed = True
        for views in self.held:  # in place, before the stores close: a traceback being handled may name these lists
            views.clear()
        self.driver.close()

    def _rows_check(self, out: list[tuple[str, str]]) -> dict[str, Any]:
        rows = self.driver.rows()
        want = [self.model.row(i) for i in range(SLOTS)]
        if self.config.compare_state and rows != want:
            diff = [f"slot {i}: {list(rows[i])} (model {list(want[i])})" for i in range(SLOTS) if rows[i] != want[i]]
            out.append(("CONFORMANCE", "metadata rows differ: " + "; ".join(diff)))
        return {"rows": [list(r) for r in rows]}

    def _finish(self, call: Call, expected: str, observed: str, out: list[tuple[str, str]], t0: float,
                changed: dict[str, Any]) -> Step:
        took = time.monotonic() - t0
        if took > CALL_BOUND_S:
            out.append(("LIVE", f"the call took {took:.2f} s (bound {CALL_BOUND_S:g} s)"))
        out.sort(key=lambda pm: SEVERITY.get(pm[0], 9))
        step = Step(len(self.trace), call.process, call.action, dict(call.args), expected, observed, changed, out,
                    call.action)
        self.trace.append(step)
        for prop, msg in out:
            if not self.config.excuses(prop, call.action):
                raise PropertyViolation(prop, f"step {step.index} ({call.process} {call.action}): {msg}", self.trace,
                                        call.action)
        return step


class ArenaSession(_Session):
    """An arena in lockstep with :class:`~shmspec.model.slotapi.ArenaModel`.

    Actions: ``write`` (writer; ``size`` bytes, ``seed``), and per reader
    ``view`` (receive the next message: a view of its slot, or the fallback
    path), ``keep`` (a second view sharing the newest one's memory: the
    client deviation of a view kept after its tensor is dropped), ``drop``
    (drop held view ``which``, modulo the number held) and ``flush``."""

    def __init__(self, target: Any, config: SessionConfig):
        super().__init__(target, config)
        self.model = ArenaModel(self.readers, SLOTS, slot_bytes=SLOT_BYTES)
        self.stubs: list[Any] = []

    def _views_check(self, out: list[tuple[str, str]]) -> None:
        for r, views in enumerate(self.held):
            for msg, slot, view in views:
                want, got = self.model.messages[msg][1], self.driver.read(view)
                if got != want:
                    out.append(("NRR", f"r{r + 1}'s view of message {msg} (slot {slot}) changed: {_diff(got, want)}"))

    def _slots_check(self, out: list[tuple[str, str]], written: int | None) -> None:
        for i in range(SLOTS):
            msg = self.model.content[i]
            if i == written or msg is None:
                continue
            want = self.model.messages[msg][1]
            got = self.driver.slot_data(i, len(want))
            if got != want:
                out.append(("DISJ", f"slot {i} (message {msg}) changed by a write to slot {written}: "
                                    f"{_diff(got, want)}"))

    def execute(self, call: Call) -> Step:
        t0 = time.monotonic()
        out: list[tuple[str, str]] = []
        a = call.args
        if call.action == "write":
            msg = len(self.model.messages)
            data = payload(msg, a["size"], a["seed"])
            free = self.model.free_slots()
            if len(data) > SLOT_BYTES:
                expected = f"fallback (message {msg}: {len(data)} bytes over the slot's {SLOT_BYTES})"
            elif free:
                expected = f"message {msg} into one of slots {sorted(free)}"
            else:
                expected = f"fallback (no free slot: {_holders(self.model)})"
            rows_before = self.driver.rows()
            slot, stub = self.driver.write(data)
            observed = f"fallback (message {msg})" if slot is None else f"message {msg} into slot {slot}"
            if slot is None:
                if len(data) <= SLOT_BYTES and free:
                    out.append(("PROG", f"the writer fell back with slots {sorted(free)} free (every reader had "
                                        "released them)"))
                if self.driver.rows() != rows_before:
                    out.append(("FALLBACK", "a fallback changed the metadata rows"))
            elif len(data) > SLOT_BYTES:
                out.append(("FALLBACK", f"a message of {len(data)} bytes (over the slot's {SLOT_BYTES}) was written "
                                        f"into slot {slot}"))
            elif not 0 <= slot < SLOTS:
                out.append(("DISJ", f"the writer named slot {slot} of {SLOTS}"))
                slot = None
            elif slot not in free:
                held = self.model.holders(slot)
                out.append(("NRR", f"slot {slot} rewritten while " + ", ".join(
                    f"r{r + 1}" for r in held) + f" had not released message {self.model.content[slot]}"))
            written = slot if slot is not None and 0 <= slot < SLOTS else None
            self.model.write(data, written)
            self.stubs.append(stub if written is not None else None)
            self._slots_check(out, written)
        else:
            r = a["reader"]
            views = self.held[r]
            if call.action == "view":
                msg = self.model.receive(r)
                if msg is None:
                    expected = observed = "nothing to receive"
                elif self.stubs[msg] is None:
                    expected = observed = f"message {msg} by the fallback path"
                else:
                    slot, data = self.model.messages[msg]
                    expected = f"message {msg} ({len(data)} bytes) from slot {slot}"
                    try:
                        view = self.driver.view(r, self.stubs[msg])
                    except Exception as exc:  # noqa: BLE001 - a refusal is an observation
                        observed = f"{type(exc).__name__}: {exc}"
                        out.append(("FIFO", f"r{r + 1} lost message {msg}: its view was refused ({observed})"))
                    else:
                        got = self.driver.read(view)
                        observed = f"message {got[0] if got else '?'} ({len(got)} bytes) from slot {slot}"
                        if got != data:
                            out.append(("NRR", f"r{r + 1} viewed message {msg} in slot {slot} and got other bytes: "
                                               f"{_diff(got, data)}"))
                        views.append([msg, slot, view])
                        del view
            elif call.action == "keep":
                if views:
                    msg, slot, view = views[-1]
                    views.append([msg, slot, self.driver.derive(view)])
                    del view
                    expected = observed = f"a second view of message {msg}"
                else:
                    expected = observed = "no view held"
            elif call.action == "drop":
                if views:
                    msg, slot, _view = views.pop(a["which"] % len(views))
                    del _view
                    if not any(v[0] == msg for v in views):
                        self.model.drop(r, msg)
                    expected = observed = f"view of message {msg} dropped"
                else:
                    expected = observed = "no view held"
            else:  # flush
                released = self.model.flush(r)
                before = self.driver.rows()
                self.driver.flush(r)
                after = self.driver.rows()
                expected = f"slots {released} released" if released else "nothing to release"
                got = [i for i in range(SLOTS) if after[i][1 + r] and not before[i][1 + r]]
                observed = f"slots {got} released" if got else "nothing released"
        self._views_check(out)
        changed = self._rows_check(out)
        return self._finish(call, expected, observed, out, t0, changed)


class QueueSession(_Session):
    """A queue ring in lockstep with :class:`~shmspec.model.slotapi.QueueModel`.

    Actions: writer ``put`` (a whole ``acquire_write`` block of ``size``
    bytes), ``begin_write`` / ``end_write`` (the block split, so readers act
    inside it), ``abort_write`` (the caller raises inside the block); per
    reader ``get`` (a whole ``acquire_read`` block), ``begin_read`` /
    ``end_read`` and ``abort_read``."""

    def __init__(self, target: Any, config: SessionConfig):
        super().__init__(target, config)
        self.model = QueueModel(self.readers, SLOTS)
        self.holding: dict[int, tuple[int, bytes]] = {}  # reader -> (message the model expected, bytes it got)

    def _begin_write(self, out: list[tuple[str, str]]) -> tuple[str, str, bool]:
        m = self.model
        can = m.can_write()
        expected = (f"slot {m.w_idx} claimed" if can else
                    f"timeout (slot {m.w_idx} not released by {', '.join(f'r{r + 1}' for r in m.holders(m.w_idx))})")
        got = self.driver.begin("w")
        observed = f"slot {m.w_idx} claimed" if got else "timeout"
        if got and not can:
            out.append(("NRR", f"the writer claimed slot {m.w_idx} while " + ", ".join(
                f"r{r + 1}" for r in m.holders(m.w_idx)) + f" had not released message {m.content[m.w_idx]}"))
        if not got and can:
            out.append(("PROG", f"the writer timed out on slot {m.w_idx}, which every reader had released"))
        if got:
            m.begin_write()
        return expected, observed, got

    def _end_write(self, size: int, seed: int) -> tuple[str, str]:
        msg = len(self.model.sent)
        data = payload(msg, size, seed)
        self.driver.fill(data)
        self.driver.end("w")
        self.model.end_write(data)
        return f"message {msg} ({size} bytes) published", f"message {msg} published"

    def _begin_read(self, r: int, out: list[tuple[str, str]]) -> tuple[str, str, bool]:
        m = self.model
        msg = m.expected_read(r)
        expected = "timeout (nothing to read)" if msg is None else f"message {msg}"
        got = self.driver.begin(r)
        if not got:
            observed = "timeout"
            if msg is not None:
                out.append(("PROG", f"r{r + 1} timed out with message {msg} readable in slot {m.r_idx(r)}"))
            return expected, observed, False
        data = self.driver.data(r)
        observed = f"message {data[0] if data else '?'} ({len(data)} bytes)"
        if msg is None:
            out.append(("FIFO", f"r{r + 1} read slot {m.r_idx(r)} with nothing readable (a message twice, or a "
                                "slot mid-write)"))
        elif data != m.sent[msg]:
            same = [j for j, sent in enumerate(m.sent) if sent == data]
            what = (f"message {same[-1]}{' again' if same[-1] < msg else ''} where message {msg} was next"
                    if same else f"other bytes for message {msg}: {_diff(data, m.sent[msg])}")
            out.append(("FIFO", f"r{r + 1} read {what}"))
        self.holding[r] = (-1 if msg is None else msg, data)
        return expected, observed, True

    def _end_read(self, r: int, raised: bool, out: list[tuple[str, str]]) -> None:
        slot = self.model.r_idx(r)
        self.driver.end(r, raised=raised)
        if self.holding.pop(r)[0] >= 0:
            self.model.end_read(r)
            if not self.driver.rows()[slot][1 + r]:
                out.append(("PROG", f"r{r + 1} left its block{' (its caller raised)' if raised else ''} and slot "
                                    f"{slot} stays unreleased: the writer waits on it until r{r + 1} reads again"))

    def _holds_check(self, out: list[tuple[str, str]]) -> None:
        for r, (msg, first) in self.holding.items():
            got = self.driver.data(r)
            if got != first:  # NRR is about the bytes it holds, whatever the model expected them to be
                what = f"message {msg}" if msg >= 0 else "a message"
                out.append(("NRR", f"r{r + 1}'s block of {what} changed while it held it: {_diff(got, first)}"))

    def execute(self, call: Call) -> Step:
        t0 = time.monotonic()
        out: list[tuple[str, str]] = []
        a, act = call.args, call.action
        if act == "put":
            expected, observed, got = self._begin_write(out)
            if got:
                e2, o2 = self._end_write(a["size"], a["seed"])
                expected, observed = f"{expected}, {e2}", f"{observed}, {o2}"
        elif act == "begin_write":
            expected, observed, _ = self._begin_write(out)
        elif act == "end_write":
            expected, observed = self._end_write(a["size"], a["seed"])
        elif act == "abort_write":
            slot = self.model.w_idx
            self.driver.end("w", raised=True)
            self.model.abort_write()
            expected = f"slot {slot} left unpublished (the caller raised)"
            observed = (f"slot {slot} PUBLISHED" if self.driver.rows()[slot][0] else
                        f"slot {slot} left unpublished")
        else:
            r = a["reader"]
            if act in ("get", "begin_read"):
                expected, observed, got = self._begin_read(r, out)
                if got and act == "get":
                    self._end_read(r, raised=False, out=out)
            else:  # end_read, abort_read
                slot = self.model.r_idx(r)
                self._end_read(r, raised=act == "abort_read", out=out)
                why = " (the caller raised)" if act == "abort_read" else ""
                expected = f"slot {slot} released{why}"
                observed = (f"slot {slot} released" if self.driver.rows()[slot][1 + r] else
                            f"slot {slot} NOT released (its flag still 0)")
        self._holds_check(out)
        if self.driver.unbounded_waits:
            self.driver.unbounded_waits = 0
            out.append(("LIVE", "this release's acquire_write/acquire_read take no timeout: that wait would "
                                "never end if the slot stays unreleased (stopped at its first sleep)"))
        changed = self._rows_check(out)
        return self._finish(call, expected, observed, out, t0, changed)


def _holders(model: ArenaModel) -> str:
    return "; ".join(f"slot {i} held by " + ", ".join(f"r{r + 1}" for r in model.holders(i)) +
                     f" (message {model.content[i]})" for i in range(model.slots) if model.holders(i))


def _diff(got: bytes, want: bytes) -> str:
    return f"{got[:8].hex()}{'…' if len(got) > 8 else ''} where {want[:8].hex()}{'…' if len(want) > 8 else ''} " \
           f"was written"


def session_for(target: Any, config: SessionConfig) -> _Session:
    return (ArenaSession if target.kind == "arena" else QueueSession)(target, config)


__all__ = ["ArenaSession", "CALL_BOUND_S", "QueueSession", "SLOTS", "SLOT_BYTES", "payload", "session_for"]
