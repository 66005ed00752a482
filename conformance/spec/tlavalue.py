"""Parse the TLA+ values TLC prints (error traces, ``-dump`` files) into Python.

Mapping: integers -> ``int``; ``TRUE``/``FALSE`` -> ``bool``; strings ->
``str``; model values (bare identifiers such as ``r1``) -> :class:`ModelValue`
(a ``str``, equal to its name); sequences ``<<a, b>>`` -> ``tuple``; sets
``{a, b}`` -> ``frozenset``; records ``[f |-> v, ...]`` -> :class:`FrozenRecord`
and functions ``(a :> x @@ b :> y)`` -> :class:`FrozenDict` (hashable
dicts, so records can sit in sets; a record is a ``FrozenDict`` too).  A
function with domain ``1..n`` prints as a sequence and parses as one.  The
subclasses keep what :mod:`.itf` needs to write a value back (a model value
is not a string, a record is not a function) and change nothing else.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.errors import ShmspecError

_TOKEN = re.compile(r'\s*(?:(-?\d+)|"((?:[^"\\]|\\.)*)"|(\|->|:>|@@|<<|>>|[\[\](){},])|([A-Za-z_]\w*))')


class FrozenDict(dict):
    """A ``dict`` that hashes by its items; parsed records and functions."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


class FrozenRecord(FrozenDict):
    """A parsed record ``[f |-> v, ...]`` (a :class:`FrozenDict` keyed by field name)."""


class ModelValue(str):
    """A parsed model value (a bare identifier such as ``r1``): a ``str``
    equal to its name, told apart from a TLA+ string by its type."""

    __slots__ = ()


class TlaParseError(ShmspecError, ValueError):
    """The text is not a TLA+ value as TLC prints it."""


def parse_value(text: str) -> Any:
    """One TLA+ value.

    Raises:
        TlaParseError: the text is not a value TLC prints (with the offset).
    """
    tokens = _tokens(text)
    try:
        value, i = _value(tokens, 0, text)
    except IndexError:
        raise TlaParseError(f"unexpected end of {text[:80]!r}") from None
    if i != len(tokens):
        raise TlaParseError(f"trailing text after a value in {text[:80]!r}")
    return value


_VAR = re.compile(r"^/\\ (\w+) = ((?:.*)(?:\n(?!/\\).*)*)", re.M)


def parse_state(text: str, cache: dict[str, Any] | None = None) -> dict[str, Any]:
    """A state as TLC prints it (``/\\ var = value`` lines) -> ``{var: value}``.

    ``cache`` maps value texts already parsed to their values (states of one
    run share most of their variables' texts).
    """
    out = {}
    for m in _VAR.finditer(text):
        t = m.group(2)
        if cache is None:
            out[m.group(1)] = parse_value(t)
            continue
        v = cache.get(t)
        if v is None:
            v = cache[t] = parse_value(t)
        out[m.group(1)] = v
    return out


def parse_dump(text: str) -> list[dict[str, Any]]:
    """Every state of a TLC ``-dump`` file, in file order."""
    parts = re.split(r"^State \d+:\s*$", text, flags=re.M)
    cache: dict[str, Any] = {}
    return [parse_state(p, cache) for p in parts[1:]]


def _tokens(text: str) -> list[tuple[int, str]]:
    out = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip() == "":
                break
            raise TlaParseError(f"unexpected {text[pos:pos + 20]!r} at offset {pos}")
        pos = m.end()
        if m.group(1) is not None:
            out.append((0, m.group(1)))
        elif m.group(2) is not None:
            out.append((1, m.group(2)))
        elif m.group(3) is not None:
            out.append((2, m.group(3)))
        else:
            out.append((3, m.group(4)))
    return out


def _expect(tokens, i, sym, text):
    if i >= len(tokens) or tokens[i] != (2, sym):
        raise TlaParseError(f"expected {sym!r} in {text[:80]!r}")
    return i + 1


def _value(tokens, i, text) -> tuple[Any, int]:
    if i >= len(tokens):
        raise TlaParseError(f"value expected at the end of {text[:80]!r}")
    kind, tok = tokens[i]
    if kind == 0:
        return int(tok), i + 1
    if kind == 1:
        return tok, i + 1
    if kind == 3:
        return {"TRUE": True, "FALSE": False}.get(tok) if tok in ("TRUE", "FALSE") else ModelValue(tok), i + 1
    if tok == "<<":
        items, i = _items(tokens, i + 1, ">>", text)
        return tuple(items), i
    if tok == "{":
        items, i = _items(tokens, i + 1, "}", text)
        return frozenset(items), i
    if tok == "[":
        rec = FrozenRecord()
        i += 1
        while tokens[i] != (2, "]"):
            name = tokens[i][1]
            i = _expect(tokens, i + 1, "|->", text)
            rec[name], i = _value(tokens, i, text)
            if tokens[i] == (2, ","):
                i += 1
        return rec, i + 1
    if tok == "(":
        fn = FrozenDict()
        i += 1
        while tokens[i] != (2, ")"):
            k, i = _value(tokens, i, text)
            i = _expect(tokens, i, ":>", text)
            fn[k], i = _value(tokens, i, text)
            if tokens[i] == (2, "@@"):
                i += 1
        return fn, i + 1
    raise TlaParseError(f"unexpected {tok!r} in {text[:80]!r}")


def _items(tokens, i, close, text) -> tuple[list[Any], int]:
    items = []
    while tokens[i] != (2, close):
        v, i = _value(tokens, i, text)
        items.append(v)
        if tokens[i] == (2, ","):
            i += 1
    return items, i + 1


__all__ = ["FrozenDict", "TlaParseError", "parse_dump", "parse_state", "parse_value"]
