"""The operator's guarded webhook server, started on a free port for one scenario (unit tests, no cluster)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any

from glm_operator.k8s.webhooks import GuardedWebhookServer
from glm_operator.render.webhook_certs import WebhookCertificates

Answer = Callable[..., Awaitable[dict[str, Any]]]
"""Stands in for kopf's admission handlers: called with the review, returns the AdmissionReview answer."""


def guarded_server(tmp_path: Path, serving: WebhookCertificates, **options: Any) -> GuardedWebhookServer:
    """The server on 127.0.0.1 with `serving`'s key pair written under `tmp_path`; `options` go to the server."""
    (tmp_path / "tls.crt").write_bytes(serving.tls_cert)
    (tmp_path / "tls.key").write_bytes(serving.tls_key)
    return GuardedWebhookServer(
        addr="127.0.0.1",
        host="127.0.0.1",
        certfile=str(tmp_path / "tls.crt"),
        pkeyfile=str(tmp_path / "tls.key"),
        **options,
    )


async def _serving(server: GuardedWebhookServer, answer: Answer) -> AsyncGenerator[int]:
    async for config in server(answer):
        yield int(config["url"].rsplit(":", 1)[1].split("/")[0])


def serve_while(
    server: GuardedWebhookServer,
    answer: Answer,
    scenario: Callable[[int], Awaitable[None]],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> None:
    """Runs `scenario(port)` while `server` answers with `answer`, then stops the server."""

    async def run() -> None:
        served = _serving(server, answer)
        port = await anext(served)
        try:
            await scenario(port)
        finally:
            await served.aclose()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run())
