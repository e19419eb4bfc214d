"""GLMImages on the API server: one per patched image a deployment needs, its build Job, its outcome.

The decisions are pure (render/imagebuild.py, render/imagestate.py); this module reads and writes
the objects. A GLMImage is created once and never fought over: a second deployment asking for the
same image finds it and waits on it.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from pathlib import Path
from typing import Any, cast

import httpx
import kubernetes
import urllib3
from kubernetes.dynamic.exceptions import ConflictError

from glm_operator.api import GROUP, VERSION
from glm_operator.api.glmimage import IMAGE_PLURAL, GLMImage
from glm_operator.catalog.bundle import Catalogs
from glm_operator.k8s.client import api_client, core_v1
from glm_operator.k8s.objects import dynamic
from glm_operator.k8s.registry import Credentials, RegistryError, credentials_for, remote_digest, split_ref
from glm_operator.planner.image import ImageObserved, needs_start, plan_follow, plan_start
from glm_operator.render.imagebuild import (
    BUILD_CONTAINER,
    REGISTRY_CA_KEY,
    BuildSettings,
    job_name,
)

log = logging.getLogger(__name__)
LOG_LINES = 400  # the end of a running build's log, read for the step it is at
LOG_BYTES = 65536
LOG_TIMEOUT_S = 10  # a kubelet that does not answer costs the follow-up this long, never the build


def _custom() -> Any:
    return kubernetes.client.CustomObjectsApi(api_client())


def get_glmimage(name: str) -> dict[str, Any] | None:
    try:
        return cast(dict[str, Any], _custom().get_cluster_custom_object(GROUP, VERSION, IMAGE_PLURAL, name))
    except kubernetes.client.ApiException as err:
        if err.status == 404:
            return None
        raise


def ensure_glmimage(manifest: dict[str, Any]) -> dict[str, Any]:
    """The GLMImage of that name, created from `manifest` if absent (losing a creation race is fine)."""
    name = manifest["metadata"]["name"]
    current = get_glmimage(name)
    if current is not None:
        return current
    try:
        return cast(dict[str, Any], _custom().create_cluster_custom_object(GROUP, VERSION, IMAGE_PLURAL, manifest))
    except kubernetes.client.ApiException as err:
        if err.status != 409:
            raise
    return get_glmimage(name) or manifest


def _push_credentials(settings: BuildSettings, ref: str) -> Credentials | None:
    if not settings.push_secret:
        return None
    try:
        secret = core_v1().read_namespaced_secret(settings.push_secret, settings.namespace)
    except kubernetes.client.ApiException as err:
        log.warning("cannot read push secret %s/%s: %s", settings.namespace, settings.push_secret, err.reason)
        return None
    raw = (secret.data or {}).get(".dockerconfigjson")
    return credentials_for(base64.b64decode(raw).decode(), split_ref(ref)[0]) if raw else None


def _registry_ca(settings: BuildSettings) -> str:
    """The registry's own certificate authority (PEM) from the ConfigMap `imageBuild.registryCA` names; "" for none."""
    if not settings.registry_ca:
        return ""
    try:
        found = core_v1().read_namespaced_config_map(settings.registry_ca, settings.namespace)
    except kubernetes.client.ApiException as err:
        log.warning("cannot read registry CA %s/%s: %s", settings.namespace, settings.registry_ca, err.reason)
        return ""
    return str((found.data or {}).get(REGISTRY_CA_KEY) or "")


def _existing_digest(ref: str, settings: BuildSettings) -> str | None:
    """The digest of `ref` if the registry has it already; None (so we build) when it cannot be told."""
    try:
        return remote_digest(ref, _push_credentials(settings, ref), settings.insecure, ca=_registry_ca(settings))
    except (RegistryError, httpx.HTTPError, ValueError, OSError) as err:  # OSError: a CA that does not load
        log.warning("could not ask the registry for %s (building it): %s", ref, err)
        return None


def _create(obj: dict[str, Any]) -> None:
    res = dynamic().resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    with contextlib.suppress(ConflictError):  # created by an earlier attempt of this handler: the same object
        res.create(body=obj, namespace=obj["metadata"]["namespace"])


def start_build(body: dict[str, Any], settings: BuildSettings, catalogs: Catalogs) -> dict[str, Any]:
    """Observe the registry and the plugin wheel, plan the first step, create its objects; return the status."""
    if not needs_start(body):
        return {}
    image = GLMImage.model_validate(body)
    try:
        wheel, wheel_error = Path(settings.plugin_wheel).read_bytes(), None
    except OSError as err:
        wheel, wheel_error = None, str(err)
    observed = ImageObserved(_existing_digest(image.spec.image, settings), wheel, wheel_error)
    outcome = plan_start(body, observed, catalogs, settings)
    for obj in outcome.create:
        _create(obj)
    return outcome.status


def follow_build(body: dict[str, Any], settings: BuildSettings) -> dict[str, Any]:
    """Read the build Job and its pods; the status to write once it finished, {} while it runs."""
    name = job_name(GLMImage.model_validate(body))
    batch = kubernetes.client.BatchV1Api(api_client())
    try:
        job = batch.read_namespaced_job(name, settings.namespace)
    except kubernetes.client.ApiException as err:
        if err.status != 404:
            raise
        return plan_follow(body, None, [], settings)
    pods = core_v1().list_namespaced_pod(settings.namespace, label_selector=f"batch.kubernetes.io/job-name={name}")
    client = api_client()
    items = client.sanitize_for_serialization(pods)["items"]
    job_body = client.sanitize_for_serialization(job)
    return plan_follow(body, job_body, items, settings, _build_log(items, settings))


def _build_log(pods: list[dict[str, Any]], settings: BuildSettings) -> str | None:
    """The end of the running build container's log (the step it is at), or None: no such container yet, or the
    log cannot be read (it only says how far the build got)."""
    running = [
        p["metadata"]["name"]
        for p in pods
        if any(
            s.get("name") == BUILD_CONTAINER and (s.get("state") or {}).get("running")
            for s in (p.get("status") or {}).get("containerStatuses") or []
        )
    ]
    if not running:
        return None
    try:
        return str(
            core_v1().read_namespaced_pod_log(
                running[0],
                settings.namespace,
                container=BUILD_CONTAINER,
                tail_lines=LOG_LINES,
                limit_bytes=LOG_BYTES,
                _request_timeout=LOG_TIMEOUT_S,
            )
        )
    except (kubernetes.client.ApiException, urllib3.exceptions.HTTPError) as err:
        log.debug("cannot read the build log of %s: %s", running[0], err)
        return None


def patch_glmimage_status(name: str, status: dict[str, Any]) -> None:
    _custom().patch_cluster_custom_object_status(GROUP, VERSION, IMAGE_PLURAL, name, {"status": status})
