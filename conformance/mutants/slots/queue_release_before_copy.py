"""Fault queue_release_before_copy: a reader releases its chunk before it copies the message out.

Bug: ``dequeue`` sets the reader's flag as soon as it finds the chunk
readable and copies the frames after, so the writer (another process,
waiting on that flag) rewrites the chunk while the reader is still copying
it: the cross-process order of the release store and the data loads is
wrong.  In one process the lockstep campaigns never interleave a write
into the copy; across processes the writer, which waits on the slowest
reader's flag, does.

Must be caught by: NRR
Construction: deployed
"""

from shmspec.impl import broadcast as _b


class MessageQueue(_b.MessageQueue):
    def dequeue(self, timeout=None, indefinite=False):
        if not self._is_local_reader or self._owed:
            return super().dequeue(timeout, indefinite)
        ring = self.buffer
        ring._wait(ring._readable, f"reader {ring.reader_rank}", timeout)
        i = ring.current_idx
        ring._release(i)  # BUG: released before the copy below
        ring.current_idx = (i + 1) % ring.n_slots
        chunk = ring.buf[i * ring.slot_bytes:(i + 1) * ring.slot_bytes]
        overflow, count = _b._HEAD.unpack_from(chunk, 0)
        if overflow:
            self._owed += 1
            return self._owed_frames(timeout)
        frames, at = [], _b._HEAD.size
        for _ in range(count):
            (n,) = _b._LEN.unpack_from(chunk, at)
            frames.append(bytearray(chunk[at + _b._LEN.size:at + _b._LEN.size + n]))
            at += _b._LEN.size + n
        chunk.release()
        return self._loads(frames[0], frames[1], frames[2:])
