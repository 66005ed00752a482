"""Replay recorded calls (from ``report.json`` or ``repro_test.py``) on the model
and a target in lockstep, with the same checks as the gate."""

from __future__ import annotations

from typing import Any

from .gate import config_from_json
from .loader import load_target
from .session import Call, PropertyViolation, Session


def replay(target_spec: str, calls: list[dict[str, Any]], config: dict[str, Any]) -> str | None:
    """Run ``calls`` against ``target_spec``.  Returns ``"PROP: message"`` for the
    first violation (of a property not excused in ``config``), or None.

    The session attaches its configured readers itself, so the leading
    ``attach_reader`` calls of a recorded trace are skipped.

    Raises:
        TargetError: the target cannot be loaded.
    """
    cfg = config_from_json(config)
    session = Session(load_target(target_spec), cfg)
    setup = [{"process": r, "action": "attach_reader", "args": {"lock": True}} for r in cfg.readers]
    todo = list(calls)
    if todo[: len(setup)] == setup:
        todo = todo[len(setup):]
    try:
        for c in todo:
            session.execute(Call.from_json(c))
        session.close()
    except PropertyViolation as exc:
        return f"{exc.prop}: {exc.message}"
    finally:
        if not session.closed:
            try:
                session.close()
            except PropertyViolation:
                pass
    return None
