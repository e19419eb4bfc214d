"""The chart's webhook.clientAuth: the CA mounted into the operator pod, the environment naming it, helm test's mode."""

from __future__ import annotations

import subprocess
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from glm_operator.k8s.webhook_client_auth import CA_ENV, NAMES_ENV
from tests.support.chart import TEMPLATE_FLAGS
from tests.unit.test_alerts import CHART

CA = "webhook.clientAuth.caConfigMap.name=apiserver-webhook-client-ca"


def _template(helm: str, *sets: str) -> subprocess.CompletedProcess[str]:
    args = [helm, "template", "glmops", str(CHART), "--namespace", "glmops-system", *TEMPLATE_FLAGS]
    for value in sets:
        args += ["--set", value]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def _rendered(helm: str, *sets: str) -> dict[str, dict[str, Any]]:
    proc = _template(helm, *sets)
    assert proc.returncode == 0, proc.stderr
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(proc.stdout) if d}


def _pod(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = docs["Deployment/glmops"]["spec"]["template"]["spec"]
    return spec


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["containers"][0]["env"]}


def _mounted_file(pod: dict[str, Any], volume_name: str) -> tuple[dict[str, Any], PurePosixPath]:
    """The volume and the path its one item has inside the operator container."""
    volume = next(v for v in pod["volumes"] if v["name"] == volume_name)
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume_name)
    assert mount["readOnly"] is True
    (item,) = volume["configMap"]["items"]
    return volume, PurePosixPath(mount["mountPath"]) / item["path"]


def test_by_default_no_client_certificate_is_asked_for(helm: str) -> None:
    docs = _rendered(helm)
    pod = _pod(docs)
    assert CA_ENV not in _env(pod) and NAMES_ENV not in _env(pod)
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]
    assert "--client-auth" not in docs["Pod/glmops-test-webhook"]["spec"]["containers"][0]["command"]


@pytest.mark.parametrize("key", ["ca.crt", "bundle.pem"])
def test_the_ca_config_map_is_mounted_where_the_operator_is_told_to_read_it(helm: str, key: str) -> None:
    docs = _rendered(helm, CA, f"webhook.clientAuth.caConfigMap.key={key}")
    pod = _pod(docs)
    volume, path = _mounted_file(pod, "webhook-client-ca")
    assert volume["configMap"]["name"] == "apiserver-webhook-client-ca"
    assert volume["configMap"]["items"][0]["key"] == key
    assert _env(pod)[CA_ENV] == str(path)
    assert NAMES_ENV not in _env(pod), "no names: any certificate the CA signed"
    # helm test cannot present the API server's certificate: it checks the client authentication instead.
    command = docs["Pod/glmops-test-webhook"]["spec"]["containers"][0]["command"]
    assert command[3] == "--client-auth"


def test_the_names_reach_the_operator_as_one_comma_separated_setting(helm: str) -> None:
    pod = _pod(_rendered(helm, CA, "webhook.clientAuth.names={kube-apiserver-webhook-client,apiserver.example.com}"))
    assert _env(pod)[NAMES_ENV] == "kube-apiserver-webhook-client,apiserver.example.com"


def test_with_webhooks_off_nothing_is_mounted(helm: str) -> None:
    pod = _pod(_rendered(helm, CA, "webhook.enabled=false"))
    assert CA_ENV not in _env(pod)
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]


@pytest.mark.parametrize(
    "sets, message",
    [
        (
            ["webhook.clientAuth.names={kube-apiserver}"],
            "webhook.clientAuth.names needs webhook.clientAuth.caConfigMap",
        ),
        ([CA, r"webhook.clientAuth.names={a\,b}"], 'webhook.clientAuth.names: "a,b": a name has no comma'),
        (["webhook.clientAuth.caConfigMap.name=Not_A_Name"], "caConfigMap"),
        ([CA, "webhook.clientAuth.caConfigMap.key=../ca.crt"], "key"),
    ],
    ids=["names-without-ca", "comma-in-a-name", "bad-config-map-name", "bad-key"],
)
def test_the_chart_refuses_client_auth_values_it_cannot_use(helm: str, sets: list[str], message: str) -> None:
    proc = _template(helm, *sets)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
