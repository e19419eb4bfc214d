"""The admission webhook server: where the API server reaches the operator, and with which certificate.

Local (the API server on the same host): a URL clientConfig, `https://<GLMOPS_WEBHOOK_HOST>:<port>`.
In a cluster: a Service clientConfig (`GLMOPS_WEBHOOK_SERVICE=namespace/name`), since kube-apiserver
does not resolve cluster DNS names in URLs. Certificates come from files (a Secret mounted by the chart).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import kopf


class ServiceWebhookServer(kopf.WebhookServer):
    """kopf's server, advertised to the API server through a Service instead of a URL."""

    def __init__(self, *, service_namespace: str, service_name: str, service_port: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service = {"namespace": service_namespace, "name": service_name, "port": service_port, "path": ""}

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async for config in super().__call__(fn):
            advertised = {k: v for k, v in dict(config).items() if k != "url"}
            advertised["service"] = dict(self.service)
            yield advertised


def webhook_server_from_env(env: Mapping[str, str]) -> kopf.WebhookServer | None:
    """The server the environment asks for; None when webhooks are switched off (GLMOPS_WEBHOOK=off)."""
    if env.get("GLMOPS_WEBHOOK", "on") == "off":
        return None
    common: dict[str, Any] = {
        "addr": env.get("GLMOPS_WEBHOOK_ADDR", "0.0.0.0"),
        "port": int(env.get("GLMOPS_WEBHOOK_PORT", "9443")),
        "certfile": env.get("GLMOPS_WEBHOOK_CERT") or None,
        "pkeyfile": env.get("GLMOPS_WEBHOOK_KEY") or None,
        "cafile": env.get("GLMOPS_WEBHOOK_CA") or None,
    }
    service = env.get("GLMOPS_WEBHOOK_SERVICE")
    if service:
        namespace, _, name = service.partition("/")
        return ServiceWebhookServer(
            service_namespace=namespace,
            service_name=name,
            service_port=int(env.get("GLMOPS_WEBHOOK_SERVICE_PORT", "443")),
            **common,
        )
    return kopf.WebhookServer(host=env.get("GLMOPS_WEBHOOK_HOST"), **common)
