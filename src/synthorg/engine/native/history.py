"""The model's message history: built live during a run, or rebuilt from a run's stored events."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from synthorg.domain import ActionEvent, MessageEvent, ObservationEvent, StoredEvent
from synthorg.engine.native.model import Message, ModelReply

NOT_EXECUTED = (
    "not executed: the run stopped before this action ran (or finished); "
    "its effect on the workspace is unknown - check before repeating it"
)


class History:
    """OpenAI-format messages: the system prompt, then the conversation."""

    def __init__(self, system_prompt: str) -> None:
        self.messages: list[Message] = [{"role": "system", "content": system_prompt}]

    def add_user(self, text: str) -> None:
        """A message from the person or the loop (loop instructions are user turns)."""
        self.messages.append({"role": "user", "content": text})

    def add_assistant(self, reply: ModelReply) -> None:
        """The model's turn, with its tool calls."""
        self.messages.append(reply.as_message())

    def add_tool_result(self, call_id: str, content: str) -> None:
        """The observation answering one tool call."""
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})

    def extend(self, messages: Sequence[Message]) -> None:
        """Append rebuilt messages."""
        self.messages.extend(messages)


def rebuild_messages(events: Sequence[StoredEvent]) -> list[Message]:
    """The conversation as the model saw it, from the event log of earlier runs.

    Consecutive actions form one assistant turn; every action gets exactly one tool message
    (the observation the log has; NOT_EXECUTED when it has none), placed right after its turn
    as the chat format requires. A message logged while a turn's calls were still running
    (a steer) follows their results: nothing comes between a tool call and its result.
    """
    out: list[Message] = []
    open_turn: list[str] = []  # action ids of the current assistant turn
    answered: set[str] = set()
    held: list[Message] = []  # messages logged while the turn's calls were unanswered

    def waiting() -> bool:
        return any(action_id not in answered for action_id in open_turn)

    def close_turn() -> None:
        for action_id in open_turn:
            if action_id not in answered:
                out.append({"role": "tool", "tool_call_id": action_id, "content": NOT_EXECUTED})
                answered.add(action_id)
        open_turn.clear()
        out.extend(held)
        held.clear()

    last_was_action = False
    for stored in events:
        event = stored.event
        if isinstance(event, ActionEvent):
            if not last_was_action:
                close_turn()
                out.append(
                    {"role": "assistant", "content": event.thought or None, "tool_calls": []}
                )
            out[-1]["tool_calls"].append(_tool_call(event))
            open_turn.append(event.action_id)
            last_was_action = True
            continue
        last_was_action = False
        if isinstance(event, ObservationEvent):
            if event.action_id in open_turn and event.action_id not in answered:
                out.append(
                    {"role": "tool", "tool_call_id": event.action_id, "content": event.content}
                )
                answered.add(event.action_id)
            if not waiting():
                out.extend(held)
                held.clear()
        elif isinstance(event, MessageEvent):
            role = "assistant" if event.role == "assistant" else "user"
            message: Message = {"role": role, "content": event.text}
            if waiting():
                held.append(message)
            else:
                close_turn()
                out.append(message)
    close_turn()
    return out


def _tool_call(event: ActionEvent) -> dict[str, Any]:
    return {
        "id": event.action_id,
        "type": "function",
        "function": {"name": event.tool_name, "arguments": json.dumps(event.arguments)},
    }
