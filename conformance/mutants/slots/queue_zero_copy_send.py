"""Fault queue_zero_copy_send: a message sent over a socket still reads the caller's buffers.

Bug: ``enqueue`` hands the out-of-band buffers to zmq zero-copy
(``send_multipart(frames, copy=False)``) on the overflow path and to the
remote readers, and returns while zmq's I/O thread is still sending them;
a caller that reuses its arrays once ``enqueue`` returns (an engine's
scheduler, the deployed construction's writer) changes what the readers
receive.  vLLM 0.33.0's queue sends so.  Only the deployed construction
has sockets.

Must be caught by: NRR
Construction: deployed
"""

from shmspec.impl import broadcast as _b


class MessageQueue(_b.MessageQueue):
    def enqueue(self, obj, timeout=None):
        frames, written = self._frames(obj)
        if self.buffer is not None:
            size = _b._HEAD.size + sum(_b._LEN.size + memoryview(f).nbytes for f in frames)
            overflow = size > self.buffer.slot_bytes
            try:
                with self.acquire_write(timeout) as chunk:
                    if overflow:
                        chunk[0] = 1
                    else:
                        _b._HEAD.pack_into(chunk, 0, 0, len(frames))
                        at = _b._HEAD.size
                        for f in frames:
                            n = memoryview(f).nbytes
                            _b._LEN.pack_into(chunk, at, n)
                            chunk[at + _b._LEN.size:at + _b._LEN.size + n] = f
                            at += _b._LEN.size + n
            except BaseException:
                self._take_back(written)
                raise
            if overflow:
                self.local_socket.send_multipart(frames, copy=False)  # BUG: zero-copy, still in flight on return
        if self.remote_socket is not None:
            self.remote_socket.send_multipart(frames, copy=False)  # BUG: likewise
