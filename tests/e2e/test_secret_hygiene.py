"""No Secret value leaks: a value planted in every Secret a GLMDeployment names is found nowhere but in those Secrets.

The operator runs at DEBUG (its most talkative) while a GLMDeployment that names the Secret goes through
reconcile and its canaries to Ready on the simulator fleet. Then the operator's log, the GLMDeployment (status
included), every Event of the namespace, the operator's /metrics and every other object in the namespace are
searched for the value, raw and base64-encoded. The rendered pods must reach it by secretKeyRef only.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from glm_operator.rules.access import SECRET_REFERENCE_FIELDS
from tests.conftest import TEST_METRICS_PORT, OperatorProcess
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.cluster import Cluster, Kubectl, eventually
from tests.support.secret_refs import secret_reference_paths

pytestmark = pytest.mark.cluster
NAME = "secret-hygiene"
SECRET = "hf-token"
PULL_SECRET = "pull-creds"
MOUNTED_SECRET = "mounted-files"
# How the GLMDeployment names a Secret holding the planted value, for each field that can name one.
PLANTED_IN = {
    "spec.model.tokenSecret": SECRET,
    "spec.pod.imagePullSecrets[]": PULL_SECRET,
    "spec.pod.volumes[]": MOUNTED_SECRET,
}
# Every kind the operator writes into a namespace, and the ones Kubernetes derives from them.
SEARCHED_KINDS = "deployments,statefulsets,replicasets,pods,services,endpoints,poddisruptionbudgets,configmaps"


@pytest.fixture(scope="module")
def debug_operator(cluster: Cluster, operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """The operator at DEBUG, in place of the session's (two operators would fight)."""
    operator.stop()
    verbose = OperatorProcess(cluster, extra_env={"GLMOPS_LOG_LEVEL": "DEBUG"}, name="operator-secret-hygiene")
    try:
        verbose.start()
        yield verbose
    finally:
        verbose.stop()
        operator.start()


def _planted() -> str:
    return f"hf_glmops_planted_{uuid.uuid4().hex}"


def _leaks(text: str, value: str) -> list[str]:
    """The forms of `value` found in `text`: as it is, and as a Secret's data holds it."""
    forms = {"raw": value, "base64": base64.b64encode(value.encode()).decode()}
    return [form for form, needle in forms.items() if needle in text]


def _ready(kubectl: Kubectl, namespace: str) -> dict[str, Any]:
    glmd = kubectl.get("glmd", NAME, namespace)
    assert glmd.get("status", {}).get("readyReplicas") == 1, glmd.get("status")
    return glmd


def test_a_planted_token_appears_nowhere_but_in_its_secret(
    kubectl: Kubectl, namespace: str, debug_operator: OperatorProcess, sim_fleet: object
) -> None:
    assert secret_reference_paths() == list(SECRET_REFERENCE_FIELDS) == list(PLANTED_IN), (
        "plant a value in the new Secret reference too"
    )
    value = _planted()
    for name in PLANTED_IN.values():
        kubectl.run("create", "secret", "generic", name, "-n", namespace, f"--from-literal=HF_TOKEN={value}")
    obj = (
        B(NAME)
        .accelerator("H200")
        .tensor(8)
        .set("spec.model.tokenSecret", {"name": SECRET})
        .set("spec.pod.imagePullSecrets", [{"name": PULL_SECRET}])
        .set("spec.pod.volumes", [{"name": "files", "secret": {"secretName": MOUNTED_SECRET}}])
        .set("spec.pod.volumeMounts", [{"name": "files", "mountPath": "/etc/files", "readOnly": True}])
        .build()
    )
    kubectl.apply(obj, "-n", namespace)
    glmd = eventually(lambda: _ready(kubectl, namespace), timeout=180, what="the deployment to become Ready")

    searched: dict[str, str] = {
        "the GLMDeployment and its status": json.dumps(glmd),
        "the Events of the namespace": kubectl.run("get", "events", "-n", namespace, "-o", "json").stdout,
        "the operator's /metrics": httpx.get(f"http://127.0.0.1:{TEST_METRICS_PORT}/metrics", timeout=10).text,
        "the operator's log": debug_operator.log_path.read_text(),
    }
    objects = kubectl.run("get", SEARCHED_KINDS, "-n", namespace, "-o", "json").stdout
    secrets = kubectl.get("secrets", namespace=namespace)["items"]
    others = [s for s in secrets if s["metadata"]["name"] not in PLANTED_IN.values()]
    searched["the other objects in the namespace"] = objects + json.dumps(others)
    assert all(len(text) > 100 for text in searched.values()), {k: len(v) for k, v in searched.items()}
    # The search can find it: the Secrets themselves hold it.
    for name in PLANTED_IN.values():
        own = next(s for s in secrets if s["metadata"]["name"] == name)
        assert _leaks(json.dumps(own), value) == ["base64"], name
    leaks = {where: found for where, text in searched.items() if (found := _leaks(text, value))}
    assert leaks == {}, f"the planted token leaked into: {leaks}"

    # The pods reach the Secrets by reference, never by value.
    pods = [
        p
        for p in json.loads(objects)["items"]
        if p["kind"] == "Pod" and p["metadata"]["labels"].get("glmops.dev/deployment") == NAME
    ]
    assert pods
    for pod in pods:
        assert pod["spec"]["imagePullSecrets"] == [{"name": PULL_SECRET}]
        assert [v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v] == [MOUNTED_SECRET]
        for container in pod["spec"]["containers"]:
            (token,) = (e for e in container["env"] if e["name"] == "HF_TOKEN")
            assert token == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "HF_TOKEN"}}}
            assert "envFrom" not in container
