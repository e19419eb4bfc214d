"""GLMImage, glmops.dev/v1alpha1: one patched vLLM image the operator builds in the cluster.

Cluster-scoped and named after platform and version (`vllm-cuda-v0-33-0-glmops-1`), so every
GLMDeployment that asks for the same image shares one object and one build. The operator creates
these itself; a person reads them (`kubectl get glmi`) and deletes a Failed one to build it again.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict, Field

from glm_operator.api.constants import Platform
from glm_operator.api.v1alpha1 import GROUP, Condition, _Model

IMAGE_KIND = "GLMImage"
IMAGE_PLURAL = "glmimages"
IMAGE_SINGULAR = "glmimage"
IMAGE_SHORT_NAMES = ("glmi",)
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"


class Builder(StrEnum):
    """The in-cluster image builder the build Job runs."""

    KANIKO = "kaniko"
    BUILDKIT = "buildkit"


class ImagePhase(StrEnum):
    """Where a GLMImage's build stands."""

    PENDING = "Pending"
    BUILDING = "Building"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class GLMImageSpec(_Model):
    """The image to produce: glmops' patch plugin on top of the stock vLLM image of one release."""

    vllm_version: str = Field(
        pattern=r"^[0-9]+\.[0-9]+\.[0-9]+([a-z]+[0-9]*)?$",
        description="vLLM release the image is based on, e.g. 0.33.0.",
    )
    platform: Platform = Field(description="cuda (vllm/vllm-openai) or rocm (vllm/vllm-openai-rocm).")
    image: str = Field(
        min_length=1,
        max_length=512,
        description="The reference the build pushes to, e.g. registry.example.com/glmops/vllm-openai:v0.33.0-glmops.1.",
    )
    patches: list[str] = Field(default_factory=list, description="glmops patches the plugin applies in this image.")
    builder: Builder = Field(
        default=Builder.BUILDKIT,
        description="buildkit (rootless; the default) or kaniko (its upstream repository was archived in June 2025).",
    )


class GLMImageStatus(_Model):
    """Observed state of the build, written by the operator."""

    model_config = ConfigDict(extra="ignore")

    phase: ImagePhase | None = Field(default=None, description="Pending, Building, Succeeded or Failed.")
    digest: str | None = Field(
        default=None, pattern=DIGEST_PATTERN, description="Content digest of the pushed image (sha256:...)."
    )
    image_ref: str | None = Field(
        default=None, description="The image pinned by digest (image@sha256:...), what workloads run."
    )
    job: str | None = Field(default=None, description="The build Job, as namespace/name.")
    log_tail: str | None = Field(
        default=None, max_length=8192, description="The end of the build log when the build failed."
    )
    step: str | None = Field(
        default=None,
        max_length=256,
        description="While Building: the step the build is at, from its log (BuildKit: `[2/3] RUN ...`).",
    )
    attempts: int | None = Field(default=None, ge=0, description="Build Jobs started for this object.")
    observed_generation: int | None = Field(default=None, ge=0, description="The .metadata.generation acted on.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Built: True once the digest is known, False with the reason when the build failed.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class GLMImage(_Model):
    """A patched vLLM image built in the cluster and pinned by digest, shared by the GLMDeployments using it."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["glmops.dev/v1alpha1"] = Field(default="glmops.dev/v1alpha1")
    kind: Literal["GLMImage"] = Field(default="GLMImage")
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: GLMImageSpec
    status: GLMImageStatus = Field(default_factory=GLMImageStatus)


__all__ = [
    "DIGEST_PATTERN",
    "GROUP",
    "IMAGE_KIND",
    "IMAGE_PLURAL",
    "IMAGE_SHORT_NAMES",
    "IMAGE_SINGULAR",
    "Builder",
    "GLMImage",
    "GLMImageSpec",
    "GLMImageStatus",
    "ImagePhase",
]
