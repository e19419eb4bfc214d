"""Build one GLMImage as a pure decision: what to create and which status to write, from what was observed.

`plan_start` decides a new GLMImage's first step: pin the digest the registry already has, or the build context
and Job to create (or why they cannot be made). `plan_follow` reads the build Job and its pods once it ran. The
kopf handlers (handlers/glmimage.py) only observe through `k8s/imagebuild.py`, call these and write the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from glm_operator.api.conditions import set_condition
from glm_operator.api.constants import ImageConditionType, ImageReason
from glm_operator.api.glmimage import GLMImage, ImagePhase
from glm_operator.catalog.bundle import Catalogs
from glm_operator.render.dockerfile import build_args, render_dockerfile
from glm_operator.render.imagebuild import BuildSettings, build_job, context_configmap, job_name
from glm_operator.render.imagestate import BuildOutcome, build_outcome, build_step, image_status


@dataclass(frozen=True)
class ImageObserved:
    """What the handler read: the registry's digest for the tag (None: absent or unknown), the plugin wheel."""

    digest: str | None = None
    wheel: bytes | None = None
    wheel_error: str | None = None


@dataclass(frozen=True)
class ImageOutcome:
    """Objects to create (a creation already done by an earlier attempt is fine) and the status to write."""

    status: dict[str, Any]
    create: tuple[dict[str, Any], ...] = field(default=())


def needs_start(body: dict[str, Any]) -> bool:
    """A GLMImage whose build was never started (a restarted operator must not start it twice)."""
    return GLMImage.model_validate(body).status.phase is None


def plan_start(
    body: dict[str, Any], observed: ImageObserved, catalogs: Catalogs, settings: BuildSettings
) -> ImageOutcome:
    """Pin the registry's digest, or create the build context and Job."""
    image = GLMImage.model_validate(body)
    generation = image.metadata.get("generation")
    spec = image.spec
    if image.status.phase is not None:
        return ImageOutcome(status={})  # already under way or finished
    if observed.digest is not None:
        found = BuildOutcome(
            True, "FoundInRegistry", f"{spec.image} is already in the registry", digest=observed.digest
        )
        return ImageOutcome(status=image_status({}, found, spec.image, generation))
    try:
        if observed.wheel is None:
            raise ValueError(observed.wheel_error or "the plugin wheel is missing")
        dockerfile = render_dockerfile(spec.platform, catalogs.images)
        args = build_args(catalogs.images, spec.platform, spec.vllm_version)
        configmap = context_configmap(image, settings, dockerfile, observed.wheel)
        job = build_job(image, settings, args)
    except ValueError as err:
        return ImageOutcome(
            status=image_status({}, BuildOutcome(False, ImageReason.CONTEXT_INVALID, str(err)), spec.image, generation)
        )
    job_ref = f"{settings.namespace}/{job['metadata']['name']}"
    status = {
        "phase": ImagePhase.BUILDING.value,
        "job": job_ref,
        "attempts": (image.status.attempts or 0) + 1,
        "observedGeneration": generation,
        "conditions": set_condition(
            [],
            ImageConditionType.BUILT,
            "False",
            ImageReason.BUILDING,
            f"Job {job_ref} builds {spec.image}",
            generation,
        ),
    }
    return ImageOutcome(status=status, create=(configmap, job))


def plan_follow(
    body: dict[str, Any],
    job: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    settings: BuildSettings,
    log: str | None = None,
) -> dict[str, Any]:
    """The status to write: once the build Job finished, its outcome; while it runs, the step its log (`log`, the
    end of the build container's) shows, when that changed; {} for nothing new."""
    image = GLMImage.model_validate(body)
    status: dict[str, Any] = body.get("status") or {}
    generation = image.metadata.get("generation")
    if job is None:
        where = f"{settings.namespace}/{job_name(image)}"
        gone = BuildOutcome(False, "JobMissing", f"build Job {where} disappeared before finishing")
        return {**image_status(status, gone, image.spec.image, generation), "step": None}
    outcome = build_outcome(job, pods)
    if outcome is not None:
        return {**image_status(status, outcome, image.spec.image, generation), "step": None}
    step = build_step(log) if log else None
    return {"step": step} if step is not None and step != image.status.step else {}
