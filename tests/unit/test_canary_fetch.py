"""The operator fetches canary data only within the cluster's limits (canary/fetch.py, k8s/canary_data.py).

Test servers listen on loopback, which the real address check refuses; tests that need a server to answer let
127.0.0.1 alone stand in for a public address, and say so.
"""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from glm_operator.api.v1alpha1 import GSM8KSource
from glm_operator.canary import fetch as fetch_module
from glm_operator.canary.fetch import FetchRefused, fetch, public_address_problem
from glm_operator.catalog.access_policy import AccessPolicy
from glm_operator.k8s import canary_data

LINE = b'{"question": "Q1?", "answer": "so\\n#### 7"}\n'


def _only_test_server(address: str) -> str | None:
    return None if address == "127.0.0.1" else f"{address} is not the test server"


Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


@pytest.fixture
def server() -> Iterator[Callable[[Handler], str]]:
    """serve(handler) -> the base URL of a loopback HTTP server answering GETs with `handler`."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def serve(handle: Handler) -> str:
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                handle(self)

            def log_message(self, *_: object) -> None:
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield serve
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _send(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Handler:
    def handle(req: http.server.BaseHTTPRequestHandler) -> None:
        req.send_response(status)
        for key, value in (headers or {}).items():
            req.send_header(key, value)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    return handle


def _policy(base: str, **kwargs: object) -> AccessPolicy:
    return AccessPolicy(canary_urls=(base + "/",), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("169.254.169.254", "link-local"),
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.96.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("::ffff:169.254.169.254", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
    ],
)
def test_non_public_addresses_are_refused_with_the_reason(address: str, why: str) -> None:
    problem = public_address_problem(address)
    assert problem is not None and why in problem


def test_a_public_address_is_allowed() -> None:
    assert public_address_problem("93.184.216.34") is None


def test_the_metadata_address_is_refused_before_any_connection() -> None:
    connected: list[str] = []

    def connector(address: str, port: int, timeout: float) -> socket.socket:
        connected.append(address)
        raise AssertionError("must not connect")

    policy = AccessPolicy(canary_urls=("http://169.254.169.254/",))
    with pytest.raises(FetchRefused, match="link-local"):
        fetch("http://169.254.169.254/latest/meta-data/", policy, connector=connector)
    assert connected == []


def test_a_name_that_resolves_to_the_metadata_address_among_public_ones_is_refused() -> None:
    policy = AccessPolicy(canary_urls=("http://data.example.com/",))
    with pytest.raises(FetchRefused, match="169.254.169.254 is link-local"):
        fetch(
            "http://data.example.com/t.jsonl",
            policy,
            resolver=lambda host, port: ["93.184.216.34", "169.254.169.254"],
        )


def test_the_address_actually_connected_to_is_checked_again(server: Callable[[Handler], str]) -> None:
    base = server(_send(200, LINE))
    port = int(base.rsplit(":", 1)[1])
    policy = AccessPolicy(canary_urls=(f"http://data.example.com:{port}/",))
    # The resolver says a public address; the connection lands on loopback (a rebinding resolver, a proxy).
    with pytest.raises(FetchRefused, match="connected to 127.0.0.1, not an address checked"):
        fetch(
            f"http://data.example.com:{port}/t.jsonl",
            policy,
            resolver=lambda host, p: ["93.184.216.34"],
            connector=lambda address, p, timeout: socket.create_connection(("127.0.0.1", p), timeout=timeout),
        )


def test_a_url_outside_the_allowed_prefixes_is_never_fetched(server: Callable[[Handler], str]) -> None:
    base = server(_send(200, LINE))
    with pytest.raises(FetchRefused, match="not under canaryData.allowedUrls"):
        fetch(base + "/t.jsonl", AccessPolicy(), address_problem=_only_test_server)


def test_an_allowed_url_is_fetched(server: Callable[[Handler], str]) -> None:
    base = server(_send(200, LINE))
    assert fetch(base + "/t.jsonl", _policy(base), address_problem=_only_test_server) == LINE


def test_a_redirect_to_another_host_is_refused(server: Callable[[Handler], str]) -> None:
    base = server(_send(302, headers={"Location": "http://169.254.169.254/latest/meta-data/"}))
    with pytest.raises(FetchRefused, match="redirects to another host"):
        fetch(base + "/t.jsonl", _policy(base), address_problem=_only_test_server)


def test_a_redirect_within_the_same_host_and_prefix_is_followed(server: Callable[[Handler], str]) -> None:
    def handle(req: http.server.BaseHTTPRequestHandler) -> None:
        if req.path == "/old.jsonl":
            _send(301, headers={"Location": "/new.jsonl"})(req)
        else:
            _send(200, LINE)(req)

    base = server(handle)
    assert fetch(base + "/old.jsonl", _policy(base), address_problem=_only_test_server) == LINE


def test_a_body_declared_over_the_cap_is_refused_before_it_is_read(server: Callable[[Handler], str]) -> None:
    base = server(_send(200, b"x" * 2048))
    with pytest.raises(FetchRefused, match="2048 bytes, over canaryData.maxBytes"):
        fetch(base + "/t.jsonl", _policy(base, canary_max_bytes=1024), address_problem=_only_test_server)


def test_an_endless_body_without_a_length_stops_at_the_cap(server: Callable[[Handler], str]) -> None:
    def endless(req: http.server.BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        req.end_headers()  # no Content-Length: read until the server closes, which it never does
        chunk = b"0" * 65536
        try:
            while True:
                req.wfile.write(chunk)
        except OSError:
            pass

    base = server(endless)
    with pytest.raises(FetchRefused, match="body over canaryData.maxBytes"):
        fetch(base + "/t.jsonl", _policy(base, canary_max_bytes=1_000_000), address_problem=_only_test_server)


def test_a_server_dripping_its_answer_is_cut_off_at_the_deadline(server: Callable[[Handler], str]) -> None:
    def drip(req: http.server.BaseHTTPRequestHandler) -> None:
        try:
            req.wfile.write(b"HTTP/1.1 200 OK\r\n")
            for _ in range(100):
                req.wfile.write(b"X")  # a header line that never ends, a byte at a time
                req.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass

    base = server(drip)
    started = time.monotonic()
    with pytest.raises(FetchRefused, match="took longer than canaryData.timeoutSeconds"):
        fetch(base + "/t.jsonl", _policy(base, canary_timeout_seconds=0.5), address_problem=_only_test_server)
    assert time.monotonic() - started < 3


def test_a_canary_path_is_never_read_even_when_stored_before_admission_refused_it(tmp_path: Path) -> None:
    data = tmp_path / "test.jsonl"
    data.write_bytes(LINE)
    source = GSM8KSource.model_validate({"path": str(data)})
    with pytest.raises(FetchRefused, match="source.configMap"):
        canary_data.gsm8k_for(source, "ns", AccessPolicy())
    source = GSM8KSource(path="/dev/zero")
    with pytest.raises(FetchRefused, match="reads no file"):
        canary_data.gsm8k_for(source, "ns", AccessPolicy())


def test_a_canary_url_the_policy_does_not_allow_is_not_fetched_by_the_operator(
    server: Callable[[Handler], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def handle(req: http.server.BaseHTTPRequestHandler) -> None:
        asked.append(req.path)
        _send(200, LINE)(req)

    base = server(handle)
    monkeypatch.setattr(fetch_module, "public_address_problem", _only_test_server)
    source = GSM8KSource.model_validate({"url": base + "/x.jsonl"})
    with pytest.raises(FetchRefused, match="allowedUrls"):
        canary_data.gsm8k_for(source, "ns", AccessPolicy())
    assert asked == []
