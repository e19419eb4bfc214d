"""values.schema.json and the chart's values table, generated from the commented values.yaml.

A `# -- text` comment right above a key documents it (continued by further `#` lines). Types come
from the default values; a `# @schema {enum: [...], minimum: N}` line in that comment adds JSON-schema
keywords (enum, minimum, maximum, pattern), checked against the default. It may also replace what the
default implies: `type` (e.g. `[string, number]` for a Kubernetes quantity, which `--set` turns into a number
when it has no unit; `pattern` then applies to the strings only), `items` (the schema of a list's entries,
for a list that is empty by default) and `additionalProperties` (the schema of a mapping's free keys, or
`true` to keep a documented mapping open, as `global`, which a parent chart fills). A mapping whose every
key is documented is otherwise closed (`additionalProperties: false`), so a typo in a documented section
fails `helm install` instead of being silently ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import yaml

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):")


_ANNOTATION = "# @schema"
_KEYWORDS = frozenset({"enum", "minimum", "maximum", "pattern", "type", "items", "additionalProperties"})
# JSON-schema type names and the Python values of a YAML default each admits (bool is not a number in JSON).
_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def value_descriptions(text: str) -> dict[tuple[str, ...], str]:
    """Map each documented key path to its `# --` description."""
    return _documented(text)[0]


def schema_annotations(text: str) -> dict[tuple[str, ...], dict[str, Any]]:
    """Map each key path with a `# @schema {...}` line to those JSON-schema keywords."""
    return _documented(text)[1]


def _annotation(line: str) -> dict[str, Any]:
    extra = yaml.safe_load(line.removeprefix(_ANNOTATION)) or {}
    if not isinstance(extra, dict) or not set(extra) <= _KEYWORDS:
        raise ValueError(f"{line!r}: expected a mapping of {', '.join(sorted(_KEYWORDS))}")
    return extra


def _documented(text: str) -> tuple[dict[tuple[str, ...], str], dict[tuple[str, ...], dict[str, Any]]]:
    docs: dict[tuple[str, ...], str] = {}
    annotations: dict[tuple[str, ...], dict[str, Any]] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    extra: dict[str, Any] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending, extra = [stripped[4:].strip()], {}
            continue
        if stripped.startswith(_ANNOTATION) and pending is not None:
            extra.update(_annotation(stripped))
            continue
        if stripped.startswith("#") and pending is not None:
            pending.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if not match or stripped.startswith("-"):
            pending = None if not stripped else pending
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        if pending:
            docs[tuple(k for _, k in stack)] = " ".join(pending)
            if extra:
                annotations[tuple(k for _, k in stack)] = extra
        pending, extra = None, {}
    return docs, annotations


def _schema(
    value: Any,
    path: tuple[str, ...],
    docs: dict[tuple[str, ...], str],
    extras: dict[tuple[str, ...], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    node: dict[str, Any]
    extras = extras or {}
    if isinstance(value, dict):
        props = {k: _schema(v, (*path, k), docs, extras) for k, v in value.items()}
        node = {"type": "object"}
        if props:
            node["properties"] = props
            if all((*path, k) in docs for k in value):
                node["additionalProperties"] = False
    elif isinstance(value, list):
        node = {"type": "array"}
        if value:
            node["items"] = _schema(value[0], (*path, "[]"), docs, extras)
    elif isinstance(value, bool):
        node = {"type": "boolean"}
    elif isinstance(value, int):
        node = {"type": "integer"}
    elif isinstance(value, float):
        node = {"type": "number"}
    elif value is None:
        node = {}
    else:
        node = {"type": "string"}
    if path in extras:
        _check_default(path, value, extras[path])
        node.update(extras[path])
    if path in docs:
        node["description"] = docs[path]
    return node


def _check_default(path: tuple[str, ...], value: Any, extra: dict[str, Any]) -> None:
    """A default its own schema refuses would make every install fail: refuse it at generation instead."""
    where = ".".join(path)
    types = extra.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        unknown = [t for t in names if t not in _TYPES]
        if unknown:
            raise ValueError(f"values.yaml {where}: @schema type {unknown} is not a JSON-schema type")
        if not any(_TYPES[t](value) for t in names):
            raise ValueError(f"values.yaml {where}: default {value!r} is not of its @schema type {types}")
    if isinstance(value, str) and "pattern" in extra and not re.search(extra["pattern"], value):
        raise ValueError(f"values.yaml {where}: default {value!r} does not match its @schema pattern")
    if "enum" in extra and value not in extra["enum"]:
        raise ValueError(f"values.yaml {where}: default {value!r} is not in its @schema enum {extra['enum']}")
    if "minimum" in extra and _TYPES["number"](value) and value < extra["minimum"]:
        raise ValueError(f"values.yaml {where}: default {value!r} is below its @schema minimum {extra['minimum']}")
    if "maximum" in extra and _TYPES["number"](value) and value > extra["maximum"]:
        raise ValueError(f"values.yaml {where}: default {value!r} is above its @schema maximum {extra['maximum']}")


def values_schema(values_text: str) -> dict[str, Any]:
    """The JSON schema of the chart's values."""
    values = yaml.safe_load(values_text) or {}
    docs, extras = _documented(values_text)
    schema = {
        "$schema": "https://json-schema.org/draft-07/schema#",
        **_schema(values, (), docs, extras),
    }
    return schema


def render_values_schema(values_text: str) -> str:
    return json.dumps(values_schema(values_text), indent=2) + "\n"


def values_table(values_text: str) -> str:
    """A Markdown table of every documented value, for the chart README."""
    values = yaml.safe_load(values_text) or {}
    docs, extras = _documented(values_text)
    rows = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for path, text in docs.items():
        node: Any = values
        for key in path:
            node = node[key]
        kind = extras.get(path, {}).get("type") or _schema(node, (), {}).get("type", "")
        kind = kind if isinstance(kind, str) else " or ".join(kind)
        default = json.dumps(node) if not isinstance(node, dict) or not node else "see values.yaml"
        rows.append(f"| `{'.'.join(path)}` | {kind} | `{default}` | {text} |")
    return "\n".join(rows) + "\n"
