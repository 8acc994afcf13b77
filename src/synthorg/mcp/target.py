"""The request target in origin form: an absolute-form request line is served like any other.

RFC 9112 §3.2.2: a server must accept ``POST http://host:port/mcp HTTP/1.1`` (the form sent to
proxies); the ASGI server passes that target through as the path, so routing would miss it.
The authority then stands for the Host header, which the origin server must ignore.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

_ABSOLUTE = (b"http://", b"https://")


def origin_form(scope: Scope) -> Scope:
    """``scope`` with an absolute-form target turned into its path and Host (else as it is)."""
    raw = scope.get("raw_path") or scope.get("path", "").encode("latin-1")
    if not raw[:8].lower().startswith(_ABSOLUTE):
        return scope
    parts = urlsplit(raw.decode("latin-1"))
    path = parts.path or "/"
    authority = parts.netloc.rpartition("@")[2].encode("latin-1")
    headers = [(k, v) for k, v in scope.get("headers", ()) if k != b"host"]
    return {
        **scope,
        "raw_path": path.encode("latin-1"),
        "path": unquote(path),
        "headers": [(b"host", authority), *headers],
    }


class OriginFormMiddleware:
    """Serves absolute-form request targets as the path they name (HTTP only)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = origin_form(scope)
        await self._app(scope, receive, send)
