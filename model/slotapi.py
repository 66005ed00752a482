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

The state is a *ledger*: which message each slot holds (``content``) and
which readers released each message (``released``), from the calls the
clients made.  NRR, FIFO and PROG are judged from it; the metadata rows a
correct store holds (``[written, done_0, ..., done_{R-1}]``) are derived from
it (:meth:`ArenaModel.row`), so a store whose flags diverge (CONFORMANCE) is
still judged on what its clients did, not on its own flags.  Messages are
numbered 0, 1, ... in the order written; a fallback (the arena writing no
slot) still numbers its message, which its readers receive by the caller's
pickle path.

Imports nothing of ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Ledger:
    """What every reader has received and released, message by message; the
    metadata rows a correct store holds are derived from it (:meth:`row`),
    so a store whose flags diverge is judged on NRR, FIFO and PROG from what
    its clients did, not from its flags."""

    readers: int
    slots: int
    content: list[int | None] = field(default_factory=list)
    """Per slot: the message id it holds (None: never written)."""
    released: list[set[int]] = field(default_factory=list)
    """Per message id: the readers (0-based) that released it."""

    def __post_init__(self):
        if self.readers < 1 or self.slots < 1:
            raise ValueError(f"readers and slots must be >= 1, not {self.readers}, {self.slots}")
        self.content = [None] * self.slots

    def _claimed(self, i: int) -> bool:
        return False

    def row(self, i: int) -> bytes:
        """Slot ``i``'s flags ``[written, done_0, ...]`` as a correct store
        holds them (a claimed slot: ``written`` cleared, the flags as its last
        message's readers left them)."""
        m = self.content[i]
        done = [0] * self.readers if m is None else [int(r in self.released[m]) for r in range(self.readers)]
        return bytes([int(m is not None and not self._claimed(i)), *done])

    def free(self, i: int) -> bool:
        """Reusable: never written, or its message released by every reader."""
        m = self.content[i]
        return m is None or len(self.released[m]) == self.readers

    def holders(self, i: int) -> list[int]:
        """The readers (0-based) that have not released slot ``i``'s message."""
        m = self.content[i]
        return [] if m is None else [r for r in range(self.readers) if r not in self.released[m]]


@dataclass
class ArenaModel(_Ledger):
    """The arena: ``readers`` readers, ``slots`` slots of ``slot_bytes``
    bytes.  Each reader receives every message's stub in order, views it,
    drops the view, and releases at its next flush.

    Source: vLLM 0.33.0 ``shm_tensor_arena.py`` (``write_tensor``,
    ``get_tensor``, ``flush_releases``); the writer never blocks."""

    slot_bytes: int = 64
    messages: list[tuple[int | None, bytes]] = field(default_factory=list)
    """Per message id: the slot it went to (None: fallback) and its bytes."""
    next_for: list[int] = field(default_factory=list)
    """Per reader: the next message id it will receive."""
    dropped: list[set[int]] = field(default_factory=list)
    """Per reader: message ids whose last view it dropped, not yet flushed."""

    def __post_init__(self):
        super().__post_init__()
        self.next_for = [0] * self.readers
        self.dropped = [set() for _ in range(self.readers)]

    def free_slots(self) -> frozenset[int]:
        return frozenset(i for i in range(self.slots) if self.free(i))

    def write(self, data: bytes, slot: int | None) -> int:
        """Record a write the store placed in ``slot`` (None: fallback);
        returns its message id."""
        msg = len(self.messages)
        self.messages.append((slot, data))
        self.released.append(set())
        if slot is not None:
            self.content[slot] = msg
        return msg

    def receive(self, r: int) -> int | None:
        """Reader ``r`` takes its next message (None: none left)."""
        if self.next_for[r] >= len(self.messages):
            return None
        self.next_for[r] += 1
        return self.next_for[r] - 1

    def drop(self, r: int, msg: int) -> None:
        self.dropped[r].add(msg)

    def flush(self, r: int) -> list[int]:
        """Reader ``r``'s flush: its dropped messages released; returns their slots."""
        out = []
        for m in sorted(self.dropped[r]):
            self.released[m].add(r)
            out.append(self.messages[m][0])
        self.dropped[r].clear()
        return sorted(out)


@dataclass
class QueueModel(_Ledger):
    """The queue's ring: message ``k`` goes to slot ``k mod slots`` (the
    writer's ring moves only when it publishes), each reader receives the
    messages in order, and releases each as its block ends (also when its
    caller raised: vLLM 0.33.0 consumes the message then).

    Source: vLLM 0.33.0 ``shm_broadcast.py`` (``acquire_write``,
    ``acquire_read``)."""

    sent: list[bytes] = field(default_factory=list)
    got: list[int] = field(default_factory=list)
    """Per reader: how many messages it has consumed (its next is that id)."""
    claimed: set[int] = field(default_factory=set)
    """Slots whose ``written`` the writer cleared (its claim) and has not published since."""

    def __post_init__(self):
        super().__post_init__()
        self.got = [0] * self.readers

    @property
    def w_idx(self) -> int:
        return len(self.sent) % self.slots

    def r_idx(self, r: int) -> int:
        return self.got[r] % self.slots

    def _claimed(self, i: int) -> bool:
        return i in self.claimed

    def can_write(self) -> bool:
        return self.free(self.w_idx)

    def begin_write(self) -> None:
        self.claimed.add(self.w_idx)

    def end_write(self, data: bytes) -> int:
        msg = len(self.sent)
        self.claimed.discard(self.w_idx)
        self.content[self.w_idx] = msg
        self.sent.append(data)
        self.released.append(set())
        return msg

    def abort_write(self) -> None:
        """The writer's caller raised inside the block: the slot stays claimed
        (unwritten), the ring does not move (vLLM 0.33.0; impl likewise).
        Nothing to record: the claim stays in :attr:`claimed`."""

    def expected_read(self, r: int) -> int | None:
        """The message id reader ``r`` reads next (None: none published for it)."""
        k = self.got[r]
        return k if k < len(self.sent) and not self._claimed(k % self.slots) else None

    def end_read(self, r: int) -> int:
        """Reader ``r`` leaves its block (also by an exception): released, consumed; returns the message id."""
        k = self.got[r]
        self.released[k].add(r)
        self.got[r] += 1
        return k


__all__ = ["ArenaModel", "QueueModel"]
