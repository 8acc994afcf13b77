"""Bearer authentication of every HTTP request to the MCP endpoint (ASGI middleware)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from synthorg.gateway.signer import BearerClaims, BearerError, GatewaySigner
from synthorg.logging import get_logger

CLAIMS_KEY = "synthorg.bearer_claims"
"""Key of the verified claims in the ASGI scope's ``state``."""

# JSON-RPC error code for an unauthenticated request (implementation-defined range).
UNAUTHENTICATED = -32001

_log = get_logger("synthorg.mcp")


def _bearer_of(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


class BearerAuthMiddleware:
    """Refuses any HTTP request without a valid run bearer; stores the claims for the tools.

    The refusal is a JSON-RPC error body at status 401 so that MCP clients show its message
    (e.g. "bearer expired") instead of a bare status.
    """

    def __init__(self, app: ASGIApp, signer: GatewaySigner) -> None:
        self._app = app
        self._signer = signer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        token = _bearer_of(scope)
        try:
            if token is None:
                raise BearerError("missing 'Authorization: Bearer <run bearer>' header")
            claims = self._signer.verify(token)
        except BearerError as exc:
            _log.warning("mcp.request.unauthenticated", path=scope.get("path"), reason=str(exc))
            await _refuse(send, str(exc))
            return
        scope.setdefault("state", {})[CLAIMS_KEY] = claims
        await self._app(scope, receive, send)


async def _refuse(send: Send, reason: str) -> None:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": UNAUTHENTICATED, "message": f"unauthenticated: {reason}"},
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer error="invalid_token"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def claims_from_request(request: Any) -> BearerClaims | None:
    """The claims the middleware verified for this HTTP request (None outside HTTP)."""
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return None
    claims = scope.get("state", {}).get(CLAIMS_KEY)
    return claims if isinstance(claims, BearerClaims) else None
