"""Fault queue_overflow_drops_oob: the overflow path sends the pickle stream alone.

Bug: a message too large for a chunk goes over the local socket as its
pickle stream and the frame kinds only (``frames[:2]``, where the
out-of-band frames must follow them), so a local reader cannot rebuild an out-of-band array larger
than a chunk.  Only the deployed construction sends such messages.

Must be caught by: NRR
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
            self.local_socket.send_multipart(frames[:2], copy=True)  # BUG: the out-of-band frames are dropped
            if self.remote_socket is not None:
                self.remote_socket.send_multipart(frames, copy=True)
            return
        super().enqueue(obj, timeout)
