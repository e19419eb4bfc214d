"""The webhook server's deadlines, connection cap and size bound, on a loopback port without a cluster.

Each case runs glmops' server (`GuardedWebhookServer`) with short limits and talks to it over TLS with plain
sockets, as a slow or hostile client would. Nothing here is timed for speed (that is `bench/webhook_flood.py`);
the deadlines are checked to cut connections off, not how fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvloop

from glm_operator.k8s.admission_review import MAX_BODY_BYTES
from glm_operator.k8s.webhook_certs import CertificateSource
from glm_operator.k8s.webhook_limits import ConnectionLimits
from glm_operator.k8s.webhooks import (
    SecretWebhookServer,
    decide,
    webhook_answers,
    webhook_server_from_env,
)
from glm_operator.render.webhook_certs import WebhookCertificates, generate
from tests.support.hostile_reviews import JSON, VALID, review, valid_object
from tests.support.webhook_server import guarded_server, serve_while

LIMITS = ConnectionLimits(max_connections=3, handshake_seconds=1.0, header_seconds=0.5, idle_seconds=1.0)
SERVING = generate(["localhost"], datetime.datetime.now(datetime.UTC))
THREADS: list[str] = []


async def _answer(data: Any, **_: Any) -> dict[str, Any]:
    """Stands in for kopf's handlers: records the thread `decide` ran on and allows the review."""
    await decide(lambda: THREADS.append(threading.current_thread().name))
    uid = data["request"]["uid"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, "allowed": True}}


def _context() -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=SERVING.ca_bundle.decode())
    context.check_hostname = False  # the certificate names localhost; the server listens on 127.0.0.1
    return context


def _connect(port: int) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return _context().wrap_socket(raw, server_hostname="localhost")


def _request(body: bytes, length: int | None = None) -> bytes:
    head = (
        f"POST /glmops-validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: {JSON}\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\n\r\n"
    )
    return head.encode() + body


