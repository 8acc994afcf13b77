"""HTTP hygiene in front of the routes: request body cap (413), OPTIONS and ``Allow`` headers,
query parameters the route does not document (422)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def _template(path: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", path)
    return re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts))


@functools.cache
def _table(
    paths: tuple[tuple[str, frozenset[str]], ...],
) -> list[tuple[re.Pattern[str], int, set[str]]]:
    return [(_template(path), path.count("{"), set(methods)) for path, methods in paths]


_Paths = tuple[tuple[str, frozenset[str]], ...]
_Queries = dict[tuple[str, str], frozenset[str]]
_last: tuple[dict[str, Any], _Paths, _Queries] | None = None


def _documented(doc: dict[str, Any]) -> tuple[_Paths, _Queries]:
    """(template, methods) of the OpenAPI paths, and the query parameter names of each
    (template, method); worked out once per document (every request asks now, and the app's
    document does not change)."""
    global _last
    if _last is None or _last[0] is not doc:
        table = tuple((t, frozenset(m.upper() for m in ops)) for t, ops in doc.items())
        queries = {
            (template, method.upper()): frozenset(
                p["name"] for p in operation.get("parameters", ()) if p.get("in") == "query"
            )
            for template, operations in doc.items()
            for method, operation in operations.items()
        }
        _last = (doc, table, queries)
    return _last[1], _last[2]


def _most_specific(paths: _Paths, path: str) -> list[tuple[str, set[str]]]:
    """(template, methods) of the documented templates ``path`` is routed to: the most
    specific ones, as in routing (/api/conversations/count is not
    /api/conversations/{conversation_id}, whose DELETE it must not advertise)."""
    matches = [
        (params, template, documented)
        for (pattern, params, documented), (template, _) in zip(_table(paths), paths, strict=True)
        if pattern.fullmatch(path)
    ]
    fewest = min((params for params, _, _ in matches), default=0)
    return [(template, documented) for params, template, documented in matches if params == fewest]


def allowed_methods(openapi: Callable[[], dict[str, Any]], path: str) -> list[str]:
    """Every method the API documents for this path, plus HEAD and OPTIONS (empty: no such
    path). Read from the OpenAPI document, so ``Allow`` and the schema always agree."""
    paths, _ = _documented(openapi()["paths"])
    methods: set[str] = set()
    for _, documented in _most_specific(paths, path):
        methods |= documented
    if not methods:
        return []
    return sorted(methods | {"OPTIONS"} | ({"HEAD"} if "GET" in methods else set()))


def undocumented_query(openapi: Callable[[], dict[str, Any]], scope: Scope) -> list[str]:
    """The query parameter names of this request that its operation does not document
    (empty: none, or the path is not one of the API's). A misspelt filter must not be read as
    "no filter": ``?staus=running`` would list every conversation as if they matched."""
    raw = scope.get("query_string", b"")
    if not raw:
        return []
    paths, declared = _documented(openapi()["paths"])
    method = "GET" if scope["method"] == "HEAD" else scope["method"]
    operations = [
        declared[(template, method)]
        for template, _ in _most_specific(paths, scope["path"])
        if (template, method) in declared
    ]
    if not operations:
        return []
    known = frozenset().union(*operations)
    names = dict.fromkeys(
        name for name, _ in parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
    )
    return [name for name in names if name not in known]


def _too_large(limit: int) -> str:
    return f"request body larger than {limit} bytes ([server] max_body_bytes); send less"


class HttpLimits:
    """ASGI middleware: refuse bodies over ``max_body_bytes`` (declared or streamed) with 413;
    answer ``OPTIONS`` with the path's methods in ``Allow`` (204); refuse query parameters
    the operation does not document with 422."""

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
        methods = allowed_methods(self.openapi, scope["path"])
        if methods and scope["method"] == "OPTIONS":
            await Response(status_code=204, headers={"Allow": ", ".join(methods)})(
                scope, receive, send
            )
            return
        if methods and scope["method"] not in methods:
            # What Allow says is what is routed: DELETE /api/conversations/count would else
            # reach the {conversation_id} route.
            body = {
                "detail": f"{scope['method']} is not allowed here",
                "code": "method_not_allowed",
            }
            headers = {"Allow": ", ".join(methods)}
            await JSONResponse(body, status_code=405, headers=headers)(scope, receive, send)
            return
        unknown = undocumented_query(self.openapi, scope) if methods else []
        if unknown:
            # The shape of every other 422 (FastAPI's validation errors, as documented).
            detail = [
                {
                    "type": "extra_forbidden",
                    "loc": ["query", name[:100]],
                    "msg": "unknown query parameter: see /openapi.json for this route's",
                }
                for name in unknown[:20]
            ]
            await JSONResponse({"detail": detail}, status_code=422)(scope, receive, send)
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
