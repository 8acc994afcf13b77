"""The model boundary: the ModelClient protocol and its OpenAI-compatible HTTP implementation."""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import random
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from synthorg.engine.native.errors import ModelBudgetExhausted, ModelCallError
from synthorg.gateway.wire import MAY_HAVE_BILLED

if TYPE_CHECKING:
    import httpx

# httpx (~0.4 s of imports) is imported where a client is made or used: loading the native
# loops (every `synthorg serve` and `run` boot does) must not pay for it before a run.

Message = dict[str, Any]
"""One OpenAI chat message (system / user / assistant / tool)."""


@functools.cache
def shared_tls() -> ssl.SSLContext:
    """One TLS context (httpx's default: verified, certifi's CA bundle) for the process.

    Building one loads the CA bundle: ~30 ms of CPU that every run's model client paid,
    even over the gateway's unix socket where no TLS ever happens. Contexts are made to be
    shared; verification is unchanged.
    """
    import httpx

    return httpx.create_ssl_context()


@dataclass(frozen=True)
class RequestedCall:
    """One tool call as the model asked for it (arguments still the raw JSON string)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ModelReply:
    """One assistant turn: optional text and the tool calls it requests."""

    text: str
    calls: tuple[RequestedCall, ...]
    finish_reason: str | None = None

    def as_message(self) -> Message:
        """The assistant message to append to the history."""
        message: Message = {"role": "assistant", "content": self.text or None}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.calls
            ]
        return message


class ModelClient(Protocol):
    """Something that turns a message history and tool specs into the next assistant turn."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelReply:
        """The next turn; ModelBudgetExhausted on 402, ModelCallError on any other failure."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
"""Transient answers (rate limits, overload, upstream failures) worth another attempt."""

_FINAL_TYPES = frozenset({"script_exhausted"})
"""Error types that a retry cannot fix even under a retryable status."""

_MAX_RETRY_AFTER_S = 60.0
"""A longer retry-after is not waited for: the call fails and the loop decides."""


class _Transient(Exception):
    """One attempt failed in a way another attempt may not: carries the error and its wait."""

    def __init__(self, error: ModelCallError, retry_after: float | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.retry_after = retry_after


class OpenAICompatClient:
    """Chat completions over plain httpx (measured cheaper per call than the openai SDK).

    Retries, bounded with exponential backoff (honouring ``retry-after``/``retry-after-ms``),
    only what cannot bill twice: a transient status (429, 5xx, overloaded) the gateway marked
    not billed (``x-synthorg-may-have-billed: false``), or a connection that was never made.
    A request that reached the gateway and got no such mark (a dropped connection, a timeout,
    a broken answer, an unmarked error) may have been billed: it is never re-sent.
    """

    def __init__(
        self,
        base_url: str,
        bearer: str,
        model: str,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_s: float = 600.0,
        transport: httpx.AsyncBaseTransport | None = None,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
    ) -> None:
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._model = model
        self._extra: dict[str, Any] = {}
        if temperature is not None:
            self._extra["temperature"] = temperature
        if max_tokens is not None:
            self._extra["max_tokens"] = max_tokens
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        import httpx

        self._http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {bearer}"},
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            transport=transport,
            trust_env=False,
            verify=shared_tls(),
        )

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelReply:
        """POST /chat/completions and parse the first choice, retrying what is safe to retry."""
        body: dict[str, Any] = {"model": self._model, "messages": list(messages), **self._extra}
        if tools:
            body["tools"] = list(tools)
        content = json.dumps(body).encode()
        attempt = 0
        while True:
            try:
                return await self._attempt(content)
            except _Transient as failure:
                if attempt >= self._max_retries:
                    raise failure.error from failure
                wait = failure.retry_after
                if wait is None or wait > _MAX_RETRY_AFTER_S:
                    wait = min(self._max_backoff_s, self._backoff_s * 2**attempt)
                    wait *= 1 - random.random() / 4  # jitter: runs of one host spread out
                attempt += 1
                await asyncio.sleep(wait)

    async def _attempt(self, content: bytes) -> ModelReply:
        import httpx  # loaded by __init__ already: a dict lookup

        request = self._http.build_request(
            "POST", self._url, content=content, headers={"content-type": "application/json"}
        )
        try:
            response = await self._http.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # No connection was made: nothing was sent, so nothing can have been billed.
            raise _Transient(
                ModelCallError(f"cannot reach the gateway at {self._url}: {exc!r}")
            ) from exc
        except httpx.TimeoutException as exc:  # the gateway may be working on it: no retry
            raise ModelCallError(f"model call to {self._url} timed out: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise ModelCallError(f"cannot reach the gateway at {self._url}: {exc!r}") from exc
        try:
            await response.aread()
        except httpx.HTTPError as exc:
            raise ModelCallError(
                f"the gateway's answer broke off (status {response.status_code}): {exc!r}",
                status=response.status_code,
            ) from exc
        finally:
            await response.aclose()
        if response.status_code != 200:
            error, type_ = _refusal(response)
            if (
                response.status_code in RETRYABLE_STATUSES
                and type_ not in _FINAL_TYPES
                and response.headers.get(MAY_HAVE_BILLED) == "false"
            ):
                raise _Transient(error, _retry_after(response.headers))
            raise error
        try:
            return parse_reply(response.json())
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelCallError(
                f"the gateway answered 200 with an unreadable completion: {exc}"
            ) from exc

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._http.aclose()


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms`` first, then ``retry-after``)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / scale)
        except ValueError:
            try:  # an HTTP date
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                continue
            return max(0.0, when.timestamp() - time.time())
    return None


def parse_reply(data: Mapping[str, Any]) -> ModelReply:
    """The first choice of an OpenAI chat completion as a ModelReply."""
    choice = data["choices"][0]
    message = choice["message"]
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(str(part.get("text", "")) for part in content)
    calls = tuple(
        RequestedCall(
            id=str(call.get("id") or ""),
            name=str(call["function"].get("name") or ""),
            arguments=str(call["function"].get("arguments") or ""),
        )
        for call in message.get("tool_calls") or ()
    )
    return ModelReply(text=content or "", calls=calls, finish_reason=choice.get("finish_reason"))


def _refusal(response: httpx.Response) -> tuple[ModelCallError, str | None]:
    """The error a non-200 answer maps to, and the error type the gateway named."""
    message, code, type_ = response.text[:500], None, None
    try:
        error = response.json().get("error") or {}
        message, code = str(error.get("message") or message), error.get("code")
        type_ = error.get("type")
    except (ValueError, AttributeError):
        pass
    status = response.status_code
    if status == 402:
        return ModelBudgetExhausted(
            f"the gateway stopped the run at its cost ceiling: {message}", status=402, code=code
        ), type_
    return ModelCallError(
        f"the gateway answered {status}: {message}", status=status, code=code
    ), type_
