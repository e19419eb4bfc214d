"""The operator as the chart installs it, under its ServiceAccount's own token: everything it must do, it can; what
it must not do, the API server refuses.

Each mode is one `helm install` and one operator process (tests/support/installed.py): all namespaces, one
watched namespace, and one watched namespace with in-cluster image builds. The operator's log is scanned for
any refusal (403/Forbidden) after every path ran, so a missing rule fails here, not in a user's cluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.api.constants import CANARY_CONDITION, Reason
from glm_operator.canary.gsm8k_data import generate
from tests.conftest import ARTIFACTS, OperatorProcess
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.chart import TEMPLATE_FLAGS
from tests.support.cluster import REPO, Cluster, Kubectl, eventually
from tests.support.installed import RELEASE, InstalledOperator, can_i, kubectl_as
from tests.support.volumes import prebound_volume
from tests.support.wheel import build_plugin_wheel

pytestmark = pytest.mark.cluster
# A valid catalog extension, so the catalog ConfigMap is really read and parsed as installed.
CATALOG = """images:
  mirror.example/vllm-openai:v0.30.0-glmops.1:
    version: 0.30.0
    platform: cuda
    patches: [moe-mxfp4-expert-map, dsa-pp-topk-handoff, null-content-metrics]
"""
REGISTRY = "127.0.0.1:1/glmops"  # nothing listens there: the digest check fails and the build runs
DIGEST = "sha256:" + "7a" * 32
BUILT = "vllm-cuda-v0-33-0-glmops-1"
PUSH_SECRET = "push"
MODES = {
    "all-namespaces": {"watched": False, "builds": False},
    "watched-namespace": {"watched": True, "builds": False},
    "watched-namespace-image-builds": {"watched": True, "builds": True},
}


@dataclass
class Release:
    operator: InstalledOperator
    ops: str  # the release namespace
    work: str  # where GLMDeployments go (watched in namespaced modes)
    other: str  # a namespace the namespaced operator does not watch
    watched: bool
    builds: bool
    token: str


def _namespaces(kubectl: Kubectl, mode: str) -> tuple[str, str, str]:
    digest = hashlib.sha1(f"{mode}{uuid.uuid4()}".encode()).hexdigest()[:6]
    names = (f"rbac-ops-{digest}", f"rbac-work-{digest}", f"rbac-other-{digest}")
    for name in names:
        kubectl.run("create", "namespace", name)
        kubectl.run("label", "namespace", name, "glmops.dev/test=true")
    return names


def _values(mode: dict[str, bool], work: str) -> dict[str, Any]:
    values: dict[str, Any] = {"catalog": {"extension": CATALOG}}
    if mode["watched"]:
        values["watchNamespaces"] = [work]
    if mode["builds"]:
        values["imageBuild"] = {"enabled": True, "registry": REGISTRY, "insecure": True, "pushSecret": PUSH_SECRET}
    return values


def _build_env(workdir: Path) -> dict[str, str]:
    """What the operator image bakes in (the plugin wheel) and the fake builder's outcome for kwok to play."""
    fake = {BUILT: {"glmops.dev/fake-run-ms": "2000", "glmops.dev/fake-termination-message": DIGEST}}
    return {
        "GLMOPS_IMAGE_BUILD_PLUGIN_WHEEL": str(build_plugin_wheel(workdir / "plugin")),
        "GLMOPS_IMAGE_BUILD_POLL_SECONDS": "1",
        "GLMOPS_IMAGE_BUILD_POD_ANNOTATIONS": json.dumps(fake),
    }


@pytest.fixture(scope="module")
def only_the_installed_operator(operator: OperatorProcess) -> Iterator[None]:
    """The tests' own all-namespaces operator stops while these run: two operators would fight over the same
    GLMDeployments (it has no image builds, so it would put back the tag the installed one replaces by a digest)."""
    operator.stop()
    yield
    operator.start()


