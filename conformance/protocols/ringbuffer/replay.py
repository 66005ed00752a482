"""Replay recorded ring-buffer findings (from ``report.json`` or
``repro_test.py``): lockstep calls on the model and a target with the same
checks as the gate, a free-running load re-run, and the dispatch by a
finding's concurrency mode (:func:`replay_case`, what :func:`shmspec.replay`
calls).  Moved here from ``shmspec.conformance.runner.replay`` (2026-12-02),
which re-exports these names."""

from __future__ import annotations

from typing import Any

from ...core.config import config_from_json
from ...core.errors import UsageError
from ...core.results import Violation
from ...lockstep.session import Call, PropertyViolation, Session
from ...targets.loader import load_target


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


def replay_free(target_spec: str, config: dict[str, Any], prop: str) -> str | None:
    """Re-run a free-running load (``config``: geometry, ``n_readers``,
    ``free_seconds``, ``seed`` and the construction, ``writer_lock`` and
    ``start_method``, as a report records them) and check its history.
    Returns ``"PROP: message"`` when ``prop`` is violated again, else None.
    The operating system's interleaving is not replayed: a timing-dependent
    finding may need a few re-runs (or ``--concurrency controlled``) to recur.

    Raises:
        TargetError: the target cannot be loaded.
        FreeRunError: a process did not finish.
    """
    from ...concurrency.freerun import free_config, run_free

    target = load_target(target_spec)
    n = config["n_readers"]
    cfg = free_config(n_readers=n, data_buffer_size=config["data_buffer_size"],
                      max_object_size=config["max_object_size"], writer_lock=bool(config.get("writer_lock", False)),
                      start_method=str(config.get("start_method", "fork")))
    fr = run_free(target, cfg, config["free_seconds"], n, config["seed"])
    findings = fr.check.by_property().get(prop, [])
    if prop == "LEAK" and fr.leak == "fail":
        return "LEAK: the segment was still there after the writer closed"
    return f"{prop}: {findings[0].message}" if findings else None


def replay_case(target: str, case: dict[str, Any]) -> str | None:
    """Replay one finding (``case``: a report.json violation or repro case)
    by its ``concurrency``: lockstep calls (``off``), the exact schedule
    (``controlled``), the same free-running load (``free``), the named fault
    or two-thread scenario (``faults``, ``threads``).

    Raises:
        UsageError: no ``config``, or an unknown ``concurrency``.
        TargetError: the target cannot be loaded.
    """
    if "config" not in case:
        raise UsageError("a violation to replay needs its 'config' (a report.json violation or repro case)")
    mode = case.get("concurrency", "off")
    if "contract" in case["config"]:  # found under a --contract: judged by its profile and variants again
        from dataclasses import replace

        from shmspec.model.profile import PROFILES
        c = case["config"]["contract"]
        loaded = load_target(target)
        target = replace(loaded, profile=replace(PROFILES[c["profile"]], clr=c["clr"], sw=c["sw"]))
    if "calls" in case:
        calls = case["calls"]
    else:
        calls = Violation(case.get("property", "?"), "", "", 0, case.get("steps", []), case["config"],
                          concurrency=mode).calls()
    if mode == "controlled":
        from ...concurrency.schedule import DEPARTS, replay_schedule

        def judge(doc: dict) -> str | None:
            from ...spec.validate import validate  # TLC only for a recorded run (--validate-traces)

            v = validate(doc)
            return None if v.departure is None else f"CONFORMANCE: {DEPARTS}{v.departure.describe()}"

        return replay_schedule(target, calls, case["config"], judge)
    if mode == "free":
        return replay_free(target, case["config"], case["property"])
    if mode == "faults":
        from ...concurrency.faults import replay_fault
        return replay_fault(target, case["config"], case["property"])
    if mode == "threads":
        from ...concurrency.sw import replay_sw
        return replay_sw(target, case["config"], case["property"])
    if mode != "off":
        raise UsageError(f"unknown concurrency {mode!r} in the violation")
    return replay(target, calls, case["config"])
