"""Kubernetes API clients, configured once from the pod's service account or the local kubeconfig."""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import kubernetes
import urllib3

# What the client raises when the API server does not answer at all (restarting, network gone), as opposed to an
# answer with an error status (kubernetes.client.ApiException): worth a quick retry, not a traceback.
API_UNREACHABLE: tuple[type[Exception], ...] = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)


@cache
def api_client() -> Any:
    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        # Read KUBECONFIG now, not when the kubernetes package was imported.
        kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
    return kubernetes.client.ApiClient()


def core_v1() -> Any:
    return kubernetes.client.CoreV1Api(api_client())
