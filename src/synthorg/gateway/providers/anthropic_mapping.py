"""Pure mapping between OpenAI chat-completions and Anthropic's Messages API, both ways."""

from __future__ import annotations

import json
from typing import Any

from synthorg.gateway.wire import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    Choice,
    FunctionCall,
    ToolCall,
    Usage,
)

DEFAULT_MAX_TOKENS = 4096

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def _text_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    if isinstance(message.content, list):
        return [
            {"type": "text", "text": str(part.get("text", ""))}
            for part in message.content
            if part.get("type", "text") == "text"
        ]
    text = message.text()
    return [{"type": "text", "text": text}] if text else []


def _tool_use_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for call in message.tool_calls or ():
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except ValueError:
            arguments = {"_raw": call.function.arguments}
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.function.name, "input": arguments}
        )
    return blocks


def to_messages_request(request: ChatRequest) -> dict[str, Any]:
    """The Messages API body for a chat-completions request."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        # Anthropic wants alternating roles: merge consecutive same-role messages.
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for message in request.messages:
        if message.role in ("system", "developer"):
            system.append(message.text())
        elif message.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.text(),
            }
            add("user", [block])
        elif message.role == "assistant":
            add("assistant", _text_blocks(message) + _tool_use_blocks(message))
        else:
            add("user", _text_blocks(message))

    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "max_tokens": request.output_cap() or DEFAULT_MAX_TOKENS,
    }
    if system:
        body["system"] = "\n\n".join(system)
    if request.temperature is not None:
        body["temperature"] = request.temperature
    stop = (request.model_extra or {}).get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools if t.get("type", "function") == "function"]
    choice = _tool_choice(request.tool_choice)
    if choice is not None and request.tools:
        body["tool_choice"] = choice
    return body


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function", {})
    out: dict[str, Any] = {
        "name": function.get("name", ""),
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description"):
        out["description"] = function["description"]
    return out


def _tool_choice(choice: Any) -> dict[str, Any] | None:
    if choice is None or choice == "auto":
        return {"type": "auto"} if choice else None
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    if isinstance(choice, dict) and "function" in choice:
        return {"type": "tool", "name": choice["function"].get("name", "")}
    return None


def usage_of(raw: dict[str, Any]) -> Usage:
    """OpenAI usage from Anthropic usage (cache reads and writes are prompt tokens too)."""
    tokens_in = sum(
        int(raw.get(k) or 0)
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    tokens_out = int(raw.get("output_tokens") or 0)
    return Usage(
        prompt_tokens=tokens_in, completion_tokens=tokens_out, total_tokens=tokens_in + tokens_out
    )


def from_messages_response(raw: dict[str, Any], model: str) -> ChatResponse:
    """A chat completion from a Messages API response."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in raw.get("content", []):
        if block.get("type") == "text":
            texts.append(block.get("text", ""))
        elif block.get("type") == "tool_use":
            arguments = json.dumps(block.get("input", {}))
            calls.append(
                ToolCall(
                    id=block["id"], function=FunctionCall(name=block["name"], arguments=arguments)
                )
            )
    message = ChatMessage(
        role="assistant", content="".join(texts) if texts else None, tool_calls=calls or None
    )
    finish = STOP_REASONS.get(raw.get("stop_reason") or "", "stop")
    return ChatResponse(
        id=str(raw.get("id", "msg")),
        model=model,
        choices=[Choice(message=message, finish_reason=finish)],
        usage=usage_of(raw.get("usage", {})),
    )
