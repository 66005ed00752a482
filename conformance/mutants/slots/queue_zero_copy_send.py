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
    def _send(self, sock, frames):
        sock.send_multipart(frames, copy=False)  # BUG: zero-copy, still in flight when enqueue returns