def _read_answer(tls: ssl.SSLSocket) -> tuple[int, bytes]:
    """Status and body of one answer, read until the server closes or the declared length is in."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = tls.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), None
    )
    while length is not None and len(body) < length and (chunk := tls.recv(65536)):
        body += chunk
    return int(head.split(b" ")[1]), body


def _post(port: int, body: bytes, length: int | None = None) -> tuple[int, bytes]:
    with _connect(port) as tls:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # answered before all of it was taken
            tls.sendall(_request(body, length))
        return _read_answer(tls)


def _closed_by_server(tls: ssl.SSLSocket) -> bytes:
    """What the server sends until it closes the connection (the test's socket timeout fails a server that waits)."""
    data = b""
    while chunk := tls.recv(65536):
        data += chunk
    return data


def _serve_while(
    tmp_path: Path,
    scenario: Callable[[int], Awaitable[None]],
    limits: ConnectionLimits = LIMITS,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> None:
    serve_while(guarded_server(tmp_path, SERVING, limits=limits), _answer, scenario, loop_factory)


def test_a_connection_that_never_finishes_its_headers_is_answered_408_and_closed(tmp_path: Path) -> None:
    def slow(port: int) -> bytes:
        with _connect(port) as tls:
            tls.sendall(b"POST /glmops-validate HTTP/1.1\r\nHost: localhost\r\n")  # never the blank line
            return _closed_by_server(tls)

    async def scenario(port: int) -> None:
        answer = await asyncio.to_thread(slow, port)
        assert answer.startswith(b"HTTP/1.1 408") and b"headers not received in time" in answer

    _serve_while(tmp_path, scenario)


def test_a_connection_that_sends_nothing_is_closed_too(tmp_path: Path) -> None:
    def silent(port: int) -> bytes:
        with _connect(port) as tls:
            return _closed_by_server(tls)

    async def scenario(port: int) -> None:
        assert (await asyncio.to_thread(silent, port)).startswith(b"HTTP/1.1 408")

    _serve_while(tmp_path, scenario)


def test_a_connection_that_never_starts_its_tls_handshake_is_closed(tmp_path: Path) -> None:
    def no_handshake(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            return raw.recv(100)  # b"" once the server gives up on the handshake; a timeout fails the test

    async def scenario(port: int) -> None:
        assert await asyncio.to_thread(no_handshake, port) == b""

    _serve_while(tmp_path, scenario)


def test_a_kept_alive_connection_is_closed_once_idle(tmp_path: Path) -> None:
    def keep_alive(port: int) -> tuple[int, bytes]:
        with _connect(port) as tls:
            tls.sendall(_request(VALID))
            status, _ = _read_answer(tls)
            return status, _closed_by_server(tls)

    async def scenario(port: int) -> None:
        status, after = await asyncio.to_thread(keep_alive, port)
        assert status == 200 and after == b""

    _serve_while(tmp_path, scenario)


def _busy(port: int) -> ssl.SSLSocket:
    """A connection whose request is being served: headers in, its body still to come."""
    tls = _connect(port)
    tls.sendall(_request(b'{"kind": ', length=1000))
    return tls


def test_at_the_cap_the_oldest_waiting_connection_makes_room_for_a_new_one(tmp_path: Path) -> None:
    async def scenario(port: int) -> None:
        held = [await asyncio.to_thread(_connect, port) for _ in range(LIMITS.max_connections)]
        await asyncio.sleep(0.1)  # the server has counted them (their handshakes are done)
        status, body = await asyncio.to_thread(_post, port, VALID)
        assert status == 200 and json.loads(body)["response"]["allowed"] is True
        oldest = await asyncio.to_thread(_closed_by_server, held[0])
        assert oldest.startswith(b"HTTP/1.1 503") and b"to make room for another" in oldest
        for tls in held:
            tls.close()

    _serve_while(tmp_path, scenario)


def test_when_every_connection_is_serving_a_request_one_more_gets_503(tmp_path: Path) -> None:
    async def scenario(port: int) -> None:
        busy = [await asyncio.to_thread(_busy, port) for _ in range(LIMITS.max_connections)]
        await asyncio.sleep(0.2)
        over = await asyncio.to_thread(_connect, port)
        with over:
            answer = await asyncio.to_thread(_closed_by_server, over)
        assert answer.startswith(b"HTTP/1.1 503") and b"too many open connections" in answer
        busy.pop().close()
        await asyncio.sleep(0.1)
        status, _ = await asyncio.to_thread(_post, port, VALID)
        assert status == 200
        for tls in busy:
            tls.close()

    _serve_while(tmp_path, scenario)


def test_a_review_over_the_bound_is_denied_by_its_uid_before_the_body_is_read(tmp_path: Path) -> None:
    head = json.dumps(review(valid_object(), uid="4c6f6e67-0000-4000-8000-000000000001")).encode()[:200]

    async def scenario(port: int) -> None:
        # Declared 4 MiB, 200 bytes sent: the answer comes without the rest (no 408 after the body deadline).
        status, body = await asyncio.to_thread(_post, port, head, 4 * 1024 * 1024)
        answer = json.loads(body)["response"]
        assert status == 200 and answer["uid"] == "4c6f6e67-0000-4000-8000-000000000001"
        assert answer["allowed"] is False and answer["status"]["code"] == 413
        assert f"larger than {MAX_BODY_BYTES:,} bytes" in answer["status"]["message"]
        # Without the API server's head there is no uid to answer: a plain 413.
        status, body = await asyncio.to_thread(_post, port, b'{"a": 1}', 4 * 1024 * 1024)
        assert status == 413 and b"larger than" in body

    _serve_while(tmp_path, scenario)


def test_a_large_review_is_decided_off_the_event_loop_and_a_small_one_on_it(tmp_path: Path) -> None:
    large = review(valid_object())
    large["request"]["object"]["metadata"]["annotations"] = {"note": "x" * (256 * 1024)}

    async def scenario(port: int) -> None:
        THREADS.clear()
        for body in (VALID, json.dumps(large).encode()):
            status, _ = await asyncio.to_thread(_post, port, body)
            assert status == 200
        assert [threading.main_thread().name, "glmops-large-review_0"] == THREADS

    _serve_while(tmp_path, scenario)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"GLMOPS_WEBHOOK_MAX_CONNECTIONS": "0"}, "GLMOPS_WEBHOOK_MAX_CONNECTIONS: '0' is not a positive int"),
        ({"GLMOPS_WEBHOOK_HEADER_SECONDS": "soon"}, "GLMOPS_WEBHOOK_HEADER_SECONDS: 'soon' is not a positive float"),
    ],
)
def test_a_bad_limit_stops_the_start_naming_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        webhook_server_from_env({"GLMOPS_WEBHOOK_HOST": "127.0.0.1", **env})


