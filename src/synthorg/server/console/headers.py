"""Security headers on every response of the server (the API docs pages excepted from the CSP:
FastAPI's Swagger and ReDoc pages use inline script)."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'{extra}; base-uri 'none'; form-action 'self'; "
    "object-src 'none'; frame-ancestors 'none'"
)
_API_DOCS = ("/docs", "/redoc")


def content_security_policy(connect: tuple[str, ...] = ()) -> str:
    """The console's CSP: scripts and styles only from this server (no inline, no eval);
    the page may talk only to this server and the backends the operator listed."""
    extra = "".join(f" {origin}" for origin in connect)
    return CSP.format(extra=extra)


class SecurityHeaders:
    """ASGI middleware adding nosniff, Referrer-Policy, frame denial and the CSP."""

    def __init__(self, app: ASGIApp, *, csp: str) -> None:
        self.app = app
        self.csp = csp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        docs = scope["path"].startswith(_API_DOCS)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Content-Type-Options"] = "nosniff"
                headers["Referrer-Policy"] = "no-referrer"
                headers["X-Frame-Options"] = "DENY"
                headers["Cross-Origin-Opener-Policy"] = "same-origin"
                if not docs:
                    headers["Content-Security-Policy"] = self.csp
            await send(message)

        await self.app(scope, receive, with_headers)
