"""Store protocols: one module (or sub-package) each, behind
:class:`~shmspec.conformance.core.protocol.StoreProtocol`.

* ``ringbuffer``: vLLM's ``SingleWriterShmRingBuffer`` +
  ``SingleWriterShmObjectStorage`` and :mod:`shmspec.impl`
  (:mod:`.ringbuffer`); the default.
* ``arena`` and ``queue``: the slot-flag stores, vLLM's ``ShmTensorArena``
  and ``MessageQueue`` ring and impl's ``SlotArena`` and ``SlotQueue``
  (:mod:`.slots`, docs/slots.md); also named by the prefixes
  ``vllm-arena==``, ``vllm-queue==``, ``impl-arena``, ``impl-queue``.

A target names its protocol in its ``protocol`` attribute (absent:
``ringbuffer``); a ``--target`` string ``NAME:REST`` whose ``NAME`` is a
registered protocol other than the default is loaded by that protocol
(``REST`` is its own target string); every other string is a ring-buffer
target (``impl``, ``file:PATH``, ``vllm==X.Y.Z``).

Importing this loads no protocol: each is imported when first asked for, so
``shmspec prove`` and ``shmspec model`` stay free of Hypothesis and
multiprocess.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..core.errors import UsageError
from ..core.protocol import StoreProtocol

DEFAULT = "ringbuffer"
_BUILTIN: dict[str, str] = {"ringbuffer": "shmspec.conformance.protocols.ringbuffer:PROTOCOL",
                            "arena": "shmspec.conformance.protocols.slots:ARENA",
                            "queue": "shmspec.conformance.protocols.slots:QUEUE"}
_ALIASES: dict[str, tuple[str, str]] = {"vllm-arena==": ("arena", "vllm=="), "vllm-queue==": ("queue", "vllm=="),
                                        "sglang-queue==": ("queue", "sglang=="),
                                        "impl-arena": ("arena", "impl"), "impl-queue": ("queue", "impl")}
"""Target-string prefixes that name a protocol without ``NAME:`` (``vllm-arena==0.33.0`` is ``arena:vllm==0.33.0``)."""
_LOADED: dict[str, StoreProtocol] = {}


def register(protocol: StoreProtocol) -> StoreProtocol:
    """Make ``protocol`` known by its name (replacing one of that name);
    returns it.

    Raises:
        UsageError: it has no name, or no properties.
    """
    if not protocol.name or not protocol.properties:
        raise UsageError(f"a store protocol needs a name and properties (got {protocol!r})")
    _LOADED[protocol.name] = protocol
    return protocol


def unregister(name: str) -> None:
    """Forget a registered protocol (tests); a built-in one is loaded again when asked for."""
    _LOADED.pop(name, None)


def names() -> tuple[str, ...]:
    """Every protocol name known: the built-in ones, then the registered."""
    return tuple(dict.fromkeys([*_BUILTIN, *_LOADED]))


def get(name: str = DEFAULT) -> StoreProtocol:
    """The protocol called ``name``.

    Raises:
        UsageError: no such protocol.
    """
    if name not in _LOADED:
        if name not in _BUILTIN:
            raise UsageError(f"unknown store protocol {name!r} (known: {', '.join(names())})")
        module, attr = _BUILTIN[name].split(":")
        _LOADED[name] = getattr(importlib.import_module(module), attr)
    return _LOADED[name]


def protocol_of(target: Any) -> StoreProtocol:
    """The protocol of a loaded target (its ``protocol`` attribute, default ``ringbuffer``)."""
    return get(getattr(target, "protocol", DEFAULT))


def split_spec(spec: str) -> tuple[str, str]:
    """``(protocol name, its own target string)`` for a ``--target`` string."""
    for prefix, (name, replacement) in _ALIASES.items():
        if spec.startswith(prefix):
            return name, replacement + spec[len(prefix):]
    head, sep, rest = spec.partition(":")
    if sep and head != DEFAULT and head in names():
        return head, rest
    return DEFAULT, spec


def load(spec: str) -> Any:
    """Load the target a ``--target`` string names, by its protocol.

    Raises:
        TargetError: the target cannot be loaded.
    """
    name, rest = split_spec(spec)
    return get(name).load(rest)


__all__ = ["DEFAULT", "get", "load", "names", "protocol_of", "register", "split_spec", "unregister"]
