"""Owned objects on the API server: server-side apply, discovery of LeaderWorkerSet, pruning, status.

Everything the operator writes goes through here, with field manager `glmops`. Server-side apply is
idempotent: applying an unchanged object changes nothing and wakes no watcher.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import kubernetes
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from glm_operator.api import API_VERSION, GROUP, PLURAL, VERSION
from glm_operator.api.constants import LABEL_DEPLOYMENT, selector
from glm_operator.api.constants import OWNED_KINDS as OWNED
from glm_operator.k8s.client import api_client

log = logging.getLogger(__name__)
FIELD_MANAGER = "glmops"
LWS_API_VERSION = next(k.api_version for k in OWNED if k.kind == "LeaderWorkerSet")
# Kinds the operator may own, in the order stale ones are removed (workloads first): api/constants.py.
OWNED_KINDS: tuple[tuple[str, str], ...] = tuple((k.api_version, k.kind) for k in OWNED)

_lock = threading.Lock()
_dynamic: DynamicClient | None = None
_lws_seen: tuple[float, bool] | None = None


def dynamic() -> DynamicClient:
    global _dynamic
    with _lock:
        if _dynamic is None:
            _dynamic = DynamicClient(api_client())  # type: ignore[no-untyped-call]
        return _dynamic


def _resource(api_version: str, kind: str) -> Any:
    try:
        return dynamic().resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        dynamic().resources.invalidate_cache()  # a CRD installed after start-up
        return dynamic().resources.get(api_version=api_version, kind=kind)


def lws_available(ttl_s: float = 30.0) -> bool:
    """Whether the LeaderWorkerSet API is served (re-checked at most every `ttl_s` seconds)."""
    global _lws_seen
    now = time.monotonic()
    if _lws_seen and now - _lws_seen[0] < ttl_s:
        return _lws_seen[1]
    api = kubernetes.client.ApiextensionsV1Api(api_client())
    try:
        api.read_custom_resource_definition("leaderworkersets.leaderworkerset.x-k8s.io")
        found = True
    except kubernetes.client.ApiException as err:
        if err.status != 404:
            raise
        found = False
    _lws_seen = (now, found)
    return found


def apply(obj: dict[str, Any]) -> dict[str, Any]:
    res = _resource(obj["apiVersion"], obj["kind"])
    meta = obj["metadata"]
    out = res.server_side_apply(
        body=obj,
        name=meta["name"],
        namespace=meta.get("namespace"),
        field_manager=FIELD_MANAGER,
        force_conflicts=True,
    )
    result: dict[str, Any] = out.to_dict()
    return result


def owned(namespace: str, name: str) -> Iterable[dict[str, Any]]:
    """Objects of every owned kind labelled as belonging to this GLMDeployment (the handlers read their watches'
    copies instead; this is the API server's own answer, for tools and tests)."""
    for api_version, kind in OWNED_KINDS:
        if kind == "LeaderWorkerSet" and not lws_available():
            continue
        yield from list_labelled(api_version, kind, namespace, {LABEL_DEPLOYMENT: name})[0]


def list_labelled(
    api_version: str, kind: str, namespace: str, labels: dict[str, str]
) -> tuple[list[dict[str, Any]], str | None]:
    """The objects of one kind in a namespace with these labels, and the resourceVersion the list was served at."""
    listed = _resource(api_version, kind).get(namespace=namespace, label_selector=selector(labels)).to_dict()
    items: list[dict[str, Any]] = listed["items"]
    for item in items:
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
    return items, (listed.get("metadata") or {}).get("resourceVersion")


def delete(namespace: str, items: Iterable[tuple[str, str, str]]) -> None:
    """Delete owned objects (apiVersion, kind, name) the plan no longer renders; already gone is fine."""
    for api_version, kind, name in items:
        with contextlib.suppress(NotFoundError):
            background = {"propagationPolicy": "Background"}
            _resource(api_version, kind).delete(name=name, namespace=namespace, body=background)


def get_glmdeployment(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        obj = kubernetes.client.CustomObjectsApi(api_client()).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        )
        return cast(dict[str, Any], obj)
    except kubernetes.client.ApiException as err:
        if err.status == 404:
            return None
        raise


def patch_glmdeployment_status(namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    """Merge `status` into the GLMDeployment's status; returns the object as stored after it."""
    stored = kubernetes.client.CustomObjectsApi(api_client()).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"apiVersion": API_VERSION, "status": status}
    )
    return cast(dict[str, Any], stored)


SUMMARY_ATTEMPTS = 5


def write_canary_report(
    namespace: str,
    name: str,
    pod: str,
    report: dict[str, Any] | None,
    summarize: Callable[[dict[str, Any]], str],
    body: dict[str, Any] | None = None,
    running: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Write one pod's canary report (None: drop it) with a summary over every pod's report; returns the stored object.

    The report and the summary go in one patch under the resourceVersion the summary was computed from, so nobody
    reading status ever sees reports and a summary that disagree: a patch refused because another pod's gate wrote in
    between (409) is read again and redone. `body` is the object as the caller last saw it (tried first; a stale one
    costs one refusal). Should every attempt be refused, the report is merged without a version and the summary
    settled after it, as `settle_canary_summary` does. None: the GLMDeployment is gone.
    """
    api = kubernetes.client.CustomObjectsApi(api_client())
    canary: dict[str, Any] = {"pods": {pod: report}}
    if running is not None:
        canary["running"] = running
    for _ in range(SUMMARY_ATTEMPTS):
        if body is None:
            body = get_glmdeployment(namespace, name)
        if body is None:
            return None
        reports = {**(((body.get("status") or {}).get("canary") or {}).get("pods") or {}), pod: report}
        patch = {
            "apiVersion": API_VERSION,
            "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
            "status": {"canary": {**canary, "summary": summarize(reports)}},
        }
        try:
            return cast(
                dict[str, Any],
                api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, patch),
            )
        except kubernetes.client.ApiException as err:
            if err.status == 404:
                return None
            if err.status != 409:
                raise
            body = None  # changed since: read it again
    try:
        stored = patch_glmdeployment_status(namespace, name, {"canary": canary})
    except kubernetes.client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return settle_canary_summary(namespace, name, summarize, stored) or stored


def settle_canary_summary(
    namespace: str,
    name: str,
    summarize: Callable[[dict[str, Any]], str],
    stored: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Make status.canary.summary agree with status.canary.pods as stored now; returns the object as last read.

    Each pod's gate patches its own report (a merge: no report is lost) with a summary computed from the reports
    it last read, so two gates finishing together each leave the other's out. This checks the object as stored
    (`stored`: the answer of the gate's own patch, else read here) and patches under its resourceVersion: a summary
    computed from reports that changed since is refused (409), read again and redone.
    """
    api = kubernetes.client.CustomObjectsApi(api_client())
    body = stored
    for _ in range(SUMMARY_ATTEMPTS):
        if body is None:
            body = get_glmdeployment(namespace, name)
        if body is None:
            return None
        canary = (body.get("status") or {}).get("canary") or {}
        wanted = summarize(canary.get("pods") or {})
        if canary.get("summary") == wanted:
            return body
        patch = {
            "apiVersion": API_VERSION,
            "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
            "status": {"canary": {"summary": wanted}},
        }
        try:
            return cast(
                dict[str, Any],
                api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, patch),
            )
        except kubernetes.client.ApiException as err:
            if err.status != 409:
                raise
            body = None  # changed since: read it again
    return None
