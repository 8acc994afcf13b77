"""OpenAI chat-completions wire models: what the gateway accepts and what providers return."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
"""Every role OpenAI's chat completions accept; anything else is refused."""

PART_TYPES = frozenset({"text", "image_url", "input_audio", "refusal"})
"""Content parts whose cost the gateway can bound (file parts name data it cannot see)."""

OutputCap = Annotated[StrictInt, Field(ge=1)]
"""A positive integer output cap: negative, zero, fractional or quoted caps are refused."""


COST_CEILING_REACHED = "cost_ceiling_reached"
"""Error code: the run's spend reached its ceiling; the gateway killed it."""
REQUEST_EXCEEDS_BUDGET = "request_exceeds_budget"
"""Error code: this request's least cost is more than what is left of the ceiling."""
BUDGET_ERROR_CODES = frozenset({COST_CEILING_REACHED, REQUEST_EXCEEDS_BUDGET})
"""The 402 codes that mean "out of budget": a loop ends BUDGET_EXHAUSTED on either."""
REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Delta fields carrying reasoning text (DeepSeek/vLLM, OpenRouter): output like the content."""
MAY_HAVE_BILLED = "x-synthorg-may-have-billed"
"""Header on every error answer: ``true`` when the upstream may have billed the request
(re-sending it could bill twice), ``false`` when it certainly did not. Also in the body as
``error.may_have_billed``."""


class _Emitted(BaseModel):
    """A response object whose ``object``/``created`` are always emitted, even when defaulted.

    Responses are dumped with ``exclude_unset`` so an upstream's explicit nulls pass through
    (``finish_reason: null``, ``content: null`` beside tool calls) and nothing is invented.
    """

    @model_validator(mode="after")
    def _always_emit(self) -> Any:
        self.model_fields_set.update(("object", "created"))
        return self

    def to_json(self) -> bytes:
        """The wire JSON: what was set (upstream nulls included), nothing unset."""
        return self.model_dump_json(exclude_unset=True).encode()


def reasoning_of(part: BaseModel) -> str:
    """The reasoning text a message or delta carries in its extra fields."""
    extra = part.model_extra or {}
    return "".join(value for key in REASONING_FIELDS if isinstance(value := extra.get(key), str))


class FunctionCall(BaseModel):
    """The function part of a tool call."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(description="The tool's name.")
    arguments: str = Field(default="", description="The arguments as a JSON string.")


class ToolCall(BaseModel):
    """One tool call of an assistant message."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="Unique id the tool result refers back to.")
    type: Literal["function"] = Field(default="function", description="Always 'function'.")
    function: FunctionCall = Field(description="Name and arguments.")


class ChatMessage(BaseModel):
    """One message of the history (system, user, assistant or tool)."""

    model_config = ConfigDict(extra="allow")

    role: Role = Field(description="system / developer / user / assistant / tool.")
    content: str | list[dict[str, Any]] | None = Field(
        default=None, description="Text, or a list of content parts."
    )
    name: str | None = Field(default=None, description="Optional author name.")
    tool_calls: list[ToolCall] | None = Field(default=None, description="Assistant tool calls.")
    tool_call_id: str | None = Field(default=None, description="The call a tool message answers.")

    @field_validator("content")
    @classmethod
    def _known_parts(
        cls, content: str | list[dict[str, Any]] | None
    ) -> str | list[dict[str, Any]] | None:
        if isinstance(content, list):
            for part in content:
                if part.get("type") not in PART_TYPES:
                    raise ValueError(
                        f"content part type {part.get('type')!r} is not accepted "
                        f"(the gateway cannot bound its cost); use one of {sorted(PART_TYPES)}"
                    )
        return content

    def images(self) -> int:
        """How many image parts the message carries."""
        if not isinstance(self.content, list):
            return 0
        return sum(1 for part in self.content if part.get("type") == "image_url")

    def text(self) -> str:
        """The message's text, content parts concatenated."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(part.get("text", "")) for part in self.content)


ROUTING_FIELDS = frozenset({"models", "route", "provider"})
"""Fields that let an upstream router pick another model or provider (OpenRouter's fallback
``models``/``route`` and ``provider`` preferences): refused, as the binding is to one model."""


