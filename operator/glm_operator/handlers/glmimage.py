"""GLMImage handlers: start each image's build once, follow its Job, wake the deployments waiting on it.

Registered only with image builds enabled (GLMOPS_IMAGE_BUILD_ENABLED), so a cluster without the
GLMImage CRD runs as before. A Failed image stays failed: deleting it builds it again.
"""

from __future__ import annotations

from typing import Any

import kopf

from glm_operator.api import GROUP, PLURAL, VERSION
from glm_operator.api.constants import ImageConditionType
from glm_operator.api.glmimage import IMAGE_PLURAL, ImagePhase
from glm_operator.control import refreshes
from glm_operator.control.runtime import REGISTRATION, runtime
from glm_operator.k8s import metrics
from glm_operator.k8s.imagebuild import follow_build, start_build
from glm_operator.render.imagebuild import planned_image


def build(body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger, memo: kopf.Memo, **_: Any) -> None:
    """Pin the digest the registry already has, or create the build context and Job."""
    context = runtime(memo)
    status = start_build(dict(body), context.image_build, context.catalogs.get())
    patch.status.update(status)
    if status.get("phase"):
        kopf.info(body, reason=status["phase"], message=status["conditions"][-1]["message"])


def follow(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    """Record the step a running build is at, and its outcome once it finished: the digest, or the reason and log
    tail."""
    status = follow_build(dict(body), runtime(memo).image_build)
    patch.status.update(status)
    metrics.record_build_finished(body, status)
    if status.get("conditions"):  # finished (a step alone is progress, said in status only)
        built = next(c for c in status["conditions"] if c["type"] == ImageConditionType.BUILT)
        (kopf.info if built["status"] == "True" else kopf.warn)(body, reason=built["reason"], message=built["message"])


def building(status: kopf.Status, **_: Any) -> bool:
    return bool(status.get("phase") == ImagePhase.BUILDING.value)


def image_users(
    spec: kopf.Spec, namespace: str | None, name: str, memo: kopf.Memo, **_: Any
) -> dict[str, tuple[str, str]] | None:
    """Index GLMDeployments by the image they run, so a GLMImage's change finds its waiting users."""
    ref = planned_image(dict(spec), runtime(memo).catalogs.get())
    return {ref: (namespace, name)} if ref and namespace else None


async def wake_users(body: kopf.Body, logger: kopf.Logger, memo: kopf.Memo, **kwargs: Any) -> None:
    """A GLMImage changed (or was deleted, to rebuild): refresh every deployment running its image, each through its
    own work queue like any other refresh (one run per deployment at a time)."""
    if kwargs.get("type") == "DELETED":
        metrics.forget_image(body.get("metadata", {}).get("name", ""))
    else:
        metrics.record_image(body)
    users: kopf.Index[str, tuple[str, str]] = kwargs["image_users"]  # kopf passes indexes by their id
    for namespace, name in list(users.get(body.get("spec", {}).get("image", ""), [])):
        refreshes.request_refresh(runtime(memo), (namespace, name), logger)


if REGISTRATION.enabled:
    kopf.on.resume(GROUP, VERSION, IMAGE_PLURAL, id="glmops-image-build")(build)
    kopf.on.create(GROUP, VERSION, IMAGE_PLURAL, id="glmops-image-build")(build)
    poll = REGISTRATION.poll_seconds
    kopf.timer(GROUP, VERSION, IMAGE_PLURAL, id="glmops-image-follow", interval=poll, when=building)(follow)
    kopf.index(GROUP, VERSION, PLURAL, id="image_users")(image_users)
    kopf.on.event(GROUP, VERSION, IMAGE_PLURAL, id="glmops-image-users")(wake_users)
