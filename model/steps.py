"""The store's atomic steps: one vocabulary for the model, impl's yield points,
the harness's scheduler and the TLA+ spec.

An operation of the store (``put``, ``get``, ``clear``, ... in
:mod:`.store`) is a sequence of these steps; another process may run between
any two of them.  impl/ pauses just *before* each step it names
(``shmspec.impl.yieldpoints``); the harness adds the lock and serde steps for
targets it cannot edit.  ``tests/impl/test_steps.py`` keeps the sets equal.
"""

from __future__ import annotations

READ_STEPS: dict[str, str] = {
    "pin": "a reader publishes its hazard pin on the handle's allocation, then fences (impl)",
    "reader_check": "a reader compares the handle with the published live window (abs_start, abs_end) or the drain window",
    "payload_read": "a reader copies the chunk's payload bytes out of shared memory",
    "deserialize": "a reader turns payload bytes into an object",
    "counter_increment": "a reader counts its read: impl in its own ack word, vLLM in the in-band reader_count under the lock",
    "unpin": "a reader that acknowledged its read releases its hazard pin (impl)",
}
"""Steps of a reader's ``get`` (``touch`` stops after its checks)."""

WRITE_STEPS: dict[str, str] = {
    "pin_scan": "the writer reads the readers' pins and waits for those on chunks no longer live (impl)",
    "pin_wait": "the writer waits until a reader releases its pin on a chunk no longer live (impl)",
    "header_write": "the writer writes a new chunk's [id][chunk_size] header",
    "payload_write": "the writer writes [reader_count=0][metadata][data]",
    "publish": "the writer makes the new chunk visible to readers (abs_end)",
    "free_step": "the writer plans to reclaim the oldest chunk not yet planned (impl), or reclaims it (vLLM)",
    "retire": "the writer retires the chunks it planned to reclaim (abs_start advances, impl)",
    "clear": "the writer drops every chunk at once (abs_start = abs_end)",
}
"""Steps of the writer's ``put``, ``free_unused`` and ``clear``."""

LOCK_STEPS: dict[str, str] = {
    "lock_acquire": "a process takes the reader lock (it may block here)",
    "lock_release": "a process gives the reader lock back",
}
"""Steps of the process-shared reader lock (any target, through a wrapper)."""

ATOMIC_STEPS: dict[str, str] = {**READ_STEPS, **WRITE_STEPS, **LOCK_STEPS}
"""Every step name, with what it does."""

FAULT_STEPS: dict[str, str] = {
    "die": "a reader's process dies (SIGKILL) wherever it is; its pin word stays in shared memory",
}
"""Faults the spec and the model take as steps (``tla/ShmStore.tla``'s
``Mortal`` readers), which no store takes itself: no yield point."""
