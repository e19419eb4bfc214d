"""The checks of `glmctl doctor`: pure functions from a cluster's facts to findings, each with the fix it prints.

`diagnose` runs them all in the order a person fixes things: the API server, the nodes, the APIs glmops needs,
storage, then the installed release (CRDs, webhooks and their certificate, the operator's permissions). Before
glmops is installed, the release's checks say so and pass; a missing piece the chart would need is still reported.
"""

from __future__ import annotations

import re

from glm_operator.api import GROUP, PLURAL, VERSION
from glm_operator.api.glmimage import IMAGE_PLURAL
from glm_operator.catalog import AcceleratorCatalog
from glm_operator.doctor.facts import CRDFact, Finding, Level, Options, Snapshot
from glm_operator.doctor.gpus import check_gpu_nodes
from glm_operator.doctor.webhooks import check_certificate, check_webhooks

MIN_KUBERNETES = (1, 30)
"""ValidatingAdmissionPolicy v1 (the chart's limit on the operator's writes) and the pod's preStop sleep action."""
LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
LWS_FIX = (
    "Install LeaderWorkerSet (https://lws.sigs.k8s.io/docs/installation/): `kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/lws/releases/latest/download/manifests.yaml`"
)
MONITORING_CRDS = tuple(f"{p}.monitoring.coreos.com" for p in ("servicemonitors", "podmonitors", "prometheusrules"))
MONITORING_KINDS = frozenset({"ServiceMonitor", "PodMonitor", "PrometheusRule"})
MONITORING_FIX = (
    "Install the prometheus-operator CRDs (kube-prometheus-stack, or `helm install prometheus-operator-crds "
    "prometheus-community/prometheus-operator-crds`), or turn monitoring.serviceMonitor and "
    "monitoring.prometheusRule off"
)
GLMOPS_CRDS = (f"{PLURAL}.{GROUP}", f"{IMAGE_PLURAL}.{GROUP}")
CRD_FIX = "Apply this glmctl's CRDs: `kubectl apply --server-side --force-conflicts -f crds/` (the chart's crds/)"


