"""A scripted model for the forge tests: one real commit's worth of work per user message (the
task, then each CI or review message), so every resumed run lands something new."""

from __future__ import annotations

from collections.abc import Sequence

from synthorg.engine.native.scripts import Tools, steps_of
from synthorg.gateway.scripted import ScriptedModel, ScriptedTurn
from synthorg.gateway.wire import ChatMessage


def answer_each() -> ScriptedModel:
    """Appends n to answers.txt for the n-th user message, then finishes."""

    def script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
        asks = sum(1 for m in messages if m.role == "user")
        answered = [
            s
            for s in steps_of(messages)
            if s.name == "terminal" and "answered-" in (s.result or "")
        ]
        n = len(answered) + 1
        if n > asks:
            return ScriptedTurn.call("finish", message=f"answered {asks} requests")
        return ScriptedTurn.call(
            "terminal", f"Answering {n}.", command=f"echo {n} >> answers.txt && echo answered-{n}"
        )

    return script
