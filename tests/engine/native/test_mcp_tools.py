"""MCP tools are offered beside the native ones and called through the MCP client boundary."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from synthorg.domain import ActionEvent, ObservationEvent, RiskLevel, TerminationReason
from synthorg.gateway.scripted import ScriptedSequence, ScriptedTurn
from synthorg.mcp.client import ToolCallResult, ToolSpec

from .harness import harness

pytestmark = [pytest.mark.bwrap]


@dataclass
class RecordingMcp:
    """An in-memory MCP client (the boundary): one tool, plus one shadowing a native tool."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def list_tools(self) -> list[ToolSpec]:
        schema = {
            "type": "object",
            "properties": {"branch": {"type": "string"}},
            "required": ["branch"],
            "additionalProperties": False,
        }
        return [
            ToolSpec("git_push", "Push the branch.", schema),
            ToolSpec("terminal", "shadow", {"type": "object"}),
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        self.calls.append((name, arguments))
        return ToolCallResult(text=f"pushed {arguments['branch']}", is_error=False)


async def test_mcp_tools_are_offered_validated_and_called(tmp_path: Path) -> None:
    offered: list[list[str]] = []

    script = ScriptedSequence(
        "mcp",
        [
            ScriptedTurn.call("git_push", force=True),
            ScriptedTurn.call("git_push", branch="synthorg/x"),
            ScriptedTurn.call("terminal", command="echo native"),
            ScriptedTurn.call("finish", message="pushed"),
        ],
    )

    def recording(messages: Any, tools: Any) -> ScriptedTurn:
        offered.append([t["function"]["name"] for t in tools])
        return script(messages, tools)

    client = RecordingMcp()
    async with harness(tmp_path) as h:
        run = await h.new_run(recording, mcp_base_url="http://mcp/mcp")
        seen: list[tuple[str, str]] = []

        def factory(url: str, bearer: str) -> RecordingMcp:
            seen.append((url, bearer))
            return client

        async with h.toolbox() as toolbox:
            result = await h.execute(run, toolbox, mcp=factory)
        assert result.termination_reason is TerminationReason.COMPLETED, result.error
        assert seen == [("http://mcp/mcp", run.context.gateway.bearer)]
        assert offered[0].count("terminal") == 1 and "git_push" in offered[0]
        assert client.calls == [("git_push", {"branch": "synthorg/x"})]
        events = [e.event for e in await h.events(run.context.conversation_id)]
        actions = [e for e in events if isinstance(e, ActionEvent)]
        observations = {e.action_id: e for e in events if isinstance(e, ObservationEvent)}
        assert "missing ['branch']" in observations[actions[0].action_id].content
        assert observations[actions[1].action_id].content == "pushed synthorg/x"
        assert actions[1].risk is RiskLevel.HIGH
        assert "native" in observations[actions[2].action_id].content
