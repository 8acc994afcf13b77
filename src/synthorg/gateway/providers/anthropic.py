"""Anthropic Messages API provider over the gateway's one HTTP stack (``gateway.upstream_http``)."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any

from synthorg.gateway.config import ProviderConfig
from synthorg.gateway.providers.anthropic_mapping import (
    STOP_REASONS,
    from_messages_response,
    to_messages_request,
    usage_of,
)
from synthorg.gateway.providers.base import ProviderError
from synthorg.gateway.providers.openai_compat import proxy_for, read_api_key, upstream_error
from synthorg.gateway.upstream_errors import UpstreamHttpError
from synthorg.gateway.wire import (
    ChatChunk,
    ChatRequest,
    ChatResponse,
    ChunkChoice,
    Delta,
    DeltaFunction,
    DeltaToolCall,
    Usage,
)

ANTHROPIC_VERSION = "2023-06-01"


def _messages_path(base_url: str) -> str:
    return "/messages" if base_url.rstrip("/").endswith("/v1") else "/v1/messages"


class AnthropicProvider:
    """Anthropic's Messages API, mapped to and from chat-completions."""

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        environ: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        headers = {"content-type": "application/json", "anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        self.name = name
        self.timeout_s = timeout_s
        self._path = _messages_path(base_url)
        proxy = proxy_for(base_url, os.environ if environ is None else environ)
        from synthorg.gateway.upstream_http import UpstreamClient  # httpcore: at first use

        self._http = UpstreamClient(base_url, headers=headers, proxy=proxy, ssl_context=ssl_context)

    def _failed(self, exc: UpstreamHttpError, during: str) -> ProviderError:
        what = f"failed {during}" if exc.sent else "unreachable"
        return ProviderError(f"upstream {self.name!r} {what}: {exc}", may_have_billed=exc.sent)

    @classmethod
    def from_config(cls, config: ProviderConfig) -> AnthropicProvider:
        """Build from config; the key is read from the named env var."""
        return cls(
            config.name, config.base_url, api_key=read_api_key(config), timeout_s=config.timeout_s
        )

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """One Messages API call, mapped back to a chat completion."""
        body = json.dumps(to_messages_request(request)).encode()
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                self._http.post(self._path, body) as answer,
            ):
                content = await answer.read()
        except TimeoutError as exc:
            raise ProviderError(
                f"upstream {self.name!r} gave no answer within {self.timeout_s:g}s"
            ) from exc
        except UpstreamHttpError as exc:
            raise self._failed(exc, "mid-answer") from exc
        if answer.status != 200:
            raise upstream_error(answer.status, content, self.name, answer.headers)
        try:
            raw = json.loads(content)
        except ValueError as exc:
            raise ProviderError(f"upstream {self.name!r} sent malformed JSON") from exc
        return from_messages_response(raw, request.model)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """A streaming Messages API call, mapped event by event to chat-completion chunks."""
        payload = to_messages_request(request)
        payload["stream"] = True
        mapper = _StreamMapper(request.model)
        try:
            async with self._http.post(self._path, json.dumps(payload).encode()) as answer:
                if answer.status != 200:
                    body = await answer.read()
                    raise upstream_error(answer.status, body, self.name, answer.headers)
                async for line in answer.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    try:
                        event = json.loads(line[5:])
                    except ValueError as exc:
                        raise ProviderError(f"upstream {self.name!r} sent a bad event") from exc
                    if event.get("type") == "error":
                        detail = event.get("error", {}).get("message", "unknown error")
                        raise ProviderError(f"upstream {self.name!r} stream error: {detail}")
                    for chunk in mapper.map(event):
                        yield chunk
        except UpstreamHttpError as exc:
            raise self._failed(exc, "mid-stream") from exc

    async def aclose(self) -> None:
        """Close the keep-alive pool."""
        await self._http.aclose()


class _StreamMapper:
    """Turns Anthropic stream events into chat-completion chunks (stateful per stream)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = "msg"
        self.usage: dict[str, Any] = {}
        self.tool_index: dict[int, int] = {}  # content block index -> tool call index

    def _chunk(
        self, delta: Delta, finish: str | None = None, usage: Usage | None = None
    ) -> ChatChunk:
        choices = [] if usage is not None else [ChunkChoice(delta=delta, finish_reason=finish)]
        return ChatChunk(id=self.id, model=self.model, choices=choices, usage=usage)

    def map(self, event: dict[str, Any]) -> list[ChatChunk]:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message", {})
            self.id = str(message.get("id", self.id))
            self.usage.update(message.get("usage", {}))
            return [self._chunk(Delta(role="assistant", content=""))]
        if kind == "content_block_start":
            block = event.get("content_block", {})
            if block.get("type") == "tool_use":
                index = len(self.tool_index)
                self.tool_index[int(event.get("index", 0))] = index
                call = DeltaToolCall(
                    index=index,
                    id=block.get("id"),
                    type="function",
                    function=DeltaFunction(name=block.get("name"), arguments=""),
                )
                return [self._chunk(Delta(tool_calls=[call]))]
            return []
        if kind == "content_block_delta":
            delta = event.get("delta", {})
            if delta.get("type") == "text_delta":
                return [self._chunk(Delta(content=delta.get("text", "")))]
            if delta.get("type") == "input_json_delta":
                index = self.tool_index.get(int(event.get("index", 0)), 0)
                piece = DeltaFunction(arguments=delta.get("partial_json", ""))
                return [self._chunk(Delta(tool_calls=[DeltaToolCall(index=index, function=piece)]))]
            return []
        if kind == "message_delta":
            self.usage.update(event.get("usage", {}))
            reason = event.get("delta", {}).get("stop_reason")
            finish = STOP_REASONS.get(reason or "", "stop")
            return [self._chunk(Delta(), finish), self._chunk(Delta(), usage=usage_of(self.usage))]
        return []
