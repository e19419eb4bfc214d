"""The chart's webhook configurations, certificates, probes and availability, as `helm template` renders them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.test_helm_chart import CHART, _helm
from tests.support.cluster import REPO, Cluster, Kubectl

pytestmark = pytest.mark.cluster
Docs = dict[tuple[str, str], dict[str, Any]]
CONFIG_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _render(cluster: Cluster, *sets: str, release: str = "glmops", namespace: str = "ops") -> Docs:
    args = [a for s in sets for a in ("--set", s)]
    out = _helm(cluster, "template", release, CHART, "--namespace", namespace, *args).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


def _configs(docs: Docs) -> list[dict[str, Any]]:
    return [d for (kind, _), d in docs.items() if kind in CONFIG_KINDS]


def _container(docs: Docs, name: str = "glmops") -> dict[str, Any]:
    container: dict[str, Any] = docs[("Deployment", name)]["spec"]["template"]["spec"]["containers"][0]
    return container


def _env(docs: Docs) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in _container(docs)["env"]}


@pytest.mark.parametrize("sets", [(), ("webhook.certManager.enabled=true",), ("replicas=3",)])
def test_helm_template_renders_the_same_output_twice(cluster: Cluster, sets: tuple[str, ...]) -> None:
    args = [a for s in sets for a in ("--set", s)]
    first = _helm(cluster, "template", "glmops", CHART, "-n", "ops", *args).stdout
    assert first == _helm(cluster, "template", "glmops", CHART, "-n", "ops", *args).stdout


@pytest.mark.parametrize("sets", [(), ("webhook.certManager.enabled=true",), ("replicas=2", "logLevel=DEBUG")])
def test_chart_lints_clean_in_each_certificate_mode(cluster: Cluster, sets: tuple[str, ...]) -> None:
    args = [a for s in sets for a in ("--set", s)]
    assert "0 chart(s) failed" in _helm(cluster, "lint", "--strict", CHART, *args).stdout


def test_each_release_has_configurations_of_its_own(cluster: Cluster) -> None:
    names = {
        (kind, name)
        for release, ns in (("glmops", "a"), ("glmops", "b"), ("other", "a"))
        for (kind, name) in _render(cluster, release=release, namespace=ns)
        if kind in CONFIG_KINDS
    }
    assert len(names) == 6, names


def test_configurations_fail_closed_on_glmdeployments_only_through_the_service(cluster: Cluster) -> None:
    docs = _render(cluster)
    paths = set()
    for config in _configs(docs):
        assert config["metadata"]["name"] == "glmops-ops"
        assert "annotations" not in config["metadata"]
        [hook] = config["webhooks"]
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None" and hook["timeoutSeconds"] == 10
        assert hook["rules"] == [
            {
                "apiGroups": ["glmops.dev"],
                "apiVersions": ["v1alpha1"],
                "resources": ["glmdeployments"],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ]
        service = hook["clientConfig"]["service"]
        assert (service["namespace"], service["name"], service["port"]) == ("ops", "glmops-webhook", 443)
        assert "caBundle" not in hook["clientConfig"], "left to the operator, so helm upgrade keeps what it wrote"
        assert hook["namespaceSelector"] == {} and hook["objectSelector"] == {}
        paths.add(service["path"])
    assert paths == {"/glmops-repair", "/glmops-validate"}


def test_selectors_come_from_values_or_from_the_watched_namespaces(cluster: Cluster) -> None:
    watched = _render(cluster, "watchNamespaces={team-a,team-b}", "webhook.objectSelector.matchLabels.tier=gpu")
    for config in _configs(watched):
        hook = config["webhooks"][0]
        assert hook["namespaceSelector"] == {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
            ]
        }
        assert hook["objectSelector"] == {"matchLabels": {"tier": "gpu"}}
    given = _render(cluster, "watchNamespaces={team-a}", "webhook.namespaceSelector.matchLabels.glmops=on")
    assert all(c["webhooks"][0]["namespaceSelector"] == {"matchLabels": {"glmops": "on"}} for c in _configs(given))


def test_by_default_the_operator_owns_the_certificate_and_fills_the_ca_bundle(cluster: Cluster) -> None:
    docs = _render(cluster)
    env = _env(docs)
    assert env["GLMOPS_WEBHOOK_SECRET_OWNED"] == "true"
    assert env["GLMOPS_WEBHOOK_INJECT_CA_INTO"] == "glmops-ops,glmops-ops"
    role = docs[("Role", "glmops-webhook")]["rules"]
    assert {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["glmops-webhook-cert"],
            "verbs": ["get", "update"]} in role  # fmt: skip
    assert {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]} in role
    assert not [k for k in docs if k[0] in ("Certificate", "Issuer")]


def test_cert_manager_issues_the_certificate_and_injects_the_ca(cluster: Cluster) -> None:
    docs = _render(cluster, "webhook.certManager.enabled=true")
    cert = docs[("Certificate", "glmops-webhook")]["spec"]
    assert cert["secretName"] == "glmops-webhook-cert" and "glmops-webhook.ops.svc" in cert["dnsNames"]
    assert cert["issuerRef"]["name"] == "glmops-webhook-ca"
    assert docs[("Certificate", "glmops-webhook-ca")]["spec"]["isCA"] is True
    assert ("Issuer", "glmops-selfsigned") in docs and ("Issuer", "glmops-webhook-ca") in docs
    for config in _configs(docs):
        assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "ops/glmops-webhook"}
    env = _env(docs)
    assert env["GLMOPS_WEBHOOK_SECRET_OWNED"] == "false" and "GLMOPS_WEBHOOK_INJECT_CA_INTO" not in env
    assert docs[("Role", "glmops-webhook")]["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["glmops-webhook-cert"], "verbs": ["get"]}
    ]
    assert ("ClusterRole", "glmops-ops-webhook") not in docs, "no right to touch a configuration"


def test_cert_manager_with_a_named_issuer_creates_no_issuer(cluster: Cluster) -> None:
    docs = _render(
        cluster,
        "webhook.certManager.enabled=true",
        "webhook.certManager.issuerRef.name=corp-ca",
        "webhook.certManager.issuerRef.kind=ClusterIssuer",
    )
    assert not [k for k in docs if k[0] == "Issuer"]
    ref = docs[("Certificate", "glmops-webhook")]["spec"]["issuerRef"]
    assert ref == {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


def test_a_secret_of_your_own_with_a_ca_bundle_in_values(cluster: Cluster) -> None:
    docs = _render(cluster, "webhook.certificateSecret=my-tls", "webhook.caBundle=Q0EK")
    assert all(c["webhooks"][0]["clientConfig"]["caBundle"] == "Q0EK" for c in _configs(docs))
    env = _env(docs)
    assert env["GLMOPS_WEBHOOK_SECRET"] == "ops/my-tls" and env["GLMOPS_WEBHOOK_SECRET_OWNED"] == "false"
    assert "GLMOPS_WEBHOOK_INJECT_CA_INTO" not in env
    without_bundle = _env(_render(cluster, "webhook.certificateSecret=my-tls"))
    assert without_bundle["GLMOPS_WEBHOOK_INJECT_CA_INTO"] == "glmops-ops,glmops-ops", "copied from its ca.crt"


def test_readiness_waits_for_the_webhook_server_and_shutdown_keeps_answering(cluster: Cluster) -> None:
    docs = _render(cluster, "logLevel=WARNING")
    container = _container(docs)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "readiness"}
    assert {"name": "readiness", "containerPort": 8082} in container["ports"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 10}}
    pod = docs[("Deployment", "glmops")]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > 10
    assert _env(docs)["GLMOPS_LOG_LEVEL"] == "WARNING"
    off = _container(_render(cluster, "webhook.enabled=false"))
    assert off["readinessProbe"]["httpGet"]["path"] == "/healthz"


@pytest.mark.parametrize("replicas, spread", [(1, False), (3, True)])
def test_more_than_one_replica_gets_a_disruption_budget_and_spreads(
    cluster: Cluster, replicas: int, spread: bool
) -> None:
    docs = _render(cluster, f"replicas={replicas}")
    assert (("PodDisruptionBudget", "glmops") in docs) is spread
    affinity = docs[("Deployment", "glmops")]["spec"]["template"]["spec"].get("affinity")
    assert bool(affinity) is spread
    if spread:
        assert docs[("PodDisruptionBudget", "glmops")]["spec"]["maxUnavailable"] == 1
        term = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
        assert term["topologyKey"] == "kubernetes.io/hostname"


def test_helm_test_sends_the_validating_webhook_a_refused_glmdeployment(cluster: Cluster) -> None:
    pod = _render(cluster)[("Pod", "glmops-test-webhook")]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    command = pod["spec"]["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "glm_operator.k8s.webhook_check"]
    assert command[3] == "https://glmops-webhook.ops.svc/glmops-validate"


@pytest.mark.parametrize(
    "flag, fragment",
    [
        ("logLevel=LOUD", "logLevel"),
        ("replicas=0", "replicas"),
        ("webhook.failurePolicy=Sometimes", "failurePolicy"),
        ("webhook.timeoutSeconds=31", "timeoutSeconds"),
        ("imageBuild.builder=docker", "builder"),
    ],
)
def test_values_schema_refuses_values_outside_their_enum_or_bounds(cluster: Cluster, flag: str, fragment: str) -> None:
    proc = _helm(cluster, "template", "glmops", CHART, "--set", flag, check=False)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr and fragment in proc.stderr


@pytest.fixture
def installed(cluster: Cluster, kubectl: Kubectl, namespace: str) -> Iterator[str]:
    _helm(cluster, "install", "glmops", CHART, "-n", namespace, "--set", f"watchNamespaces={{{namespace}}}")
    yield namespace
    _helm(cluster, "uninstall", "glmops", "-n", namespace, check=False)


def test_helm_upgrade_keeps_the_ca_bundle_the_operator_wrote_and_uninstall_keeps_the_secret(
    cluster: Cluster, kubectl: Kubectl, installed: str
) -> None:
    ns = installed
    config = f"glmops-{ns}"
    deploy = kubectl.get("deployment", "glmops", ns)
    env = {e["name"]: e["value"] for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}
    # What the operator's pod does at start (kwok runs no process): create the Secret, fill caBundle by name.
    code = (
        "import os, datetime; from glm_operator.k8s.webhook_certs import CertificateSource, sync_certificates;"
        "sync_certificates(CertificateSource.from_env(os.environ), datetime.datetime.now(datetime.UTC))"
    )
    subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), "-c", code],
        env={**os.environ, **env, "KUBECONFIG": cluster.kubeconfig}, check=True, timeout=60,
    )  # fmt: skip
    ca = kubectl.get("secret", "glmops-webhook-cert", ns)["data"]["ca.crt"]

    def bundles() -> list[str | None]:
        return [kubectl.get(k, config)["webhooks"][0]["clientConfig"].get("caBundle") for k in CONFIG_KINDS]

    assert bundles() == [ca, ca]
    _helm(cluster, "upgrade", "glmops", CHART, "-n", ns, "--reuse-values", "--set", "webhook.timeoutSeconds=7")
    assert [kubectl.get(k, config)["webhooks"][0]["timeoutSeconds"] for k in CONFIG_KINDS] == [7, 7]
    assert bundles() == [ca, ca], "helm upgrade must leave the operator's caBundle alone"
    _helm(cluster, "uninstall", "glmops", "-n", ns)
    for kind in CONFIG_KINDS:
        assert kubectl.run("get", kind, config, check=False).returncode != 0, "the release's configurations go"
    assert kubectl.get("secret", "glmops-webhook-cert", ns)["data"]["ca.crt"] == ca, "the generated Secret is kept"
