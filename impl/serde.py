"""Pluggable object serialisation (the ``serde_class`` of the store).

Contract (vLLM 0.11 - 0.33 ``ObjectSerde``):

* ``serialize(value) -> (data, data_nbytes, metadata, md_nbytes)`` where
  ``data`` is one bytes-like object or a list of bytes-like objects whose
  lengths sum to ``data_nbytes``, and ``metadata`` is bytes-like of length
  ``md_nbytes``.  The store writes ``[metadata][data pieces in order]``.
* ``deserialize(view: memoryview) -> value`` receives a view of exactly
  ``md_nbytes + data_nbytes`` bytes, ``[metadata][data]`` (the store hands
  readers a private copy, never a view of shared memory).

On impl the view is over an immutable ``bytes`` object (``view.obj``) that
only this call holds, copied out of the chunk and re-validated (NRR) before
``deserialize`` runs; a serde may therefore keep it (alias it in the value
it returns) instead of copying it again, which vLLM's ``MsgpackSerde`` does
with ``share_mem=True``.  vLLM's stores hand a view of shared memory, which
the writer reuses once the chunk is freed: there a serde must copy.  (This
is what ``bench.store --serde keep`` measures.)
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from typing import Any


class ObjectSerde(ABC):
    """Abstract serializer; see the module docstring for the contract."""

    @abstractmethod
    def serialize(self, value: Any) -> tuple[Any, int, bytes, int]:
        """Return ``(data, data_nbytes, metadata, md_nbytes)`` (sizes in bytes)."""

    @abstractmethod
    def deserialize(self, data: memoryview) -> Any:
        """Rebuild the value from ``[metadata][data]``."""


class PickleSerde(ObjectSerde):
    """Default serde: the value is pickled with the highest protocol.

    Metadata is the pickled tuple ``("bytes", data_nbytes, None)`` and the data
    is the pickle itself -- the same byte layout vLLM 0.33's ``MsgpackSerde``
    produces for non-tensor values, so object sizes (and therefore handles)
    match vLLM's default for such values, without needing torch.
    """

    _PROTOCOL = pickle.HIGHEST_PROTOCOL

    def serialize(self, value: Any) -> tuple[bytes, int, bytes, int]:
        data = pickle.dumps(value, protocol=self._PROTOCOL)
        metadata = pickle.dumps(("bytes", len(data), None), protocol=self._PROTOCOL)
        return data, len(data), metadata, len(metadata)

    def deserialize(self, data: memoryview) -> Any:
        # pickle.loads stops at the STOP opcode, so the metadata tuple can be
        # read from the front of the whole view.
        header = pickle.loads(data)
        if (
            not isinstance(header, tuple)
            or len(header) != 3
            or header[0] != "bytes"
            or not isinstance(header[1], int)
            or not 0 < header[1] <= len(data)
        ):
            raise ValueError(f"Unsupported object metadata {header!r}")
        return pickle.loads(data[len(data) - header[1] :])
