"""The gateway's HTTP surface as a raw ASGI app (no router: the hot path stays under a millisecond).

Routes: POST /v1/chat/completions (JSON or SSE), GET /v1/models, GET /metrics, GET /health.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from pydantic import ValidationError

from synthorg.gateway.access_log import log_request
from synthorg.gateway.config import GatewayConfig
from synthorg.gateway.estimate import Ending
from synthorg.gateway.metrics import GatewayMetrics
from synthorg.gateway.providers import build_providers
from synthorg.gateway.providers.base import Provider, ProviderError
from synthorg.gateway.refusals import GatewayRefusal
from synthorg.gateway.request_body import BodyReader, authorization
from synthorg.gateway.service import Gateway
from synthorg.gateway.signer import GatewaySigner, load_or_create_key
from synthorg.gateway.ticket import Ticket
from synthorg.gateway.wire import MAY_HAVE_BILLED, ChatChunk, ChatRequest, error_body
from synthorg.store.protocol import ExecutionStatus, LedgerStore

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _error(
    send: Send,
    status: int,
    message: str,
    type_: str,
    code: str | None,
    headers: Mapping[str, str] | None = None,
    *,
    billed: bool = False,
) -> None:
    """An error answer; ``billed`` says whether the upstream may have billed the request."""
    extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    extra.append((MAY_HAVE_BILLED.encode(), b"true" if billed else b"false"))
    body = error_body(message, type_, code, may_have_billed=billed)
    await _respond(send, status, body, [*_JSON, *extra])


async def _provider_error(send: Send, exc: ProviderError) -> None:
    await _error(
        send, exc.status, exc.message, exc.type, exc.code, exc.headers, billed=exc.may_have_billed
    )


def _parse(raw: bytes) -> ChatRequest:
    try:
        return ChatRequest.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise GatewayRefusal(
            400,
            f"invalid chat request: {where}: {first['msg']}",
            "invalid_request_error",
            "invalid_request",
        ) from exc


class GatewayApp:
    """ASGI app serving one Gateway; ``.gateway`` is the service runners call in-process."""

    def __init__(self, gateway: Gateway, *, owns_providers: bool = False) -> None:
        self.gateway = gateway
        self.metrics = GatewayMetrics()
        config = gateway.config
        self._bodies = BodyReader(
            max_bytes=config.max_body_bytes,
            timeout_s=config.body_timeout_s,
            max_in_flight=config.max_body_in_flight,
        )
        self._owns_providers = owns_providers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        path, method = scope["path"], scope["method"]
        if path in ("/v1/chat/completions", "/chat/completions") and method == "POST":
            await self._chat(scope, receive, send)
        elif path in ("/v1/models", "/models") and method == "GET":
            await self._models(scope, send)
        elif path == "/health" and method == "GET":
            await _respond(send, 200, b'{"status":"ok"}', _JSON)
        elif path == "/metrics" and method == "GET":
            body, content_type = self.metrics.render()
            await _respond(send, 200, body, [(b"content-type", content_type.encode())])
        else:
            await _error(send, 404, f"no route {method} {path}", "invalid_request_error", None)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._owns_providers:
                    await self.gateway.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _models(self, scope: Scope, send: Send) -> None:
        try:
            claims = self.gateway.authenticate(authorization(scope))
        except GatewayRefusal as refusal:
            await _error(send, refusal.status, refusal.message, refusal.type, refusal.code)
            return
        model = {
            "id": claims.model_id,
            "object": "model",
            "created": claims.issued_at,
            "owned_by": claims.provider,
        }
        await _respond(send, 200, json.dumps({"object": "list", "data": [model]}).encode(), _JSON)

    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        ticket: Ticket | None = None
        request: ChatRequest | None = None
        try:
            # The bearer first: an unauthenticated peer gets no byte of its body read.
            claims = self.gateway.authenticate(authorization(scope))
            async with self._bodies.body(scope, receive) as raw:
                request = _parse(raw)
            ticket = await self.gateway.admit(claims, request)
        except GatewayRefusal as refusal:
            self.metrics.refused(refusal.code)
            # Refused before the request was parsed, its body maybe unread: close the
            # connection rather than have the server read what nobody will use.
            close = {"connection": "close"} if request is None else None
            await _error(send, refusal.status, refusal.message, refusal.type, refusal.code, close)
            return
        status = 499  # the caller went away before an answer
        try:
            if request.stream:
                status = await self._stream(ticket, request.wants_usage_in_stream(), receive, send)
            else:
                status = await self._complete(ticket, send)
        finally:
            await self.gateway.settle(ticket, None)  # any path not settled above: incomplete
            elapsed = time.perf_counter() - started
            self.metrics.observe(ticket, status, elapsed)
            log_request(ticket, status, elapsed, stream=request.stream)
            await self.gateway.persist(ticket)

    async def _complete(self, ticket: Ticket, send: Send) -> int:
        try:
            response = await ticket.provider.complete(ticket.request)
        except ProviderError as exc:
            await self.gateway.settle(ticket, None, _ending(exc))
            await _provider_error(send, exc)
            return exc.status
        ticket.out_bytes = response.out_bytes()
        # Settle before answering: the next request of this run sees the new total.
        await self.gateway.settle(ticket, response.usage, "answered")
        await _respond(send, 200, response.to_json(), _JSON)
        return 200

    async def _stream(self, ticket: Ticket, want_usage: bool, receive: Receive, send: Send) -> int:
        """Relay chunks; cut at the ceiling, after ``idle_timeout_s`` of silence, or when the
        caller hangs up (uvicorn drops writes to a gone client silently, so it is watched)."""
        config = self.gateway.config.provider(ticket.claims.provider)
        wait = config.timeout_s if config else 600.0
        idle = config.idle_timeout_s if config else 120.0
        whole = config.stream_timeout_s if config else 1800.0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + whole  # however lively, a stream ends by then
        waiting: list[asyncio.Timeout] = []
        gone = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            if waiting:  # blocked on the upstream: stop waiting now
                waiting[0].reschedule(asyncio.get_running_loop().time())

        watcher = asyncio.create_task(watch())
        stream = ticket.provider.stream(ticket.request)
        started = False
        usage = None  # the final usage chunk's
        try:
            while True:
                try:
                    async with asyncio.timeout_at(min(loop.time() + wait, deadline)) as timeout:
                        waiting.append(timeout)
                        try:
                            chunk = await anext(stream)
                        finally:
                            waiting.clear()
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    await self.gateway.settle(ticket, usage, "incomplete")
                    if gone:
                        return 499
                    message = f"upstream {ticket.claims.provider!r} stalled for {wait:g}s"
                    code = "upstream_stalled" if started else "upstream_timeout"
                    if loop.time() >= deadline:
                        message = f"upstream {ticket.claims.provider!r} streamed past {whole:g}s"
                        code = "upstream_stream_too_long"
                    if not started:
                        await _error(send, 504, message, "upstream_error", code, billed=True)
                    else:
                        await _sse_error(send, message, "upstream_error", code, billed=True)
                    return 504
                wait = idle
                if gone:
                    await self.gateway.settle(ticket, usage, "incomplete")
                    return 499
                if not started:
                    await send({"type": "http.response.start", "status": 200, "headers": _SSE})
                    started = True
                if chunk.usage is not None:
                    ticket.reported = chunk.usage
                    if not chunk.choices:  # the final usage chunk: the answer is whole
                        usage = chunk.usage
                        if want_usage:
                            await _sse(send, chunk)
                        continue
                if not ticket.streamed(chunk.out_bytes()):
                    # The run dies here, so the bill may be what arrived (no dodging possible).
                    await self.gateway.settle(ticket, usage, "answered")
                    await _sse_error(send, self._ceiling_message(ticket), billed=True)
                    return 402
                await _sse(send, chunk)
        except ProviderError as exc:
            await self.gateway.settle(ticket, usage, _ending(exc))
            if not started:
                await _provider_error(send, exc)
            else:
                code = exc.code or "upstream_error"
                await _sse_error(send, exc.message, exc.type, code, billed=exc.may_have_billed)
            return exc.status
        finally:
            watcher.cancel()
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        await self.gateway.settle(ticket, usage, "answered")
        if not started:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
        return 200

    def _ceiling_message(self, ticket: Ticket) -> str:
        # Say only what the settle made true: killed when the run's row is, else cut.
        killed = ticket.state.row.status == ExecutionStatus.KILLED
        tree = None if killed else ticket.tree_closed()  # its own ceiling says more
        if tree is not None:
            return f"{tree.message}; the stream was cut"
        outcome = "the stream was cut and the run killed" if killed else "the stream was cut"
        return (
            f"execution {ticket.claims.execution_id!r} crossed its cost ceiling of "
            f"${ticket.ceiling} mid-stream; {outcome}"
        )


def _ending(exc: ProviderError) -> Ending:
    return "incomplete" if exc.may_have_billed else "refused"


async def _sse(send: Send, chunk: ChatChunk) -> None:
    data = chunk.to_json()
    await send(
        {"type": "http.response.body", "body": b"data: " + data + b"\n\n", "more_body": True}
    )


async def _sse_error(
    send: Send,
    message: str,
    type_: str = "insufficient_quota",
    code: str = "cost_ceiling_reached",
    *,
    billed: bool,
) -> None:
    body = b"data: " + error_body(message, type_, code, may_have_billed=billed) + b"\n\n"
    await send({"type": "http.response.body", "body": body})


def create_gateway_app(
    config: GatewayConfig,
    signer: GatewaySigner,
    ledger: LedgerStore,
    providers: Mapping[str, Provider] | None = None,
) -> GatewayApp:
    """The gateway ASGI app; providers are built from config unless given (then not closed)."""
    owns = providers is None
    built = build_providers(config) if providers is None else providers
    return GatewayApp(Gateway(config, signer, ledger, built), owns_providers=owns)


def signer_for(config: GatewayConfig) -> GatewaySigner:
    """The signer of ``config``: its key file (generated when absent) and its provider binding."""
    return GatewaySigner(
        load_or_create_key(config.signing_key_file),
        served=config.serves,
        max_ttl_s=config.token_ttl_s,
    )
