"""Named yield points for deterministic interleaving tests.

``HOOK`` is ``None`` in normal operation; every call site in impl/ is written as
``if yieldpoints.HOOK is not None: yieldpoints.HOOK("<name>")`` so the cost when
unused is one module-attribute load and one comparison.  A harness may assign a
callable ``HOOK(name: str) -> None`` (e.g. one that hands control to another
thread) and restore ``None`` afterwards.

Each hook fires just *before* the step it names.

Read path (reader ``get`` / ``touch``):

* ``reader_check``      -- before every liveness check against ``abs_start``
  (first check, the post-copy re-check, and the check under the reader lock).
* ``payload_read``      -- before the payload is copied out of shared memory.
* ``counter_increment`` -- under the reader lock, after the last liveness
  re-check and before ``reader_count`` is incremented (the one known window,
  see :class:`shmspec.impl.storage.SingleWriterShmObjectStorage`).
* ``deserialize``       -- before the private copy is deserialized.

Write path (writer):

* ``header_write``  -- before a new chunk's ``[id][chunk_size]`` header is written.
* ``payload_write`` -- before ``[reader_count][metadata][data]`` is written.
* ``publish``       -- before ``abs_end`` is published in the control block.
* ``free_step``     -- before one chunk is reclaimed (``abs_start`` advanced).
* ``clear``         -- before ``clear()`` publishes ``abs_start = abs_end``.
"""

from __future__ import annotations

from collections.abc import Callable

HOOK: Callable[[str], None] | None = None

READ_POINTS = ("reader_check", "payload_read", "counter_increment", "deserialize")
WRITE_POINTS = ("header_write", "payload_write", "publish", "free_step", "clear")
# The names are the model's atomic steps (shmspec.model.steps); tests/test_steps.py
# checks that these tuples, the call sites in impl/ and the model agree.
