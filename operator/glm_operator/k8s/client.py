"""Kubernetes API clients, configured once from the pod's service account or the local kubeconfig."""

from __future__ import annotations

from functools import cache
from typing import Any

import kubernetes


@cache
def _configured() -> None:
    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]


def core_v1() -> Any:
    _configured()
    return kubernetes.client.CoreV1Api()
