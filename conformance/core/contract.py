"""The contract a target is judged by: its model profile, the variants it
chooses (CLR, SW), the properties it does not claim and the client rules it
relies on.  Declared in the target module (``SHMSPEC_CONTRACT = {...}``) or
by ``shmspec check --contract FILE`` (TOML or JSON, the same keys); the
command line wins.  Every report names the contract and where it came from.

Keys (all optional)::

    profile = "vllm-0.32"          # a model profile (shmspec.model.profile.PROFILES)
    clr = "drain"                  # CLR variant: drain | strict (SEMANTICS.md, CLR)
    sw = "one-thread"              # SW variant: one-thread | threads (SEMANTICS.md, SW)
    relies_on = ["a reference never read"]   # client rules (CLIENT_RULES); default: all
    [not_claimed]                  # property id -> why the store does not claim it
    LIVE = "our writer blocks by design until a reader frees a chunk"
    [excused]                      # one finding's fingerprint -> why it does not fail the run
    "RC:preemption:get:1a2b3c4d" = "tracked upstream; fixed by the lease rework"

A property not claimed is run and reported but gets the verdict
``not-claimed`` and never fails the run.  A client rule left out of
``relies_on`` is one the store says it tolerates: a client breaking it is
then the store's violation (PROG), not a client deviation.  An excused
finding (by its fingerprint, report.json's ``fingerprint``; since
2026-12-03) is reported as known and does not fail the run; another finding
of the same property still does.

Imports nothing of the harness above ``core``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from shmspec.model.profile import IMPL, PROFILES, Profile
from shmspec.model.properties import PROPERTIES

from .errors import UsageError

CLIENT_RULES: dict[str, str] = {
    "a reference never read": "a handle the client was given is read (get) by every reader it was promised to "
                              "(PROG counts a chunk owed a read as the client's, not the store's)",
    "a touch without a later get_cached or release_touches": "a touch is ended by get_cached or release_touches "
                                                             "(a touch still held protects its chunk)",
}
"""The client rules SEMANTICS.md lets a store rely on (PROG), by the name a
client deviation is reported under."""

KEYS = ("profile", "clr", "sw", "relies_on", "not_claimed", "excused")
VARIANTS = {"clr": ("drain", "strict"), "sw": ("one-thread", "threads")}


@dataclass(frozen=True)
class Contract:
    """A declared contract.  ``source``: where it was declared (``--contract
    PATH``, ``SHMSPEC_CONTRACT in PATH``) or ``None`` (the profile's own,
    nothing declared)."""

    profile: str
    clr: str
    sw: str
    relies_on: tuple[str, ...] = tuple(CLIENT_RULES)
    not_claimed: dict[str, str] = field(default_factory=dict)
    source: str | None = None
    excused: dict[str, str] = field(default_factory=dict)
    """Fingerprint -> why that one finding does not fail the run."""

    @property
    def name(self) -> str:
        """``vllm-0.32`` when nothing departs from the profile, else e.g.
        ``vllm-0.32 (clr=strict, not claimed: LIVE)``."""
        base = PROFILES[self.profile]
        parts = [f"{k}={getattr(self, k)}" for k in ("clr", "sw") if getattr(self, k) != getattr(base, k)]
        if self.not_claimed:
            parts.append("not claimed: " + ", ".join(self.not_claimed))
        if self.excused:
            parts.append(f"{len(self.excused)} finding{'s' * (len(self.excused) != 1)} excused")
        if set(self.relies_on) != set(CLIENT_RULES):
            parts.append("relies on " + (", ".join(repr(r) for r in self.relies_on) or "no client rule"))
        return self.profile + (f" ({'; '.join(parts)})" if parts else "")

    def apply(self, profile: Profile) -> Profile:
        """The model profile the target is judged by: ``profile`` with the
        declared variants.  ``clr="strict"`` also turns the model's drain
        window off (as ``impl-strict``): the model then predicts the
        stale-handle error for a pre-clear handle, so the trace's expected
        column is the strict contract's."""
        base = PROFILES[self.profile] if self.profile != profile.name else profile
        drain = base.drain and self.clr == "drain"
        return replace(base, clr=self.clr, sw=self.sw, drain=drain)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Contract":
        """The contract :meth:`to_json` wrote (``report.json``'s ``contract``)."""
        return cls(d["profile"], d["clr"], d["sw"], tuple(d.get("relies_on", CLIENT_RULES)),
                   dict(d.get("not_claimed") or {}), d.get("source"), dict(d.get("excused") or {}))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "profile": self.profile, "clr": self.clr, "sw": self.sw,
                "relies_on": list(self.relies_on), "not_claimed": dict(self.not_claimed), "excused": dict(self.excused)}


