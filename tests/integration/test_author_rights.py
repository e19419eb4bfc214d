"""The author's own rights decide what a GLMDeployment may name, asked of the real API server (docs/security.md).

Users are impersonated (`kubectl --as`) with Roles of this namespace only: `alice` may write GLMDeployments and
nothing else, `bob` may also read Secrets and act as the ServiceAccount `builder`. The operator runs as the session's
(the cluster administrator), so every refusal here is the author's missing right, found by a SubjectAccessReview.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import OperatorProcess
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.cluster import Kubectl

pytestmark = pytest.mark.cluster

GLMD_RULE = {
    "apiGroups": ["glmops.dev"],
    "resources": ["glmdeployments"],
    "verbs": ["get", "list", "create", "patch", "update"],
}


def _grant(kubectl: Kubectl, namespace: str, user: str, rules: list[dict[str, Any]]) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": user}, "rules": rules}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    kubectl.apply(role, "-n", namespace)
    kubectl.apply(binding, "-n", namespace)


@pytest.fixture
def users(kubectl: Kubectl, namespace: str, operator: OperatorProcess) -> str:
    kubectl.run("create", "secret", "generic", "theirs", "--from-literal=token=x", "-n", namespace)
    kubectl.run("create", "serviceaccount", "builder", "-n", namespace)
    _grant(kubectl, namespace, "alice", [GLMD_RULE])
    _grant(
        kubectl,
        namespace,
        "bob",
        [
            GLMD_RULE,
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
            {
                "apiGroups": [""],
                "resources": ["serviceaccounts"],
                "verbs": ["impersonate"],
                "resourceNames": ["builder"],
            },
        ],
    )
    return namespace


def _glmd(name: str) -> B:
    return B(name).accelerator("H200").tensor(8).vllm("0.30.0")


def test_a_secret_the_author_may_not_read_is_refused_with_the_field(kubectl: Kubectl, users: str) -> None:
    obj = _glmd("pull").set("spec.pod.imagePullSecrets", [{"name": "theirs"}]).build()
    result = kubectl.apply(obj, "-n", users, "--as=alice", check=False)
    assert result.returncode != 0
    assert 'admission webhook "glmops-validate.glmops.dev" denied the request' in result.stderr
    assert f"spec.pod.imagePullSecrets[0].name: theirs: alice may not get Secret {users}/theirs" in result.stderr
    assert kubectl.apply(obj, "-n", users, "--as=bob", check=False).returncode == 0


def test_a_secret_volume_and_a_service_account_follow_the_authors_rights(kubectl: Kubectl, users: str) -> None:
    obj = (
        _glmd("vol")
        .set("spec.pod.volumes", [{"name": "s", "secret": {"secretName": "theirs"}}])
        .set("spec.pod.volumeMounts", [{"name": "s", "mountPath": "/data"}])
        .set("spec.pod.serviceAccountName", "builder")
        .build()
    )
    refused = kubectl.apply(obj, "-n", users, "--as=alice", check=False)
    assert refused.returncode != 0 and "2 problem(s)" in refused.stderr
    assert "spec.pod.volumes[0].secret.secretName: theirs: alice may not get Secret" in refused.stderr
    assert "spec.pod.serviceAccountName: builder: alice may not act as ServiceAccount" in refused.stderr
    assert kubectl.apply(obj, "-n", users, "--as=bob", check=False).returncode == 0


def test_an_object_naming_nothing_of_the_namespace_is_admitted_for_anyone(kubectl: Kubectl, users: str) -> None:
    assert kubectl.apply(_glmd("plain").build(), "-n", users, "--as=alice", check=False).returncode == 0


def test_an_update_by_someone_without_the_right_keeps_what_was_admitted(kubectl: Kubectl, users: str) -> None:
    obj = _glmd("kept").set("spec.pod.imagePullSecrets", [{"name": "theirs"}]).build()
    assert kubectl.apply(obj, "-n", users, "--as=bob", check=False).returncode == 0
    obj["spec"]["replicas"] = 2
    assert kubectl.apply(obj, "-n", users, "--as=alice", check=False).returncode == 0
    obj["spec"]["pod"]["imagePullSecrets"].append({"name": "theirs-too"})
    added = kubectl.apply(obj, "-n", users, "--as=alice", check=False)
    assert added.returncode != 0 and "imagePullSecrets[1].name: theirs-too" in added.stderr