@pytest.fixture(scope="module", params=list(MODES), ids=list(MODES))
def release(
    request: pytest.FixtureRequest,
    cluster: Cluster,
    crd_installed: None,
    only_the_installed_operator: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Release]:
    """The chart installed in one mode, its operator running under the ServiceAccount's token."""
    mode = MODES[request.param]
    kubectl = cluster.kubectl
    ops, work, other = _namespaces(kubectl, request.param)
    workdir = tmp_path_factory.mktemp(request.param)
    test_env = {}
    if mode["builds"]:
        kubectl.run("delete", "glmimage", BUILT, "--ignore-not-found", "--wait=true")
        auth = {"auths": {"127.0.0.1:1": {"username": "bot", "password": "secret"}}}
        kubectl.run(
            "create", "secret", "docker-registry", PUSH_SECRET, "-n", ops,
            "--from-file=.dockerconfigjson=/dev/stdin", input=json.dumps(auth),
        )  # fmt: skip
        test_env = _build_env(workdir)
    operator = InstalledOperator(cluster, ops, workdir, values=_values(mode, work), test_env=test_env)
    try:
        operator.install()
        operator.start(probe_namespace=work)
        yield Release(operator, ops, work, other, mode["watched"], mode["builds"], operator.token())
    finally:
        operator.stop()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"installed-{request.param}.log").write_text(operator.log())
        operator.uninstall()
        if mode["builds"]:
            kubectl.run("delete", "glmimage", BUILT, "--ignore-not-found", check=False)
        for name in (ops, work, other):
            kubectl.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def sim_fleet(cluster: Cluster) -> Iterator[None]:
    """Simulated vLLM on every serving pod's IP (kwok pods run no process): the canaries' counterpart."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = open(ARTIFACTS / "sim-fleet-installed.log", "wb")  # noqa: SIM115 (owned by the process)
    env = dict(os.environ, KUBECONFIG=cluster.kubeconfig)
    proc = subprocess.Popen([str(REPO / ".venv" / "bin" / "glmctl"), "sim-fleet"], env=env, stdout=log, stderr=log)
    yield
    proc.terminate()
    proc.wait(timeout=20)


def _gsm8k_configmap(kubectl: Kubectl, namespace: str) -> str:
    """GSM8K questions in a ConfigMap of the deployment's namespace (spec.canary.gsm8k.source.configMap)."""
    lines = "\n".join(json.dumps({"question": i.question, "answer": i.answer}) for i in generate(200, seed=7))
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "gsm8k", "namespace": namespace},
            "data": {"test.jsonl": lines},
        }
    )
    return "gsm8k"


def _condition(glmd: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in glmd.get("status", {}).get("conditions", []) if c["type"] == type_), {})


SERVING_MODES = [m for m in MODES if not MODES[m]["builds"]]  # the image-build mode proves its own path below
BUILD_MODES = [m for m in MODES if MODES[m]["builds"]]


@pytest.mark.parametrize("release", SERVING_MODES, indirect=True)
def test_a_deployment_reconciles_passes_its_canaries_and_becomes_ready(
    release: Release, kubectl: Kubectl, sim_fleet: None
) -> None:
    ns = release.work
    source = _gsm8k_configmap(kubectl, ns)
    obj = B("served").accelerator("H200").tensor(8).vllm("0.32.0").set("spec.canary.gsm8k.source.configMap", source)
    kubectl.apply(obj.build(), "-n", ns)

    def ready() -> dict[str, Any]:
        glmd = kubectl.get("glmd", "served", ns)
        assert glmd["status"].get("readyReplicas") == 1, (glmd["status"].get("canary"), release.operator.refusals())
        return glmd

    glmd = eventually(ready, timeout=150, what="the deployment to pass its canaries as installed")
    assert _condition(glmd, "Ready")["status"] == "True"
    (pod,) = [p for p in kubectl.get("pods", namespace=ns)["items"] if p["metadata"]["name"].startswith("served")]
    gate = next(c for c in pod["status"]["conditions"] if c["type"] == CANARY_CONDITION)
    assert (gate["status"], gate["reason"]) == ("True", Reason.CANARY_PASSED)
    events = kubectl.run("get", "events", "-n", ns, "-o", "json").stdout
    assert Reason.CANARY_PASSED in events, "kopf's Events on the GLMDeployment were posted"
    # Drift: the owned Service deleted by hand comes back (the label-selected watch on owned objects).
    kubectl.run("delete", "service", "served", "-n", ns)
    eventually(lambda: kubectl.get("service", "served", ns), timeout=60, what="the deleted Service to be restored")
    # Pruning: a deployment deleted is cleaned up by garbage collection, and the operator keeps quiet.
    kubectl.run("delete", "glmd", "served", "-n", ns, "--wait=true", "--timeout=60s")


