"""OpenAI-compatible upstream over a keep-alive HTTP/1.1 pool: the gateway's fast path."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from synthorg.errors import ConfigError
from synthorg.gateway.config import ProviderConfig
from synthorg.gateway.http1 import Http1Pool, HttpError
from synthorg.gateway.providers.base import ProviderError
from synthorg.gateway.wire import ChatChunk, ChatRequest, ChatResponse


def read_api_key(config: ProviderConfig) -> str | None:
    """The provider key from the env var the config names (read only inside the gateway)."""
    if not config.api_key_env:
        return None
    key = os.environ.get(config.api_key_env)
    if not key:
        raise ConfigError(
            f"provider {config.name!r} needs its API key in env var {config.api_key_env!r}; "
            "export it in the gateway's environment"
        )
    return key


def upstream_error(response_status: int, body: bytes, provider: str) -> ProviderError:
    """Map an upstream HTTP error; auth failures are ours (502), not the caller's."""
    try:
        detail = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        detail = body[:500].decode(errors="replace")
    message = f"upstream {provider!r} answered {response_status}: {detail}"
    if response_status in (401, 403) or response_status >= 500:
        return ProviderError(message, status=502)
    return ProviderError(message, status=response_status, type_="invalid_request_error")


class OpenAICompatProvider:
    """Any OpenAI-compatible chat-completions API (OpenAI, vLLM, Ollama, OpenRouter, ...)."""

    def __init__(
        self, name: str, base_url: str, *, api_key: str | None = None, timeout_s: float = 600.0
    ) -> None:
        headers = {"content-type": "application/json", "accept": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self.name = name
        self.timeout_s = timeout_s
        self._pool = Http1Pool(base_url, headers=headers, timeout_s=timeout_s)

    @classmethod
    def from_config(cls, config: ProviderConfig) -> OpenAICompatProvider:
        """Build from config; the key is read from the named env var."""
        return cls(
            config.name, config.base_url, api_key=read_api_key(config), timeout_s=config.timeout_s
        )

    def _body(self, request: ChatRequest, *, stream: bool) -> bytes:
        payload: dict[str, Any] = request.model_dump(exclude_none=True)
        payload["stream"] = stream
        if stream:
            # Always ask for usage: metering needs it whether or not the caller did.
            payload["stream_options"] = {**(request.stream_options or {}), "include_usage": True}
        else:
            payload.pop("stream_options", None)
        return json.dumps(payload).encode()

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Forward one completion and parse the answer."""
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self._pool.post(
                    "/chat/completions", self._body(request, stream=False)
                )
                body = await response.read()
        except (HttpError, TimeoutError) as exc:
            raise ProviderError(f"upstream {self.name!r} unreachable: {exc}") from exc
        if response.status != 200:
            raise upstream_error(response.status, body, self.name)
        try:
            return ChatResponse.model_validate_json(body)
        except ValidationError as exc:
            raise ProviderError(f"upstream {self.name!r} sent a malformed completion") from exc

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """Forward a streaming completion, parsing server-sent events as they arrive."""
        body = self._body(request, stream=True)
        try:
            response = await self._pool.post("/chat/completions", body)
        except HttpError as exc:
            raise ProviderError(f"upstream {self.name!r} unreachable: {exc}") from exc
        try:
            if response.status != 200:
                raise upstream_error(response.status, await response.read(), self.name)
            async for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    continue  # drain to the end so the connection can be reused
                try:
                    yield ChatChunk.model_validate_json(data)
                except ValidationError as exc:
                    raise ProviderError(f"upstream {self.name!r} sent a malformed chunk") from exc
        except HttpError as exc:
            raise ProviderError(f"upstream {self.name!r} failed mid-stream: {exc}") from exc
        finally:
            response.release()

    async def aclose(self) -> None:
        """Close the keep-alive pool."""
        await self._pool.aclose()
