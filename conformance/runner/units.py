"""Seed units: a gate run as several independent gates, one per seed, in
parallel worker processes (``shmspec check --seeds K --workers N --shard i/n``).

Within one seed the campaigns are a chain (a finding is excused in the
campaigns after it, :mod:`.gate`), so the unit of parallelism is the seed: unit
``k`` runs the whole gate with seed :func:`unit_seed` ``(base, k)``, in a
forked process of its own (a fresh copy of the parent's state, whatever ran in
that worker before), and the parent merges the units' results in unit order
(:func:`merge`).  What a run finds therefore depends on the base seed and the
number of units, never on ``--workers``: with the example database off, the
same seeds give the same findings on 1 worker or 16 (lockstep and controlled
findings shrink to the same trace when shrinking completes; a free-running
load's interleaving is the OS's).

``--shard i/n`` runs the units ``k`` with ``k % n == i - 1`` only, so ``n`` CI
jobs with the same base seed split one deep run between them; each job's
report and exit status is the verdict of its share.

Waits are bounded: a unit that sends no result is a campaign error (exit 2),
never a pass; one still running after ``unit_limit`` seconds is stopped and is
an error too.  SIGTERM or Ctrl-C in the parent stops every unit (SIGTERM, then
SIGKILL after 10 s) before the interrupt propagates.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import replace
from typing import Any, Callable

from ..core.results import CampaignResult, GateResult

GOLDEN = 0x9E3779B9


def unit_seed(base: int, k: int) -> int:
    """The seed of unit ``k`` of a run whose base seed is ``base`` (unit 0's
    is ``base`` itself): ``(base + k * 0x9E3779B9) mod 2**32``."""
    return (base + k * GOLDEN) % 2**32


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``1 <= i <= n``.

    Raises:
        ValueError: not of that form (the message is the one-line CLI error).
    """
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes i/n (e.g. 2/4), not {text!r}") from None
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text}: i must be in 1..n")
    return i, n


def shard_units(units: int, shard: tuple[int, int] | None) -> list[int]:
    """The unit indices a shard runs (all of them without a shard)."""
    if shard is None:
        return list(range(units))
    i, n = shard
    return [k for k in range(units) if k % n == i - 1]


def run_units(run_one: Callable[[int], GateResult], seeds: list[int], workers: int,
              on_progress: Callable[[str, int, int], None] | None = None,
              unit_limit: float = 6 * 3600.0) -> list[GateResult | str]:
    """``run_one(seed)`` for every seed, at most ``workers`` at a time, each in
    a forked process; the results in ``seeds``' order, a unit that failed to
    report being the error text instead.

    ``on_progress("seed unit D/T ended (seed S)", done, total)`` is called
    as units end.
    """
    import multiprocess as mp
    from multiprocess.connection import wait

    ctx = mp.get_context("fork")
    results: dict[int, GateResult | str] = {}
    pending = list(range(len(seeds)))
    # the parent waits on each unit's pipe, not on its exit: a result larger
    # than the pipe's buffer is read while the unit is still sending it, and
    # a unit that dies makes its pipe readable too (end of file)
    running: dict[Any, tuple[int, Any, float]] = {}  # receiving end -> (index, process, started)
    try:
        while pending or running:
            while pending and len(running) < workers:
                i = pending.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                p = ctx.Process(target=_unit_main, args=(run_one, seeds[i], send), name=f"shmspec-seed-{seeds[i]}")
                p.start()
                send.close()
                running[recv] = (i, p, time.monotonic())
            now = time.monotonic()
            budget = min(started + unit_limit for _, _, started in running.values()) - now
            ready = wait(list(running), timeout=max(0.0, min(budget, 5.0)))
            for recv in ready:
                i, p, _ = running.pop(recv)
                results[i] = _collect(recv, p, seeds[i])
                if on_progress:
                    on_progress(f"seed unit {len(results)}/{len(seeds)} ended (seed {seeds[i]})", len(results),
                                len(seeds))
            for recv, (i, p, started) in list(running.items()):
                if time.monotonic() - started > unit_limit:
                    running.pop(recv)
                    _stop([p])
                    recv.close()
                    results[i] = f"seed {seeds[i]}: still running after {unit_limit:.0f} s; stopped"
    finally:
        _stop([p for _, p, _ in running.values()])
    return [results[i] for i in range(len(seeds))]


def _unit_main(run_one: Callable[[int], GateResult], seed: int, send: Any) -> None:
    from ..core import interrupt

    interrupt.reset()
    try:
        send.send(("ok", _portable(run_one(seed))))
    except KeyboardInterrupt:
        send.send(("error", f"seed {seed}: interrupted"))
    except BaseException:  # noqa: BLE001 - reported to the parent as the unit's error
        send.send(("error", f"seed {seed}: {traceback.format_exc(limit=5).strip().splitlines()[-1]}"))
    finally:
        send.close()


