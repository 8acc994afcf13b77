"""The embedded server keeps idle connections open longer than clients pool them (issue 14.7).

uvicorn's default keep-alive (5 s) equals httpx's pool expiry (5 s): a native loop's model
client could pick a pooled connection in the instant the gateway closed it ("Server
disconnected without sending a response"). The server now outlasts every client pool.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from synthorg.gateway.embedded import serve_embedded
from synthorg.gateway.providers.scripted import ScriptedProvider
from synthorg.gateway.scripted import echo
from synthorg.gateway.scripted_server import ScriptedUpstream

HTTPX_POOL_EXPIRY_S = 5.0


async def test_an_idle_connection_outlives_the_client_pool_expiry(tmp_path: Path) -> None:
    app = ScriptedUpstream(ScriptedProvider({}, default=echo))
    async with serve_embedded(app, uds=tmp_path / "gw.sock") as ends:
        assert ends.uds_path is not None
        reader, writer = await asyncio.open_unix_connection(str(ends.uds_path))
        body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        # Past the client's pool expiry (plus slack for a busy machine) the server must not
        # have closed the connection: reading would return EOF if it had.
        try:
            data = await asyncio.wait_for(reader.read(1), HTTPX_POOL_EXPIRY_S + 2)
        except TimeoutError:
            data = None
        assert data is None, "the server closed an idle connection a client may still reuse"
        writer.close()
