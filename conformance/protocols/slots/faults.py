"""The slot protocols' process-fault scenario: a reader killed (SIGKILL)
while it holds a slot, in a process of its own.

The writer and a second reader stay in the controller's process (a
:mod:`.session` in lockstep with the model); reader ``r1`` is a forked
process that takes message 0 (the arena: a zero-copy view; the queue: an
open ``acquire_read`` block) over the shared segment, reports the bytes it
sees, and is killed.  Then the writer goes on writing and ``r2`` keeps
reading.  What must hold (docs/slots.md):

* LIVE: no call of the writer blocks (the arena falls back, the queue's
  ``acquire_write`` returns ``TimeoutError`` within its timeout);
* NRR: no slot the dead reader had not released is rewritten;
* PROG's naming: the writer's fallback or timeout names ``r1``, in the
  trace's expected column;
* FIFO for the survivor: ``r2`` receives every message in order.

The scenario is deterministic; a finding replays by running it again.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from ...core.config import SessionConfig
from ...lockstep.session import Call, PropertyViolation, Step
from .session import SLOTS, session_for

CHILD_TIMEOUT_S = 10.0
"""How long the controller waits for the forked reader to report (seconds)."""


def _child(conn, driver: Any, kind: str, stub: Any) -> None:  # runs in the forked reader
    try:
        if kind == "arena":
            view = driver.view(0, stub)
            conn.send(("holding", driver.read(view).hex()))
        else:
            if not driver.begin(0):
                conn.send(("timeout", ""))
                return
            conn.send(("holding", driver.data(0).hex()))
        while True:
            time.sleep(1)
    except BaseException as exc:  # noqa: BLE001 - reported to the controller
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


def run_scenario(target: Any, config: SessionConfig) -> tuple[list[Step], PropertyViolation | None]:
    """Run the scenario once: its trace, and the first property violated
    (not excused by ``config``), or None.

    Raises:
        RuntimeError: the forked reader did not report within
            :data:`CHILD_TIMEOUT_S` or failed (the scenario could not run)."""
    import multiprocess as mp

    session = session_for(target, config)
    kind = target.kind
    put = "write" if kind == "arena" else "put"
    proc = None
    try:
        first = session.execute(Call("writer", put, {"size": 5, "seed": 1}))
        ctx = mp.get_context("fork")
        parent, child = ctx.Pipe()
        stub = session.stubs[0] if kind == "arena" else None
        proc = ctx.Process(target=_child, args=(child, session.driver, kind, stub), daemon=True)
        proc.start()
        if not parent.poll(CHILD_TIMEOUT_S):
            raise RuntimeError(f"the forked reader r1 did not report within {CHILD_TIMEOUT_S:g} s")
        what, seen = parent.recv()
        if what == "error" or what == "timeout":
            raise RuntimeError(f"the forked reader r1 could not take message 0: {seen or 'timed out'}")
        want = session.model.messages[0][1] if kind == "arena" else session.model.sent[0]
        steps = [Step(len(session.trace), "r1", "view" if kind == "arena" else "begin_read", {"reader": 0},
                      "message 0 (its own process)", f"holding {len(bytes.fromhex(seen))} bytes (pid {proc.pid})",
                      {}, [] if bytes.fromhex(seen) == want else [("NRR", "r1 saw other bytes than message 0")])]
        if kind == "arena":
            session.model.receive(0)  # r1 holds message 0 for ever: never dropped, never released
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=CHILD_TIMEOUT_S)
        steps.append(Step(len(session.trace) + 1, "r1", "killed", {"reader": 0}, "SIGKILL while holding slot "
                          f"{first.observed.rsplit(' ', 1)[-1]}", f"exit {proc.exitcode}", {}, []))
        session.trace.extend(steps)
        for s in steps:
            for prop, msg in s.violations:
                if not config.excuses(prop, s.action):
                    return session.trace, PropertyViolation(prop, f"step {s.index} (r1 {s.action}): {msg}",
                                                            session.trace, s.action)
        try:
            for k in range(1, SLOTS + 2):  # one lap and one more: every slot ends up held by the dead reader
                session.execute(Call("writer", put, {"size": 5, "seed": 1 + k}))
                reader_calls = ([Call("r2", "view", {"reader": 1}), Call("r2", "drop", {"reader": 1, "which": 0}),
                                 Call("r2", "flush", {"reader": 1})] if kind == "arena" else
                                [Call("r2", "get", {"reader": 1})])
                if k == 1:  # r2 catches up with message 0 first
                    for c in reader_calls:
                        session.execute(c)
                for c in reader_calls:
                    session.execute(c)
        except PropertyViolation as exc:
            return session.trace, exc
        return session.trace, None
    finally:
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(timeout=CHILD_TIMEOUT_S)
        session.close()


__all__ = ["CHILD_TIMEOUT_S", "run_scenario"]