@pytest.mark.parametrize("release", SERVING_MODES, indirect=True)
def test_a_shared_model_cache_is_made_filled_mounted_and_cleaned_up(release: Release, kubectl: Kubectl) -> None:
    """The download path (claim, Job, then the workload) under the chart's RBAC; no provisioner here, so the test
    makes the PersistentVolume the claim binds to, and kwok completes the download pod."""
    ns = release.work
    with prebound_volume(kubectl, ns, "cached-model-cache"):
        obj = B("cached").accelerator("H200").tensor(8).vllm("0.32.0").set("spec.modelCache.shared", {"retain": False})
        kubectl.apply(obj.build(), "-n", ns)

        def workload() -> dict[str, Any]:
            items = kubectl.get("deploy", namespace=ns)["items"]
            return next(d for d in items if d["metadata"]["name"] == "cached")

        try:
            deploy = eventually(workload, timeout=90, what="the download, then the workload")
        except AssertionError as err:
            state = kubectl.run("get", "pv,pvc,jobs,pods,events", "-n", ns, "-o", "wide", check=False).stdout
            raise AssertionError(f"{err}\n{state}\nrefused: {release.operator.refusals()}") from err
        volumes = deploy["spec"]["template"]["spec"]["volumes"]
        assert {
            "name": "model-cache",
            "persistentVolumeClaim": {"claimName": "cached-model-cache", "readOnly": True},
        } in volumes
        kubectl.run("delete", "glmd", "cached", "-n", ns, "--wait=true", "--timeout=60s")

        def collected() -> bool:
            left = kubectl.run("get", "jobs,pvc", "-n", ns, "-l", "glmops.dev/deployment=cached", "-o", "name").stdout
            return not left.strip()

        eventually(collected, timeout=60, what="the Job and the unretained claim to go with the deployment")


def test_replicas_register_in_the_chart_peering_object(release: Release, kubectl: Kubectl) -> None:
    if release.watched:
        peering = kubectl.get("kopfpeering", "glmops", release.work)
    else:
        peering = kubectl.get("clusterkopfpeering", "glmops")
    assert peering.get("status"), f"no operator registered in {peering['metadata']}: {release.operator.refusals()}"


@pytest.mark.parametrize("release", BUILD_MODES, indirect=True)
def test_an_image_build_runs_and_its_digest_is_pinned(release: Release, kubectl: Kubectl) -> None:
    kubectl.apply(B("built").accelerator("H200").tensor(8).vllm("0.33.0").build(), "-n", release.work)
    image = eventually(
        lambda: (i := kubectl.get("glmimage", BUILT)).get("status", {}).get("phase") == "Succeeded" and i,
        timeout=90,
        what="the GLMImage to be built in the release namespace",
    )
    assert image["status"]["digest"] == DIGEST
    jobs = kubectl.run("get", "jobs", "-n", release.ops, "-o", "name").stdout.split()
    assert jobs, "the build Job runs in the release namespace"

    def pinned() -> str:
        items = kubectl.get("deploy", namespace=release.work)["items"]
        (deploy,) = [d for d in items if d["metadata"]["name"] == "built"]
        return str(deploy["spec"]["template"]["spec"]["containers"][0]["image"])

    assert eventually(pinned, timeout=60, what="the workload to run the built digest").endswith(f"@{DIGEST}")
    # Events on the cluster-scoped GLMImage go to the build namespace, beside its Job (not to `default`).
    events = kubectl.run("get", "events", "-n", release.ops, "--field-selector", "involvedObject.kind=GLMImage")
    assert BUILT in events.stdout


def test_the_operator_was_never_refused_anything(release: Release) -> None:
    """Runs last in each mode: every path above ran under the chart's RBAC."""
    log = release.operator.log()
    assert "keeping the last good catalogs" not in log, "the catalog extension was read and parsed"
    assert release.operator.refusals(namespaces={release.ops, release.work, release.other}) == []


