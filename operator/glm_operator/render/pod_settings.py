"""spec.pod merged into a pod template glmops rendered: the user's settings added, glmops' decisions kept.

Where both set something, glmops' value stays: GPU requests and limits, the labels pods are selected by, the
command-hash annotation, the accelerator's node expressions (added into every required term of the user's
node affinity, since terms are ORed and the expressions of one term ANDed). Admission refuses the conflicts
first (rules/pod_settings.py), so this precedence only matters for a spec that bypassed it.
"""

from __future__ import annotations

import copy
from typing import Any

from glm_operator.api.constants import SERVER_CONTAINER
from glm_operator.api.pod import Affinity, PodSettings


def _quantity(value: int | str) -> str:
    return str(value)


def _merged_affinity(ours: dict[str, Any], theirs: Affinity | None) -> dict[str, Any]:
    """The accelerator's required node affinity ANDed into each of the user's terms; the rest passed through."""
    if theirs is None:
        return ours
    ours_required = ours.get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
    accelerator = [e for t in ours_required.get("nodeSelectorTerms", []) for e in t.get("matchExpressions", [])]
    out: dict[str, Any] = copy.deepcopy(ours)
    node = theirs.node_affinity
    if node is not None and node.required_during_scheduling_ignored_during_execution is not None:
        terms = []
        for term in node.required_during_scheduling_ignored_during_execution.node_selector_terms:
            merged = copy.deepcopy(term)
            merged["matchExpressions"] = [*(merged.get("matchExpressions") or []), *copy.deepcopy(accelerator)]
            terms.append(merged)
        if terms:
            required = out.setdefault("nodeAffinity", {}).setdefault(
                "requiredDuringSchedulingIgnoredDuringExecution", {}
            )
            required["nodeSelectorTerms"] = terms
    if node is not None and node.preferred_during_scheduling_ignored_during_execution:
        preferred = copy.deepcopy(node.preferred_during_scheduling_ignored_during_execution)
        out.setdefault("nodeAffinity", {})["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    if theirs.pod_affinity is not None:
        out["podAffinity"] = copy.deepcopy(theirs.pod_affinity)
    if theirs.pod_anti_affinity is not None:
        out["podAntiAffinity"] = copy.deepcopy(theirs.pod_anti_affinity)
    return out


def _merge_container(container: dict[str, Any], settings: PodSettings) -> None:
    resources = container.setdefault("resources", {})
    for kind, theirs in (("requests", settings.resources.requests), ("limits", settings.resources.limits)):
        ours = resources.get(kind, {})
        resources[kind] = {**{k: _quantity(v) for k, v in theirs.items()}, **ours}
    mounts = [
        {"name": m.name, "mountPath": m.mount_path, **({"readOnly": True} if m.read_only else {})}
        | ({"subPath": m.sub_path} if m.sub_path else {})
        for m in settings.volume_mounts
    ]
    container["volumeMounts"] = [*container.get("volumeMounts", []), *mounts]


def _set_shm_size(volumes: list[dict[str, Any]], size: str) -> None:
    for volume in volumes:
        empty_dir = volume.get("emptyDir") or {}
        if volume.get("name") == "shm" and empty_dir.get("medium") == "Memory":
            empty_dir["sizeLimit"] = size


def pod_identity(settings: PodSettings) -> dict[str, Any]:
    """What every pod glmops makes for a deployment takes from spec.pod to pull its image and be scheduled as the
    user's: pull secrets, ServiceAccount, priority class (the keys set only when given)."""
    out: dict[str, Any] = {}
    if settings.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": s.name} for s in settings.image_pull_secrets]
    if settings.service_account_name:
        out["serviceAccountName"] = settings.service_account_name
    if settings.priority_class_name:
        out["priorityClassName"] = settings.priority_class_name
    return out


def merge_pod_settings(template: dict[str, Any], settings: PodSettings) -> dict[str, Any]:
    """`template` (a pod template glmops rendered) with spec.pod merged in; glmops' own values win."""
    out = copy.deepcopy(template)
    meta, spec = out.setdefault("metadata", {}), out["spec"]
    meta["labels"] = {**settings.labels, **meta.get("labels", {})}
    if settings.annotations:
        meta["annotations"] = {**settings.annotations, **meta.get("annotations", {})}
    for container in spec["containers"]:
        if container.get("name") == SERVER_CONTAINER:
            _merge_container(container, settings)
    if settings.node_selector:
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), **settings.node_selector}
    spec["affinity"] = _merged_affinity(spec.get("affinity", {}), settings.affinity)
    spec["tolerations"] = [
        *spec.get("tolerations", []),
        *(t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in settings.tolerations),
    ]
    spec.update(pod_identity(settings))
    spec["volumes"] = [*spec.get("volumes", []), *(v.as_dict() for v in settings.volumes)]
    _set_shm_size(spec["volumes"], settings.shm_size)
    return out
