"""A deterministic fake OpenHands conversation that plays scripted runtime lines.

The script is the runtime's own wire format (JSON objects, or raw strings for garbage), parsed
with the same ``parse_record`` as the real runtime, so the loop's unit tests exercise exactly
what the sandboxed entrypoint would feed it. ``WAIT`` blocks until a decision (after a
confirmation request) or forever (to test stops and cancellation).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from synthorg.engine.openhands.conversation import (
    ControlCommand,
    EventSink,
    OpenHandsOutcome,
    OpenHandsRunSpec,
)
from synthorg.engine.openhands.errors import OpenHandsRuntimeError
from synthorg.engine.openhands.events import RuntimeNotice, garbage, parse_record

WAIT = object()
"""Script item: block here until a confirm control arrives (or forever, until stopped)."""

ScriptItem = Mapping[str, Any] | str | object


class FakeConversation:
    """OpenHandsConversation over a fixed script of runtime lines."""

    def __init__(self, script: Sequence[ScriptItem], *, exit_code: int = 0) -> None:
        self._script = list(script)
        self._exit_code = exit_code
        self.controls: list[dict[str, Any]] = []
        """Every control line sent, in order."""
        self.running = False
        self.torn_down = False
        """True once run() left, whatever the exit path (the real runtime kills the sandbox)."""
        self._stop = asyncio.Event()
        self._decided = asyncio.Event()

    async def run(self, sink: EventSink) -> OpenHandsOutcome:
        self.running = True
        last_error: tuple[str, str | None] | None = None
        try:
            for item in self._script:
                if item is WAIT:
                    if not await self._wait():
                        return OpenHandsOutcome(stopped=True)
                    continue
                if self._stop.is_set():
                    return OpenHandsOutcome(stopped=True)
                line = item if isinstance(item, str) else json.dumps(item)
                try:
                    record = parse_record(line)
                except OpenHandsRuntimeError as exc:
                    record = garbage(line, str(exc))
                if not await sink(record):
                    return OpenHandsOutcome(stopped=True)
                await asyncio.sleep(0)  # let control tasks run, as a real stream would
                if isinstance(record, RuntimeNotice):
                    if record.kind == "status" and record.summary == "paused":
                        return OpenHandsOutcome(paused=True)
                    continue
                if record.kind == "finished":
                    return OpenHandsOutcome(finished=True, final_message=record.text)
                if record.kind == "error":
                    last_error = (record.text, record.code)
            if last_error is not None:
                return OpenHandsOutcome(
                    error=last_error[0], error_code=last_error[1], exit_code=self._exit_code
                )
            return OpenHandsOutcome(
                error="the fake runtime's script ended without finishing",
                error_code="runtime_exit",
                exit_code=self._exit_code,
            )
        finally:
            self.running = False
            self.torn_down = True

    async def _wait(self) -> bool:
        """Until a decision arrives (True) or a stop (False)."""
        decided = asyncio.ensure_future(self._decided.wait())
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({decided, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            decided.cancel()
            stopped.cancel()
        self._decided.clear()
        return not self._stop.is_set()

    async def send_control(self, command: ControlCommand) -> None:
        self.controls.append(dict(command))
        if command.get("type") == "confirm":
            self._decided.set()

    async def stop(self) -> None:
        self._stop.set()


class FakeConversationFactory:
    """A ConversationFactory handing out scripted conversations; keeps the specs it got."""

    def __init__(self, *scripts: Sequence[ScriptItem], exit_code: int = 0) -> None:
        self._scripts = list(scripts)
        self._exit_code = exit_code
        self.specs: list[OpenHandsRunSpec] = []
        self.conversations: list[FakeConversation] = []

    def __call__(self, spec: OpenHandsRunSpec) -> FakeConversation:
        if not self._scripts:
            raise OpenHandsRuntimeError("the fake factory has no script left for another run")
        self.specs.append(spec)
        conversation = FakeConversation(self._scripts.pop(0), exit_code=self._exit_code)
        self.conversations.append(conversation)
        return conversation


# -- wire records, as run_task.py writes them ---------------------------------------------


def status(summary: str = "started", cost: float = 0.0, **extra: Any) -> dict[str, Any]:
    """A status line (started/resumed carry the persisted running cost)."""
    return {"kind": "status", "summary": summary, "accumulated_cost": cost, **extra}


def action(
    action_id: str,
    tool: str,
    cost: float,
    *,
    prompt: int = 0,
    completion: int = 0,
    risk: str = "UNKNOWN",
    **arguments: Any,
) -> dict[str, Any]:
    """An action line with its turn's token deltas and the running cost after it."""
    return {
        "kind": "action",
        "id": action_id,
        "source": "agent",
        "tool_name": tool,
        "tool_call_id": f"call-{action_id}",
        "arguments": arguments,
        "summary": f"{tool} {json.dumps(arguments, sort_keys=True)}"[:120],
        "thought": "",
        "risk": risk,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "accumulated_cost": cost,
    }


def observation(
    action_id: str, content: str, cost: float, *, is_error: bool = False, rejected: bool = False
) -> dict[str, Any]:
    """An observation line answering ``action_id``."""
    record: dict[str, Any] = {
        "kind": "observation",
        "id": f"obs-{action_id}",
        "source": "environment",
        "tool_call_id": f"call-{action_id}",
        "action_id": action_id,
        "content": content,
        "is_error": is_error,
        "accumulated_cost": cost,
    }
    if rejected:
        record["rejected"] = True
    return record


def message(
    text: str, cost: float, *, source: str = "agent", prompt: int = 0, completion: int = 0
) -> dict[str, Any]:
    """A message line (an agent message is a turn with token deltas)."""
    record: dict[str, Any] = {
        "kind": "message",
        "id": f"msg-{abs(hash(text)) % 10**8}",
        "source": source,
        "content": text,
        "accumulated_cost": cost,
    }
    if source == "agent":
        record.update(prompt_tokens=prompt, completion_tokens=completion)
    return record


def finished(summary: str, cost: float) -> dict[str, Any]:
    """The agent finished."""
    return {"kind": "finished", "summary": summary, "accumulated_cost": cost}


def error(content: str, cost: float, code: str = "error") -> dict[str, Any]:
    """The run failed."""
    return {"kind": "error", "code": code, "content": content, "accumulated_cost": cost}


def confirmation_request(cost: float, *pending: tuple[str, str, str]) -> dict[str, Any]:
    """A wait for a decision on (action id, tool, risk) triples."""
    return {
        "kind": "confirmation_request",
        "accumulated_cost": cost,
        "pending": [
            {"action_id": a, "tool_name": t, "tool_call_id": f"call-{a}", "risk": r, "summary": t}
            for a, t, r in pending
        ],
    }