# -- what it must not be able to do -----------------------------------------------------------------------------
NEVER = [
    ("get", "secrets", "kube-system"),
    ("list", "secrets", ""),
    ("create", "roles.rbac.authorization.k8s.io", "kube-system"),
    ("create", "rolebindings.rbac.authorization.k8s.io", "default"),
    ("create", "clusterroles.rbac.authorization.k8s.io", ""),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", ""),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", ""),
    ("bind", "clusterroles.rbac.authorization.k8s.io", ""),
    ("impersonate", "users", ""),
    ("impersonate", "serviceaccounts", "kube-system"),
    ("impersonate", "groups", ""),
    ("create", "pods/exec", "default"),
    ("create", "pods", "default"),
    ("patch", "pods", "default"),
    ("create", "serviceaccounts/token", "kube-system"),
    ("delete", "nodes", ""),
    ("delete", "namespaces", ""),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("delete", "validatingwebhookconfigurations.admissionregistration.k8s.io", ""),
    ("update", "glmdeployments.glmops.dev", "default"),
]


@pytest.mark.parametrize("verb, resource, namespace", NEVER, ids=[f"{v}-{r}-{n or 'cluster'}" for v, r, n in NEVER])
def test_the_service_account_may_never(
    release: Release, cluster: Cluster, verb: str, resource: str, namespace: str
) -> None:
    assert not can_i(cluster, release.token, verb, resource, namespace)


def test_secrets_are_out_of_reach_in_its_own_namespaces(release: Release, cluster: Cluster) -> None:
    for ns in (release.ops, release.work):
        assert not can_i(cluster, release.token, "list", "secrets", ns)
        assert not can_i(cluster, release.token, "get", "secrets", ns, name="another-secret")
    # Its own webhook certificate, by name only: the operator creates and renews it.
    assert can_i(cluster, release.token, "get", "secrets", release.ops, name=f"{RELEASE}-webhook-cert")
    assert can_i(cluster, release.token, "get", "secrets", release.ops, name=PUSH_SECRET) is release.builds


def test_webhook_configurations_are_patched_only_by_name(release: Release, cluster: Cluster) -> None:
    group = "admissionregistration.k8s.io"
    own = f"{RELEASE}-{release.ops}"  # the chart's configurations: <fullname>-<release namespace>
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        assert can_i(cluster, release.token, "patch", f"{kind}.{group}", name=own)
        assert not can_i(cluster, release.token, "patch", f"{kind}.{group}", name="another-webhook")
        assert not can_i(cluster, release.token, "create", f"{kind}.{group}")
        assert not can_i(cluster, release.token, "list", f"{kind}.{group}")


@pytest.mark.parametrize(
    "verb, resource",
    [
        ("create", "deployments.apps"),
        ("patch", "statefulsets.apps"),
        ("delete", "services"),
        ("create", "configmaps"),
        ("create", "jobs.batch"),
        ("delete", "persistentvolumeclaims"),
        ("patch", "pods/status"),
        ("list", "glmdeployments.glmops.dev"),
        ("create", "events"),
    ],
)
def test_a_namespaced_operator_writes_only_where_it_watches(
    release: Release, cluster: Cluster, verb: str, resource: str
) -> None:
    token = release.token
    assert can_i(cluster, token, verb, resource, release.work), "what the code needs where it watches"
    if not release.watched:
        # All namespaces: RBAC cannot scope by label, so this holds everywhere (docs/rbac.md, residual risk).
        assert can_i(cluster, token, verb, resource, "kube-system")
        return
    for ns in (release.other, "kube-system", "default"):
        assert not can_i(cluster, token, verb, resource, ns), f"{verb} {resource} in {ns}"


# -- what RBAC cannot say: the chart's admission policy on the operator's own writes --------------------------
def _refused(proc: subprocess.CompletedProcess[str], why: str) -> None:
    assert proc.returncode != 0, f"the operator's token was allowed to {why}: {proc.stdout}"
    assert "forbidden" in proc.stderr.lower() or "denied" in proc.stderr.lower(), proc.stderr


def _config_map(name: str, namespace: str, labels: dict[str, str]) -> str:
    meta = {"name": name, "namespace": namespace, "labels": labels}
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}})


MANAGED = {"app.kubernetes.io/managed-by": "glmops"}


