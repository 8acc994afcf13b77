"""The WebSocket protocol ``synthorg serve`` runs under uvicorn: its shutdown never raises.

uvicorn's sans-I/O protocol answers a client's Close frame and closes the transport, but the
connection stays in the server's list until the transport is gone — which waits for unsent
data to drain (a client that stopped reading) or for the TLS close handshake. A shutdown in
that window sends a second Close frame, websockets refuses it (``InvalidState``), and the
exception ends uvicorn's shutdown before the lifespan's: active runs would not be stopped
with SHUTDOWN. A connection whose Close handshake has begun has nothing more to say (the
app was told of the client's Close when it came).
"""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State


class ClosingSafeWebSocketProtocol(WebSocketsSansIOProtocol):
    """``WebSocketsSansIOProtocol`` whose shutdown skips connections already closing."""

    def shutdown(self) -> None:
        if not self.close_sent and self.conn.state in (State.CLOSING, State.CLOSED):
            self.stop_keepalive()
            self.transport.close()
            return
        super().shutdown()