def _version(text: str) -> tuple[int, int] | None:
    match = re.match(r"v?(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else None


def check_kubernetes_version(snap: Snapshot) -> list[Finding]:
    found = _version(snap.server_version)
    need = ".".join(map(str, MIN_KUBERNETES))
    if found is None:
        detail = f"not a Kubernetes version; glmops needs {need} or later"
        return [Finding("kubernetes-version", Level.WARNING, "Kubernetes version", snap.server_version, detail)]
    if found < MIN_KUBERNETES:
        return [
            Finding(
                "kubernetes-version",
                Level.PROBLEM,
                "Kubernetes version",
                snap.server_version,
                f"glmops needs {need} or later (ValidatingAdmissionPolicy v1, the preStop sleep action)",
                f"Upgrade the cluster to Kubernetes {need} or later",
            )
        ]
    detail = f"{need} or later is supported"
    return [Finding("kubernetes-version", Level.OK, "Kubernetes version", snap.server_version, detail)]


def _served(crd: CRDFact | None) -> bool:
    return crd is not None and crd.established and bool(crd.served)


def check_leaderworkerset(snap: Snapshot, opts: Options) -> list[Finding]:
    spanning = [d for d in snap.deployments if d.nodes_per_replica > 1]
    wanted = opts.multi_node or bool(spanning)
    why = (
        "--multi-node"
        if opts.multi_node
        else f"GLMDeployment {spanning[0].namespace}/{spanning[0].name}"
        if spanning
        else ""
    )
    if _served(snap.crds.get(LWS_CRD)):
        return [
            Finding(
                "leaderworkerset", Level.OK, "LeaderWorkerSet API", "served", "multi-node replicas run as one group"
            )
        ]
    if not wanted:
        detail = "not served; only multi-node GLMDeployments need it (pass --multi-node to require it)"
        return [Finding("leaderworkerset", Level.OK, "LeaderWorkerSet API", "not served", detail)]
    # Asked for with --multi-node, it is a problem; a spanning GLMDeployment already runs on the StatefulSet fallback,
    # so its absence there is a warning: the replicas work, without LWS's group restarts and gang scheduling.
    return [
        Finding(
            "leaderworkerset",
            Level.PROBLEM if opts.multi_node else Level.WARNING,
            "LeaderWorkerSet API (leaderworkerset.x-k8s.io)",
            f"not served, needed by {why}",
            "replicas spanning nodes need it (a chart prerequisite); without it they fall back to one indexed "
            "StatefulSet per replica",
            LWS_FIX,
        )
    ]


def check_monitoring(snap: Snapshot, opts: Options) -> list[Finding]:
    from_release = bool(snap.release and snap.release.kinds & MONITORING_KINDS)
    missing = [name for name in MONITORING_CRDS if not _served(snap.crds.get(name))]
    subject = "prometheus-operator CRDs (monitoring.coreos.com)"
    if not missing:
        return [Finding("monitoring", Level.OK, subject, "served", "ServiceMonitor, PodMonitor and PrometheusRule")]
    if not (opts.monitoring or from_release):
        detail = "not all served; only the chart's monitoring needs them (pass --monitoring to require them)"
        return [Finding("monitoring", Level.OK, subject, f"missing {', '.join(missing)}", detail)]
    why = "the installed release's monitoring objects" if from_release else "--monitoring"
    return [
        Finding(
            "monitoring",
            Level.PROBLEM,
            subject,
            f"missing {', '.join(missing)}",
            f"needed by {why}: the chart cannot create its ServiceMonitor, PodMonitor or PrometheusRule",
            MONITORING_FIX,
        )
    ]


def check_storage_class(snap: Snapshot) -> list[Finding]:
    defaults = sorted(c.name for c in snap.storage_classes if c.default)
    subject = "default StorageClass"
    if len(defaults) == 1:
        return [Finding("storage-class", Level.OK, subject, defaults[0], "model caches without a class get it")]
    if defaults:
        detail = "more than one is marked default; the API server gives new claims the newest of them"
        fix = "Keep the annotation storageclass.kubernetes.io/is-default-class=true on one StorageClass only"
        return [Finding("storage-class", Level.WARNING, subject, ", ".join(defaults), detail, fix)]
    names = ", ".join(sorted(c.name for c in snap.storage_classes)) or "no StorageClass at all"
    return [
        Finding(
            "storage-class",
            Level.WARNING,
            subject,
            f"none ({names})",
            "a shared model cache (spec.modelCache.shared) without a class gets a claim nothing provisions",
            "Set spec.modelCache.shared.storageClassName in each GLMDeployment that caches its model, or mark one "
            "class default (annotation storageclass.kubernetes.io/is-default-class=true)",
        )
    ]


def check_crds(snap: Snapshot) -> list[Finding]:
    installed = snap.release is not None
    findings = []
    for name in GLMOPS_CRDS:
        crd = snap.crds.get(name)
        if crd is None:
            level = Level.PROBLEM if installed else Level.WARNING
            detail = "not installed" + ("" if installed else " yet (helm installs it with the chart)")
            findings.append(Finding("crds", level, f"CRD {name}", "missing", detail, CRD_FIX))
        elif crd.storage != VERSION or VERSION not in crd.served:
            detail = f"this glmctl stores and serves {VERSION}; the cluster's CRD is of another version of glmops"
            value = f"stores {crd.storage}, serves {', '.join(crd.served) or 'nothing'}"
            findings.append(Finding("crds", Level.PROBLEM, f"CRD {name}", value, detail, CRD_FIX))
        else:
            findings.append(Finding("crds", Level.OK, f"CRD {name}", f"stores {VERSION}", "as this glmctl's"))
    return findings


def check_release(snap: Snapshot, opts: Options) -> list[Finding]:
    rel = snap.release
    if rel is None:
        return [
            Finding(
                "release",
                Level.WARNING,
                f"glmops release {opts.release!r} in {opts.namespace}",
                "not installed",
                "the webhook, certificate and permission checks wait for it",
                f"Install it: `helm install {opts.release} charts/glmops -n {opts.namespace} --create-namespace`, "
                "then run doctor again",
            )
        ]
    detail = f"chart {rel.chart_version}, ServiceAccount {rel.service_account}"
    return [
        Finding(
            "release", Level.OK, f"glmops release {rel.name!r} in {rel.namespace}", f"revision {rel.revision}", detail
        )
    ]


def check_permissions(snap: Snapshot) -> list[Finding]:
    rel = snap.release
    if rel is None or not snap.access_asked:
        return []
    subject = f"permissions of ServiceAccount {rel.namespace}/{rel.service_account}"
    denied = [a for a in snap.access if not a.allowed]
    if not snap.access:
        detail = "the release grants it nothing doctor can find (no Role or ClusterRole bound to it)"
        fix = "Reinstall the chart (`helm upgrade --install`) so its RBAC is created"
        return [Finding("permissions", Level.PROBLEM, subject, "none", detail, fix)]
    if not denied:
        detail = "the API server allows every request the chart grants it"
        return [Finding("permissions", Level.OK, subject, f"{len(snap.access)} checked", detail)]
    return [
        Finding(
            "permissions",
            Level.PROBLEM,
            subject,
            a.permission.describe(),
            "the chart grants it but the API server denies it" + (f" ({a.reason})" if a.reason else ""),
            "Restore the release's Roles and bindings: `helm upgrade --install` with the same values, and look for "
            "a binding or role removed or edited since",
        )
        for a in denied
    ]


def check_notes(snap: Snapshot) -> list[Finding]:
    return [
        Finding("access", Level.WARNING, "doctor could not read", note, "checks that need it are partial")
        for note in snap.notes
    ]


def diagnose(snap: Snapshot, opts: Options, catalog: AcceleratorCatalog) -> list[Finding]:
    """Every check's findings, in the order a person would fix them."""
    return [
        *check_kubernetes_version(snap),
        *check_gpu_nodes(catalog, snap.nodes, snap.nodes_truncated),
        *check_leaderworkerset(snap, opts),
        *check_monitoring(snap, opts),
        *check_storage_class(snap),
        *check_release(snap, opts),
        *check_crds(snap),
        *check_certificate(snap),
        *check_webhooks(snap),
        *check_permissions(snap),
        *check_notes(snap),
    ]


def exit_code(findings: list[Finding]) -> int:
    """0 when nothing is missing (warnings allowed), 1 when a check found a problem."""
    return 1 if any(f.level is Level.PROBLEM for f in findings) else 0
