"""Named yield points for deterministic interleaving tests.

``HOOK`` is ``None`` in normal operation; every call site in impl/ is written as
``if yieldpoints.HOOK is not None: yieldpoints.HOOK("<name>")`` so the cost when
unused is one module-attribute load and one comparison.  A harness may assign a
callable ``HOOK(name: str) -> None`` (e.g. one that hands control to another
thread) and restore ``None`` afterwards.

Each hook fires just *before* the step it names.

Read path (reader ``get`` / ``touch``):

* ``pin``               -- before a reader publishes its hazard pin on the handle's allocation.
* ``reader_check``      -- before a reader validates the handle against the
  control block (live, or an intact drain chunk) and the chunk header.
* ``payload_read``      -- before a serde that keeps its input is handed a
  private copy of the payload (``keeps_buffer``), the copy being made.
* ``deserialize``       -- before the serde deserializes (straight from shared
  memory, under the pin; or from the private copy).
* ``counter_increment`` -- before the reader acknowledges its read in its slot.
* ``unpin``             -- after an acknowledged read of a get without a lease
  time, before the reader releases its pin (the writer may see the ack and
  the pin at once; ShmStore.tla's ``unpin``).

Write path (writer):

* ``pin_scan``      -- after a put published what its allocation kills and
  fenced, before it reads the readers' pins (and waits for those on chunks
  that are no longer live).
* ``pin_wait``      -- each round of the writer's wait for such a pin to be
  released (a scheduler treats the writer as blocked until the reader moves).
* ``header_write``  -- before a new chunk's ``[id][chunk_size]`` header is written.
* ``payload_write`` -- before ``[0][metadata][data]`` is written.
* ``publish``       -- before ``abs_end`` is published in the control block.
* ``free_step``     -- after a reclaim found the oldest chunk not yet planned
  reclaimable, before it plans its retirement (and checks the next one).
* ``retire``        -- after the reclaim's last check, before the planned chunks
  are retired (``abs_start`` advanced).
* ``clear``         -- before ``clear()`` opens the drain window and publishes ``abs_start = abs_end``.
"""

from __future__ import annotations

from collections.abc import Callable

HOOK: Callable[[str], None] | None = None

OBSERVER = False
"""True while ``HOOK`` only observes (it notes the point and returns; it never
hands control away): a wait then keeps its own pacing (``pin_wait`` spins,
then sleeps) instead of the one round per call a scheduler's hook expects."""

READ_POINTS = ("pin", "reader_check", "payload_read", "deserialize", "counter_increment", "unpin")
WRITE_POINTS = ("pin_scan", "pin_wait", "header_write", "payload_write", "publish", "free_step", "retire", "clear")
# The names are the model's atomic steps (shmspec.model.steps); tests/impl/test_steps.py
# checks that these tuples, the call sites in impl/ and the model agree.
