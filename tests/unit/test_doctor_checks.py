"""Each check of `glmctl doctor`, passing and failing, from snapshots built with the code's own builders."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from glm_operator.api import VERSION
from glm_operator.catalog import load_accelerators
from glm_operator.doctor.checks import (
    GLMOPS_CRDS,
    LWS_CRD,
    MONITORING_CRDS,
    check_crds,
    check_kubernetes_version,
    check_leaderworkerset,
    check_monitoring,
    check_permissions,
    check_release,
    check_storage_class,
    diagnose,
    exit_code,
)
from glm_operator.doctor.facts import (
    AccessFact,
    CRDFact,
    DeploymentFact,
    DryRunFact,
    Finding,
    Level,
    NodeFact,
    Options,
    Permission,
    ReleaseFact,
    SecretFact,
    Snapshot,
    StorageClassFact,
    WebhookConfigFact,
    WebhookFact,
)
from glm_operator.doctor.gpus import check_gpu_nodes
from glm_operator.doctor.probe import names_a_rule, nodes_per_replica, probe_namespace, probe_object
from glm_operator.doctor.webhooks import CERT_MANAGER_CRDS, check_certificate, check_webhooks
from glm_operator.render.fleet import cpu_node, default_fleet, fake_node
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B

CATALOG = load_accelerators()
SERVICE = ("glmops-system", "glmops-webhook")


def node(obj: dict[str, Any]) -> NodeFact:
    return NodeFact(obj["metadata"]["name"], obj["metadata"]["labels"], obj["status"]["allocatable"])


def fleet() -> tuple[NodeFact, ...]:
    return tuple(node(n) for n in default_fleet(CATALOG))


def crd(name: str, version: str = "v1") -> CRDFact:
    return CRDFact(name, served=(version,), storage=version)


def crds(*names: str) -> dict[str, CRDFact]:
    return {n: crd(n, VERSION if n in GLMOPS_CRDS else "v1") for n in names}


def release(**changes: Any) -> ReleaseFact:
    base = ReleaseFact(
        name="glmops",
        namespace="glmops-system",
        revision=1,
        chart_version="0.1.0",
        service_account="glmops",
        kinds=frozenset({"Deployment", "Service"}),
        webhook_configs=(
            ("MutatingWebhookConfiguration", "glmops-glmops-system"),
            ("ValidatingWebhookConfiguration", "glmops-glmops-system"),
        ),
        certificate_secret="glmops-webhook-cert",
        cert_manager=False,
    )
    return replace(base, **changes)


def configs(ca: bool = True, exists: bool = True) -> tuple[WebhookConfigFact, ...]:
    return tuple(
        WebhookConfigFact(kind, "glmops-glmops-system", exists, (WebhookFact(f"{hook}.glmops.dev", ca, SERVICE),))
        for kind, hook in (
            ("MutatingWebhookConfiguration", "glmops-repair"),
            ("ValidatingWebhookConfiguration", "glmops-validate"),
        )
    )


def installed(**changes: Any) -> Snapshot:
    """A cluster with glmops installed and healthy; each test changes one fact."""
    grant = Permission("patch", "glmops.dev", "glmdeployments", "status")
    base = Snapshot(
        server_version="v1.36.3",
        nodes=fleet(),
        crds=crds(*GLMOPS_CRDS),
        storage_classes=(StorageClassFact("standard", True),),
        release=release(),
        webhook_configs=configs(),
        ready_endpoints={SERVICE: 1},
        certificate=SecretFact("glmops-webhook-cert", True, frozenset({"ca.crt", "tls.crt", "tls.key"})),
        dry_run=DryRunFact("default", "refused-by-rule", "admission webhook denied the request ... (rule vllm-1)"),
        access=(AccessFact(grant, True),),
    )
    return replace(base, **changes)


def levels(findings: list[Finding]) -> list[Level]:
    return [f.level for f in findings]


# -- Kubernetes version -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "version, level",
    [("v1.36.3", Level.OK), ("v1.30.0", Level.OK), ("v1.29.9-eks-1", Level.PROBLEM), ("v1.18.0", Level.PROBLEM)],
)
def test_the_server_version_passes_from_1_30_on_and_is_a_problem_below(version: str, level: Level) -> None:
    (finding,) = check_kubernetes_version(Snapshot(server_version=version))
    assert finding.level is level
    assert finding.value == version
    if level is Level.PROBLEM:
        assert "Upgrade the cluster to Kubernetes 1.30 or later" in finding.message


# -- GPU nodes ----------------------------------------------------------------------------------------------------
def test_the_fake_fleet_reports_every_accelerator_type_with_its_allocatable_gpus() -> None:
    findings = check_gpu_nodes(CATALOG, fleet(), truncated=False)
    assert set(levels(findings)) == {Level.OK}
    found = {f.subject: (f.value, f.detail) for f in findings}
    for acc in CATALOG.accelerators.values():
        count = sum(1 for n in fleet() if n.labels.get("glmops.dev/accelerator") == acc.name)
        assert found[f"{acc.name} nodes"] == (
            str(count),
            f"{count * acc.gpus_per_node} {acc.resource_name} allocatable",
        )


def test_a_labelled_node_without_allocatable_gpus_means_the_device_plugin_is_missing() -> None:
    obj = fake_node(CATALOG.get("H200"), 0)
    del obj["status"]["allocatable"]["nvidia.com/gpu"]
    findings = check_gpu_nodes(CATALOG, (node(obj),), truncated=False)
    problem = next(f for f in findings if f.level is Level.PROBLEM)
    assert problem.value == "gpu-h200-0" and "device plugin" in problem.message


def test_a_node_with_allocatable_gpus_but_no_product_label_means_feature_discovery_is_missing() -> None:
    obj = fake_node(CATALOG.get("H200"), 0)
    del obj["metadata"]["labels"]["nvidia.com/gpu.product"]
    findings = check_gpu_nodes(CATALOG, (node(obj),), truncated=False)
    problem = next(f for f in findings if f.subject.startswith("nodes with nvidia.com/gpu but no"))
    assert problem.level is Level.PROBLEM and problem.value == "gpu-h200-0"
    assert "feature discovery" in problem.message


def test_a_gpu_product_the_catalog_does_not_know_is_a_warning_naming_the_product() -> None:
    obj = fake_node(CATALOG.get("H200"), 0)
    obj["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    findings = check_gpu_nodes(CATALOG, (node(obj),), truncated=False)
    warning = next(f for f in findings if f.level is Level.WARNING)
    assert "NVIDIA-A100-SXM4-80GB" in warning.value


def test_a_cluster_of_cpu_nodes_only_has_no_gpu_nodes() -> None:
    findings = check_gpu_nodes(CATALOG, (node(cpu_node(0)),), truncated=False)
    assert [(f.level, f.subject, f.value) for f in findings] == [(Level.PROBLEM, "GPU nodes", "none")]


def test_a_truncated_node_list_is_said() -> None:
    findings = check_gpu_nodes(CATALOG, fleet(), truncated=True)
    assert findings[-1].level is Level.WARNING and "more nodes" in findings[-1].detail


# -- LeaderWorkerSet -----------------------------------------------------------------------------------------------
SPANNING = DeploymentFact("team", "big", nodes_per_replica=2)


@pytest.mark.parametrize(
    "served, multi_node, deployments, level",
    [
        (True, True, (), Level.OK),
        (False, False, (), Level.OK),
        (False, True, (), Level.PROBLEM),
        (False, False, (SPANNING,), Level.WARNING),
        (False, True, (SPANNING,), Level.PROBLEM),
        (False, False, (replace(SPANNING, nodes_per_replica=1),), Level.OK),
    ],
    ids=[
        "served",
        "not-needed",
        "asked-for-by-flag",
        "a-spanning-deployment-runs-on-the-fallback",
        "flag-and-spanning-deployment",
        "single-node-deployment",
    ],
)
def test_leaderworkerset_is_a_problem_when_asked_for_and_a_warning_when_a_deployment_runs_without_it(
    served: bool, multi_node: bool, deployments: tuple[DeploymentFact, ...], level: Level
) -> None:
    snap = Snapshot("v1.36.3", crds=crds(LWS_CRD) if served else {}, deployments=deployments)
    (finding,) = check_leaderworkerset(snap, Options(multi_node=multi_node))
    assert finding.level is level
    if level is not Level.OK:
        assert "kubernetes-sigs/lws" in finding.fix
        assert ("team/big" in finding.value) is (bool(deployments) and not multi_node)


def test_a_leaderworkerset_crd_not_yet_established_is_not_served() -> None:
    snap = Snapshot("v1.36.3", crds={LWS_CRD: replace(crd(LWS_CRD), established=False)})
    assert check_leaderworkerset(snap, Options(multi_node=True))[0].level is Level.PROBLEM


# -- prometheus-operator CRDs --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "served, flag, release_kinds, level",
    [
        (MONITORING_CRDS, True, (), Level.OK),
        ((), False, (), Level.OK),
        ((), True, (), Level.PROBLEM),
        (MONITORING_CRDS[:2], True, (), Level.PROBLEM),
        ((), False, ("PodMonitor",), Level.PROBLEM),
    ],
    ids=["served", "not-needed", "asked-for-by-flag", "prometheusrules-missing", "asked-for-by-the-release"],
)
def test_monitoring_crds_are_a_problem_only_when_monitoring_is_on_and_one_is_missing(
    served: tuple[str, ...], flag: bool, release_kinds: tuple[str, ...], level: Level
) -> None:
    rel = release(kinds=frozenset({"Deployment", *release_kinds})) if release_kinds else None
    snap = Snapshot("v1.36.3", crds=crds(*served), release=rel)
    (finding,) = check_monitoring(snap, Options(monitoring=flag))
    assert finding.level is level
    if level is Level.PROBLEM:
        assert "prometheus-operator" in finding.fix and "prometheusrules.monitoring.coreos.com" in finding.value


# -- StorageClass --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "classes, level",
    [
        ((StorageClassFact("standard", True), StorageClassFact("fast", False)), Level.OK),
        ((), Level.WARNING),
        ((StorageClassFact("fast", False),), Level.WARNING),
        ((StorageClassFact("a", True), StorageClassFact("b", True)), Level.WARNING),
    ],
    ids=["one-default", "no-class", "no-default", "two-defaults"],
)
def test_a_default_storage_class_passes_and_its_absence_names_the_field_to_set(
    classes: tuple[StorageClassFact, ...], level: Level
) -> None:
    (finding,) = check_storage_class(Snapshot("v1.36.3", storage_classes=classes))
    assert finding.level is level
    if classes and not any(c.default for c in classes):
        assert "spec.modelCache.shared.storageClassName" in finding.fix


# -- the release and its CRDs --------------------------------------------------------------------------------------
def test_no_release_is_a_warning_with_the_install_command_and_skips_the_installed_checks() -> None:
    snap = Snapshot("v1.36.3")
    (finding,) = check_release(snap, Options())
    assert finding.level is Level.WARNING and "helm install glmops" in finding.fix
    assert check_webhooks(snap) == [] and check_permissions(snap) == []
    assert {f.level for f in check_crds(snap)} == {Level.WARNING}


@pytest.mark.parametrize(
    "crd_facts, level",
    [
        (crds(*GLMOPS_CRDS), Level.OK),
        ({}, Level.PROBLEM),
        ({n: CRDFact(n, ("v1alpha0",), "v1alpha0") for n in GLMOPS_CRDS}, Level.PROBLEM),
    ],
    ids=["this-version", "missing", "another-version"],
)
def test_installed_crds_must_store_this_glmctls_version(crd_facts: dict[str, CRDFact], level: Level) -> None:
    findings = check_crds(installed(crds=crd_facts))
    assert {f.level for f in findings} == {level}
    if level is Level.PROBLEM:
        assert all("kubectl apply --server-side" in f.fix for f in findings)


# -- webhook certificate -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "snap, level, said",
    [
        (installed(), Level.OK, "kept by the operator"),
        (installed(certificate=SecretFact("glmops-webhook-cert", False)), Level.PROBLEM, "missing"),
        (
            installed(certificate=SecretFact("glmops-webhook-cert", True, frozenset({"tls.crt"}))),
            Level.PROBLEM,
            "ca.crt",
        ),
        (installed(release=release(cert_manager=True)), Level.PROBLEM, "cert-manager"),
        (
            installed(release=release(cert_manager=True), crds=crds(*GLMOPS_CRDS, *CERT_MANAGER_CRDS)),
            Level.OK,
            "kept by cert-manager",
        ),
    ],
    ids=["operator-secret", "secret-missing", "secret-incomplete", "cert-manager-missing", "cert-manager-present"],
)
def test_the_webhook_certificate_is_checked_where_the_release_keeps_it(snap: Snapshot, level: Level, said: str) -> None:
    findings = check_certificate(snap)
    assert max(levels(findings), key=[Level.OK, Level.WARNING, Level.PROBLEM].index) is level
    assert any(said in f.message for f in findings)


def test_before_install_cert_manager_is_reported_for_information_only() -> None:
    (absent,) = check_certificate(Snapshot("v1.36.3"))
    (present,) = check_certificate(Snapshot("v1.36.3", crds=crds(*CERT_MANAGER_CRDS)))
    assert (absent.level, absent.value, present.level, present.value) == (Level.OK, "not served", Level.OK, "served")


# -- webhooks ------------------------------------------------------------------------------------------------------
def test_healthy_webhooks_pass_every_part() -> None:
    assert set(levels(check_webhooks(installed()))) == {Level.OK}


@pytest.mark.parametrize(
    "snap, said",
    [
        (installed(webhook_configs=configs(exists=False)), "missing"),
        (installed(webhook_configs=configs(ca=False)), "no caBundle"),
        (installed(ready_endpoints={}), "0 ready endpoints"),
        (
            installed(
                dry_run=DryRunFact("default", "failed", 'Internal error: failed calling webhook "x": connect: refused')
            ),
            "webhook unreachable: Internal error: failed calling webhook",
        ),
    ],
    ids=["configuration-missing", "no-ca-bundle", "no-ready-endpoint", "unreachable"],
)
def test_a_broken_webhook_part_is_a_problem_with_what_the_api_server_said(snap: Snapshot, said: str) -> None:
    problems = [f for f in check_webhooks(snap) if f.level is Level.PROBLEM]
    assert problems and any(said in f.message for f in problems)


def test_a_probe_admitted_without_refusal_is_a_warning_about_the_selectors() -> None:
    findings = check_webhooks(installed(dry_run=DryRunFact("default", "admitted")))
    warning = next(f for f in findings if f.level is Level.WARNING)
    assert "namespaceSelector" in warning.detail


def test_a_release_without_webhooks_is_a_warning() -> None:
    (finding,) = check_webhooks(installed(release=release(webhook_configs=(), certificate_secret=None)))
    assert finding.level is Level.WARNING and "webhook.enabled=true" in finding.fix


# -- permissions ---------------------------------------------------------------------------------------------------
def test_every_granted_permission_allowed_passes() -> None:
    assert levels(check_permissions(installed())) == [Level.OK]


def test_each_denied_permission_is_a_problem_naming_it() -> None:
    denied = Permission("patch", "", "pods", "status", "team")
    findings = check_permissions(installed(access=(AccessFact(denied, False, "no RBAC policy matched"),)))
    assert [(f.level, f.value) for f in findings] == [(Level.PROBLEM, "patch pods/status in team")]


def test_a_release_granting_nothing_is_a_problem_and_an_unasked_one_is_skipped() -> None:
    assert levels(check_permissions(installed(access=()))) == [Level.PROBLEM]
    assert check_permissions(installed(access=(), access_asked=False)) == []


# -- all together --------------------------------------------------------------------------------------------------
def test_a_healthy_installed_cluster_exits_0_and_one_problem_exits_1() -> None:
    healthy = diagnose(installed(), Options(), CATALOG)
    assert exit_code(healthy) == 0 and set(levels(healthy)) == {Level.OK}
    broken = diagnose(installed(server_version="v1.28.0"), Options(), CATALOG)
    assert exit_code(broken) == 1


def test_warnings_alone_exit_0() -> None:
    findings = diagnose(installed(storage_classes=()), Options(), CATALOG)
    assert Level.WARNING in levels(findings) and exit_code(findings) == 0


def test_every_message_follows_what_value_problem_fix() -> None:
    for finding in diagnose(Snapshot("v1.28.0"), Options(multi_node=True, monitoring=True), CATALOG):
        assert finding.message.startswith(f"{finding.subject}: {finding.value}: ")
        assert finding.level is Level.OK or finding.fix, finding


# -- the probe and deployments -------------------------------------------------------------------------------------
def test_the_probe_is_refused_by_admission_naming_a_rule() -> None:
    decision = admit(probe_object("default"))
    assert not decision.allowed and names_a_rule(decision.rejection())
    assert any(f.severity == "error" and f.rule != "schema" for f in decision.findings)


@pytest.mark.parametrize(
    "selector, namespace",
    [
        (None, "default"),
        ({}, "default"),
        ({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}]}, "a"),
        ({"matchLabels": {"kubernetes.io/metadata.name": "c"}}, "c"),
    ],
)
def test_the_probe_goes_to_a_namespace_the_webhook_is_asked_for(selector: Any, namespace: str) -> None:
    assert probe_namespace(selector) == namespace


@pytest.mark.parametrize(
    "builder, nodes",
    [(B("one").accelerator("H200").tensor(8), 1), (B("two").accelerator("H200").tensor(8).data(2), 2)],
    ids=["tp8-on-one-h200-node", "tp8-dp2-on-two-h200-nodes"],
)
def test_a_stored_deployment_spans_as_many_nodes_as_its_gpus_need(builder: B, nodes: int) -> None:
    assert nodes_per_replica(builder.build(), CATALOG) == nodes


def test_the_minimum_version_is_the_one_the_chart_readme_states() -> None:
    """One minimum: the chart's prerequisites (generated from cli/generate.py) and doctor's check agree."""
    from glm_operator.cli.generate import CHART
    from glm_operator.doctor.checks import MIN_KUBERNETES
    from tests.support.cluster import REPO

    readme = (REPO / CHART / "README.md").read_text()
    assert f"- Kubernetes {MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]} or later" in readme