def test_the_operator_creates_nothing_unlabelled_and_nothing_in_system_namespaces(
    release: Release, cluster: Cluster
) -> None:
    create = ("create", "--dry-run=server", "-f", "-")
    allowed = kubectl_as(cluster, release.token, *create, input=_config_map("ok", release.work, MANAGED))
    assert allowed.returncode == 0, f"a labelled object where it works is the operator's: {allowed.stderr}"
    unlabelled = kubectl_as(cluster, release.token, *create, input=_config_map("x", release.work, {}))
    _refused(unlabelled, "create an object not labelled as glmops'")
    assert "managed-by=glmops" in unlabelled.stderr
    system = kubectl_as(cluster, release.token, *create, input=_config_map("x", "kube-system", MANAGED))
    _refused(system, "create a labelled object in kube-system")


def test_the_operator_cannot_take_over_or_delete_foreign_objects(
    release: Release, cluster: Cluster, kubectl: Kubectl
) -> None:
    kubectl.run("create", "configmap", "foreign", "-n", release.work, "--from-literal=k=v", check=False)
    relabel = (
        "label",
        "configmap",
        "foreign",
        "-n",
        release.work,
        "--dry-run=server",
        "app.kubernetes.io/managed-by=glmops",
    )
    _refused(kubectl_as(cluster, release.token, *relabel), "relabel a foreign object as glmops'")
    delete = ("delete", "configmap", "foreign", "-n", release.work, "--dry-run=server")
    _refused(kubectl_as(cluster, release.token, *delete), "delete a foreign object")
    assert kubectl.get("configmap", "foreign", release.work)


def test_the_gate_writer_writes_the_status_of_serving_pods_only(
    release: Release, cluster: Cluster, kubectl: Kubectl
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bystander", "namespace": release.work},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    kubectl.apply(pod)
    condition = {"status": {"conditions": [{"type": CANARY_CONDITION, "status": "True"}]}}
    patch = ("patch", "pod", "bystander", "-n", release.work, "--subresource=status", "--type=strategic")
    proc = kubectl_as(cluster, release.token, *patch, "--dry-run=server", "-p", json.dumps(condition))
    _refused(proc, "write the status of a pod that is not a glmops serving pod")


# -- the rules themselves, in every combination of values --------------------------------------------------------
RENDERED = {
    "all-namespaces": [],
    "watched": ["--set", "watchNamespaces={a,b}"],
    "builds": ["--set", "imageBuild.enabled=true", "--set", "imageBuild.registry=r.example/g"],
    "builds-secret": [
        "--set",
        "imageBuild.enabled=true",
        "--set",
        "imageBuild.registry=r",
        "--set",
        "imageBuild.pushSecret=p",
    ],
    "no-webhook": ["--set", "webhook.enabled=false"],
}


@pytest.mark.parametrize("flags", list(RENDERED.values()), ids=list(RENDERED))
def test_no_rendered_rule_grants_wildcards_rbac_or_unnamed_secrets(cluster: Cluster, flags: list[str]) -> None:
    out = subprocess.run(
        [cluster.helm, "template", "glmops", str(REPO / "charts" / "glmops"), "-n", "ops", *TEMPLATE_FLAGS, *flags],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    roles = [d for d in yaml.safe_load_all(out) if d and d["kind"] in ("Role", "ClusterRole")]
    assert roles
    for role in roles:
        for rule in role["rules"]:
            where = f"{role['kind']} {role['metadata'].get('namespace', '')}: {rule}"
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], where
            assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"]), where
            assert "rbac.authorization.k8s.io" not in rule["apiGroups"], where
            assert not {"pods/exec", "pods/attach", "serviceaccounts/token", "nodes"} & set(rule["resources"]), where
            if "admissionregistration.k8s.io" in rule["apiGroups"]:
                assert rule.get("resourceNames"), f"unnamed: {where}"
            if "secrets" in rule["resources"]:  # read the push Secret; create and keep its webhook certificate
                named = rule.get("resourceNames") or []
                allowed = {(): ["create"], (f"{RELEASE}-webhook-cert",): ["get", "update"]}.get(tuple(named), ["get"])
                assert rule["verbs"] == allowed and (named or role["kind"] == "Role"), where
    groups = {g for role in roles for rule in role["rules"] for g in rule["apiGroups"]}
    assert ("admissionregistration.k8s.io" in groups) is ("webhook.enabled=false" not in flags)
