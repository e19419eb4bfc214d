"""The operator's runtime context: catalogs and settings, built once at start-up and handed to every handler.

`settings.configure` (kopf's start-up handler) stores a `Runtime` in kopf's memo; handlers read it with
`runtime(memo)` instead of sharing module globals built at import. The catalogs re-read the cluster's extension
(`GLMOPS_CATALOG_CONFIGMAP`) every `GLMOPS_CATALOG_TTL_SECONDS`, keeping the last good ones when it breaks.
Which handlers exist is still decided at import (kopf registers decorators then): `REGISTRATION` says whether
in-cluster image builds are on, and how often a build is polled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glm_operator.catalog.access_policy import AccessPolicy
from glm_operator.catalog.image_policy import ImagePolicy
from glm_operator.control.coalesce import Coalescer
from glm_operator.control.observed import ObservedObjects
from glm_operator.control.retry import Retries
from glm_operator.k8s.admission_cache import AdmissionCache
from glm_operator.k8s.catalog import CatalogSource
from glm_operator.k8s.objects import OWNED_KINDS
from glm_operator.render.imagebuild import BuildSettings, ImageBuildError
from glm_operator.render.storage import DownloadSettings

REGISTRATION = BuildSettings.from_env(os.environ)


DEFAULT_RESYNC_S = 600.0


def resync_seconds(env: Mapping[str, str]) -> float:
    """GLMOPS_RESYNC_SECONDS, 600 when unset; 0 turns the sweep off."""
    raw = env.get("GLMOPS_RESYNC_SECONDS", "").strip()
    try:
        value = float(raw) if raw else DEFAULT_RESYNC_S
    except ValueError:
        raise ValueError(
            f"GLMOPS_RESYNC_SECONDS: {raw!r} is not a number of seconds; use e.g. 600, or 0 for off"
        ) from None
    if value < 0:
        raise ValueError(f"GLMOPS_RESYNC_SECONDS: {raw!r} is negative; use e.g. 600, or 0 for off")
    return value


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}: {raw!r} is not a number of seconds; use e.g. {default:g}") from None
    if value < 0:
        raise ValueError(f"{name}: {raw!r} is negative; use e.g. {default:g}")
    return value


@dataclass(frozen=True)
class Settings:
    """The operator's own settings from its environment, read once at start-up (tests build one directly)."""

    resync_seconds: float = DEFAULT_RESYNC_S  # GLMOPS_RESYNC_SECONDS: the periodic re-list (handlers/resync.py)
    discovery_ttl_s: float = 30.0  # GLMOPS_DISCOVERY_TTL_SECONDS: how long "is the LWS API served" is trusted
    gsm8k_path: str | None = None  # GLMOPS_GSM8K_PATH: the canary's default GSM8K questions (the image ships them)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        return cls(
            resync_seconds=resync_seconds(env),
            discovery_ttl_s=_seconds(env, "GLMOPS_DISCOVERY_TTL_SECONDS", 30.0),
            gsm8k_path=env.get("GLMOPS_GSM8K_PATH") or None,
        )


@dataclass(frozen=True)
class Runtime:
    catalogs: CatalogSource
    image_build: BuildSettings
    refreshes: Coalescer = field(default_factory=Coalescer)  # owned-object events, one refresh per burst
    downloads: DownloadSettings = field(default_factory=DownloadSettings)  # model download Jobs (spec.modelCache)
    # The newest copy of every GLMDeployment and owned object, from the watches and the operator's own writes.
    observed: ObservedObjects = field(default_factory=lambda: ObservedObjects(kind for _, kind in OWNED_KINDS))
    # Set when the copies may have missed deletions (this replica's watches were paused): re-list soon.
    relist_requested: asyncio.Event = field(default_factory=asyncio.Event)
    # Deployments one of whose owned objects was deleted: their next refresh asks the API server whether they still
    # exist (their own deletion's event may not have arrived yet, and garbage collection deletes what they own).
    confirm_owner: set[tuple[str, str]] = field(default_factory=set)
    # Deployments whose last refresh nobody waited for failed: each retried later, with backoff.
    retries: Retries = field(default_factory=Retries)
    # The webhooks' last rule evaluations: the validating call reuses the mutating call's for the same object.
    admissions: AdmissionCache = field(default_factory=AdmissionCache)
    settings: Settings = field(default_factory=Settings)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Runtime:
        image_build = BuildSettings.from_env(env)
        catalogs = CatalogSource(
            env.get("GLMOPS_CATALOG_CONFIGMAP"),
            ttl_seconds=float(env.get("GLMOPS_CATALOG_TTL_SECONDS", "30")),
            # glmops' patched images in the cluster's registry: where it builds them, or where they were pushed.
            patched_registry=patched_registry(env, image_build),
            # The chart's network.rdmaResource: the RDMA resource of spec.network.rdma without a resourceName.
            default_rdma_resource=env.get("GLMOPS_RDMA_RESOURCE", "").strip() or None,
            # GLMOPS_IMAGE_POLICY (the chart's imagePolicy), read once: a malformed one stops the start-up.
            image_policy=ImagePolicy.from_env(env),
            # GLMOPS_ACCESS_POLICY (the chart's podPolicy and canaryData), read once: malformed stops the start-up.
            access_policy=AccessPolicy.from_env(env),
            # A stale ConfigMap is re-read in a thread: never on the event loop the webhooks answer on.
            background=True,
        )
        return cls(
            catalogs=catalogs,
            image_build=image_build,
            downloads=DownloadSettings.from_env(env),
            settings=Settings.from_env(env),
        )

    def sharing_state_of(self, other: Runtime | None) -> Runtime:
        """This runtime's settings with another's live state (copies, queues): kopf runs start-up handlers in no set
        order, and one that built a runtime before the settings handler must keep seeing the same copies."""
        if not isinstance(other, Runtime):
            return self
        return dataclasses.replace(
            self,
            refreshes=other.refreshes,
            observed=other.observed,
            relist_requested=other.relist_requested,
            confirm_owner=other.confirm_owner,
            retries=other.retries,
            admissions=other.admissions,
        )


def patched_registry(env: Mapping[str, str], image_build: BuildSettings) -> str | None:
    """Where glmops' patched images are: the image build registry when builds are on, else the chart's
    vllmImages.registry (GLMOPS_VLLM_IMAGE_REGISTRY), else the packaged names (None)."""
    mirror = env.get("GLMOPS_VLLM_IMAGE_REGISTRY", "").strip().rstrip("/")
    if image_build.enabled:
        if mirror and mirror != image_build.registry:
            raise ImageBuildError(
                f"GLMOPS_VLLM_IMAGE_REGISTRY ({mirror}) differs from GLMOPS_IMAGE_BUILD_REGISTRY "
                f"({image_build.registry}): with builds on, the operator runs the images it builds; "
                "leave vllmImages.registry empty or give the same registry"
            )
        return image_build.registry
    return mirror or None


def runtime(memo: Any) -> Runtime:
    """The Runtime the start-up handler stored (built on first use where a handler runs before it, as in tests)."""
    found = getattr(memo, "runtime", None)
    if not isinstance(found, Runtime):
        found = Runtime.from_env(os.environ)
        memo.runtime = found
    return found
