"""The scripted provider: serves ScriptedModels as OpenAI-shaped completions and streams."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Mapping

from synthorg.gateway.config import ProviderConfig
from synthorg.gateway.providers.base import ProviderError
from synthorg.gateway.scripted import (
    ScriptedModel,
    ScriptedTurn,
    ScriptExhausted,
    count_tokens,
    resolve_script,
    tool_call_id,
)
from synthorg.gateway.wire import (
    ChatChunk,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    Choice,
    ChunkChoice,
    Delta,
    DeltaFunction,
    DeltaToolCall,
    FunctionCall,
    ToolCall,
    Usage,
)

_STREAM_PIECE_CHARS = 16


class ScriptedProvider:
    """A provider like the others whose 'upstream' is a deterministic script per model."""

    def __init__(
        self,
        scripts: Mapping[str, ScriptedModel],
        *,
        default: ScriptedModel | None = None,
        latency_s: float = 0.0,
        chars_per_token: int = 4,
    ) -> None:
        self._scripts = dict(scripts)
        self._default = default
        self.latency_s = latency_s
        self._chars_per_token = chars_per_token

    @classmethod
    def from_config(cls, config: ProviderConfig) -> ScriptedProvider:
        """Resolve the config's script names (registered or 'module:attr')."""
        scripts = {model: resolve_script(name) for model, name in config.scripts.items()}
        default = resolve_script(config.script) if config.script else None
        for model in config.models:
            if model not in scripts and default is None:
                raise ProviderError(
                    f"scripted provider {config.name!r}: model {model!r} has no script; "
                    "set 'script' or 'scripts' in its config",
                    status=500,
                )
        return cls(scripts, default=default, latency_s=config.latency_ms / 1000)

    def set_script(self, model: str, script: ScriptedModel) -> None:
        """Serve ``model`` with ``script`` from now on (tests register their own)."""
        self._scripts[model] = script

    async def _turn(self, request: ChatRequest) -> tuple[ScriptedTurn, Usage]:
        script = self._scripts.get(request.model, self._default)
        if script is None:
            raise ProviderError(
                f"scripted provider has no script for model {request.model!r}",
                status=404,
                type_="invalid_request_error",
                may_have_billed=False,
            )
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        try:
            turn = script(request.messages, request.tools)
        except ScriptExhausted as exc:
            raise ProviderError(
                str(exc), status=500, type_="script_exhausted", may_have_billed=False
            ) from exc
        return turn, self._usage(request, turn)

    def _usage(self, request: ChatRequest, turn: ScriptedTurn) -> Usage:
        if turn.tokens_in is not None:
            tokens_in = turn.tokens_in
        else:
            prompt = "".join(_message_text(m) for m in request.messages)
            tokens_in = count_tokens(prompt, self._chars_per_token)
        if turn.tokens_out is not None:
            tokens_out = turn.tokens_out
        else:
            out = (turn.text or "") + "".join(c.name + c.arguments_json() for c in turn.tool_calls)
            tokens_out = max(1, count_tokens(out, self._chars_per_token))
        return Usage(
            prompt_tokens=tokens_in,
            completion_tokens=tokens_out,
            total_tokens=tokens_in + tokens_out,
        )

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The script's next turn as one completion."""
        turn, usage = await self._turn(request)
        calls = [
            ToolCall(
                id=tool_call_id(request.messages, i),
                function=FunctionCall(name=c.name, arguments=c.arguments_json()),
            )
            for i, c in enumerate(turn.tool_calls)
        ]
        message = ChatMessage(role="assistant", content=turn.text, tool_calls=calls or None)
        return ChatResponse(
            id=f"chatcmpl-{secrets.token_hex(12)}",
            model=request.model,
            choices=[Choice(message=message, finish_reason="tool_calls" if calls else "stop")],
            usage=usage,
        )

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """The script's next turn as chunks: role, text pieces, tool calls, finish, usage."""
        turn, usage = await self._turn(request)
        cid = f"chatcmpl-{secrets.token_hex(12)}"

        def chunk(delta: Delta, finish: str | None = None) -> ChatChunk:
            choice = ChunkChoice(delta=delta, finish_reason=finish)
            return ChatChunk(id=cid, model=request.model, choices=[choice])

        yield chunk(Delta(role="assistant", content=""))
        text = turn.text or ""
        for start in range(0, len(text), _STREAM_PIECE_CHARS):
            yield chunk(Delta(content=text[start : start + _STREAM_PIECE_CHARS]))
        for i, call in enumerate(turn.tool_calls):
            head = DeltaToolCall(
                index=i,
                id=tool_call_id(request.messages, i),
                type="function",
                function=DeltaFunction(name=call.name, arguments=""),
            )
            yield chunk(Delta(tool_calls=[head]))
            args = call.arguments_json()
            for start in range(0, len(args), _STREAM_PIECE_CHARS):
                piece = DeltaFunction(arguments=args[start : start + _STREAM_PIECE_CHARS])
                yield chunk(Delta(tool_calls=[DeltaToolCall(index=i, function=piece)]))
        yield chunk(Delta(), "tool_calls" if turn.tool_calls else "stop")
        # The usage chunk is always produced; the gateway forwards it only when asked for.
        yield ChatChunk(id=cid, model=request.model, choices=[], usage=usage)

    async def aclose(self) -> None:
        """Nothing to release."""


def _message_text(message: ChatMessage) -> str:
    parts: list[str] = [message.text()]
    for call in message.tool_calls or ():
        parts.append(call.function.name + call.function.arguments)
    return "".join(parts)
