"""Pluggable object serialisation (the ``serde_class`` of the store).

Contract (vLLM 0.11 - 0.33 ``ObjectSerde``):

* ``serialize(value) -> (data, data_nbytes, metadata, md_nbytes)`` where
  ``data`` is one bytes-like object or a list of bytes-like objects whose
  lengths sum to ``data_nbytes``, and ``metadata`` is bytes-like of length
  ``md_nbytes``.  The store writes ``[metadata][data pieces in order]``.
* ``deserialize(view: memoryview) -> value`` receives a view of exactly
  ``md_nbytes + data_nbytes`` bytes, ``[metadata][data]``.

On impl (segment v2) the view is of the shared segment itself, valid only
during the call: the chunk is protected from reuse by the reader's hazard pin
until ``deserialize`` returns (docs/impl-protocol.md), so the one copy a get
costs is the serde's own.  A serde must therefore copy whatever it keeps (as
vLLM's ``MsgpackSerde`` does with ``share_mem=False``): the view, a slice of
it or an object exporting its buffer must not outlive the call.  impl
releases the view afterwards and raises ``BufferError`` (the read not
acknowledged) when anything the value keeps still holds shared memory: the
view, a slice or cast of it, a memoryview or ``np.frombuffer`` over it, a
``PickleBuffer``, a pickle-5 out-of-band buffer, ctypes ``from_buffer``
(SEMANTICS ALIAS; tests/impl/test_impl_alias.py).  A serde that wants to keep its input declares ``keeps_buffer =
True``: it is handed a private immutable ``bytes`` copy instead (one more
copy), which it may alias in the value it returns.  A value that is meant to
stay in shared memory is read with ``get(..., copy=False)``, which calls
:meth:`ObjectSerde.deserialize_shared` and holds a zero-copy lease
(:mod:`shmspec.impl.zerocopy`; :class:`BufferPickleSerde`).  vLLM's stores hand a
view of shared memory without a pin: there a serde must copy, and even then
it may read bytes the writer is reusing.
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from typing import Any


class ObjectSerde(ABC):
    """Abstract serializer; see the module docstring for the contract."""

    keeps_buffer: bool = False
    """True: ``deserialize`` may keep its input, so impl hands it a private
    ``bytes`` copy instead of a view of shared memory."""

    @abstractmethod
    def serialize(self, value: Any) -> tuple[Any, int, bytes, int]:
        """Return ``(data, data_nbytes, metadata, md_nbytes)`` (sizes in bytes)."""

    @abstractmethod
    def deserialize(self, data: memoryview) -> Any:
        """Rebuild the value from ``[metadata][data]``."""

    def deserialize_shared(self, data: memoryview) -> Any:
        """Rebuild the value for ``get(..., copy=False)`` (impl only): ``data``
        is a read-only view of the chunk in shared memory that the value may
        keep (it holds a zero-copy lease until the last object over it is
        collected; see :mod:`shmspec.impl.zerocopy`).  By default
        :meth:`deserialize`."""
        return self.deserialize(data)


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


class MsgpackSerde(ObjectSerde):
    """vLLM's default serde (the same bytes as vLLM 0.33.0's ``MsgpackSerde``).

    Tensors and ``MultiModalKwargsItem`` values go through vLLM's
    ``MsgpackEncoder`` (a list of buffers, kept without a copy when they are
    written into the ring) and come back through ``MsgpackDecoder(...,
    share_mem=False)``, which copies them out of shared memory; every other
    value is pickled.  Metadata is the pickled ``(type name, data bytes, buffer
    lengths or None)``.

    Needs vLLM (``vllm.v1.serial_utils``, ``vllm.multimodal.inputs``) and
    torch, imported when the serde is built (vLLM imports them lazily too).

    Raises:
        ImportError: at construction, naming the package that is missing.
    """

    def __init__(self) -> None:
        try:
            import torch
            from vllm.multimodal.inputs import MultiModalKwargsItem
            from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder
        except ImportError as exc:
            missing = exc.name or str(exc)
            raise ImportError(
                f"MsgpackSerde needs vLLM's msgpack classes (vllm.v1.serial_utils, "
                f"vllm.multimodal.inputs) and torch; {missing!r} is not importable ({exc}). "
                "Install vllm, or pass serde_class=PickleSerde",
                name=exc.name,
            ) from exc
        self._tensor_cls = torch.Tensor
        self._item_cls = MultiModalKwargsItem
        self._encoder = MsgpackEncoder()
        self._decoders = {
            torch.Tensor.__name__: MsgpackDecoder(torch.Tensor, share_mem=False),
            MultiModalKwargsItem.__name__: MsgpackDecoder(MultiModalKwargsItem, share_mem=False),
        }

    def serialize(self, value: Any) -> tuple[Any, int, bytes, int]:
        if isinstance(value, (self._tensor_cls, self._item_cls)):
            kind = type(value).__name__
            buffers = self._encoder.encode(value)
            lengths = [len(b) for b in buffers]
            data: Any = buffers
            nbytes = sum(lengths)
        else:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            kind, lengths, nbytes = "bytes", None, len(data)
        metadata = pickle.dumps((kind, nbytes, lengths), protocol=pickle.HIGHEST_PROTOCOL)
        return data, nbytes, metadata, len(metadata)

    def deserialize(self, data: memoryview) -> Any:
        # the metadata pickle is read from the front; unpickling stops at its end
        kind, nbytes, lengths = pickle.loads(data)
        body = data[len(data) - nbytes :]
        if kind == "bytes":
            return pickle.loads(body)
        decoder = self._decoders.get(kind)
        if decoder is None:
            raise ValueError(f"Unsupported object type '{kind}' in metadata")
        pieces, at = [], 0
        for n in lengths:
            pieces.append(body[at : at + n])
            at += n
        return decoder.decode(pieces)


class BufferPickleSerde(ObjectSerde):
    """Pickle protocol 5 with out-of-band buffers (impl only), for values
    made of large arrays: numpy arrays, ``bytearray`` and ``PickleBuffer``
    contents are written into the ring as raw bytes after the pickle.

    Metadata is the pickled ``("pickle5", pickle bytes, (buffer bytes, ...))``;
    the data is the pickle, then each buffer.  :meth:`deserialize` copies each
    buffer out (the value owns its memory, writable); :meth:`deserialize_shared`
    (``get(copy=False)``) hands pickle views of the ring itself, so the
    arrays of the value are read-only and point into shared memory under a
    zero-copy lease.  A buffer that is not contiguous is pickled in-band.
    Buffers are not aligned (a numpy array over one may be unaligned).
    """

    _PROTOCOL = 5

    def serialize(self, value: Any) -> tuple[list, int, bytes, int]:
        buffers: list[memoryview] = []

        def out_of_band(buf: pickle.PickleBuffer) -> bool:
            try:
                buffers.append(buf.raw())
            except BufferError:  # not contiguous: in-band
                return True
            return False

        body = pickle.dumps(value, protocol=self._PROTOCOL, buffer_callback=out_of_band)
        lengths = tuple(b.nbytes for b in buffers)
        nbytes = len(body) + sum(lengths)
        metadata = pickle.dumps(("pickle5", len(body), lengths), protocol=self._PROTOCOL)
        return [body, *buffers], nbytes, metadata, len(metadata)

    def _split(self, data: memoryview) -> tuple[memoryview, list[memoryview]]:
        header = pickle.loads(data)
        if (not isinstance(header, tuple) or len(header) != 3 or header[0] != "pickle5"
                or not isinstance(header[1], int) or not isinstance(header[2], tuple)):
            raise ValueError(f"Unsupported object metadata {header!r}")
        _, body_n, lengths = header
        at = len(data) - body_n - sum(lengths)
        if at < 0 or body_n <= 0:
            raise ValueError(f"object metadata {header!r} does not fit {len(data)} bytes")
        body, at = data[at : at + body_n], at + body_n
        pieces = []
        for n in lengths:
            pieces.append(data[at : at + n])
            at += n
        return body, pieces

    def deserialize(self, data: memoryview) -> Any:
        body, pieces = self._split(data)
        return pickle.loads(body, buffers=[bytearray(p) for p in pieces])

    def deserialize_shared(self, data: memoryview) -> Any:
        body, pieces = self._split(data)
        return pickle.loads(body, buffers=pieces)
