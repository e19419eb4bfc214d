"""Builds the GLMDeployment CustomResourceDefinition from the pydantic models.

Kubernetes wants a *structural* OpenAPI v3 schema: every node typed, no `$ref`, no `anyOf` with null,
no `additionalProperties` beside `properties`. Pydantic emits JSON Schema, so this module inlines
references, turns optional fields into plain (not required) ones and keeps only the keywords the API
server understands. The result is deterministic, so the committed YAML can be checked for drift.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from pydantic import BaseModel

from glm_operator.api import v1alpha1 as api

# Keywords the API server's structural schema accepts and we use.
_KEPT = {
    "type",
    "description",
    "default",
    "enum",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "items",
    "properties",
    "required",
    "nullable",
}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Inline `$ref`s and drop JSON Schema constructs Kubernetes does not accept."""
    if isinstance(node, list):
        return [_resolve(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = copy.deepcopy(defs[node.pop("$ref").rsplit("/", 1)[-1]])
        target.update(node)  # the field's own description and default win over the type's
        return _resolve(target, defs)
    if "anyOf" in node:  # Optional[X] -> X; the field is simply not required
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express a union of {len(options)} types structurally: {options}")
        merged = dict(options[0])
        merged.update(node)
        return _resolve(merged, defs)
    if "const" in node:  # Literal with a single value
        node["enum"] = [node.pop("const")]
    if node.get("default", ...) is None:
        node.pop("default")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _resolve(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = _resolve(value, defs)
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = _resolve(value, defs)  # a map: dict[str, X]
        elif key in _KEPT or key.startswith("x-kubernetes-"):
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "properties" in out:
        out.setdefault("type", "object")
    # A fixed key order keeps the generated YAML readable and diffs small.
    head = {k: out[k] for k in ("type", "description") if k in out}
    return head | {k: out[k] for k in sorted(out) if k not in head}


def _schema_of(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    resolved: dict[str, Any] = _resolve(raw, defs)
    return resolved


def openapi_schema() -> dict[str, Any]:
    """The openAPIV3Schema of GLMDeployment v1alpha1."""
    status = _schema_of(api.GLMDeploymentStatus)
    spec = _schema_of(api.GLMDeploymentSpec)
    return {
        "type": "object",
        "description": (api.GLMDeployment.__doc__ or "").strip(),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "glmops.dev/v1alpha1"},
            "kind": {"type": "string", "description": "GLMDeployment"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name"},
    {"name": "Accelerator", "type": "string", "jsonPath": ".spec.accelerator.type"},
    {"name": "Parallelism", "type": "string", "jsonPath": ".status.parallelism"},
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "priority": 1},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {
        "name": "Validated",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Validated")].status',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def build_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{api.PLURAL}.{api.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "glmops"},
        },
        "spec": {
            "group": api.GROUP,
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": list(api.SHORT_NAMES),
                "categories": ["glmops"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


HEADER = "# Generated by `glmctl crd` from operator/glm_operator/api. Do not edit by hand.\n"


def render_crd_yaml() -> str:
    """The CRD as the YAML text committed under crds/ and the chart."""
    body = yaml.safe_dump(build_crd(), sort_keys=False, width=100, allow_unicode=True)
    return HEADER + body