def _collect(recv: Any, p: Any, seed: int) -> GateResult | str:
    try:
        kind, payload = recv.recv()
    except (EOFError, OSError):
        kind, payload = "error", None
    finally:
        recv.close()
    p.join(10)
    if kind == "ok":
        return payload
    return payload or f"seed {seed}: the worker process ended (exit {p.exitcode}) without a result"


def _stop(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 10.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(5)


def _portable(result: GateResult) -> GateResult:
    """The result with each violation's exception reduced to what the parent
    uses (property, cause, action, message): an exception holding the target's
    objects need not pickle."""
    from types import SimpleNamespace

    for c in result.campaigns:
        for v in c.violations:
            if v.exc is not None:
                v.exc = SimpleNamespace(prop=getattr(v.exc, "prop", v.property), cause=getattr(v.exc, "cause", ""),
                                        action=getattr(v.exc, "action", ""), message=getattr(v.exc, "message", ""))
    return result


def merge(parts: list[tuple[int, GateResult | str]], seconds: float, shard: tuple[int, int] | None,
          workers: int, units: int) -> GateResult:
    """One :class:`GateResult` from the units' (in unit order).

    Per campaign (in unit 0's order): examples, steps and seconds summed over
    the units; completed only if every unit completed it; the first error,
    unknown and skip reason, prefixed with the unit's seed; ``rates``
    (schedules, throughput, scenario details) the first unit's, but client
    deviations' counts summed over the units.  Violations: all of
    the first unit's, then of each later unit those whose
    (property, failing step kind) no earlier unit found; each carries its
    ``seed``.  A unit that sent no result adds a campaign ``seed S`` with that
    error (the verdict is then at least ``error``).
    """
    good = [(s, r) for s, r in parts if isinstance(r, GateResult)]
    lost = [(s, r) for s, r in parts if not isinstance(r, GateResult)]
    if not good:
        raise ValueError("no unit sent a result")
    first = good[0][1]
    order = [c.name for c in first.campaigns]
    merged: dict[str, CampaignResult] = {}
    seen: set[tuple[str, str]] = set()
    for seed, r in good:
        for c in r.campaigns:
            for v in c.violations:
                v.seed = seed
            if c.name not in merged:
                merged[c.name] = _empty(c, dict(c.rates))
                if c.name not in order:
                    order.append(c.name)
            m = _add(merged[c.name], c, f"seed {seed}: ")
            for rule, d in c.rates.get("client_deviations", {}).items() if r is not first else ():
                entry = m.rates.setdefault("client_deviations", {}).setdefault(rule, {**d, "count": 0})
                entry["count"] += d["count"]
            for v in c.violations:
                key = _unit_key(v)
                if r is first or key not in seen:
                    m.violations.append(v)
                seen.add(key)
    campaigns = [merged[n] for n in order]
    for seed, why in lost:
        campaigns.append(CampaignResult(f"seed {seed}", [], "unit", error=str(why)))
    return replace(first, campaigns=campaigns, seconds=seconds, seeds=tuple(s for s, _ in parts), shard=shard,
                   workers=workers, units=units)


def _empty(c: CampaignResult, rates: dict[str, Any]) -> CampaignResult:
    """A campaign to sum units' (or shards') runs of ``c`` into."""
    return replace(c, violations=[], rates=rates, not_claimed=dict(c.not_claimed), examples=0, steps=0,
                   seconds=0.0, completed=True, error=None, unknown=None, skipped=c.skipped)


def _add(m: CampaignResult, c: CampaignResult, prefix: str = "") -> CampaignResult:
    """Sum one run of a campaign into ``m`` (:func:`merge`, :func:`merge_shards`):
    counts and seconds added, completed only if every run completed, the
    first error and unknown (``prefix`` + text), skipped only if every run
    was; returns ``m``.  Violations and rates are the caller's."""
    m.examples += c.examples
    m.steps += c.steps
    m.seconds += c.seconds
    m.completed = m.completed and c.completed
    m.error = m.error or (f"{prefix}{c.error}" if c.error else None)
    m.unknown = m.unknown or (f"{prefix}{c.unknown}" if c.unknown else None)
    m.skipped = m.skipped if c.skipped else None
    m.not_claimed.update(c.not_claimed)
    return m


def _unit_key(v: Any) -> tuple[str, str]:
    """What :func:`merge` deduplicates later units' violations by."""
    return (v.property, getattr(v.exc, "cause", "") or getattr(v.exc, "action", "") or "")


def merge_shards(shards: list[GateResult]) -> GateResult:
    """The unsharded run's result from its shards' (``shmspec merge``): the
    units of every shard in unit order, merged as :func:`merge` merges them
    (counts summed, each later unit's violations kept only when no earlier
    unit found their property and failing step kind), so that ``n`` shard
    reports merged equal one run of all the units.  ``seconds`` is the
    longest shard's; ``shard`` is None.

    Raises:
        ValueError: no shard, shards of different runs (target, protocol,
            profiles, contract, concurrency, construction, base seed, unit
            count, shard count), a shard given twice or one missing (one line
            each: a lost shard must never merge into a pass).
    """
    if not shards:
        raise ValueError("no report to merge")
    first = shards[0]
    for r in shards[1:]:
        for what, a, b in (("target", first.target, r.target), ("protocol", first.protocol, r.protocol),
                           ("gate profile", first.profile, r.profile),
                           ("model profile", first.model_profile, r.model_profile),
                           ("contract", first.contract_name, r.contract_name),
                           ("concurrency", first.concurrency, r.concurrency),
                           ("construction", first.construction.name, r.construction.name),
                           ("base seed", first.seed, r.seed), ("seed units", first.units, r.units),
                           ("shard count", first.shard and first.shard[1], r.shard and r.shard[1])):
            if a != b:
                raise ValueError(f"the reports are of different runs: {what} {a} and {b}")
    n = first.shard[1] if first.shard else 1
    got = sorted(r.shard[0] if r.shard else 1 for r in shards)
    if len(set(got)) != len(got):
        dup = next(i for i in got if got.count(i) > 1)
        raise ValueError(f"shard {dup}/{n} is given twice")
    missing = [i for i in range(1, n + 1) if i not in got]
    if missing:
        raise ValueError(f"shard{'s' * (len(missing) > 1)} {', '.join(f'{i}/{n}' for i in missing)} missing: "
                         f"a merge covers every shard of the run")
    unit_of = {unit_seed(first.seed, k): k for k in range(first.units)}
    order = [c.name for c in min(shards, key=lambda r: r.shard or (1, 1)).campaigns]
    for r in shards:
        order += [c.name for c in r.campaigns if c.name not in order]
    merged: dict[str, CampaignResult] = {}
    by_unit: dict[int, list[tuple[str, Any]]] = {}  # unit -> (campaign, violation), in the unit's order
    first_rates: dict[str, dict] = {}
    lowest: dict[str, int] = {}
    for r in sorted(shards, key=lambda r: r.shard or (1, 1)):
        low = min((unit_of.get(s, first.units) for s in r.seeds or (r.seed,)), default=0)
        for c in r.campaigns:
            _add(merged.setdefault(c.name, _empty(c, {})), c)  # a shard's errors already name their seed
            if c.name not in lowest or low < lowest[c.name]:  # rates: the first unit's (the lowest unit's shard)
                lowest[c.name], first_rates[c.name] = low, dict(c.rates)
            for v in c.violations:
                k = unit_of.get(v.seed, first.units) if v.seed is not None else low
                by_unit.setdefault(k, []).append((c.name, v))
    for name, m in merged.items():
        m.rates = first_rates.get(name, {})
        devs: dict[str, dict] = {}
        for r in shards:
            for c in r.campaigns:
                if c.name == name:
                    for rule, d in c.rates.get("client_deviations", {}).items():
                        devs.setdefault(rule, {**d, "count": 0})["count"] += d["count"]
        if devs:
            m.rates = {**m.rates, "client_deviations": devs}
    seen: set[tuple[str, str]] = set()
    lost = {c.name.split(" ", 1)[1] for r in shards for c in r.campaigns if c.mode == "unit"}
    first_unit = min((k for s, k in unit_of.items() if str(s) not in lost), default=0)  # merge()'s first good unit
    for k in sorted(by_unit):
        for name, v in by_unit[k]:
            key = _unit_key(v)
            if k == first_unit or key not in seen:
                merged[name].violations.append(v)
            seen.add(key)
    seeds = tuple(sorted({s for r in shards for s in (r.seeds or (r.seed,))}, key=lambda s: unit_of.get(s, 0)))
    return replace(first, campaigns=[merged[n] for n in order], seconds=max(r.seconds for r in shards),
                   seeds=seeds if first.units > 1 else (), shard=None, workers=max(r.workers for r in shards),
                   executor=", ".join(dict.fromkeys(r.executor for r in shards)))


__all__ = ["merge", "merge_shards", "parse_shard", "run_units", "shard_units", "unit_seed"]
