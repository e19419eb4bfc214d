"""kopf's peering object, read so the canary gate's tasks pause when kopf pauses this replica."""

from __future__ import annotations

from typing import Any

import kubernetes

from glm_operator.k8s.client import api_client

GROUP, VERSION = "kopf.dev", "v1"


def read_peers(name: str, namespace: str | None) -> dict[str, Any]:
    """The peers recorded in the peering object (cluster-wide when namespace is None); {} when there is none."""
    api = kubernetes.client.CustomObjectsApi(api_client())
    try:
        if namespace is None:
            body = api.get_cluster_custom_object(GROUP, VERSION, "clusterkopfpeerings", name)
        else:
            body = api.get_namespaced_custom_object(GROUP, VERSION, namespace, "kopfpeerings", name)
    except kubernetes.client.ApiException as err:
        if err.status == 404:
            return {}
        raise
    status = body.get("status") if isinstance(body, dict) else None
    return dict(status) if isinstance(status, dict) else {}
