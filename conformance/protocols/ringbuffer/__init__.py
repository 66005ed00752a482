"""The ring-buffer store protocol: vLLM's ``SingleWriterShmRingBuffer`` +
``SingleWriterShmObjectStorage`` (every release that ships them) and
:mod:`shmspec.impl`, checked against ``docs/semantics.md``.

What is specific to it, in one place:

* model: :mod:`shmspec.model.store` (allocation, eviction, reader flags);
* properties: :data:`shmspec.model.properties.PROPERTIES`;
* action names: :data:`shmspec.model.store.ACTIONS`;
* adapter and loading: :mod:`shmspec.conformance.targets`
  (``impl``, ``file:PATH``, ``vllm==X.Y.Z``);
* campaigns and how each runs: :mod:`.campaigns`;
* replay of a finding: :mod:`.replay`;
* TLA+ spec: ``tla/ShmStore.tla`` and its ``MC*.cfg``;
* seeded faults: :mod:`shmspec.conformance.mutants`.

Importing this module loads neither Hypothesis nor multiprocess (its
campaigns are imported when first run).
"""

from __future__ import annotations

from typing import Any

from shmspec.model.properties import CHECKERS, PROPERTIES
from shmspec.model.store import ACTIONS

from ...core import paths
from ...core.protocol import CampaignContext, StoreProtocol

CONCURRENCY_MODES: tuple[str, ...] = ("controlled", "free", "off")
"""The gate's ``--concurrency`` choices for this protocol."""


class RingBufferProtocol(StoreProtocol):
    """The ring-buffer protocol (see the module docstring)."""

    name = "ringbuffer"
    title = "single-writer shared-memory ring buffer + object storage (vLLM multimodal cache)"
    properties = PROPERTIES
    actions = ACTIONS
    concurrency_modes = CONCURRENCY_MODES
    tla_dir = paths.tla_dir()  # the shmspec.tla package (the repository's tla/)
    mutants = "shmspec.conformance.mutants"
    checkers = CHECKERS
    stated_in = "shmspec.model.properties:PROPERTIES"

    def base_campaigns(self) -> tuple[Any, ...]:
        from .campaigns import DEFAULT_CAMPAIGNS

        return DEFAULT_CAMPAIGNS

    def concurrent_campaigns(self, concurrency: str) -> tuple[Any, ...]:
        from .campaigns import CONCURRENT_CAMPAIGNS

        return CONCURRENT_CAMPAIGNS[concurrency]

    def run_campaign(self, ctx: CampaignContext, campaign: Any, res: Any) -> Any:
        from . import campaigns

        return campaigns.run_campaign(ctx, campaign, res)

    def load(self, spec: str) -> Any:
        from ...targets.loader import load_target

        return load_target(spec)

    def replay(self, target_spec: str, case: dict[str, Any]) -> str | None:
        from .replay import replay_case

        return replay_case(target_spec, case)


PROTOCOL = RingBufferProtocol()

__all__ = ["CONCURRENCY_MODES", "PROTOCOL", "RingBufferProtocol"]
