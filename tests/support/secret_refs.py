"""Where a GLMDeployment can name a Secret, by wire path: every field of the API models that is a Secret reference
(SecretKeyRef, LocalObjectReference), a pass-through Kubernetes object (a model that keeps unknown fields, such as
a Volume, which can hold a secret source), or whose description speaks of a Secret."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel

from glm_operator.api import GLMDeploymentSpec
from glm_operator.api.pod import LocalObjectReference
from glm_operator.api.v1alpha1 import SecretKeyRef

SECRET_TYPES: tuple[type[BaseModel], ...] = (SecretKeyRef, LocalObjectReference)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (through Optional, list, dict and unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    if typing.get_origin(annotation) is not None or isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            out += _models_in(arg)
    return out


def _passes_through(model: type[BaseModel]) -> bool:
    return model.model_config.get("extra") == "allow"


def secret_reference_paths(model: type[BaseModel] = GLMDeploymentSpec, prefix: str = "spec") -> list[str]:
    """Wire paths (camelCase, `[]` for list items) of every field under `model` that can name a Secret."""
    paths: list[str] = []
    for name, field in model.model_fields.items():
        wire = field.alias or name
        is_list = typing.get_origin(field.annotation) is list or any(
            typing.get_origin(a) is list for a in typing.get_args(field.annotation)
        )
        path = f"{prefix}.{wire}" + ("[]" if is_list else "")
        models = _models_in(field.annotation)
        names_secret = not models and "secret" in (field.description or "").lower()  # e.g. a plain name string
        if names_secret or any(sub in SECRET_TYPES or _passes_through(sub) for sub in models):
            paths.append(path)
            continue
        for sub in models:
            paths += secret_reference_paths(sub, path)
    return paths
