"""Control: shmspec.impl wrapped exactly like the variants, with no bug.

Subclasses both classes and re-classes reader views in ``create_from_handle``
(as inband_only / auth_late_check do), changing no behaviour.  The gate must
pass it; otherwise a variant's failure could come from the wrapping.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    pass


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    @staticmethod
    def create_from_handle(handle):
        view = _impl.SingleWriterShmObjectStorage.create_from_handle(handle)
        view.__class__ = SingleWriterShmObjectStorage
        return view


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
