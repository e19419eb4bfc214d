"""The admission webhook server: where the API server reaches the operator, and with which certificate.

Local (the API server on the same host): a URL clientConfig, `https://<GLMOPS_WEBHOOK_HOST>:<port>`.
In a cluster: a Service clientConfig (`GLMOPS_WEBHOOK_SERVICE=namespace/name`), since kube-apiserver
does not resolve cluster DNS names in URLs. Certificates come from files (a Secret mounted by the chart).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp.web
import kopf

from glm_operator.api import GROUP, PLURAL, VERSION
from glm_operator.api.constants import REPAIR_WEBHOOK_ID, VALIDATE_WEBHOOK_ID
from glm_operator.k8s.admission_review import MAX_BODY_BYTES, Refusal, check_request_line, parse_review

log = logging.getLogger(__name__)
WEBHOOK_IDS = frozenset({REPAIR_WEBHOOK_ID, VALIDATE_WEBHOOK_ID})
RESOURCES = frozenset({(GROUP, VERSION, PLURAL)})
BODY_TIMEOUT_SECONDS = 10.0
"""The API server sends a review in one go; a client that trickles its body is cut off (408)."""


class GuardedWebhookServer(kopf.WebhookServer):
    """kopf's server, answering only AdmissionReviews for our webhooks, over TLS 1.2 or later.

    kopf hands any POST to any path to the handlers and answers a body it cannot digest with a 500 and a
    traceback; here such a request gets a 4xx and one log line before kopf sees it.
    """

    def _build_ssl(self) -> tuple[bytes | None, ssl.SSLContext | None]:
        cadata, context = super()._build_ssl()
        if context is not None:
            context.minimum_version = ssl.TLSVersion.TLSv1_2
        return cadata, context

    async def _serve(  # type: ignore[override]  # kopf's is a staticmethod, called through the instance
        self, fn: kopf.WebhookFn, request: aiohttp.web.Request
    ) -> aiohttp.web.Response:
        webhook = request.match_info.get("id", "")
        try:
            check_request_line(webhook, request.content_type, WEBHOOK_IDS)
            review = parse_review(await _read_body(request), RESOURCES)
        except Refusal as refusal:
            log.warning("webhook refused a request from %s: %s", request.remote, refusal)
            return aiohttp.web.Response(status=refusal.status, text=refusal.message + "\n")
        headers = dict(request.headers)
        sslpeer = request.transport.get_extra_info("peercert") if request.transport else None
        try:
            # kopf types the review as its own TypedDict (not exported); parse_review checked that shape.
            response = await fn(review, webhook=webhook, sslpeer=sslpeer, headers=headers)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 (a well-formed review that still fails is our bug: logged, answered 4xx)
            log.exception("webhook %s failed on review %s", webhook, review["request"]["uid"])
            return aiohttp.web.Response(status=400, text="glmops could not process this AdmissionReview\n")
        return aiohttp.web.json_response(response)


async def _read_body(request: aiohttp.web.Request) -> bytes:
    """The body, at most MAX_BODY_BYTES and within BODY_TIMEOUT_SECONDS."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise Refusal(413, f"body larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT_SECONDS):
            while chunk := await request.content.readany():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise Refusal(413, f"body larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB")
                chunks.append(chunk)
    except TimeoutError as err:
        raise Refusal(408, f"body not received within {BODY_TIMEOUT_SECONDS:g} s") from err
    return b"".join(chunks)


class ServiceWebhookServer(GuardedWebhookServer):
    """kopf's server, advertised to the API server through a Service instead of a URL."""

    def __init__(self, *, service_namespace: str, service_name: str, service_port: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service = {"namespace": service_namespace, "name": service_name, "port": service_port, "path": ""}

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async for config in super().__call__(fn):
            advertised = {k: v for k, v in dict(config).items() if k != "url"}
            advertised["service"] = dict(self.service)
            yield advertised


def webhook_server_from_env(env: Mapping[str, str]) -> GuardedWebhookServer | None:
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
    return GuardedWebhookServer(host=env.get("GLMOPS_WEBHOOK_HOST"), **common)
