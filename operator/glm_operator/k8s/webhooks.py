"""The admission webhook server: where the API server reaches the operator, and with which certificate.

Local (the API server on the same host, tests): a URL clientConfig, `https://<GLMOPS_WEBHOOK_HOST>:<port>`,
certificates from files, and a webhook configuration that kopf creates and keeps (`settings.admission.managed`).
Installed by the chart (`GLMOPS_WEBHOOK_SECRET` set): the chart owns the configurations and their Service
clientConfig; the certificate is kept in a Secret (`k8s/webhook_certs.py`), reloaded without a restart, and a
readiness endpoint says whether the server answers (docs/webhooks.md).
Either way, with GLMOPS_WEBHOOK_CLIENT_CA set only clients with a certificate from that CA get past the TLS
handshake, and with GLMOPS_WEBHOOK_CLIENT_NAMES only those with one of its names are answered
(`k8s/webhook_client_auth.py`, docs/security.md).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import logging
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.web
import kopf

from glm_operator.api import GROUP, PLURAL, VERSION
from glm_operator.api.constants import REPAIR_WEBHOOK_ID, VALIDATE_WEBHOOK_ID
from glm_operator.k8s.admission_review import (
    MAX_BODY_BYTES,
    Refusal,
    check_request_line,
    parse_review,
    refusal_review,
    too_large,
)
from glm_operator.k8s.metrics import WEBHOOK_CERT_EXPIRY, WEBHOOK_SECONDS
from glm_operator.k8s.webhook_certs import CertificateSource, sync_certificates_async
from glm_operator.k8s.webhook_client_auth import ClientAuth
from glm_operator.k8s.webhook_limits import ConnectionGuard, ConnectionLimits, GuardedSite
from glm_operator.render.webhook_certs import WebhookCertificates, not_after

log = logging.getLogger(__name__)
WEBHOOK_IDS = frozenset({REPAIR_WEBHOOK_ID, VALIDATE_WEBHOOK_ID})
RESOURCES = frozenset({(GROUP, VERSION, PLURAL)})
BODY_TIMEOUT_SECONDS = 10.0
"""The API server sends a review in one go; a client that trickles its body is cut off (408)."""
INLINE_BYTES = 64 * 1024
"""A review up to this size is parsed and decided on the event loop (about a millisecond); a larger one in
LARGE_REVIEWS, so that it never holds the small ones behind it."""
LARGE_REVIEWS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="glmops-large-review")
"""Not kopf's pool, where reconciles block: one thread, so large reviews queue behind each other, not the rest."""
_LARGE_REVIEW = contextvars.ContextVar("glmops_large_review", default=False)
T = TypeVar("T")
Answer = Callable[[dict[str, Any], str], Awaitable[dict[str, Any]]]
"""Answers a checked AdmissionReview for one of our webhooks (its id): `handlers/admission.py` `answer`."""


def large_review() -> bool:
    """Whether the review being served is a large one (its work belongs off the event loop)."""
    return _LARGE_REVIEW.get()


