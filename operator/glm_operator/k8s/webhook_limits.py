"""How long and how many: the webhook server's deadlines and its cap on connections.

aiohttp bounds neither the time a new connection may take to send its headers nor how many connections are open,
and asyncio gives a TLS handshake 60 s. Each connection here is wrapped (`GuardedProtocol`) so that:

- at most `max_connections` past their TLS handshake are open; when one more arrives, the oldest connection no
  request is being served on (still sending its headers, or idle between requests) is answered 503 and closed to
  make room, and only when every connection is serving a request is the newcomer answered 503;
- the handshake must finish within `handshake_seconds` (asyncio's own limit, set on the listening socket);
- a request's headers must be complete within `header_seconds` of its first byte (of the connection, for the
  first one), or the connection is answered 408 and closed;
- the body must follow within its own deadline (`k8s/webhooks.py`, `_read_body`);
- a kept-alive connection idle for `idle_seconds` is closed (aiohttp's `keepalive_timeout`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import aiohttp.web

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
)
_SLOW = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"


@dataclass(frozen=True)
class ConnectionLimits:
    """The deadlines and the cap; GLMOPS_WEBHOOK_* settings override the defaults (docs/webhooks.md)."""

    max_connections: int = 128
    handshake_seconds: float = 5.0
    header_seconds: float = 5.0
    idle_seconds: float = 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ConnectionLimits:
        """GLMOPS_WEBHOOK_MAX_CONNECTIONS, _HANDSHAKE_SECONDS, _HEADER_SECONDS, _IDLE_SECONDS; a bad one stops it."""
        values: dict[str, Any] = {}
        for field, name, kind in _SETTINGS:
            raw = env.get(name, "").strip()
            if not raw:
                continue
            try:
                value = kind(raw)
            except ValueError:
                value = 0
            if value <= 0:
                raise ValueError(f"{name}: {raw!r} is not a positive {kind.__name__}; unset it for the default")
            values[field] = value
        return cls(**values)


_SETTINGS: tuple[tuple[str, str, type[int] | type[float]], ...] = (
    ("max_connections", "GLMOPS_WEBHOOK_MAX_CONNECTIONS", int),
    ("handshake_seconds", "GLMOPS_WEBHOOK_HANDSHAKE_SECONDS", float),
    ("header_seconds", "GLMOPS_WEBHOOK_HEADER_SECONDS", float),
    ("idle_seconds", "GLMOPS_WEBHOOK_IDLE_SECONDS", float),
)


class ConnectionGuard:
    """The open connections of one server, and the deadlines on them."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open: dict[asyncio.BaseTransport, GuardedProtocol] = {}
        self.refused_busy = 0
        self.cut_slow = 0
        self.evicted = 0

    def protocol_factory(self, inner_factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: GuardedProtocol(self, inner_factory())

    def evict_one(self) -> bool:
        """Close the oldest connection no request is being served on, to make room for a new one; False if none.

        Without it, connections that trickle their headers would hold every slot until their deadlines, and
        the API server's next connection would get 503; with it, they are the ones that go.
        """
        waiting = next((g for g in self.open.values() if g.busy == 0), None)
        if waiting is None or waiting.transport is None:
            return False
        self.evicted += 1
        self.open.pop(waiting.transport, None)
        waiting.cut_off(b"glmops webhook: connection closed to make room for another\n", _BUSY)
        return True

    def request_started(self, transport: asyncio.BaseTransport | None) -> None:
        """The handler got a request on `transport`: its headers are in, the header deadline is off."""
        guarded = self.open.get(transport) if transport is not None else None
        if guarded is not None:
            guarded.busy += 1
            guarded.disarm()

    def request_finished(self, transport: asyncio.BaseTransport | None) -> None:
        guarded = self.open.get(transport) if transport is not None else None
        if guarded is not None:
            guarded.busy -= 1


class GuardedProtocol(asyncio.Protocol):
    """aiohttp's protocol for one connection, with the cap checked on arrival and a deadline on its headers."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.busy = 0
        self.counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's does not subclass asyncio's, so it is not checked with isinstance).
        self.transport = cast(asyncio.Transport, transport)
        if len(self.guard.open) >= self.guard.limits.max_connections and not self.guard.evict_one():
            self.guard.refused_busy += 1
            text = b"glmops webhook: too many open connections, retry\n"
            self.transport.write(_BUSY % (len(text), text))
            self.transport.close()
            return
        self.counted = True
        self.guard.open[transport] = self
        self.arm()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.counted:
            return
        if self.busy == 0 and self.timer is None:
            self.arm()  # the first bytes of the next request on a kept-alive connection
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.counted else None

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        if self.counted and self.transport is not None:
            self.guard.open.pop(self.transport, None)
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.counted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.counted:
            self.inner.resume_writing()

    def arm(self) -> None:
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.guard.limits.header_seconds, self._headers_late)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _headers_late(self) -> None:
        self.timer = None
        if self.busy or self.transport is None or self.transport.is_closing():
            return
        self.guard.cut_slow += 1
        self.cut_off(b"glmops webhook: request headers not received in time\n", _SLOW)

    def cut_off(self, text: bytes, response: bytes) -> None:
        """Answer `response` with `text` and close; its slot is free at once."""
        self.disarm()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(response % (len(text), text))
            self.transport.close()


class GuardedSite(aiohttp.web.TCPSite):
    """aiohttp's TCP site, listening with the guard around each connection and a deadline on the TLS handshake."""

    def __init__(self, runner: aiohttp.web.BaseRunner, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(runner, **kwargs)
        self.guard = guard

    async def start(self) -> None:
        await aiohttp.web.BaseSite.start(self)  # registers the site with its runner; TCPSite.start would listen
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None  # noqa: S101 (the runner is set up before its sites start)
        self._server = await loop.create_server(
            self.guard.protocol_factory(server),
            self._host,
            self._port,
            ssl=self._ssl_context,
            ssl_handshake_timeout=self.guard.limits.handshake_seconds if self._ssl_context else None,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port
