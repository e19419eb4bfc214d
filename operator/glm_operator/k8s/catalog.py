"""The cluster's catalog extension: a ConfigMap read through the Kubernetes API, cached briefly."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from glm_operator.catalog.access_policy import AccessPolicy
from glm_operator.catalog.bundle import CatalogError, Catalogs
from glm_operator.catalog.image_policy import ImagePolicy

log = logging.getLogger(__name__)
CONFIGMAP_KEY = "catalog.yaml"
TTL_SECONDS = 30.0


def _read_configmap(namespace: str, name: str) -> str | None:
    """The extension text, or None when the ConfigMap (or its key) does not exist."""
    import kubernetes  # imported lazily: only the operator process talks to the API

    from glm_operator.k8s.client import core_v1

    try:
        cm = core_v1().read_namespaced_config_map(name, namespace)
    except kubernetes.client.ApiException as err:
        if err.status == 404:
            return None
        raise
    text: str | None = (cm.data or {}).get(CONFIGMAP_KEY)
    return text


class CatalogSource:
    """Packaged catalogs plus the ConfigMap's extension. A broken extension is reported (`last_error`, which the
    planner turns into a condition and an Event on every GLMDeployment) and the last good catalogs stay in use.

    With `background` (the operator), a stale extension is re-read in a thread while `get` goes on answering with
    the catalogs it has: the webhooks and the reconciles call `get` on the event loop, where a read of the
    ConfigMap would hold every review and every handler for an API round trip (or the client's timeout).
    """

    def __init__(
        self,
        ref: str | None,
        reader: Callable[[str, str], str | None] = _read_configmap,
        ttl_seconds: float = TTL_SECONDS,
        patched_registry: str | None = None,
        default_rdma_resource: str | None = None,
        image_policy: ImagePolicy | None = None,
        access_policy: AccessPolicy | None = None,
        background: bool = False,
    ) -> None:
        self._ref = ref
        self._background = background
        self._refreshing = False
        self._image_policy = image_policy or ImagePolicy()
        self._access_policy = access_policy or AccessPolicy()
        # With in-cluster image builds, glmops' patched images live in the cluster's registry.
        self._patched_registry = patched_registry
        self._default_rdma_resource = default_rdma_resource
        self._ttl = ttl_seconds
        self._reader = reader
        self._lock = threading.Lock()
        self._cached: tuple[float, Catalogs] | None = None
        self._last_good: Catalogs | None = None
        self.last_error: str | None = None

    def get(self) -> Catalogs:
        with self._lock:
            now = time.monotonic()
            # Without a ConfigMap the catalogs are the packaged ones and the settings, which never change: built once
            # (a rebuild parses the packaged YAML, about 70 ms on the event loop, inside whichever review came next).
            if self._cached and (not self._ref or now - self._cached[0] < self._ttl):
                return self._cached[1]
            if self._cached and self._background:
                if not self._refreshing:
                    self._refreshing = True
                    threading.Thread(target=self._refresh, name="glmops-catalog-refresh", daemon=True).start()
                return self._cached[1]
            catalogs = self._load()
            self._cached = (now, catalogs)
            return catalogs

    def _refresh(self) -> None:
        catalogs: Catalogs | None = None
        try:
            catalogs = self._load()
        finally:
            with self._lock:
                if catalogs is not None:
                    self._cached = (time.monotonic(), catalogs)
                self._refreshing = False

    def _load(self) -> Catalogs:
        packaged = replace(Catalogs.packaged(), image_policy=self._image_policy, access_policy=self._access_policy)
        if self._patched_registry:
            packaged = replace(packaged, images=packaged.images.with_patched_registry(self._patched_registry))
        if self._default_rdma_resource:
            packaged = replace(packaged, default_rdma_resource=self._default_rdma_resource)
        if not self._ref:
            return packaged
        namespace, _, name = self._ref.partition("/")
        try:
            text = self._reader(namespace, name)
        except Exception as err:  # noqa: BLE001 (the API server's refusal or absence: read again after the TTL)
            # Not the extension's fault, so not reported on every GLMDeployment: the last good catalogs stay.
            log.warning("could not read the catalog ConfigMap %s, keeping the last good catalogs: %s", self._ref, err)
            return self._last_good or packaged
        try:
            catalogs = packaged.extend(text, source=f"configmap {self._ref}") if text else packaged
        except CatalogError as err:
            self.last_error = str(err)
            log.error("keeping the last good catalogs: %s", err)
            return self._last_good or packaged
        self.last_error = None
        self._last_good = catalogs
        return catalogs
