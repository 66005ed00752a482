"""Fault arena_remote_stub: the tensor arena stays on when the queue has remote readers.

Bug: ``MessageQueue.__init__`` builds the arena whenever it is asked to,
although a remote reader (on another node, over tcp) cannot map the
arena's segment: vLLM 0.33.0 turns the arena off when there are remote
readers (``enable_shm_tensor_arena and n_remote_reader == 0``).  A remote
reader then receives arena frames it cannot rebuild, and its dequeue
raises.  Only the deployed construction has remote readers.

Must be caught by: NRR
Construction: deployed
"""

from shmspec.impl import broadcast as _b


class MessageQueue(_b.MessageQueue):
    def __init__(self, n_reader, n_local_reader, *args, enable_shm_tensor_arena=False, **kwargs):
        super().__init__(n_reader, n_local_reader, *args, enable_shm_tensor_arena=enable_shm_tensor_arena, **kwargs)
        if enable_shm_tensor_arena and self.tensor_arena is None and n_local_reader:
            self.tensor_arena = self.arena_class(n_local_reader, self.ARENA_SLOT_BYTES, self.ARENA_SLOTS)  # BUG
            self.handle.tensor_arena_handle = self.tensor_arena.handle()
