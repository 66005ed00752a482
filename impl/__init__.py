"""shmspec.impl: our shared-memory object store.

A drop-in for vLLM 0.32/0.33's ``shm_object_storage`` module (every public
name of vLLM 0.33.0's module, ``MsgpackSerde`` included; same constructor
arguments, methods, attributes, error types and messages, and the same
allocation policy, hence the same handles), hardened so that no reader ever
returns or deserializes bytes of a freed-and-reused chunk (NRR), whatever
payloads contain, with or without a lock on the writer (the protocol:
docs/impl-protocol.md).  Errors come from :mod:`shmspec.model.errors`.

Modules: :mod:`.layout` (segment and chunk layout), :mod:`.segment` (create /
reserve / attach / release), :mod:`.readers` (reader slots, pins, acks, the
fence), :mod:`.ring` (ring buffer), :mod:`.signing` (handle signatures and
field checks), :mod:`.serde` (serializers), :mod:`.storage` (object store), :mod:`.zerocopy` (zero-copy leases),
:mod:`.yieldpoints` (test hook).
"""

from . import yieldpoints
from .ring import SingleWriterShmRingBuffer
from .serde import BufferPickleSerde, MsgpackSerde, ObjectSerde, PickleSerde
from .storage import ShmObjectStorageHandle, SingleWriterShmObjectStorage, logger

__all__ = [
    "BufferPickleSerde",
    "MsgpackSerde",
    "ObjectSerde",
    "PickleSerde",
    "ShmObjectStorageHandle",
    "SingleWriterShmObjectStorage",
    "SingleWriterShmRingBuffer",
    "logger",
    "yieldpoints",
]
