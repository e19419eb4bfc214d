"""Builds the GLMDeployment and GLMImage CustomResourceDefinitions from the pydantic models.

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

from glm_operator.api import glmimage
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
    "maxProperties",
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
    if node.get("x-kubernetes-int-or-string"):  # int | str: the one union a structural schema allows
        return {k: v for k, v in node.items() if k in _KEPT or k in ("anyOf", "x-kubernetes-int-or-string")}
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


def _root_schema(model: type[BaseModel], kind: str, spec: type[BaseModel], status: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "object",
        "description": (model.__doc__ or "").strip(),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": api.API_VERSION},
            "kind": {"type": "string", "description": kind},
            "metadata": {"type": "object"},
            "spec": _schema_of(spec),
            "status": _schema_of(status),
        },
    }


def openapi_schema() -> dict[str, Any]:
    """The openAPIV3Schema of GLMDeployment v1alpha1."""
    return _root_schema(api.GLMDeployment, api.KIND, api.GLMDeploymentSpec, api.GLMDeploymentStatus)


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name"},
    {"name": "Accelerator", "type": "string", "jsonPath": ".spec.accelerator.type"},
    {"name": "Parallelism", "type": "string", "jsonPath": ".status.parallelism"},
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "priority": 1},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
    {
        "name": "Validated",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Validated")].status',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


IMAGE_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Platform", "type": "string", "jsonPath": ".spec.platform"},
    {"name": "vLLM", "type": "string", "jsonPath": ".spec.vllmVersion"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Step", "type": "string", "jsonPath": ".status.step", "priority": 1},
    {"name": "Image", "type": "string", "jsonPath": ".spec.image", "priority": 1},
    {"name": "Digest", "type": "string", "jsonPath": ".status.digest", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _crd(
    kind: str,
    plural: str,
    singular: str,
    short_names: tuple[str, ...],
    scope: str,
    schema: dict[str, Any],
    subresources: dict[str, Any],
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{api.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "glmops"},
        },
        "spec": {
            "group": api.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": list(short_names),
                "categories": ["glmops"],
            },
            "scope": scope,
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def build_crd() -> dict[str, Any]:
    """The GLMDeployment CustomResourceDefinition."""
    scale = {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    return _crd(
        api.KIND,
        api.PLURAL,
        api.SINGULAR,
        api.SHORT_NAMES,
        "Namespaced",
        openapi_schema(),
        {"status": {}, "scale": scale},
        PRINTER_COLUMNS,
    )


def build_image_crd() -> dict[str, Any]:
    """The GLMImage CustomResourceDefinition: cluster-scoped, one object per patched image."""
    schema = _root_schema(glmimage.GLMImage, glmimage.IMAGE_KIND, glmimage.GLMImageSpec, glmimage.GLMImageStatus)
    return _crd(
        glmimage.IMAGE_KIND,
        glmimage.IMAGE_PLURAL,
        glmimage.IMAGE_SINGULAR,
        glmimage.IMAGE_SHORT_NAMES,
        "Cluster",
        schema,
        {"status": {}},
        IMAGE_PRINTER_COLUMNS,
    )


HEADER = "# Generated by `glmctl crd` from operator/glm_operator/api. Do not edit by hand.\n"


def _yaml(crd: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(crd, sort_keys=False, width=100, allow_unicode=True)


def render_crd_yaml() -> str:
    """The GLMDeployment CRD as the YAML text committed under crds/ and the chart."""
    return _yaml(build_crd())


def render_image_crd_yaml() -> str:
    """The GLMImage CRD as the YAML text committed under crds/ and the chart."""
    return _yaml(build_image_crd())
