"""Checks that spec.pod adds to the pods without undoing what the rules and the plan decided.

The schema already bounds every value; these checks need the catalogs (GPU resource names, the accelerator's
node labels) or Kubernetes' key syntax, which a structural schema cannot express for map keys.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from glm_operator.api.constants import LABEL_MANAGED_BY, LABEL_POD_INDEX
from glm_operator.api.pod import GLMOPS_MOUNT_PATHS, GLMOPS_VOLUMES, parse_quantity, qualified_name_problem
from glm_operator.rules.context import Context
from glm_operator.rules.findings import Finding

RESERVED_PREFIXES = ("glmops.dev/", "leaderworkerset.sigs.k8s.io/")
"""Label and annotation keys glmops or the LeaderWorkerSet controller writes on the pods."""
RESERVED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    LABEL_MANAGED_BY,
    LABEL_POD_INDEX,
    "statefulset.kubernetes.io/pod-name",
    "controller-revision-hash",
    "pod-template-hash",
)
"""Labels the workloads select their pods by, or that their controllers set."""
MAX_ANNOTATIONS_BYTES = 256 * 1024  # the API server's limit on all annotations of one object


def _f(rule: str, field: str, value: object, problem: str, fix: str) -> Finding:
    return Finding(rule=f"pod/{rule}", severity="error", field=field, value=str(value), problem=problem, fix=fix)


def _key(path: str, key: str) -> str:
    return f"{path}[{json.dumps(key)}]"


def _gpu_resources(ctx: Context) -> set[str]:
    return {acc.resource_name for acc in ctx.catalogs.accelerators.accelerators.values()}


def resources_leave_gpus_alone(ctx: Context) -> list[Finding]:
    """spec.pod.resources names no GPU resource, only valid resource names, and no request above its limit."""
    res = ctx.spec.pod.resources
    out = []
    gpus = _gpu_resources(ctx)
    for kind, values in (("requests", res.requests), ("limits", res.limits)):
        for name, value in values.items():
            where = _key(f"spec.pod.resources.{kind}", name)
            if name in gpus:
                fix = "Remove it; the GPU count per pod comes from spec.parallelism (tensor x pipeline x data)"
                out.append(_f("resources", where, value, f"{name} is the GPU count glmops computes", fix))
            elif (problem := qualified_name_problem(name)) is not None:
                out.append(_f("resources", where, name, f"not a resource name: {problem}", "Use e.g. cpu or memory"))
    for name, request in res.requests.items():
        limit = res.limits.get(name)
        low, high = parse_quantity(request), parse_quantity(limit) if limit is not None else None
        if low is not None and high is not None and low > high:
            out.append(
                _f(
                    "resources",
                    _key("spec.pod.resources.requests", name),
                    request,
                    f"above its limit {limit}; Kubernetes refuses such a pod",
                    f"Lower the request to at most {limit} or raise spec.pod.resources.limits",
                )
            )
    return out


def node_selector_narrows(ctx: Context) -> list[Finding]:
    """spec.pod.nodeSelector may narrow the accelerator's node labels, never contradict them."""
    out = []
    allowed = ctx.accelerator.node_selector
    for key, value in ctx.spec.pod.node_selector.items():
        where = _key("spec.pod.nodeSelector", key)
        if (problem := qualified_name_problem(key)) is not None:
            out.append(_f("node-selector", where, key, f"not a label key: {problem}", "Use a node label's key"))
        elif key in allowed and value not in allowed[key]:
            wanted = ", ".join(allowed[key])
            out.append(
                _f(
                    "node-selector",
                    where,
                    value,
                    f"{ctx.accelerator.name} nodes carry {key}={wanted}, so no GPU node would match",
                    f"Remove it, or use {wanted} (spec.accelerator.type picks the GPU model)",
                )
            )
    return out


def _term_excludes_accelerator(term: dict[str, Any], allowed: dict[str, list[str]]) -> str | None:
    """The expression of a node selector term that no node of the accelerator can satisfy, or None."""
    for expr in term.get("matchExpressions") or []:
        if not isinstance(expr, dict) or expr.get("key") not in allowed:
            continue
        values = set(expr.get("values") or [])
        ours = set(allowed[expr["key"]])
        if (
            (expr.get("operator") == "In" and not values & ours)
            or (expr.get("operator") == "NotIn" and ours <= values)
            or expr.get("operator") == "DoesNotExist"
        ):
            return f"{expr['key']} {expr.get('operator')} {sorted(values)}"
    return None


