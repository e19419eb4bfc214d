"""The Helm chart: lints, renders, refuses bad values, and installs on the real control plane."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from glm_operator.catalog.image_policy import ImagePolicy
from tests.support.chart import TEMPLATE_FLAGS
from tests.support.cluster import REPO, Cluster, Kubectl, eventually

pytestmark = pytest.mark.cluster
CHART = str(REPO / "charts" / "glmops")


def _helm(cluster: Cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """helm on the test cluster; `template` is told the API versions the cluster serves, as its users are."""
    flags = TEMPLATE_FLAGS if args[:1] == ("template",) else ()
    proc = subprocess.run(
        [cluster.helm, f"--kubeconfig={cluster.kubeconfig}", *args, *flags], capture_output=True, text=True, timeout=180
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}\n{proc.stdout}")
    return proc


def test_chart_lints_clean(cluster: Cluster) -> None:
    out = _helm(cluster, "lint", "--strict", CHART)
    assert "0 chart(s) failed" in out.stdout


def test_template_renders_the_operator_with_rbac_and_the_crd(cluster: Cluster) -> None:
    out = _helm(cluster, "template", "glmops", CHART, "--namespace", "glmops-system", "--include-crds").stdout
    kinds = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out) if d}
    assert ("CustomResourceDefinition", "glmdeployments.glmops.dev") in kinds
    assert ("Deployment", "glmops") in kinds
    assert ("ClusterRole", "glmops") in kinds and ("ServiceAccount", "glmops") in kinds


def test_template_with_watch_namespaces_scopes_the_operator(cluster: Cluster) -> None:
    out = _helm(cluster, "template", "glmops", CHART, "--set", "watchNamespaces={team-a,team-b}").stdout
    deploy = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args and "--all-namespaces" not in args


def _operator_pod(cluster: Cluster, *flags: str) -> dict[str, Any]:
    out = _helm(cluster, "template", "glmops", CHART, *flags).stdout
    deploy = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")
    pod: dict[str, Any] = deploy["spec"]["template"]["spec"]
    return pod


def test_the_operator_pod_runs_non_root_read_only_without_capabilities(cluster: Cluster) -> None:
    pod = _operator_pod(cluster)
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False
    assert context["readOnlyRootFilesystem"] is True and context["runAsNonRoot"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    # The one writable place is an in-memory emptyDir.
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/tmp"]
    assert volumes["tmp"]["emptyDir"]["medium"] == "Memory"


def test_the_operator_security_context_can_be_overridden_for_platforms_that_assign_users(cluster: Cluster) -> None:
    pod = _operator_pod(
        cluster,
        "--set", "podSecurityContext.runAsUser=null", "--set", "podSecurityContext.runAsGroup=null",
        "--set", "podSecurityContext.fsGroup=null", "--set", "securityContext.readOnlyRootFilesystem=false",
    )  # fmt: skip
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize(
    "flags, policy",
    [
        ((), {"allowCustomImages": True, "allowedRepositories": []}),
        (
            ("--set", "imagePolicy.allowCustomImages=false"),
            {"allowCustomImages": False, "allowedRepositories": []},
        ),
        (
            ("--set", "imagePolicy.allowedRepositories={registry.example.com/team/,docker.io/vllm}"),
            {"allowCustomImages": True, "allowedRepositories": ["registry.example.com/team/", "docker.io/vllm"]},
        ),
    ],
)
def test_the_image_policy_reaches_the_operator_as_the_json_it_reads(
    cluster: Cluster, flags: tuple[str, ...], policy: dict[str, Any]
) -> None:
    env = {e["name"]: e.get("value") for e in _operator_pod(cluster, *flags)["containers"][0]["env"]}
    assert json.loads(env["GLMOPS_IMAGE_POLICY"]) == policy
    assert ImagePolicy.from_env(env) == ImagePolicy.from_values(policy)


def test_values_schema_refuses_a_misspelt_image_policy(cluster: Cluster) -> None:
    proc = _helm(cluster, "template", "glmops", CHART, "--set", "imagePolicy.allowedRepository={x}", check=False)
    assert proc.returncode != 0 and "allowedRepository" in proc.stderr


@pytest.mark.parametrize(
    "flag, fragment",
    [("replica=2", "replica"), ("image.tga=x", "tga"), ("replicas=two", "replicas")],
)
def test_values_schema_refuses_typos_and_wrong_types(cluster: Cluster, flag: str, fragment: str) -> None:
    proc = _helm(cluster, "template", "glmops", CHART, "--set", flag, check=False)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr and fragment in proc.stderr


@pytest.fixture
def release(cluster: Cluster, kubectl: Kubectl, namespace: str) -> Iterator[str]:
    yield namespace
    _helm(cluster, "uninstall", "glmops", "--namespace", namespace, check=False)


def test_helm_install_runs_the_operator_deployment(cluster: Cluster, kubectl: Kubectl, release: str) -> None:
    ns = release
    _helm(
        cluster,
        "install",
        "glmops",
        CHART,
        "--namespace",
        ns,
        "--set",
        f"watchNamespaces={{{ns}}}",
        "--wait",
        "--timeout",
        "120s",
    )
    deploy = kubectl.get("deployment", "glmops", ns)
    # The chart's default: two replicas, so admission keeps answering while one restarts (docs/webhooks.md).
    assert deploy["status"].get("availableReplicas") == deploy["spec"]["replicas"] == 2
    pods = kubectl.get("pods", namespace=ns)["items"]
    assert len(pods) == 2 and all(p["spec"]["nodeName"].startswith("cpu-") for p in pods), "no GPU node needed"
    assert kubectl.run("get", "crd", "glmdeployments.glmops.dev").returncode == 0
    can = kubectl.run(
        "auth",
        "can-i",
        "patch",
        "glmdeployments.glmops.dev/status",
        "-n",
        ns,
        f"--as=system:serviceaccount:{ns}:glmops",
    ).stdout.strip()
    assert can == "yes"
    cannot = kubectl.run(
        "auth", "can-i", "delete", "nodes", f"--as=system:serviceaccount:{ns}:glmops", check=False
    ).stdout.strip()
    assert cannot == "no"
    eventually(lambda: _helm(cluster, "status", "glmops", "-n", ns).stdout.count("STATUS: deployed") == 1)


def test_webhook_is_served_through_a_service_with_a_certificate_the_operator_keeps(cluster: Cluster) -> None:
    out = _helm(cluster, "template", "glmops", CHART, "--namespace", "ops").stdout
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}
    assert ("Service", "glmops-webhook") in docs
    assert not [k for k in docs if k[0] == "Secret"], "the chart renders no key material"
    env = {
        e["name"]: e.get("value")
        for e in docs[("Deployment", "glmops")]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["GLMOPS_WEBHOOK_SERVICE"] == "ops/glmops-webhook"
    assert env["GLMOPS_WEBHOOK_SECRET"] == "ops/glmops-webhook-cert"
    rules = docs[("ClusterRole", "glmops-ops-webhook")]["rules"]
    assert rules == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
            "resourceNames": ["glmops-ops"],
            "verbs": ["get", "patch"],
        }
    ]
    # kubectl auth can-i cannot judge a type the server does not serve yet, so check the rule itself.
    rules = docs[("ClusterRole", "glmops")]["rules"]
    assert any(r["apiGroups"] == ["leaderworkerset.x-k8s.io"] and "patch" in r["verbs"] for r in rules)


def test_webhook_can_be_switched_off(cluster: Cluster) -> None:
    out = _helm(cluster, "template", "glmops", CHART, "--set", "webhook.enabled=false").stdout
    kinds = {d["kind"] for d in yaml.safe_load_all(out) if d}
    assert "Secret" not in kinds and "Service" not in kinds
    assert '"off"' in out or "value: off" in out


@pytest.mark.parametrize(
    "verb, resource",
    [
        ("create", "deployments.apps"),
        ("delete", "statefulsets.apps"),
        ("create", "poddisruptionbudgets.policy"),
        ("patch", "pods --subresource=status"),
        ("create", "services"),
        ("create", "jobs.batch"),
        ("delete", "persistentvolumeclaims"),
    ],
)
def test_the_operator_may_manage_what_a_glmdeployment_owns(
    cluster: Cluster, kubectl: Kubectl, release: str, verb: str, resource: str
) -> None:
    ns = release
    _helm(cluster, "install", "glmops", CHART, "--namespace", ns, "--set", f"watchNamespaces={{{ns}}}")
    answer = kubectl.run(
        "auth",
        "can-i",
        verb,
        *resource.split(),
        "-n",
        ns,
        f"--as=system:serviceaccount:{ns}:glmops",
        check=False,
    ).stdout.strip()
    assert answer == "yes"
