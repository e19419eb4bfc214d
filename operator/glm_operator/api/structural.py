"""A manifest checked against the CRD's structural schema, as the API server checks it.

`glmctl validate` runs without a cluster, yet must refuse what the API server refuses: unknown fields
(kubectl's strict field validation, the default of `kubectl apply`), snake_case spellings of camelCase
fields, wrong types, values out of range and duplicate list keys. The checks read the generated
openAPIV3Schema itself, so the CRD stays the one truth; the pydantic models only run afterwards.
Nulls are dropped first, as the API server prunes a null on a field that is not nullable.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from glm_operator.api.crd import openapi_schema

# metadata is the API server's own; status is ignored on writes to the main resource.
_NOT_CHECKED = {"metadata", "status"}


@dataclass(frozen=True)
class SchemaProblem:
    """One place where a manifest breaks the schema, in the words a person acts on."""

    path: str
    value: str
    problem: str
    fix: str


@cache
def _root() -> dict[str, Any]:
    return openapi_schema()


def drop_nulls(node: Any) -> Any:
    """The object as the API server keeps it: keys whose value is null are gone."""
    if isinstance(node, dict):
        return {k: drop_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [drop_nulls(v) for v in node]
    return node


SHOWN_CHARS = 200
"""Longest value a message quotes whole: a 5 MB string is cut, with its length said."""


def show(value: Any) -> str:
    """A value as a message quotes it: scalars as JSON (cut past SHOWN_CHARS), containers elided."""
    if isinstance(value, dict):
        return "{...}"
    if isinstance(value, list):
        return "[...]"
    text = json.dumps(value)
    if len(text) <= SHOWN_CHARS + 40:
        return text
    return f"{text[:SHOWN_CHARS]}... (truncated, {len(text)} characters in all)"


def explain_path(path: str) -> str:
    """`spec.engine.env[0].name` -> `glmdeployment.spec.engine.env.name`, as `kubectl explain` takes it."""
    return "glmdeployment." + re.sub(r"\[[^]]*\]", "", path)


def check(obj: dict[str, Any]) -> list[SchemaProblem]:
    """Every place where `obj` (a GLMDeployment manifest) breaks the CRD's schema; empty when none."""
    return check_cleaned(drop_nulls(obj))


def check_cleaned(obj: dict[str, Any]) -> list[SchemaProblem]:
    """`check` of an object whose null-valued keys are already dropped (`drop_nulls`)."""
    root = _root()
    out: list[SchemaProblem] = []
    top = {k: v for k, v in obj.items() if k not in _NOT_CHECKED}
    _object(top, {**root, "properties": _without(root["properties"], _NOT_CHECKED)}, "", out)
    return out


def _without(props: dict[str, Any], names: set[str]) -> dict[str, Any]:
    return {k: v for k, v in props.items() if k not in names}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _problem(out: list[SchemaProblem], path: str, value: Any, problem: str, fix: str | None = None) -> None:
    out.append(SchemaProblem(path, show(value), problem, fix or f"See `kubectl explain {explain_path(path)}`"))


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def _node(value: Any, schema: dict[str, Any], path: str, out: list[SchemaProblem]) -> None:
    kind = schema.get("type")
    if schema.get("x-kubernetes-int-or-string") and (isinstance(value, bool) or not isinstance(value, int | str)):
        _problem(out, path, value, f"must be an integer or a string, not {_json_type(value)}")
        return
    if kind is not None:
        wanted = _TYPES[kind]
        if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
            _problem(out, path, value, f"must be of type {kind}, not {_json_type(value)}")
            return
    if isinstance(value, dict):
        _object(value, schema, path, out)
    elif isinstance(value, list):
        _array(value, schema, path, out)
    else:
        _scalar(value, schema, path, out)


def _json_type(value: Any) -> str:
    for name, types in (("boolean", (bool,)), ("integer", (int,)), ("number", (float,)), ("string", (str,))):
        if isinstance(value, types):
            return name
    return "object" if isinstance(value, dict) else "array" if isinstance(value, list) else type(value).__name__


def _object(value: dict[str, Any], schema: dict[str, Any], path: str, out: list[SchemaProblem]) -> None:
    props: dict[str, Any] | None = schema.get("properties")
    extra = schema.get("additionalProperties")
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        _problem(out, path, value, f"must have at most {schema['maxProperties']} entries, has {len(value)}")
    for name in schema.get("required", []):
        if name not in value:
            _problem(out, _join(path, name), None, "required field is missing")
    for key, sub in value.items():
        where = _join(path, str(key))
        if props is not None and key in props:
            _node(sub, props[key], where, out)
        elif isinstance(extra, dict):
            _node(sub, extra, where, out)
        elif schema.get("x-kubernetes-preserve-unknown-fields") is not True:  # kept whole, as the API server does
            _problem(out, where, sub, "unknown field: the API server refuses it", _suggest(str(key), props or {}, path))


def _suggest(key: str, props: dict[str, Any], parent: str) -> str:
    """Name the field that was most likely meant: the same letters without underscores or case."""
    folded = key.replace("_", "").replace("-", "").lower()
    for name in props:
        if name.lower() == folded:
            return f"Write it {_join(parent, name)}"
    return f"Fields here: {', '.join(sorted(props))}" if props else "Remove it"


def _array(value: list[Any], schema: dict[str, Any], path: str, out: list[SchemaProblem]) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        _problem(out, path, value, f"must have at most {schema['maxItems']} items, has {len(value)}")
    if "minItems" in schema and len(value) < schema["minItems"]:
        _problem(out, path, value, f"must have at least {schema['minItems']} items, has {len(value)}")
    items = schema.get("items") or {}
    for i, item in enumerate(value):
        _node(item, items, f"{path}[{i}]", out)
    keys = schema.get("x-kubernetes-list-map-keys")
    if schema.get("x-kubernetes-list-type") == "map" and keys:
        seen: set[tuple[Any, ...]] = set()
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = tuple(json.dumps(item.get(k)) for k in keys)
            if key in seen:
                named = ", ".join(f"{k}={item.get(k)}" for k in keys)
                _problem(out, f"{path}[{i}]", item, f"duplicate entry ({named})", "Keep one entry per key")
            seen.add(key)


def _scalar(value: Any, schema: dict[str, Any], path: str, out: list[SchemaProblem]) -> None:
    if "enum" in schema and value not in schema["enum"]:
        _problem(out, path, value, "must be one of " + ", ".join(json.dumps(v) for v in schema["enum"]))
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            _problem(out, path, value, f"must be at most {schema['maxLength']} characters")
        if "minLength" in schema and len(value) < schema["minLength"]:
            _problem(out, path, value, f"must be at least {schema['minLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            _problem(out, path, value, f"must match {schema['pattern']}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _bounds(float(value), schema, path, out)


_BOUNDS: tuple[tuple[str, Callable[[float, float], bool], str], ...] = (
    ("minimum", operator.ge, "must be greater than or equal to"),
    ("maximum", operator.le, "must be less than or equal to"),
    ("exclusiveMinimum", operator.gt, "must be greater than"),
    ("exclusiveMaximum", operator.lt, "must be less than"),
)


def _bounds(value: float, schema: dict[str, Any], path: str, out: list[SchemaProblem]) -> None:
    shown = int(value) if value.is_integer() else value
    for key, ok, words in _BOUNDS:
        if key in schema and not ok(value, float(schema[key])):
            _problem(out, path, shown, f"{words} {schema[key]}")
