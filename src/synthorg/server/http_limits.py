"""HTTP hygiene in front of the routes: request body cap (413), OPTIONS and ``Allow`` headers."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def _template(path: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", path)
    return re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts))


@functools.cache
def _table(paths: tuple[tuple[str, frozenset[str]], ...]) -> list[tuple[re.Pattern[str], set[str]]]:
    return [(_template(path), set(methods)) for path, methods in paths]


def allowed_methods(openapi: Callable[[], dict[str, Any]], path: str) -> list[str]:
    """Every method the API documents for this path, plus HEAD and OPTIONS (empty: no such
    path). Read from the OpenAPI document, so ``Allow`` and the schema always agree."""
    paths = tuple(
        (template, frozenset(m.upper() for m in operations))
        for template, operations in openapi()["paths"].items()
    )
    methods: set[str] = set()
    for pattern, documented in _table(paths):
        if pattern.fullmatch(path):
            methods |= documented
    if not methods:
        return []
    return sorted(methods | {"OPTIONS"} | ({"HEAD"} if "GET" in methods else set()))


def _too_large(limit: int) -> str:
    return f"request body larger than {limit} bytes ([server] max_body_bytes); send less"


class HttpLimits:
    """ASGI middleware: refuse bodies over ``max_body_bytes`` (declared or streamed) with 413;
    answer ``OPTIONS`` with the path's methods in ``Allow`` (204)."""

    def __init__(
        self, app: ASGIApp, *, openapi: Callable[[], dict[str, Any]], max_body_bytes: int
    ) -> None:
        self.app = app
        self.openapi = openapi
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            methods = allowed_methods(self.openapi, scope["path"])
            if methods:
                await Response(status_code=204, headers={"Allow": ", ".join(methods)})(
                    scope, receive, send
                )
                return
        limit = self.max_body_bytes
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            body = {"detail": _too_large(limit), "code": "payload_too_large"}
            await JSONResponse(body, status_code=413)(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # Raised inside the route's body read: the error handlers answer 413.
                    raise HTTPException(413, _too_large(limit))
            return message

        await self.app(scope, counted, send)
