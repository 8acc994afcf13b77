"""Event stream of the OpenHands entrypoint: SDK events to JSON lines on a private stdout fd.

Imported by run_task.py from its own directory (the runtime venv's python only).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from typing import Any

MAX_TEXT = 20_000  # an observation can be a whole file; keep event lines bounded


class EventWriter:
    """Writes one JSON object per line to the event stream, from any thread."""

    def __init__(self, fd: int) -> None:
        self._out = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
        self._lock = threading.Lock()

    def emit(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, default=str, separators=(",", ":"))
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


def claim_stdout() -> EventWriter:
    """Move fd 1 aside for events; everything else that prints lands on stderr."""
    event_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return EventWriter(event_fd)


_GATEWAY_CODE = re.compile(r'"code"\s*:\s*"([a-z][a-z0-9_]{0,63})"')


def gateway_code(error: BaseException | str | None) -> str | None:
    """The gateway's error code behind an LLM failure (its JSON error body), if there is one.

    The host classifies by this code (``cost_ceiling_reached`` is the gateway's budget kill),
    never by the wording of a message. The SDK and litellm wrap the HTTP error: look at each
    exception of the chain (``code``, a ``body`` dict), then at the body embedded in the text.
    """
    current: BaseException | str | None = error
    for _ in range(8):
        if not isinstance(current, BaseException):
            break
        body = getattr(current, "body", None)
        if isinstance(body, dict):
            inner = body.get("error", body)
            code = inner.get("code") if isinstance(inner, dict) else None
            if isinstance(code, str) and code:
                return code
        current = current.__cause__ or current.__context__
    match = _GATEWAY_CODE.search(str(error)) if error is not None else None
    return match.group(1) if match else None


def clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "\n[... truncated]"


class Translator:
    """Maps SDK events to the wire records, adding running cost and per-turn token deltas."""

    def __init__(self) -> None:
        self._conversation: Any = None
        self._seen_responses: set[str] = set()
        self._prompt = self._completion = 0

    def attach(self, conversation: Any) -> None:
        """Start counting from the persisted totals, so a resumed run reports only its own."""
        self._conversation = conversation
        _, self._prompt, self._completion = self.totals()

    def totals(self) -> tuple[float, int, int]:
        """Running (cost, prompt tokens, completion tokens) from the SDK's metrics."""
        if self._conversation is None:
            return 0.0, 0, 0
        metrics = self._conversation.conversation_stats.get_combined_metrics()
        usage = metrics.accumulated_token_usage
        prompt = usage.prompt_tokens if usage else 0
        completion = usage.completion_tokens if usage else 0
        return float(metrics.accumulated_cost), prompt, completion

    def _turn_tokens(self, record: dict[str, Any], response_id: str | None) -> None:
        # One LLM response can yield several actions: its tokens go to the first only,
        # so the per-turn deltas sum exactly to the totals.
        _, prompt, completion = self.totals()
        if response_id is not None and response_id in self._seen_responses:
            record["prompt_tokens"], record["completion_tokens"] = 0, 0
            return
        if response_id is not None:
            self._seen_responses.add(response_id)
        record["prompt_tokens"] = prompt - self._prompt
        record["completion_tokens"] = completion - self._completion
        self._prompt, self._completion = prompt, completion

    def translate(self, event: Any) -> dict[str, Any]:
        from openhands.sdk.event import (
            ActionEvent,
            AgentErrorEvent,
            MessageEvent,
            ObservationEvent,
            PauseEvent,
            SystemPromptEvent,
            UserRejectObservation,
        )
        from openhands.sdk.event.conversation_error import ConversationErrorEvent
        from openhands.sdk.event.user_action import InterruptEvent
        from openhands.sdk.llm import content_to_str

        record: dict[str, Any] = {
            "kind": "status",
            "sdk_type": type(event).__name__,
            "id": event.id,
            "source": getattr(event, "source", None),
        }
        if isinstance(event, ActionEvent):
            try:
                arguments: Any = json.loads(event.tool_call.arguments)
            except (TypeError, ValueError):
                arguments = event.tool_call.arguments
            record.update(
                kind="action",
                tool_name=event.tool_name,
                tool_call_id=event.tool_call_id,
                arguments=arguments,
                summary=event.summary,
                thought="".join(t.text for t in event.thought),
                risk=event.security_risk.value,
            )
            self._turn_tokens(record, event.llm_response_id)
        elif isinstance(event, MessageEvent):
            record.update(
                kind="message", content=clip("".join(content_to_str(event.llm_message.content)))
            )
            if event.source == "agent":
                self._turn_tokens(record, event.llm_response_id)
        elif isinstance(event, ObservationEvent):
            content = "".join(content_to_str(event.observation.to_llm_content))
            record.update(
                kind="observation",
                tool_name=event.tool_name,
                tool_call_id=event.tool_call_id,
                action_id=event.action_id,
                content=clip(content),
                is_error=bool(getattr(event.observation, "is_error", False)),
            )
        elif isinstance(event, UserRejectObservation):
            record.update(
                kind="observation",
                tool_name=event.tool_name,
                tool_call_id=event.tool_call_id,
                action_id=event.action_id,
                content=event.rejection_reason,
                rejected=True,
                is_error=False,
            )
        elif isinstance(event, AgentErrorEvent):
            record.update(
                kind="observation",
                tool_name=event.tool_name,
                tool_call_id=event.tool_call_id,
                content=clip(event.error),
                is_error=True,
            )
        elif isinstance(event, ConversationErrorEvent):
            code = gateway_code(event.detail) or event.code
            record.update(kind="error", code=code, content=clip(event.detail))
        elif isinstance(event, SystemPromptEvent):
            record.update(kind="system", content=event.system_prompt.text)
        elif isinstance(event, PauseEvent):
            # Requested only: the run stops at the next step boundary ("paused" status).
            record.update(summary="pause_requested")
        elif isinstance(event, InterruptEvent):
            record.update(summary="interrupted")
        else:
            record["summary"] = clip(str(getattr(event, "key", "") or type(event).__name__))
        record["accumulated_cost"] = self.totals()[0]
        return record
