"""A TCP forwarder from a kwok pod's (loopback) IP and port to the session's real vLLM server.

kwok pods run no process; as the simulator fleet binds a simulator to a pod's IP, this puts the real server
there. A forwarder rather than a second server: a vLLM start takes 65 to 300 s on this shared 2-core machine
and holds its own KV cache, while the forwarded server is the one every other real-vLLM test checks.
Bytes are copied unchanged both ways, so the operator talks HTTP to the real server as to a pod.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import suppress


class Forwarder:
    """Listens on listen_host:listen_port in a thread of its own; `close()` stops it and every connection."""

    def __init__(self, listen_host: str, listen_port: int, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._server = self._loop.run_until_complete(
                    asyncio.start_server(self._accept, listen_host, listen_port, reuse_address=True)
                )
            except OSError as err:
                failure.append(err)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"forward-{listen_host}:{listen_port}", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        pumps = [asyncio.ensure_future(_pump(reader, up_writer)), asyncio.ensure_future(_pump(up_reader, writer))]
        for task in pumps:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await asyncio.gather(*pumps, return_exceptions=True)

    def close(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.sleep(0)

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with suppress(ConnectionError, RuntimeError):
            writer.close()
