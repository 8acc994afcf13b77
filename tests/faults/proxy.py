"""A loopback TCP proxy in front of PostgreSQL that a test can freeze, kill and restore."""

from __future__ import annotations

import asyncio
import contextlib


class Proxy:
    """Forwards 127.0.0.1:<port> to an upstream; ``freeze`` holds every byte, ``kill`` resets."""

    def __init__(self, upstream_port: int = 5432) -> None:
        self._upstream = upstream_port
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        """Listen (on the same port again after a kill)."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        """Connections stay open and new ones are accepted, but no byte moves: a stalled server."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Bytes move again."""
        self._flowing.set()

    async def kill(self) -> None:
        """The server vanishes: every connection is reset and new ones are refused."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        await self.close_pipes()

    async def close_pipes(self) -> None:
        for task in list(self._pipes):
            task.cancel()
        for task in list(self._pipes):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task
        self._pipes.clear()
        self._writers.clear()

    async def stop(self) -> None:
        """Tear everything down."""
        self.thaw()
        await self.kill()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self._upstream)
        except OSError:
            client_w.transport.abort()
            return
        self._writers.update({client_w, up_w})
        for source, sink in ((client_r, up_w), (up_r, client_w)):
            task = asyncio.create_task(self._pipe(source, sink))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            sink.transport.abort()
            self._writers.discard(sink)