class ChatRequest(BaseModel):
    """A chat-completions request; other fields are kept here and each provider forwards only
    the ones it knows (``providers.openai_compat.FORWARDED``); routing fields are refused."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _no_routing(cls, data: Any) -> Any:
        if isinstance(data, dict) and (routing := ROUTING_FIELDS & data.keys()):
            raise ValueError(
                f"routing field(s) {sorted(routing)} are not accepted: a run is bound to one "
                "model at one provider"
            )
        return data

    model: str = Field(description="The model asked for (plain or 'openai/<model>').")
    messages: list[ChatMessage] = Field(min_length=1, description="The message history.")
    tools: list[dict[str, Any]] | None = Field(default=None, description="Tool definitions.")
    tool_choice: Any = Field(default=None, description="Tool choice directive.")
    stream: StrictBool = Field(default=False, description="Stream server-sent events.")
    stream_options: dict[str, Any] | None = Field(default=None, description="include_usage etc.")
    max_tokens: OutputCap | None = Field(default=None, description="Output cap (legacy name).")
    max_completion_tokens: OutputCap | None = Field(default=None, description="Output cap.")
    n: Annotated[StrictInt, Field(ge=1, le=128)] | None = Field(
        default=None, description="How many choices (each billed its output)."
    )
    temperature: float | None = Field(default=None, description="Sampling temperature.")

    def output_cap(self) -> int | None:
        """The output token cap the caller asked for, if any (the tighter when both are set)."""
        caps = [c for c in (self.max_completion_tokens, self.max_tokens) if c is not None]
        return min(caps) if caps else None

    def images(self) -> int:
        """How many image parts the history carries."""
        return sum(message.images() for message in self.messages)

    def to_json(self) -> bytes:
        """The request as sent on: what the caller set (nulls included), nothing unset."""
        return self.model_dump_json(exclude_unset=True).encode()

    def wants_usage_in_stream(self) -> bool:
        """Whether the caller asked for the final usage chunk of a stream."""
        return bool(self.stream_options and self.stream_options.get("include_usage"))


class Usage(BaseModel):
    """Token usage of one completion."""

    model_config = ConfigDict(extra="allow")

    prompt_tokens: int = Field(default=0, ge=0, description="Input tokens.")
    completion_tokens: int = Field(default=0, ge=0, description="Output tokens.")
    total_tokens: int = Field(default=0, ge=0, description="Sum of both.")


class Choice(BaseModel):
    """One choice of a non-streaming completion."""

    model_config = ConfigDict(extra="allow")

    index: int = Field(default=0, description="Choice index.")
    message: ChatMessage = Field(description="The assistant message.")
    finish_reason: str | None = Field(default=None, description="stop / tool_calls / length.")


class ChatResponse(_Emitted):
    """A non-streaming chat completion."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="Completion id.")
    object: str = Field(default="chat.completion", description="Object type.")
    created: int = Field(default_factory=lambda: int(time.time()), description="Unix time.")
    model: str = Field(description="The model that answered.")
    choices: list[Choice] = Field(description="The choices (one).")
    usage: Usage | None = Field(default=None, description="Token usage.")

    def out_bytes(self) -> int:
        """UTF-8 bytes of every choice's text and tool calls (for metering without usage)."""
        total = 0
        for choice in self.choices:
            total += len(choice.message.text().encode()) + len(
                reasoning_of(choice.message).encode()
            )
            for call in choice.message.tool_calls or ():
                total += len(call.function.name.encode()) + len(call.function.arguments.encode())
        return total


class DeltaFunction(BaseModel):
    """A fragment of a streamed tool call's function."""

    model_config = ConfigDict(extra="allow")

    name: str | None = Field(default=None, description="Name (first fragment only).")
    arguments: str | None = Field(default=None, description="A fragment of the arguments.")


class DeltaToolCall(BaseModel):
    """A fragment of a streamed tool call."""

    model_config = ConfigDict(extra="allow")

    index: int = Field(description="Which tool call this fragment extends.")
    id: str | None = Field(default=None, description="Id (first fragment only).")
    type: str | None = Field(default=None, description="'function' on the first fragment.")
    function: DeltaFunction | None = Field(default=None, description="Function fragment.")


class Delta(BaseModel):
    """The change a stream chunk carries."""

    model_config = ConfigDict(extra="allow")

    role: str | None = Field(default=None, description="'assistant' on the first chunk.")
    content: str | None = Field(default=None, description="A text fragment.")
    tool_calls: list[DeltaToolCall] | None = Field(default=None, description="Call fragments.")

    def reasoning(self) -> str:
        """Reasoning text the upstream streams beside the content (billed as output)."""
        return reasoning_of(self)


class ChunkChoice(BaseModel):
    """One choice of a stream chunk."""

    model_config = ConfigDict(extra="allow")

    index: int = Field(default=0, description="Choice index.")
    delta: Delta = Field(default_factory=Delta, description="The change.")
    finish_reason: str | None = Field(default=None, description="Set on the last chunk.")


class ChatChunk(_Emitted):
    """One server-sent event of a streaming completion."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="Completion id (same on every chunk).")
    object: str = Field(default="chat.completion.chunk", description="Object type.")
    created: int = Field(default_factory=lambda: int(time.time()), description="Unix time.")
    model: str = Field(description="The model that answers.")
    choices: list[ChunkChoice] = Field(default_factory=list, description="Empty on usage chunk.")
    usage: Usage | None = Field(default=None, description="Only on the final usage chunk.")

    def out_bytes(self) -> int:
        """UTF-8 bytes of content and tool-call fragments this chunk carries (for metering)."""
        total = 0
        for choice in self.choices:
            total += len((choice.delta.content or "").encode())
            total += len(choice.delta.reasoning().encode())
            for call in choice.delta.tool_calls or ():
                if call.function is not None:
                    total += len((call.function.name or "").encode())
                    total += len((call.function.arguments or "").encode())
        return total


def error_body(
    message: str,
    type_: str,
    code: str | None = None,
    param: str | None = None,
    *,
    may_have_billed: bool = False,
) -> bytes:
    """OpenAI's error shape as JSON bytes, with whether the request may have been billed."""
    error = {
        "message": message,
        "type": type_,
        "code": code,
        "param": param,
        "may_have_billed": may_have_billed,
    }
    return json.dumps({"error": error}).encode()
