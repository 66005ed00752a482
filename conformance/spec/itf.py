"""ITF, the Informal Trace Format (Apalache ADR-015; read by Apalache, Quint
and their libraries), for TLC traces: :func:`trace_to_itf` writes one,
:func:`trace_from_itf` reads one back (issue 29 item 4).

Values (:mod:`.tlavalue`'s Python form on our side): ``TRUE``/``FALSE`` ->
JSON booleans; integers -> ``{"#bigint": "n"}``; strings and model values
-> JSON strings (the model values a trace holds are listed in the trace's
``#meta.model-values``, so reading gives them back as
:class:`~.tlavalue.ModelValue`); sequences -> JSON arrays; sets ->
``{"#set": [...]}``; records -> JSON objects; other functions ->
``{"#map": [[key, value], ...]}``.  Set members and map entries are
written in the order of their JSON text, so one trace always gives one
file.  Each state's ``#meta`` holds its index and the action TLC names for
it.  :data:`ITF_SCHEMA` is a JSON Schema (draft 7) of the format.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import ShmspecError
from .tlavalue import FrozenDict, FrozenRecord, ModelValue

FORMAT_DESCRIPTION = "https://apalache-mc.org/docs/adr/015adr-trace.html"

_VALUE = {"$ref": "#/definitions/value"}
ITF_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "ITF trace (Apalache ADR-015)",
    "type": "object",
    "required": ["vars", "states"],
    "properties": {
        "#meta": {"type": "object"},
        "params": {"type": "array", "items": {"type": "string"}},
        "vars": {"type": "array", "items": {"type": "string"}},
        "states": {"type": "array", "items": {"$ref": "#/definitions/state"}},
        "loop": {"type": "integer", "minimum": 0},
    },
    "definitions": {
        "state": {"type": "object", "properties": {"#meta": {"type": "object"}}, "additionalProperties": _VALUE},
        "value": {"anyOf": [
            {"type": "boolean"}, {"type": "string"}, {"type": "integer"},
            {"type": "array", "items": _VALUE},
            {"type": "object", "required": ["#bigint"], "additionalProperties": False,
             "properties": {"#bigint": {"type": "string", "pattern": "^-?[0-9]+$"}}},
            {"type": "object", "required": ["#tup"], "additionalProperties": False,
             "properties": {"#tup": {"type": "array", "items": _VALUE}}},
            {"type": "object", "required": ["#set"], "additionalProperties": False,
             "properties": {"#set": {"type": "array", "items": _VALUE}}},
            {"type": "object", "required": ["#map"], "additionalProperties": False,
             "properties": {"#map": {"type": "array", "items": {"type": "array", "items": _VALUE,
                                                                  "minItems": 2, "maxItems": 2}}}},
            {"type": "object", "required": ["#unserializable"], "additionalProperties": False,
             "properties": {"#unserializable": {"type": "string"}}},
            {"type": "object", "propertyNames": {"pattern": "^[^#]"}, "additionalProperties": _VALUE},
        ]},
    },
}


class ItfError(ShmspecError, ValueError):
    """Not an ITF value or trace this module reads (one line saying where)."""


def _key(j: Any) -> str:
    return json.dumps(j, sort_keys=True)


def value_to_itf(v: Any, model_values: set[str] | None = None) -> Any:
    """One value in ITF's JSON form; model values met are added to ``model_values``.

    Raises:
        ItfError: a value of another type (with its type).
    """
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return {"#bigint": str(v)}
    if isinstance(v, ModelValue):
        if model_values is not None:
            model_values.add(str(v))
        return str(v)
    if isinstance(v, str):
        return v
    if isinstance(v, tuple):
        return [value_to_itf(x, model_values) for x in v]
    if isinstance(v, frozenset):
        return {"#set": sorted((value_to_itf(x, model_values) for x in v), key=_key)}
    if isinstance(v, FrozenRecord):
        return {str(k): value_to_itf(x, model_values) for k, x in v.items()}
    if isinstance(v, dict):
        return {"#map": sorted(([value_to_itf(k, model_values), value_to_itf(x, model_values)]
                                for k, x in v.items()), key=_key)}
    raise ItfError(f"no ITF form for a {type(v).__name__} value: {v!r}"[:200])


def value_from_itf(j: Any, model_values: frozenset[str] = frozenset()) -> Any:
    """The Python value (:mod:`.tlavalue`'s form) of one ITF value.

    Raises:
        ItfError: not an ITF value (or ``#unserializable``).
    """
    if isinstance(j, bool):
        return j
    if isinstance(j, int):
        return j
    if isinstance(j, str):
        return ModelValue(j) if j in model_values else j
    if isinstance(j, list):
        return tuple(value_from_itf(x, model_values) for x in j)
    if isinstance(j, dict):
        if "#bigint" in j:
            return int(j["#bigint"])
        if "#tup" in j:
            return tuple(value_from_itf(x, model_values) for x in j["#tup"])
        if "#set" in j:
            return frozenset(value_from_itf(x, model_values) for x in j["#set"])
        if "#map" in j:
            return FrozenDict((value_from_itf(k, model_values), value_from_itf(x, model_values)) for k, x in j["#map"])
        if "#unserializable" in j:
            raise ItfError(f"an #unserializable value ({j['#unserializable'][:80]!r}) cannot be read")
        return FrozenRecord((k, value_from_itf(x, model_values)) for k, x in j.items())
    raise ItfError(f"not an ITF value: {j!r}"[:200])


def trace_to_itf(states: list[dict[str, Any]], actions: list[str] | None = None, source: str = "",
                 description: str = "") -> dict[str, Any]:
    """An ITF trace of ``states`` (each ``{variable: value}``, as
    ``TraceState.values()`` gives them); ``actions[i]``: the action that
    produced state ``i`` (recorded in its ``#meta``).

    Raises:
        ItfError: a value with no ITF form, or states with different variables.
    """
    names = sorted(states[0]) if states else []
    model_values: set[str] = set()
    out = []
    for i, s in enumerate(states):
        if sorted(s) != names:
            raise ItfError(f"state {i} has the variables {sorted(s)}, the first one {names}")
        meta: dict[str, Any] = {"index": i}
        if actions is not None and i < len(actions):
            meta["action"] = actions[i]
        out.append({"#meta": meta, **{n: value_to_itf(s[n], model_values) for n in names}})
    meta = {"format": "ITF", "format-description": FORMAT_DESCRIPTION, "source": source,
            "description": description, "model-values": sorted(model_values)}
    return {"#meta": meta, "vars": names, "states": out}


def trace_from_itf(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The states of an ITF trace, each ``{variable: value}`` (model values
    as :class:`~.tlavalue.ModelValue` where ``#meta.model-values`` lists them).

    Raises:
        ItfError: not an ITF trace (no ``vars``/``states``, a state missing a variable).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("vars"), list) or not isinstance(doc.get("states"), list):
        raise ItfError("not an ITF trace: it needs a list 'vars' and a list 'states'")
    mv = frozenset((doc.get("#meta") or {}).get("model-values") or ())
    out = []
    for i, st in enumerate(doc["states"]):
        missing = [v for v in doc["vars"] if v not in st]
        if missing:
            raise ItfError(f"ITF state {i} lacks the variables {missing}")
        out.append({v: value_from_itf(st[v], mv) for v in doc["vars"]})
    return out


__all__ = ["FORMAT_DESCRIPTION", "ITF_SCHEMA", "ItfError", "trace_from_itf", "trace_to_itf", "value_from_itf",
           "value_to_itf"]
