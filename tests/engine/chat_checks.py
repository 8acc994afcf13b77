"""Checks on a chat request as a model receives it (shared by the native and OpenHands tests)."""

from __future__ import annotations

from synthorg.gateway.wire import ChatMessage


def text_of(message: ChatMessage) -> str:
    """The message's text, whether plain or a list of parts."""
    content = message.content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content)
    return content or ""


def assert_valid_chat(messages: list[ChatMessage]) -> None:
    """Each assistant tool call is answered by the messages right after it, exactly once."""
    i = 0
    while i < len(messages):
        ids = [c.id for c in messages[i].tool_calls or []]
        following = messages[i + 1 : i + 1 + len(ids)]
        assert [m.role for m in following] == ["tool"] * len(ids), (i, messages)
        assert sorted(m.tool_call_id or "" for m in following) == sorted(ids)
        i += 1 + len(ids)
    answered = [m.tool_call_id for m in messages if m.role == "tool"]
    assert len(answered) == len(set(answered))


def answer_to_last_call(messages: list[ChatMessage]) -> str:
    """The tool result given for the last tool call of the history."""
    last = [m for m in messages if m.tool_calls][-1]
    call_id = last.tool_calls[-1].id  # type: ignore[index]
    return next(text_of(m) for m in messages if m.role == "tool" and m.tool_call_id == call_id)