def test_the_limits_are_read_from_the_environment() -> None:
    server = webhook_server_from_env({"GLMOPS_WEBHOOK_MAX_CONNECTIONS": "7", "GLMOPS_WEBHOOK_IDLE_SECONDS": "2.5"})
    assert server is not None
    assert server.guard.limits == ConnectionLimits(max_connections=7, idle_seconds=2.5)


@pytest.mark.parametrize("make_loop", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"])
def test_the_deadlines_and_the_cap_hold_on_the_loop_kopf_runs_on(
    tmp_path: Path, make_loop: Callable[[], asyncio.AbstractEventLoop]
) -> None:
    """`kopf run` runs on uvloop when it is installed (the operator's image): its TLS and protocol calls differ."""

    def slow(port: int) -> bytes:
        with _connect(port) as tls:
            tls.sendall(b"POST /glmops-validate HTTP/1.1\r\n")
            return _closed_by_server(tls)

    async def scenario(port: int) -> None:
        busy = [await asyncio.to_thread(_busy, port) for _ in range(LIMITS.max_connections)]
        await asyncio.sleep(0.2)
        with await asyncio.to_thread(_connect, port) as over:
            assert (await asyncio.to_thread(_closed_by_server, over)).startswith(b"HTTP/1.1 503")
        for tls in busy:
            tls.close()
        await asyncio.sleep(0.1)
        waiting = await asyncio.to_thread(_connect, port)
        with waiting:  # the header deadline closes it
            assert (await asyncio.to_thread(_closed_by_server, waiting)).startswith(b"HTTP/1.1 408")
        assert (await asyncio.to_thread(slow, port)).startswith(b"HTTP/1.1 408")
        status, _ = await asyncio.to_thread(_post, port, VALID)
        assert status == 200

    _serve_while(tmp_path, scenario, loop_factory=make_loop)


def test_the_charts_server_serves_through_the_same_guard_and_stays_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SecretWebhookServer (the chart's mode) runs the guarded serving loop too; its certificate comes from here."""
    source = CertificateSource("glmops-system", "glmops-webhook-cert", "glmops-webhook", True, None, None)
    serving = generate(source.dns_names, datetime.datetime.now(datetime.UTC))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = SecretWebhookServer(
        source=source, resync_seconds=3600, readiness_port=None, addr="127.0.0.1", port=port, limits=LIMITS
    )

    async def issued() -> WebhookCertificates:
        return serving

    monkeypatch.setattr(server, "_initial_certificates", issued)

    def context() -> ssl.SSLContext:
        made = ssl.create_default_context(cadata=serving.ca_bundle.decode())
        made.check_hostname = False
        return made

    def slow(port: int) -> bytes:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        with context().wrap_socket(raw, server_hostname=source.dns_names[2]) as tls:
            tls.sendall(b"POST /glmops-validate HTTP/1.1\r\n")
            return _closed_by_server(tls)

    async def run() -> None:
        served = server(_answer)
        config = await anext(served)
        assert config["service"]["name"] == "glmops-webhook"
        try:
            assert await webhook_answers(port, serving, source.dns_names[2], "127.0.0.1") == ""
            assert (await asyncio.to_thread(slow, port)).startswith(b"HTTP/1.1 408")
        finally:
            await served.aclose()

    asyncio.run(run())


def test_the_handlers_time_is_observed_by_webhook_and_result_and_a_failure_counts_as_error(tmp_path: Path) -> None:
    from prometheus_client import REGISTRY

    def sample(suffix: str, result: str) -> float:
        labels = {"webhook": "glmops-validate", "result": result}
        return REGISTRY.get_sample_value(f"glmops_webhook_request_duration_seconds_{suffix}", labels) or 0.0

    calls: list[str] = []

    async def slow_then_broken(data: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs["webhook"])
        if len(calls) > 1:
            raise RuntimeError("a bug in a handler")
        await asyncio.sleep(0.3)
        return await _answer(data)

    async def scenario(port: int) -> None:
        assert (await asyncio.to_thread(_post, port, VALID))[0] == 200
        assert (await asyncio.to_thread(_post, port, VALID))[0] == 400

    before = {(s, r): sample(s, r) for s in ("count", "sum") for r in ("ok", "error")}
    serve_while(guarded_server(tmp_path, SERVING, limits=LIMITS), slow_then_broken, scenario)
    assert sample("count", "ok") == before["count", "ok"] + 1
    assert sample("sum", "ok") - before["sum", "ok"] >= 0.3
    assert sample("count", "error") == before["count", "error"] + 1
    assert calls == ["glmops-validate", "glmops-validate"]
