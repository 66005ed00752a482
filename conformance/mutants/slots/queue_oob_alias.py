"""Fault queue_oob_alias: a reader's out-of-band arrays alias the ring.

Bug: ``dequeue`` hands ``pickle.loads`` views of the chunk for the
out-of-band buffers instead of copies (the copy vLLM 0.33.0's reader makes,
"out-of-band arrays may outlive this reusable ring slot"), so an array a
reader keeps changes when the writer reuses the chunk.  Only the deployed
construction's free-running load sees it: it keeps every out-of-band array
and checks its digest again after later writes.

Must be caught by: NRR
Construction: deployed
"""

from shmspec.impl import broadcast as _b


class MessageQueue(_b.MessageQueue):
    def dequeue(self, timeout=None, indefinite=False):
        if not self._is_local_reader or self._owed:
            return super().dequeue(timeout, indefinite)
        with self.acquire_read(timeout, indefinite) as chunk:
            overflow, count = _b._HEAD.unpack_from(chunk, 0)
            if not overflow:
                frames, at = [], _b._HEAD.size
                for i in range(count):
                    (n,) = _b._LEN.unpack_from(chunk, at)
                    view = chunk[at + _b._LEN.size:at + _b._LEN.size + n]
                    frames.append(bytes(view) if i < 2 else view)  # BUG: the out-of-band frames not copied
                    at += _b._LEN.size + n
                return self._loads(frames[0], frames[1], frames[2:])
        self._owed += 1
        return self._owed_frames(timeout)
