"""Fault free_out_of_order: reclaim scans past a busy chunk.

Bug: reclaim is meant to stop at the first chunk that is still being read
(strict FIFO: a busy chunk blocks everything younger).  Here, after the FIFO
walk (impl's ``free_buf``) stops at a busy oldest chunk, ``_free_unused`` goes
on and reclaims every younger chunk whose reads are complete ("free whatever
is free"): the store drops their keys and index entries and the ring forgets
them, although its ``start`` cannot move past the busy chunk.  (The parked
chunks are put back for the next FIFO walk, so the ring's own pointers stay
consistent.)

Must be caught by: FIFO (chunks are reclaimed oldest first; a busy chunk
blocks reclaim of younger ones).
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _free_unused(self):
        ring = self.ring_buffer
        parked, self._parked = getattr(self, "_parked", {}), {}
        window = (ring.monotonic_id_end - ring.monotonic_id_start) % ring.ID_MAX
        # the FIFO walk needs every (still live) chunk's address back
        ring.metadata.update({i: a for i, a in parked.items()
                              if (i - ring.monotonic_id_start) % ring.ID_MAX < window})
        ring.free_buf(lambda i, view: i in parked or self.default_is_free_check(i, view),
                      2 * self.max_object_size, journal=self)
        # BUG: go on past the busy head and reclaim younger chunks that are done.
        head = ring.monotonic_id_start
        for i in list(ring.metadata):
            if i == head or not self.default_is_free_check(i, None):
                continue
            self._parked[i] = ring.metadata.pop(i)
            key = self._id_index.pop(i, None)
            if key is not None and self._key_index.get(key, (None, None))[1] == i:
                del self._key_index[key]
            self._writer_flag.pop(i, None)
            self._touched.discard(i)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
