"""OpenAI-compatible upstream over the gateway's one HTTP stack (``gateway.upstream_http``).

HTTPS_PROXY / HTTP_PROXY / NO_PROXY are honoured (resolved once per upstream URL).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from synthorg.errors import ConfigError
from synthorg.gateway.config import ProviderConfig
from synthorg.gateway.providers.base import ProviderError
from synthorg.gateway.upstream_errors import UpstreamHttpError

if TYPE_CHECKING:
    from synthorg.gateway.upstream_http import UpstreamResponse
from synthorg.gateway.wire import ChatChunk, ChatRequest, ChatResponse

FORWARDED = frozenset(
    {
        # the request itself, and what the gateway sets or bounds
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "n",
        # generation controls of OpenAI's API that neither route nor change the price tier
        "temperature",
        "top_p",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "seed",
        "user",
        "response_format",
        "reasoning_effort",
        "verbosity",
        "prompt_cache_key",
        "safety_identifier",
        # sampling controls of vLLM / Ollama / OpenRouter
        "top_k",
        "min_p",
        "repetition_penalty",
    }
)
"""Request fields an OpenAI-compatible upstream is sent; the rest are dropped (a field the
gateway does not know could route, change the price tier or run paid tools upstream)."""

_PASSED_HEADERS = ("retry-after", "retry-after-ms")
"""Upstream error headers a caller needs to act on; passed through."""


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


def proxy_for(url: str, environ: Mapping[str, str]) -> str | None:
    """The proxy ``url`` goes through per HTTPS_PROXY / HTTP_PROXY / NO_PROXY (curl's rules)."""
    proxies: dict[str, str] = {}
    for key, value in environ.items():  # lower-case names win, as in curl and urllib
        name = key.lower()
        if not value or not name.endswith("_proxy"):
            continue
        scheme = name.removesuffix("_proxy")
        if key.islower() or scheme not in proxies:
            proxies[scheme] = value
    parts = urlsplit(url)
    proxy = proxies.get(parts.scheme)
    if not proxy or not parts.hostname:
        return None
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if proxies.get("no") and bypass(host, proxies):
        return None
    return proxy


def upstream_error(
    response_status: int, body: bytes, provider: str, headers: Mapping[str, str] | None = None
) -> ProviderError:
    """Map an upstream HTTP error, keeping its type, code and retry-after.

    Auth failures are the gateway's (502), not the caller's; 5xx become 502; 429 and the
    caller's other mistakes keep their status.
    """
    detail: Any = None
    type_, code = "invalid_request_error", None
    try:
        error = json.loads(body)["error"]
        detail = error["message"]
        type_ = str(error.get("type") or type_)
        code = str(error["code"]) if error.get("code") is not None else None
    except (ValueError, KeyError, TypeError):
        detail = detail or body[:500].decode(errors="replace")
    message = f"upstream {provider!r} answered {response_status}: {detail}"
    passed = {k: v for k in _PASSED_HEADERS if (v := (headers or {}).get(k)) is not None}
    if response_status in (401, 403) or response_status >= 500:
        type_ = "upstream_error" if response_status in (401, 403) else type_
        status = 502
    else:
        status = response_status
    return ProviderError(
        message, status=status, type_=type_, code=code, headers=passed, may_have_billed=False
    )


class OpenAICompatProvider:
    """Any OpenAI-compatible chat-completions API (OpenAI, vLLM, Ollama, OpenRouter, ...)."""

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
        headers = {"content-type": "application/json", "accept": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self.name = name
        self.timeout_s = timeout_s
        proxy = proxy_for(base_url, os.environ if environ is None else environ)
        from synthorg.gateway.upstream_http import UpstreamClient  # httpcore: at first use

        self._http = UpstreamClient(base_url, headers=headers, proxy=proxy, ssl_context=ssl_context)

    @classmethod
    def from_config(cls, config: ProviderConfig) -> OpenAICompatProvider:
        """Build from config; the key is read from the named env var."""
        return cls(
            config.name, config.base_url, api_key=read_api_key(config), timeout_s=config.timeout_s
        )

    def _body(self, request: ChatRequest, *, stream: bool) -> bytes:
        dumped = request.model_dump(mode="json", exclude_unset=True)
        payload: dict[str, Any] = {k: v for k, v in dumped.items() if k in FORWARDED}
        payload["stream"] = stream
        if stream:
            # Always ask for usage: metering needs it whether or not the caller did.
            payload["stream_options"] = {**(request.stream_options or {}), "include_usage": True}
        else:
            payload.pop("stream_options", None)
        return json.dumps(payload).encode()

    def _failed(self, exc: UpstreamHttpError, during: str) -> ProviderError:
        what = f"failed {during}" if exc.sent else "unreachable"
        return ProviderError(f"upstream {self.name!r} {what}: {exc}", may_have_billed=exc.sent)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Forward one completion and parse the answer."""
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                self._http.post("/chat/completions", self._body(request, stream=False)) as answer,
            ):
                body = await answer.read()
        except TimeoutError as exc:
            raise ProviderError(
                f"upstream {self.name!r} gave no answer within {self.timeout_s:g}s"
            ) from exc
        except UpstreamHttpError as exc:
            raise self._failed(exc, "mid-answer") from exc
        if answer.status != 200:
            raise upstream_error(answer.status, body, self.name, answer.headers)
        try:
            return ChatResponse.model_validate_json(body)
        except ValidationError as exc:
            raise ProviderError(f"upstream {self.name!r} sent a malformed completion") from exc

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """Forward a streaming completion, parsing server-sent events as they arrive."""
        try:
            async with self._http.post(
                "/chat/completions", self._body(request, stream=True)
            ) as answer:
                if answer.status != 200:
                    body = await answer.read()
                    raise upstream_error(answer.status, body, self.name, answer.headers)
                async for chunk in sse_chunks(answer, self.name):
                    yield chunk
        except UpstreamHttpError as exc:
            raise self._failed(exc, "mid-stream") from exc

    async def aclose(self) -> None:
        """Close the keep-alive pool."""
        await self._http.aclose()


async def sse_chunks(answer: UpstreamResponse, provider: str) -> AsyncIterator[ChatChunk]:
    """The chat-completion chunks of an OpenAI-style event stream, read to its end."""
    async for line in answer.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            continue  # drain to the end so the connection can be reused
        try:
            yield ChatChunk.model_validate_json(data)
        except ValidationError as exc:
            raise ProviderError(f"upstream {provider!r} sent a malformed chunk") from exc
