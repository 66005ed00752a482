"""Control: shmspec.impl wrapped exactly like the variants, with no bug.

Subclasses both classes (as every variant does; impl's ``create_from_handle``
builds reader views of the subclass), changing no behaviour.  The gate must
pass it; otherwise a variant's failure could come from the wrapping.
"""

from shmspec import impl as _impl
from shmspec.impl import ObjectSerde, ShmObjectStorageHandle

SHMSPEC_PROFILE = "impl"


class SingleWriterShmRingBuffer(_impl.SingleWriterShmRingBuffer):
    pass


class SingleWriterShmObjectStorage(_impl.SingleWriterShmObjectStorage):
    pass


__all__ = ["ObjectSerde", "ShmObjectStorageHandle", "SingleWriterShmObjectStorage", "SingleWriterShmRingBuffer"]
