"""Helm's release record read as Helm writes it, and the permissions doctor asks about taken from its manifest."""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.doctor.facts import Permission
from glm_operator.doctor.release import (
    ReleaseRecordError,
    decode_release,
    granted_permissions,
    manifest_objects,
    release_fact,
)
from tests.support.chart import TEMPLATE_FLAGS

NS = "glmops-system"


def record(release: dict[str, Any]) -> str:
    """The `release` value of a Helm release Secret as the API returns it: base64 of Helm's base64 of gzipped JSON."""
    helm_text = base64.b64encode(gzip.compress(json.dumps(release).encode()))
    return base64.b64encode(helm_text).decode()


def rbac(kind: str, name: str, rules: list[dict[str, Any]], namespace: str = "") -> list[dict[str, Any]]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    binding = "RoleBinding" if kind == "Role" else "ClusterRoleBinding"
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": binding,
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "glmops", "namespace": NS}],
        },
    ]


DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "glmops", "namespace": NS},
    "spec": {
        "template": {
            "spec": {
                "serviceAccountName": "glmops",
                "containers": [
                    {
                        "name": "operator",
                        "env": [{"name": "GLMOPS_WEBHOOK_SECRET", "value": "glmops-system/glmops-webhook-cert"}],
                    }
                ],
            }
        }
    },
}
WEBHOOK = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "glmops-glmops-system"},
}
OBJECTS = [
    DEPLOYMENT,
    WEBHOOK,
    *rbac(
        "ClusterRole",
        "glmops",
        [{"apiGroups": ["glmops.dev"], "resources": ["glmdeployments", "glmdeployments/status"], "verbs": ["patch"]}],
    ),
    *rbac(
        "Role",
        "glmops",
        [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["glmops-catalog"], "verbs": ["get"]}],
        NS,
    ),
]
RELEASE = {
    "name": "glmops",
    "namespace": NS,
    "version": 3,
    "chart": {"metadata": {"version": "0.1.0"}},
    "manifest": yaml.safe_dump_all(OBJECTS),
}


def test_a_release_record_decodes_to_the_release_and_its_objects() -> None:
    release = decode_release(record(RELEASE))
    fact = release_fact(release, manifest_objects(release))
    assert (fact.name, fact.revision, fact.service_account, fact.certificate_secret) == (
        "glmops",
        3,
        "glmops",
        "glmops-webhook-cert",
    )
    assert fact.webhook_configs == (("ValidatingWebhookConfiguration", "glmops-glmops-system"),)
    assert not fact.cert_manager


@pytest.mark.parametrize(
    "value",
    ["not base64!", base64.b64encode(b"plain").decode(), base64.b64encode(base64.b64encode(b"\x1f\x8bxx")).decode()],
)
def test_a_record_that_is_not_helms_is_an_error_not_a_crash(value: str) -> None:
    with pytest.raises(ReleaseRecordError):
        decode_release(value)


def test_permissions_are_those_the_release_binds_to_its_service_account_where_bound() -> None:
    assert granted_permissions(OBJECTS, "glmops", NS) == [
        Permission("patch", "glmops.dev", "glmdeployments"),
        Permission("patch", "glmops.dev", "glmdeployments", "status"),
        Permission("get", "", "configmaps", namespace=NS, name="glmops-catalog"),
    ]


def test_roles_bound_to_another_account_grant_it_nothing() -> None:
    assert granted_permissions(OBJECTS, "someone-else", NS) == []


def test_the_release_the_chart_renders_names_its_certificate_secret_and_service_account(helm: str) -> None:
    """The chart's own Deployment, not a hand-written one: how the chart spells GLMOPS_WEBHOOK_SECRET is what counts."""
    chart = Path(__file__).resolve().parents[2] / "charts" / "glmops"
    rendered = subprocess.run(
        [helm, "template", "prod", str(chart), "--namespace", "ops", *TEMPLATE_FLAGS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    fact = release_fact({"name": "prod", "namespace": "ops", "version": 1}, objects)
    assert (fact.certificate_secret, fact.service_account) == ("prod-glmops-webhook-cert", "prod-glmops")
