"""The re-list against the real API server: its list versions order copies as the store assumes.

The store of observed objects keeps a copy until a watch reports its deletion; the re-list (`handlers/resync.py`)
finds what was deleted while no watch saw it. Here no watch runs at all: the test records copies as the API server
returned them, deletes one behind the store's back, and the re-list must forget exactly that one, keep a copy
recorded from a write newer than its list, and name the deployment to refresh.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from glm_operator.control.runtime import Runtime
from glm_operator.handlers import resync
from tests.support.cluster import Kubectl

pytestmark = pytest.mark.cluster

LABELS = {"app.kubernetes.io/managed-by": "glmops", "glmops.dev/deployment": "glm"}


def _configmap(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": LABELS}, "data": {"a": "1"}}
    out = kubectl.run("create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(obj)).stdout
    created: dict[str, Any] = json.loads(out)
    return created


@pytest.fixture
def context(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Runtime:
    from glm_operator.k8s import client, objects

    monkeypatch.setenv("KUBECONFIG", cluster.kubeconfig)
    client.api_client.cache_clear()
    monkeypatch.setattr(objects, "_dynamic", None)
    return Runtime.from_env({})


def test_the_relist_forgets_only_what_the_api_server_no_longer_has(
    kubectl: Kubectl, namespace: str, context: Runtime
) -> None:
    kept, gone = _configmap(kubectl, namespace, "kept"), _configmap(kubectl, namespace, "gone")
    assert context.observed.record(kept) and context.observed.record(gone)
    kubectl.run("delete", "configmap", "gone", "-n", namespace)  # no watch tells the store
    # A copy from a write answered after the list will be served (its version is ahead of everything so far).
    future = dict(kept, metadata={**kept["metadata"], "name": "later", "resourceVersion": str(10**15)})
    context.observed.record(future)

    assert resync.resync_once(context) == {(namespace, "glm")}
    names = sorted(o["metadata"]["name"] for o in context.observed.owned_by(namespace, "glm"))
    assert names == ["kept", "later"]
    assert resync.resync_once(context) == set(), "nothing more is stale"
