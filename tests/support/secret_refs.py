"""Where a GLMDeployment names a Secret: every field of the API models typed SecretKeyRef, by wire path."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel

from glm_operator.api import GLMDeploymentSpec
from glm_operator.api.v1alpha1 import SecretKeyRef


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (through Optional, list, dict and unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    if typing.get_origin(annotation) is not None or isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            out += _models_in(arg)
    return out


def secret_reference_paths(model: type[BaseModel] = GLMDeploymentSpec, prefix: str = "spec") -> list[str]:
    """Wire paths (camelCase, `[]` for list items) of every SecretKeyRef field under `model`."""
    paths: list[str] = []
    for name, field in model.model_fields.items():
        wire = field.alias or name
        is_list = typing.get_origin(field.annotation) is list or any(
            typing.get_origin(a) is list for a in typing.get_args(field.annotation)
        )
        path = f"{prefix}.{wire}" + ("[]" if is_list else "")
        for sub in _models_in(field.annotation):
            if sub is SecretKeyRef:
                paths.append(path)
            else:
                paths += secret_reference_paths(sub, path)
    return paths
