"""Fetching canary data from a URL a user named, within the limits the cluster's administrator set.

The operator runs inside the cluster with network reach its users may lack (the cloud's metadata service, the
API server, other teams' Services), so a URL is fetched only when it is under canaryData.allowedUrls, and then:
the host's every address must be public (not loopback, link-local, private, multicast or reserved), the address
the socket actually connected to is checked again (a resolver answering differently the second time gains
nothing), redirects are followed only within the same scheme, host and port and prefix, the body is capped in
bytes, and the whole fetch, connect to last byte, has one deadline.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from glm_operator.catalog.access_policy import AccessPolicy

MAX_REDIRECTS = 3
CHUNK = 64 * 1024

Resolver = Callable[[str, int], list[str]]
Connector = Callable[[str, int, float], socket.socket]


class FetchRefused(ValueError):
    """A fetch the policy or the limits refuse; the message says which and what to do instead."""


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (TCP)."""
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)})


def connect(address: str, port: int, timeout: float) -> socket.socket:
    return socket.create_connection((address, port), timeout=timeout)


def public_address_problem(address: str) -> str | None:
    """Why the operator must not connect to `address`, or None when it is a public unicast address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for test, what in (
        (ip.is_unspecified, "unspecified"),
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local (the cloud metadata service lives there)"),
        (ip.is_private, "private (the cluster's own network)"),
        (ip.is_multicast, "multicast"),
        (ip.is_reserved, "reserved"),
    ):
        if test:
            return f"{ip} is {what}"
    if not ip.is_global:
        return f"{ip} is not a public address"
    return None


def fetch(
    url: str,
    policy: AccessPolicy,
    *,
    resolver: Resolver | None = None,
    connector: Connector | None = None,
    address_problem: Callable[[str], str | None] | None = None,
) -> bytes:
    """The body at `url`, at most policy.canary_max_bytes, within policy.canary_timeout_seconds; FetchRefused if not.

    The resolver, connector and address check default to the real ones (looked up at call time)."""
    resolver = resolver or resolve
    connector = connector or connect
    address_problem = address_problem or public_address_problem
    deadline = time.monotonic() + policy.canary_timeout_seconds
    for _ in range(MAX_REDIRECTS + 1):
        if not policy.allows_url(url):
            raise FetchRefused(f"{url}: not under canaryData.allowedUrls; use source.configMap")
        status, location, body = _get_once(url, policy, deadline, resolver, connector, address_problem)
        if location is None:
            if status != 200:
                raise FetchRefused(f"{url}: HTTP {status}")
            return body
        target = urljoin(url, location)
        here, there = urlsplit(url), urlsplit(target)
        if (here.scheme, here.hostname, here.port) != (there.scheme, there.hostname, there.port):
            raise FetchRefused(f"{url}: redirects to another host ({there.hostname}); redirects are not followed there")
        url = target
    raise FetchRefused(f"{url}: more than {MAX_REDIRECTS} redirects")


def _remaining(deadline: float, url: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchRefused(f"{url}: took longer than canaryData.timeoutSeconds")
    return left


def _get_once(
    url: str,
    policy: AccessPolicy,
    deadline: float,
    resolver: Resolver,
    connector: Connector,
    address_problem: Callable[[str], str | None],
) -> tuple[int, str | None, bytes]:
    """(status, redirect location or None, body) of one GET, over a socket to an address checked twice."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    addresses = resolver(host, port)
    if not addresses:
        raise FetchRefused(f"{url}: {host} has no address")
    for address in addresses:
        if (problem := address_problem(address)) is not None:
            raise FetchRefused(f"{url}: {host} resolves to {problem}; the operator does not fetch from there")
    sock = connector(addresses[0], port, _remaining(deadline, url))
    # Per-read timeouts alone let a server drip one byte at a time; at the deadline the socket is shut down.
    watchdog = threading.Timer(_remaining(deadline, url), _shut, [sock])
    watchdog.start()
    try:
        peer = str(sock.getpeername()[0])
        if peer not in addresses or (problem := address_problem(peer)) is not None:
            raise FetchRefused(f"{url}: connected to {peer}, not an address checked for {host}")
        if parts.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        conn = _Connected(host, port, sock)
        sock.settimeout(_remaining(deadline, url))
        conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers={"Host": host})
        response = conn.getresponse()
        if 300 <= response.status < 400:
            return response.status, response.getheader("Location") or "", b""
        return response.status, None, _read_capped(response, policy.canary_max_bytes, deadline, url)
    except (OSError, http.client.HTTPException) as err:
        if time.monotonic() >= deadline:
            raise FetchRefused(f"{url}: took longer than canaryData.timeoutSeconds") from err
        raise FetchRefused(f"{url}: {type(err).__name__}: {err}") from err
    finally:
        watchdog.cancel()
        sock.close()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def _read_capped(response: http.client.HTTPResponse, limit: int, deadline: float, url: str) -> bytes:
    declared = response.getheader("Content-Length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise FetchRefused(f"{url}: {declared} bytes, over canaryData.maxBytes ({limit})")
    chunks: list[bytes] = []
    size = 0
    while True:
        _remaining(deadline, url)  # the watchdog cuts a read that outlasts it
        chunk = response.read(min(CHUNK, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise FetchRefused(f"{url}: body over canaryData.maxBytes ({limit} bytes)")


class _Connected(http.client.HTTPConnection):
    """An HTTP connection over a socket already connected (to the address that was checked)."""

    def __init__(self, host: str, port: int, sock: socket.socket) -> None:
        super().__init__(host, port)
        self.sock = sock

    def connect(self) -> None:
        """Never opens another socket: the checked one is the only one."""