def of_profile(profile: Profile) -> Contract:
    """The contract nothing declared: the profile's own variants, every client rule relied on."""
    return Contract(profile.name, profile.clr, profile.sw)


RING_PROPERTY_IDS: tuple[str, ...] = tuple(p.id for p in PROPERTIES)
"""The property ids a ``not_claimed`` may name: the object store's (the one
protocol whose targets have a model profile)."""


def parse(data: Any, profile: Profile, source: str, property_ids: tuple[str, ...] = RING_PROPERTY_IDS) -> Contract:
    """A contract from its declaration (a mapping of :data:`KEYS`) over the
    target's ``profile``.

    Raises:
        UsageError: an unknown key, profile, variant, client rule or property
            id, or a not-claimed property without a reason (one line, naming
            ``source``).
    """
    if not isinstance(data, dict):
        raise UsageError(f"{source}: a contract is a table of {', '.join(KEYS)}, not {type(data).__name__}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise UsageError(f"{source}: unknown contract key {unknown[0]!r} (known: {', '.join(KEYS)})")
    name = data.get("profile", profile.name)
    if name not in PROFILES:
        raise UsageError(f"{source}: unknown profile {name!r} (choose from {', '.join(PROFILES)})")
    base = PROFILES[name] if name != profile.name else profile
    values = {}
    for key, allowed in VARIANTS.items():
        values[key] = data.get(key, getattr(base, key))
        if values[key] not in allowed:
            raise UsageError(f"{source}: {key} must be one of {', '.join(allowed)}, not {values[key]!r}")
    relies = data.get("relies_on", list(CLIENT_RULES))
    if not isinstance(relies, list) or any(r not in CLIENT_RULES for r in relies):
        bad = relies if not isinstance(relies, list) else next(r for r in relies if r not in CLIENT_RULES)
        raise UsageError(f"{source}: relies_on names client rules ({'; '.join(CLIENT_RULES)}), not {bad!r}")
    not_claimed = data.get("not_claimed", {})
    if not isinstance(not_claimed, dict):
        raise UsageError(f"{source}: not_claimed is a table of property id = reason")
    for pid, why in not_claimed.items():
        if pid not in property_ids:
            raise UsageError(f"{source}: not_claimed names {pid!r}, not a property id ({', '.join(property_ids)})")
        if not isinstance(why, str) or not why.strip():
            raise UsageError(f"{source}: not_claimed {pid} needs a reason (a non-empty string)")
    excused = data.get("excused", {})
    if not isinstance(excused, dict):
        raise UsageError(f"{source}: excused is a table of fingerprint = reason")
    for fp, why in excused.items():
        parts = str(fp).split(":")
        if len(parts) != 4 or parts[0] not in property_ids or len(parts[3]) != 8:
            raise UsageError(f"{source}: excused names {fp!r}, not a finding's fingerprint "
                             f"(PROPERTY:campaign:cause:hash, report.json's violations[].fingerprint)")
        if not isinstance(why, str) or not why.strip():
            raise UsageError(f"{source}: excused {fp} needs a reason (a non-empty string)")
    return Contract(name, values["clr"], values["sw"], tuple(relies), dict(not_claimed), source, dict(excused))


def load_file(path: Path, profile: Profile = IMPL, property_ids: tuple[str, ...] = RING_PROPERTY_IDS) -> Contract:
    """``--contract PATH``: TOML (``.toml``) or JSON, over ``profile``
    (default impl's: enough to check a file before the target is loaded).

    Raises:
        UsageError: unreadable, not TOML/JSON, or not a valid contract.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the contract {path}: {exc.strerror or exc}") from None
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import tomllib

            data = tomllib.loads(text)
    except (ValueError, json.JSONDecodeError) as exc:
        raise UsageError(f"--contract {path}: not {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}") from None
    return parse(data, profile, f"--contract {path}", property_ids)


__all__ = ["CLIENT_RULES", "Contract", "RING_PROPERTY_IDS", "load_file", "of_profile", "parse"]
