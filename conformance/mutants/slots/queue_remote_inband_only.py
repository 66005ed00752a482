"""Fault queue_remote_inband_only: remote readers miss the overflow messages.

Bug: the send to the remote socket sits in the in-chunk branch of
``enqueue``, so a message too large for a chunk reaches the local readers
(over the local socket) but never the remote ones.  Only the deployed
construction has remote readers.

Must be caught by: FIFO
Construction: deployed
"""

from shmspec.impl import broadcast as _b


class MessageQueue(_b.MessageQueue):
    def enqueue(self, obj, timeout=None):
        frames, _ = self._frames(obj)
        size = _b._HEAD.size + sum(_b._LEN.size + memoryview(f).nbytes for f in frames)
        if self.buffer is not None and size > self.buffer.slot_bytes:
            with self.acquire_write(timeout) as chunk:
                chunk[0] = 1
            self.local_socket.send_multipart(frames, copy=True)
            return  # BUG: the remote readers are not sent it
        super().enqueue(obj, timeout)
