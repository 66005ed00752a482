"""shmspec.impl: our shared-memory object store.

A drop-in for vLLM 0.32/0.33's ``shm_object_storage`` module (same class
names, constructor arguments, methods, attributes, error types and messages,
and the same allocation policy, hence the same handles), hardened so that no
reader ever returns or deserializes bytes of a freed-and-reused chunk (NRR),
whatever payloads contain.  Errors come from :mod:`shmspec.model.errors`.

Modules: :mod:`.layout` (segment and chunk layout), :mod:`.segment` (create /
attach / release), :mod:`.ring` (ring buffer), :mod:`.signing` (handle
signatures and field checks), :mod:`.serde` (serializers), :mod:`.storage`
(object store), :mod:`.yieldpoints` (test hook).
"""

from . import yieldpoints
from .ring import SingleWriterShmRingBuffer
from .serde import ObjectSerde, PickleSerde
from .storage import ShmObjectStorageHandle, SingleWriterShmObjectStorage

__all__ = [
    "ObjectSerde",
    "PickleSerde",
    "ShmObjectStorageHandle",
    "SingleWriterShmObjectStorage",
    "SingleWriterShmRingBuffer",
    "yieldpoints",
]