async def decide(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` inline for the review being served, or in LARGE_REVIEWS when that review is large."""
    if not _LARGE_REVIEW.get():
        return fn(*args)
    return await asyncio.get_running_loop().run_in_executor(LARGE_REVIEWS, fn, *args)


class GuardedWebhookServer(kopf.WebhookServer):
    """kopf's server, answering only AdmissionReviews for our webhooks, over TLS 1.2 or later.

    kopf hands any POST to any path to the handlers and answers a body it cannot digest with a 500 and a
    traceback; here such a request gets a 4xx and one log line before kopf sees it. With `client_auth`, the
    handshake requires a client certificate from its CA, and a certificate without an allowed name gets a 403.
    """

    def __init__(
        self, *, client_auth: ClientAuth | None = None, limits: ConnectionLimits | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.client_auth = client_auth
        self.guard = ConnectionGuard(limits or ConnectionLimits())
        self.answer: Answer | None = None
        """Set by the operator: reviews are answered by it directly, not through kopf's per-call machinery."""

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        """kopf's serving loop, with the connection guard's site (`k8s/webhook_limits.py`) in place of aiohttp's."""

        async def serve(request: aiohttp.web.Request) -> aiohttp.web.Response:
            return await self._serve(fn, request)

        while True:
            cadata, context = self._build_ssl()
            app = aiohttp.web.Application()
            path = self.path.rstrip("/") if self.path else ""
            app.add_routes([aiohttp.web.post(f"{path}/{{id:.*}}", serve)])
            runner = aiohttp.web.AppRunner(
                app, handle_signals=False, keepalive_timeout=self.guard.limits.idle_seconds, access_log=None
            )
            await runner.setup()
            try:
                port = self.port or self._allocate_free_port()
                site = GuardedSite(
                    runner,
                    self.guard,
                    host=self.addr or None,
                    port=port,
                    ssl_context=context,
                    reuse_address=True,
                    reuse_port=True,
                )
                await site.start()
                schema = "http" if context is None else "https"
                host = self.host or self.DEFAULT_HOST or self._get_accessible_addr(self.addr)
                config = kopf.WebhookClientConfig(url=self._build_url(schema, host, port, self.path or ""))
                if cadata is not None:
                    config["caBundle"] = base64.b64encode(cadata).decode("ascii")
                yield config
                await self._WebhookServer__sleep_forever_or_until_ssl_files_change()  # type: ignore[attr-defined]
            finally:
                await runner.cleanup()

    def _build_ssl(self) -> tuple[bytes | None, ssl.SSLContext | None]:
        cadata, context = super()._build_ssl()
        if context is not None:
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            if self.client_auth is not None:
                self.client_auth.apply(context)
        return cadata, context

    async def _serve(  # type: ignore[override]  # kopf's is a staticmethod, called through the instance
        self, fn: kopf.WebhookFn, request: aiohttp.web.Request
    ) -> aiohttp.web.Response:
        webhook = request.match_info.get("id", "")
        sslpeer = request.transport.get_extra_info("peercert") if request.transport else None
        self.guard.request_started(request.transport)
        try:
            return await self._answer(fn, request, webhook, sslpeer)
        finally:
            self.guard.request_finished(request.transport)

    async def _answer(
        self, fn: kopf.WebhookFn, request: aiohttp.web.Request, webhook: str, sslpeer: Any
    ) -> aiohttp.web.Response:
        head = bytearray()
        try:
            if self.client_auth is not None and (refused := self.client_auth.refusal(sslpeer)):
                raise Refusal(403, refused)  # before the body is read: a stranger's request is not parsed
            check_request_line(webhook, request.content_type, WEBHOOK_IDS)
            body = await _read_body(request, head)
            large = len(body) > INLINE_BYTES
            _LARGE_REVIEW.set(large)
            if large:
                review = await asyncio.get_running_loop().run_in_executor(LARGE_REVIEWS, parse_review, body, RESOURCES)
            else:
                review = parse_review(body, RESOURCES)
        except Refusal as refusal:
            log.warning("webhook refused a request from %s: %s", request.remote, refusal)
            denial = refusal_review(bytes(head), refusal) if refusal.status in (400, 413) else None
            if denial is not None:  # the API server's own review: a denial it shows the user, whatever the policy
                return aiohttp.web.json_response(denial, headers={"Connection": "close"})
            return aiohttp.web.Response(status=refusal.status, text=refusal.message + "\n")
        start = time.monotonic()
        try:
            if self.answer is not None:
                response: Mapping[str, Any] = await self.answer(review, webhook)
            else:  # kopf types the review as its own TypedDict (not exported); parse_review checked that shape
                response = await fn(review, webhook=webhook, sslpeer=sslpeer, headers=dict(request.headers))  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 (a well-formed review that still fails is our bug: logged, answered 4xx)
            WEBHOOK_SECONDS.labels(webhook, "error").observe(time.monotonic() - start)
            log.exception("webhook %s failed on review %s", webhook, review["request"]["uid"])
            return aiohttp.web.Response(status=400, text="glmops could not process this AdmissionReview\n")
        WEBHOOK_SECONDS.labels(webhook, "ok").observe(time.monotonic() - start)
        return aiohttp.web.json_response(response)


async def _read_body(request: aiohttp.web.Request, head: bytearray) -> bytes:
    """The body, at most MAX_BODY_BYTES and within BODY_TIMEOUT_SECONDS; its first KiB goes into `head` as it comes.

    A body declared larger is refused before any of it is read; its head is then the first chunk already buffered.
    """
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        head += request.content.read_nowait(1024)
        raise too_large(request.content_length)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT_SECONDS):
            while chunk := await request.content.readany():
                if len(head) < 1024:
                    head += chunk[: 1024 - len(head)]
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise too_large(size)
                chunks.append(chunk)
    except TimeoutError as err:
        raise Refusal(408, f"body not received within {BODY_TIMEOUT_SECONDS:g} s") from err
    return b"".join(chunks)


class SecretWebhookServer(GuardedWebhookServer):
    """The chart's server: advertised through the chart's Service, its certificate kept in a Secret.

    kopf is told the configurations are not its own (`settings.admission.managed` unset), so nothing here or in
    kopf creates, patches or deletes a webhook configuration, at start or on shutdown; `k8s/webhook_certs.py`
    only fills the caBundle of the two the chart rendered. A changed certificate is loaded into the live TLS
    context: connections opened after that get it, open ones finish on the old one, and the listening socket is
    never closed (kopf's own file watch would restart the server, refusing connections meanwhile).
    """

    def __init__(
        self, *, source: CertificateSource, resync_seconds: float, readiness_port: int | None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.resync_seconds = resync_seconds
        self.readiness_port = readiness_port
        self.loaded: WebhookCertificates | None = None
        self.ssl_context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
        self.ssl_context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.client_auth is not None:
            self.client_auth.apply(self.ssl_context)

    def _build_ssl(self) -> tuple[bytes | None, ssl.SSLContext | None]:
        return None, self.ssl_context

    def load(self, certs: WebhookCertificates) -> bool:
        """Serve `certs` on connections opened from now on; False when they are already served."""
        if certs == self.loaded:
            return False
        with tempfile.TemporaryDirectory(prefix="glmops-webhook-") as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(certs.tls_cert)
            key.touch(mode=0o600)
            key.write_bytes(certs.tls_key)
            self.ssl_context.load_cert_chain(cert, key)
        self.loaded = certs
        expires = not_after(certs.tls_cert)
        WEBHOOK_CERT_EXPIRY.set(expires.timestamp())
        log.info("webhook server: serving the certificate that expires %s", expires)
        return True

    async def _initial_certificates(self) -> WebhookCertificates:
        delay = 1.0
        while True:
            try:
                return await sync_certificates_async(self.source)
            except Exception as err:  # noqa: BLE001 (retried: cert-manager may not have issued it yet)
                log.warning("webhook certificate not ready, retrying in %.0f s: %s", delay, err)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def _resync_forever(self) -> None:
        while True:
            await asyncio.sleep(self.resync_seconds)
            try:
                self.load(await sync_certificates_async(self.source))
            except Exception:  # noqa: BLE001 (keep serving the loaded certificate; try again next round)
                log.exception("webhook certificate resync failed; still serving the loaded one")

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        self.load(await self._initial_certificates())
        resync = asyncio.create_task(self._resync_forever(), name="webhook certificate resync")
        readiness = await self._serve_readiness() if self.readiness_port is not None else None
        try:
            async for config in super().__call__(fn):
                advertised = {k: v for k, v in dict(config).items() if k not in ("url", "caBundle")}
                advertised["service"] = {"namespace": self.source.namespace, "name": self.source.service, "path": ""}
                yield advertised  # informational only: kopf does not manage the configurations in this mode
        finally:
            resync.cancel()
            if readiness is not None:
                await readiness.cleanup()

    async def _serve_readiness(self) -> aiohttp.web.AppRunner:
        app = aiohttp.web.Application()
        app.add_routes([aiohttp.web.get("/readyz", self._readyz)])
        runner = aiohttp.web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        await aiohttp.web.TCPSite(runner, "0.0.0.0", self.readiness_port).start()  # noqa: S104 (kubelet probes it)
        return runner

    async def _readyz(self, _: aiohttp.web.Request) -> aiohttp.web.Response:
        """Ready once the webhook server answers over TLS with the certificate the API server is told to trust."""
        problem = await webhook_answers(
            self.port or 0, self.loaded, self.source.dns_names[2], self.addr, client_auth=self.client_auth is not None
        )
        if problem:
            return aiohttp.web.Response(status=503, text=f"webhook server not ready: {problem}\n")
        return aiohttp.web.Response(text="ok\n")


async def webhook_answers(
    port: int, certs: WebhookCertificates | None, hostname: str, addr: str | None, *, client_auth: bool = False
) -> str:
    """Empty when the webhook server at `port` answers HTTP over TLS verified for `hostname`; else what failed.

    With `client_auth` (the server requires a client certificate, which this probe has none of) it answers nothing
    over HTTP; the probe then stops at the TLS 1.3 handshake, which the client completes once it has verified the
    server's certificate and before the server checks the client's.
    """
    if certs is None or not port:
        return "no certificate loaded yet"
    host = "127.0.0.1" if addr in (None, "", "0.0.0.0") else addr  # noqa: S104
    context = ssl.create_default_context(cadata=certs.ca_bundle.decode("ascii"))
    if client_auth:
        return await _server_handshake(host, port, context, hostname)
    url = f"https://{host}:{port}/{VALIDATE_WEBHOOK_ID}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session,
            # A GET: aiohttp answers 405 before any handler runs (webhooks are POSTs), and nothing is logged.
            session.get(url, ssl=context, server_hostname=hostname) as response,
        ):
            return "" if response.status < 500 else f"HTTP {response.status}"
    except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as err:
        return f"{type(err).__name__}: {err}"


async def _server_handshake(host: str, port: int, context: ssl.SSLContext, hostname: str) -> str:
    """Empty when the client's side of a TLS 1.3 handshake completes (the server's certificate verified)."""
    context.minimum_version = ssl.TLSVersion.TLSv1_3  # in TLS 1.2 the server's Finished waits for our certificate
    try:
        async with asyncio.timeout(3):
            _, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=hostname)
    except (TimeoutError, ssl.SSLError, OSError) as err:
        return f"{type(err).__name__}: {err}"
    writer.close()
    with contextlib.suppress(ssl.SSLError, OSError):
        await writer.wait_closed()
    return ""


def webhook_server_from_env(env: Mapping[str, str]) -> GuardedWebhookServer | None:
    """The server the environment asks for; None when webhooks are switched off (GLMOPS_WEBHOOK=off).

    With GLMOPS_WEBHOOK_SECRET set (the chart), a SecretWebhookServer; otherwise a URL server with certificate
    files, whose webhook configuration kopf manages (local runs and tests).
    """
    if env.get("GLMOPS_WEBHOOK", "on") == "off":
        return None
    addr = env.get("GLMOPS_WEBHOOK_ADDR", "0.0.0.0")  # noqa: S104
    port = int(env.get("GLMOPS_WEBHOOK_PORT", "9443"))
    client_auth = ClientAuth.from_env(env)  # GLMOPS_WEBHOOK_CLIENT_CA / _NAMES: a bad one stops the start-up
    limits = ConnectionLimits.from_env(env)
    if env.get("GLMOPS_WEBHOOK_SECRET"):
        readiness = env.get("GLMOPS_READINESS_PORT")
        return SecretWebhookServer(
            source=CertificateSource.from_env(env),
            resync_seconds=float(env.get("GLMOPS_WEBHOOK_CERT_RESYNC_SECONDS", "60")),
            readiness_port=int(readiness) if readiness else None,
            client_auth=client_auth,
            limits=limits,
            addr=addr,
            port=port,
        )
    return GuardedWebhookServer(
        addr=addr,
        port=port,
        host=env.get("GLMOPS_WEBHOOK_HOST"),
        certfile=env.get("GLMOPS_WEBHOOK_CERT") or None,
        pkeyfile=env.get("GLMOPS_WEBHOOK_KEY") or None,
        cafile=env.get("GLMOPS_WEBHOOK_CA") or None,
        client_auth=client_auth,
        limits=limits,
    )
