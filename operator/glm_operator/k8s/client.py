"""Kubernetes API clients, configured once from the pod's service account or the local kubeconfig."""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

import kubernetes
import urllib3

# What the client raises when the API server does not answer at all (restarting, network gone), as opposed to an
# answer with an error status (kubernetes.client.ApiException): worth a quick retry, not a traceback.
API_UNREACHABLE: tuple[type[Exception], ...] = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)
REFUSAL_CHARS = 300  # of the API server's own message, in a log line or an Event


def refusal(err: kubernetes.client.ApiException) -> str:
    """An API error as a person needs it: the status and the server's message (an admission policy's, a quota's)."""
    text = f"{err.status} {err.reason}"
    try:
        message = json.loads(err.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    if isinstance(message, str) and message:
        text += f": {message[:REFUSAL_CHARS]}"
    return text


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
