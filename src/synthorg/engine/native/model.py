"""The model boundary: the ModelClient protocol and its OpenAI-compatible HTTP implementation."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from synthorg.engine.native.errors import ModelBudgetExhausted, ModelCallError

Message = dict[str, Any]
"""One OpenAI chat message (system / user / assistant / tool)."""


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


class OpenAICompatClient:
    """Chat completions over plain httpx (measured cheaper per call than the openai SDK).

    No retries: a retried call is a second paid request, and the gateway is on loopback.
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
    ) -> None:
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._model = model
        self._extra: dict[str, Any] = {}
        if temperature is not None:
            self._extra["temperature"] = temperature
        if max_tokens is not None:
            self._extra["max_tokens"] = max_tokens
        self._http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {bearer}"},
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            transport=transport,
            trust_env=False,
        )

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelReply:
        """POST /chat/completions and parse the first choice."""
        body: dict[str, Any] = {"model": self._model, "messages": list(messages), **self._extra}
        if tools:
            body["tools"] = list(tools)
        try:
            response = await self._http.post(
                self._url,
                content=json.dumps(body).encode(),
                headers={"content-type": "application/json"},
            )
        except httpx.TimeoutException as exc:
            raise ModelCallError(f"model call to {self._url} timed out: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise ModelCallError(f"cannot reach the gateway at {self._url}: {exc!r}") from exc
        if response.status_code != 200:
            raise _refusal(response)
        try:
            return parse_reply(response.json())
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelCallError(
                f"the gateway answered 200 with an unreadable completion: {exc}"
            ) from exc

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._http.aclose()


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


def _refusal(response: httpx.Response) -> ModelCallError:
    message, code = response.text[:500], None
    try:
        error = response.json().get("error") or {}
        message, code = str(error.get("message") or message), error.get("code")
    except ValueError:
        pass
    status = response.status_code
    if status == 402:
        return ModelBudgetExhausted(
            f"the gateway stopped the run at its cost ceiling: {message}", status=402, code=code
        )
    return ModelCallError(f"the gateway answered {status}: {message}", status=status, code=code)