def node_affinity_narrows(ctx: Context) -> list[Finding]:
    """A required node affinity term of spec.pod may narrow the accelerator's node labels, never exclude them."""
    affinity = ctx.spec.pod.affinity
    node = affinity.node_affinity if affinity is not None else None
    required = node.required_during_scheduling_ignored_during_execution if node is not None else None
    if required is None:
        return []
    allowed = ctx.accelerator.node_selector
    out = []
    for i, term in enumerate(required.node_selector_terms):
        excluded = _term_excludes_accelerator(term, allowed)
        if excluded is not None:
            where = (
                f"spec.pod.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
            )
            wanted = "; ".join(f"{k} in {', '.join(v)}" for k, v in allowed.items())
            out.append(
                _f(
                    "node-affinity",
                    where,
                    excluded,
                    f"{ctx.accelerator.name} nodes carry {wanted}, so this term matches no GPU node",
                    "Remove that expression (spec.accelerator.type picks the GPU model) or allow its value",
                )
            )
    return out


def tolerations_are_valid(ctx: Context) -> list[Finding]:
    """spec.pod.tolerations are ones the API server accepts on a pod (checked here, not after the Deployment)."""
    out = []
    for i, tol in enumerate(ctx.spec.pod.tolerations):
        where = f"spec.pod.tolerations[{i}]"
        exists = tol.operator is not None and tol.operator.value == "Exists"
        if exists and tol.value:
            out.append(
                _f("tolerations", f"{where}.value", tol.value, "must be empty with operator Exists", "Remove it")
            )
        if not tol.key and not exists:
            problem = "an empty key matches every taint only with operator Exists"
            out.append(_f("tolerations", f"{where}.key", '""', problem, "Set a key, or operator: Exists"))
        if tol.toleration_seconds is not None and (tol.effect is None or tol.effect.value != "NoExecute"):
            problem = "tolerationSeconds applies only to effect NoExecute"
            out.append(_f("tolerations", f"{where}.tolerationSeconds", tol.toleration_seconds, problem,
                          "Set effect: NoExecute or remove tolerationSeconds"))  # fmt: skip
    return out


def _reserved(key: str, labels: bool) -> bool:
    return key.startswith(RESERVED_PREFIXES) or (labels and key in RESERVED_LABELS)


def labels_and_annotations_are_the_users(ctx: Context) -> list[Finding]:
    """spec.pod.labels and annotations use valid keys that glmops and the workload controllers do not own."""
    pod = ctx.spec.pod
    out = []
    for field, entries, labels in (("labels", pod.labels, True), ("annotations", pod.annotations, False)):
        for key in entries:
            where = _key(f"spec.pod.{field}", key)
            if (problem := qualified_name_problem(key)) is not None:
                out.append(_f(field, where, key, f"not a valid key: {problem}", "Use e.g. example.com/team"))
            elif _reserved(key, labels):
                out.append(
                    _f(
                        field,
                        where,
                        key,
                        "glmops (or the workload controller) sets this key and selects or tracks pods by it",
                        "Remove it, or use a key under your own prefix (e.g. example.com/...)",
                    )
                )
    size = sum(len(k) + len(v) for k, v in pod.annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        out.append(
            _f(
                "annotations",
                "spec.pod.annotations",
                f"{size} bytes",
                "over the API server's 256 KiB limit on a pod's annotations",
                "Keep pod annotations short; put large data in a ConfigMap volume",
            )
        )
    return out


def _under(path: str, root: str) -> bool:
    path = posixpath.normpath(path)
    return path == root or path.startswith(root + "/")


def volumes_are_the_users(ctx: Context) -> list[Finding]:
    """spec.pod.volumes and volumeMounts add to glmops' volumes without replacing or shadowing them."""
    pod = ctx.spec.pod
    out = []
    declared = {v.name for v in pod.volumes}
    for i, volume in enumerate(pod.volumes):
        if volume.name in GLMOPS_VOLUMES:
            problem = "glmops renders a volume of this name (/dev/shm, the model cache)"
            out.append(_f("volumes", f"spec.pod.volumes[{i}].name", volume.name, problem, "Choose another name"))
    for i, mount in enumerate(pod.volume_mounts):
        where = f"spec.pod.volumeMounts[{i}]"
        if mount.name not in declared:
            out.append(
                _f(
                    "volumes",
                    f"{where}.name",
                    mount.name,
                    "names no volume in spec.pod.volumes",
                    f"Declare a volume named {mount.name} in spec.pod.volumes or fix the name",
                )
            )
        reserved = next((p for p in GLMOPS_MOUNT_PATHS if _under(mount.mount_path, p)), None)
        if reserved is not None:
            out.append(
                _f(
                    "volumes",
                    f"{where}.mountPath",
                    mount.mount_path,
                    f"glmops mounts {reserved} (shared memory or the model cache) and a mount there would hide it",
                    "Mount it elsewhere; set spec.pod.shmSize for a larger /dev/shm",
                )
            )
        if mount.sub_path is not None and ".." in mount.sub_path.split("/"):
            out.append(
                _f("volumes", f"{where}.subPath", mount.sub_path, "must not contain '..'", "Use a path inside it")
            )
    return out


POD_SETTINGS_CHECKS = (
    resources_leave_gpus_alone,
    node_selector_narrows,
    node_affinity_narrows,
    tolerations_are_valid,
    labels_and_annotations_are_the_users,
    volumes_are_the_users,
)
