"""Variant inband_only: a reader trusts the in-band chunk header, like vLLM.

Bug: a reader's ``get`` (and ``touch``) authenticates the handle and pins it,
then validates it *only* by comparing the id field of the chunk header found
at ``address % B`` with the handle's id -- exactly what vLLM 0.11 - 0.33 do.
The check against the writer-published control block (live: ``abs_start <=
cand < abs_end``; or a drain chunk whose bytes no allocation since the clear
reached) is gone, and every header match counts as live.  Once the chunk is
freed and its bytes are reused, any payload that happens to contain ``[stale
id][size]`` where the stale handle points is taken for the original chunk: the
reader deserializes foreign bytes (and acknowledges a read of a chunk that is
no longer there).  (``_validate`` below is impl's without the control block.)

Must be caught by: NRR (the gate's adversarial campaign places fake headers
carrying the stale id in new payloads exactly where stale handles point; the
reader returns the FORGED object).  CONFORMANCE is also expected to differ.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle, SingleWriterShmRingBuffer
from shmspec.impl import yieldpoints

SHMSPEC_PROFILE = "impl"


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    def _validate(self, cand, address, monotonic_id):
        if yieldpoints.HOOK is not None:
            yieldpoints.HOOK("reader_check")
        # BUG: no liveness / drain check against the control block; the header id is trusted.
        return True, self._check_header(address, monotonic_id)


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
