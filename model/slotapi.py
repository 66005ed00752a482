"""The slot-flag protocol at the stores' API (docs/slots.md): what the
lockstep campaigns predict for each call of an arena (``ShmTensorArena``,
impl's ``SlotArena``) and of a queue (``MessageQueue``'s ring, impl's
``SlotQueue``).

Each API call is a fixed sequence of :mod:`shmspec.model.slots` steps run
with no other process in between (the lockstep refinement): an arena write
is ``claim, copy_begin, copy_end, reset_flags, publish, advance``, a view is
``acquire, read``, a flush is one ``release`` per dropped view; a queue's
``acquire_write`` is the claim, its block the copy, its exit ``reset_flags,
publish, advance``.  Unlike :mod:`~shmspec.model.slots`, the arena's writer
may take *any* free slot (vLLM probes every slot from the one after its last
write), so :meth:`ArenaModel.free_slots` gives the set a write may choose
from and the harness records the choice.

A slot's row is ``[written, done_0, ..., done_{R-1}]``; ``content[i]`` is
the message id slot ``i`` holds (None: never written).  Messages are
numbered 0, 1, ... in the order written; a fallback (the arena writing no
slot) still numbers its message, which its readers receive by the caller's
pickle path.

Imports nothing of ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Rows:
    readers: int
    slots: int
    written: list[int] = field(default_factory=list)
    done: list[list[int]] = field(default_factory=list)
    content: list[int | None] = field(default_factory=list)

    def __post_init__(self):
        if self.readers < 1 or self.slots < 1:
            raise ValueError(f"readers and slots must be >= 1, not {self.readers}, {self.slots}")
        self.written = [0] * self.slots
        self.done = [[0] * self.readers for _ in range(self.slots)]
        self.content = [None] * self.slots

    def row(self, i: int) -> bytes:
        """Slot ``i``'s flags as the store must hold them."""
        return bytes([self.written[i], *self.done[i]])

    def free(self, i: int) -> bool:
        """Reusable: unwritten, or done by every reader."""
        return not self.written[i] or all(self.done[i])

    def holders(self, i: int) -> list[int]:
        """The readers (0-based) that have not released written slot ``i``."""
        return [r for r in range(self.readers) if self.written[i] and not self.done[i][r]]

    def _write(self, i: int, msg: int) -> None:
        self.written[i], self.done[i], self.content[i] = 1, [0] * self.readers, msg


@dataclass
class ArenaModel(_Rows):
    """The arena: ``readers`` readers, ``slots`` slots of ``slot_bytes``
    bytes.  Each reader receives every message's stub in order
    (``inbox``), views it, drops the view, and releases at its next flush.

    Source: vLLM 0.33.0 ``shm_tensor_arena.py`` (``write_tensor``,
    ``get_tensor``, ``flush_releases``); the writer never blocks."""

    slot_bytes: int = 64
    messages: list[tuple[int | None, bytes]] = field(default_factory=list)
    """Per message id: the slot it went to (None: fallback) and its bytes."""
    next_for: list[int] = field(default_factory=list)
    """Per reader: the next message id it will receive."""
    dropped: list[set[int]] = field(default_factory=list)
    """Per reader: slots whose last view it dropped, not yet flushed."""

    def __post_init__(self):
        super().__post_init__()
        self.next_for = [0] * self.readers
        self.dropped = [set() for _ in range(self.readers)]

    def free_slots(self) -> frozenset[int]:
        return frozenset(i for i in range(self.slots) if self.free(i))

    def write(self, data: bytes, slot: int | None) -> int:
        """Record a write the store placed in ``slot`` (None: fallback);
        returns its message id.  The caller has checked ``slot`` is allowed."""
        msg = len(self.messages)
        self.messages.append((slot, data))
        if slot is not None:
            self._write(slot, msg)
        return msg

    def receive(self, r: int) -> int | None:
        """Reader ``r`` takes its next message (None: none left)."""
        if self.next_for[r] >= len(self.messages):
            return None
        self.next_for[r] += 1
        return self.next_for[r] - 1

    def drop(self, r: int, slot: int) -> None:
        self.dropped[r].add(slot)

    def flush(self, r: int) -> list[int]:
        """Reader ``r``'s flush: its dropped slots released; returns them."""
        out = sorted(self.dropped[r])
        for i in out:
            self.done[i][r] = 1
        self.dropped[r].clear()
        return out


@dataclass
class QueueModel(_Rows):
    """The queue's ring: the writer writes slot ``w_idx`` only, reader ``r``
    reads slot ``r_idx[r]`` only, each moving on by one.

    Source: vLLM 0.33.0 ``shm_broadcast.py`` (``acquire_write``,
    ``acquire_read``)."""

    w_idx: int = 0
    r_idx: list[int] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)
    got: list[list[int]] = field(default_factory=list)
    writing: bool = False
    reading: list[bool] = field(default_factory=list)

    def __post_init__(self):
        super().__post_init__()
        self.r_idx = [0] * self.readers
        self.got = [[] for _ in range(self.readers)]
        self.reading = [False] * self.readers

    def can_write(self) -> bool:
        return self.free(self.w_idx)

    def can_read(self, r: int) -> bool:
        i = self.r_idx[r]
        return bool(self.written[i]) and not self.done[i][r]

    def begin_write(self) -> None:
        self.written[self.w_idx] = 0
        self.writing = True

    def end_write(self, data: bytes) -> int:
        msg = len(self.sent)
        self.sent.append(data)
        self._write(self.w_idx, msg)
        self.w_idx = (self.w_idx + 1) % self.slots
        self.writing = False
        return msg

    def abort_write(self) -> None:
        """The writer's caller raised inside the block: the slot stays claimed
        (unwritten), the ring does not move (vLLM 0.33.0; impl likewise)."""
        self.writing = False

    def expected_read(self, r: int) -> int | None:
        """The message id reader ``r`` reads next (None: nothing readable)."""
        return self.content[self.r_idx[r]] if self.can_read(r) else None

    def end_read(self, r: int) -> None:
        """Reader ``r`` leaves its block (also by an exception): released, consumed."""
        i = self.r_idx[r]
        self.got[r].append(self.content[i])
        self.done[i][r] = 1
        self.r_idx[r] = (i + 1) % self.slots
        self.reading[r] = False


__all__ = ["ArenaModel", "QueueModel"]
