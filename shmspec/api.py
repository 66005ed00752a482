"""shmspec's Python API: run the gate on a store, replay a finding, merge shard reports.

Everything here is a public interface (kept stable; see docs/api.md)::

    import shmspec
    result = shmspec.check("file:my_store.py", profile="ci", seed=0)
    result.verdict                      # "pass" | "fail" | "error" | "unknown"
    for v in result.violations:         # shmspec.Violation
        print(v.property, v.campaign, v.message)
        assert shmspec.replay("file:my_store.py", v) is not None  # still violated

It wraps the layers (``shmspec.conformance.runner``, ``...reporting``) and
imports them only when called, so ``import shmspec`` loads neither
Hypothesis nor multiprocess.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from shmspec.conformance.core.constructions import MAX_READERS, START_METHODS, Construction
from shmspec.conformance.core.errors import ExitCode, ShmspecError, UsageError
from shmspec.conformance.core.results import GateResult, Violation

if TYPE_CHECKING:
    from shmspec.conformance.targets.loader import LoadedTarget



def check(target: "str | LoadedTarget", *, profile: str = "ci", seed: int | None = None,
          concurrency: str | None = None, writer_lock: bool = False, start_method: str = "fork",
          readers: int = 2, report_dir: str | Path | None = None,
          on_progress: Callable[[str, int, int], None] | None = None, seeds: int | None = None,
          workers: int = 1, shard: "str | tuple[int, int] | None" = None,
          example_db: str | None = None, contract: "str | Path | Any | None" = None,
          executor: Any = "local", address: str | None = None, validate_traces: bool = False) -> GateResult:
    """Run the conformance gate on ``target``, as ``shmspec check`` does.

    Args:
        target: a target spec (``"impl"``, ``"vllm==0.33.0"``, ``"file:PATH"``;
            ``"NAME:REST"`` for a target of another registered store protocol,
            :mod:`shmspec.conformance.protocols`) or a target already loaded
            (:func:`shmspec.conformance.targets.loader.load_target`).
        profile: gate profile, ``"ci"`` (seed 0 unless given), ``"dev"`` or ``"deep"``.
        seed: the run's seed (``None``: the profile's rule).
        concurrency: ``"controlled"``, ``"free"`` or ``"off"`` (``None``: the profile's).
        writer_lock, start_method, readers: the primary construction (default
            vLLM's: writer without the readers' lock, two forked readers).
        report_dir: when given, ``report.json``, ``report.html`` and (with
            violations) ``repro_test.py`` are written there.
        on_progress: called as ``on_progress(campaign, done, total)`` while
            the gate runs (the CLI's progress bar).
        seeds: seed units (``None``: the profile's, 1 or deep's 8): the gate
            runs once per seed derived from ``seed``, findings merged
            (:mod:`shmspec.conformance.runner.units`).
        workers: parallel worker processes for the seed units (>= 1).
        shard: ``"i/n"`` or ``(i, n)``: only that shard of the seed units.
        example_db: Hypothesis example database: a directory,
            ``"github:OWNER/REPO"`` or ``"none"`` (``None``: ``ci`` none,
            ``dev``/``deep`` the user cache's ``examples/``).
        contract: the contract to judge by: a TOML or JSON file (path) or a
            :class:`~shmspec.conformance.core.contract.Contract`; ``None``:
            the one the target module declares (``SHMSPEC_CONTRACT``), else
            its model profile's (docs/ci.md#contracts).
        executor: where the seed units run: ``"local"`` (this machine's
            processes, ``workers`` at a time), ``"ray"`` (a Ray cluster's
            tasks, at ``address``; None starts one on this machine for the
            run) or a :class:`~shmspec.conformance.runner.executors.RayExecutor`;
            the same seeds give the same findings on either (docs/gate.md#ray).
        validate_traces: the controlled campaign records each session (the
            free-running campaign, with ``concurrency="free"``, one more
            load of 600 writer operations) and TLC checks every recorded
            run against tla/ShmStore.tla (docs/trace-validation.md): a run
            the spec cannot take is a CONFORMANCE finding; the campaign's
            ``rates["spec_validation"]`` says which spec actions the runs
            reached.  Ring-buffer targets, controlled or free concurrency,
            java on the machine that runs the unit.

    Returns:
        The :class:`GateResult` (``verdict``, ``properties``, ``violations``).

    Raises:
        UsageError: an unknown profile, concurrency mode or start method,
            ``readers`` outside 1..4, ``seeds``/``workers`` below 1, a bad
            ``shard`` or ``example_db``, a shard without ``seed`` on a
            random-seed profile, an invalid contract, an unknown executor,
            ``address`` without ray, ``workers`` other than 1 with ray, ray
            not installed or its cluster not reachable, ``validate_traces``
            on another protocol or concurrency.
        TargetError: the target cannot be loaded (both are :class:`ShmspecError`).
    """
    from shmspec.conformance import protocols
    from shmspec.conformance.core.config import SessionConfig
    from shmspec.conformance.runner.gate import GATE_PROFILES, run_gate

    if profile not in GATE_PROFILES:
        raise UsageError(f"unknown gate profile {profile!r} (choose from {', '.join(GATE_PROFILES)})")
    if start_method not in START_METHODS:
        raise UsageError(f"unknown start method {start_method!r} (choose from {', '.join(START_METHODS)})")
    if not isinstance(readers, int) or not 1 <= readers <= MAX_READERS:
        raise UsageError(f"readers must be an integer in 1..{MAX_READERS}, not {readers!r}")
    known = tuple(dict.fromkeys(m for n in protocols.names() for m in protocols.get(n).concurrency_modes))
    if concurrency is not None and concurrency not in known:  # before a target is fetched
        raise UsageError(f"unknown concurrency {concurrency!r} (choose from {', '.join(known)})")
    shard = validate_units(profile, seed, seeds, workers, shard, example_db,
                           contract if isinstance(contract, (str, Path)) else None)
    from shmspec.conformance.runner import executors

    runner = executors.make(executor, address)
    if runner is not None and workers != 1:
        raise UsageError("--workers applies to --executor local; on Ray the cluster's CPUs decide how many units "
                         "run at once")
    loaded = protocols.load(target) if isinstance(target, str) else target
    protocol = protocols.protocol_of(loaded)
    modes = protocol.concurrency_modes
    if concurrency is not None and concurrency not in modes:
        hint = (f"; the {protocol.name} protocol's controlled interleavings run in the deployed construction, "
                "under 'free' (its default)" if protocol.name == "queue" and concurrency == "controlled" else "")
        raise UsageError(f"unknown concurrency {concurrency!r} (choose from {', '.join(modes)}){hint}")
    if protocol.name in ("arena", "queue") and writer_lock:
        raise UsageError(f"the {protocol.name} protocol has no readers' lock: --writer-lock does not apply")
    if protocol.name == "arena" and start_method != "fork":
        raise UsageError("the arena's campaigns build the writer and readers in one process (and fork one reader "
                         "for the fault scenario): --start-method does not apply")
    if validate_traces and (protocol.name != "ringbuffer" or concurrency not in (None, "controlled", "free")):
        raise UsageError("--validate-traces records the ring-buffer store's controlled or free-running campaign: it "
                         "needs a ring-buffer target and --concurrency controlled or free")
    config = Construction(bool(writer_lock), start_method, readers).config(SessionConfig())
    if validate_traces:
        from dataclasses import replace as _replace

        config = _replace(config, record=True)
    loaded, config, judged_by = _with_contract(loaded, config, contract)
    result = run_gate(loaded, profile, seed, on_progress=on_progress, concurrency=concurrency, config=config,
                      seeds=seeds, workers=workers, shard=shard, example_db=example_db, executor=runner)
    if judged_by is not None:
        result.contract = judged_by
        if contract is not None:  # given here, not by the module: a replay must judge by it too (replay_case)
            for v in result.violations:
                v.config = {**v.config, "contract": {k: getattr(judged_by, k) for k in ("profile", "clr", "sw")}}
    if report_dir is not None:
        from shmspec.conformance.reporting.report import write_report
        write_report(result, Path(report_dir), None, str(loaded.source) if getattr(loaded, "source", None) else None)
    return result


def _with_contract(loaded: Any, config: Any, contract: Any) -> tuple[Any, Any, Any]:
    """The target and session config as ``contract`` (see :func:`check`)
    changes them, and the contract (None for a protocol without profiles)."""
    from dataclasses import replace

    from shmspec.conformance.core import contract as contracts
    from shmspec.model.profile import Profile

    profile = getattr(loaded, "profile", None)
    if not isinstance(profile, Profile):
        if contract is not None:
            raise UsageError(f"--contract: the {getattr(loaded, 'protocol', 'target')!r} protocol's targets "
                             f"declare no contract")
        return loaded, config, None
    if isinstance(contract, (str, Path)):
        contract = contracts.load_file(Path(contract), profile)
    contract = contract or getattr(loaded, "contract", None)
    if contract is None:
        return loaded, config, contracts.of_profile(profile)
    loaded = replace(loaded, profile=contract.apply(profile), contract=contract)
    config = replace(config, excused=config.excused | set(contract.not_claimed),
                     relies_on=None if set(contract.relies_on) == set(contracts.CLIENT_RULES) else contract.relies_on)
    return loaded, config, contract


def validate_units(profile: str, seed: int | None, seeds: int | None, workers: int,
                   shard: "str | tuple[int, int] | None", example_db: str | None,
                   contract: "str | Path | None" = None) -> "tuple[int, int] | None":
    """Check the seed-unit settings of :func:`check`, and the ``contract``
    file if one is given, before any work (before a target is fetched); the
    shard as ``(i, n)``.

    Raises:
        UsageError: as :func:`check` says (one line, naming the flag).
    """
    from shmspec.conformance.runner.gate import GATE_PROFILES, example_database
    from shmspec.conformance.runner.units import parse_shard, shard_units

    gp = GATE_PROFILES.get(profile)
    if gp is None:
        raise UsageError(f"unknown gate profile {profile!r} (choose from {', '.join(GATE_PROFILES)})")
    for name, value in (("--seeds", seeds), ("--workers", workers)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise UsageError(f"{name} must be an integer >= 1, not {value!r}")
    try:
        parsed = parse_shard(shard) if isinstance(shard, str) else shard
        if parsed is not None:
            if seed is None and not gp.deterministic:
                raise ValueError(f"--shard needs --seed on the {profile} profile: every shard must derive the "
                                 f"same seeds")
            units = gp.seeds if seeds is None else seeds
            if not shard_units(units, parsed):
                raise ValueError(f"--shard {parsed[0]}/{parsed[1]}: no unit of the {units} seed units falls in it "
                                 f"(give --seeds >= {parsed[1]})")
        example_database(example_db, profile)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if contract is not None:  # its keys and values, over impl's profile (the target's is not known yet)
        from shmspec.conformance.core.contract import load_file

        load_file(Path(contract))
    return parsed


def replay(target: str, violation: "Violation | dict[str, Any]") -> str | None:
    """Replay one finding on ``target``; ``"PROP: message"`` while a property
    is still violated, ``None`` once none is.

    ``violation`` is a :class:`Violation`, an entry of ``report.json``'s
    ``violations`` or a ``repro_test.py`` case.  Lockstep findings replay their
    calls on the model and the target; controlled ones their exact schedule;
    free-running ones re-run the same load (the OS interleaving is not
    replayed); ``faults`` and ``threads`` ones re-run the named scenario.
    The finding's ``protocol`` (absent: ``ringbuffer``) decides how it replays.

    Raises:
        UsageError: ``violation`` has no ``config`` or an unknown ``concurrency``.
        TargetError: the target cannot be loaded.
    """
    from shmspec.conformance import protocols

    case = violation.to_json() if isinstance(violation, Violation) else dict(violation)
    return protocols.get(case.get("protocol", protocols.DEFAULT)).replay(target, case)

def merge(reports: "list[str | Path]") -> GateResult:
    """The result of one unsharded run from its shards' reports
    (``shmspec merge``: each a ``report.json`` or its directory, every shard
    of the run once).  Nothing is written; pass the result to the report
    writers, or use the command.

    Raises:
        UsageError: a report cannot be read, the reports are of different
            runs or shmspec versions, or a shard is missing or given twice
            (the command's one-line errors).
    """
    from shmspec.conformance.commands.merge import merge_reports

    return merge_reports([Path(r) for r in reports])[0]


__all__ = ["Construction", "ExitCode", "GateResult", "ShmspecError", "UsageError", "Violation", "check", "merge",
           "replay"]
