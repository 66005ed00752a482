"""Replays of recorded findings: moved to
:mod:`shmspec.conformance.protocols.ringbuffer.replay` (2026-12-02); these
names stay importable from here."""

from ..protocols.ringbuffer.replay import replay, replay_case, replay_free

__all__ = ["replay", "replay_case", "replay_free"]
