"""What a native loop needs per run (NativeLoopDeps) and the set-up every loop shares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from synthorg.domain import ExecutionResult
from synthorg.engine.native.model import ModelClient, OpenAICompatClient, shared_tls
from synthorg.engine.native.settings import NativeLoopSettings
from synthorg.engine.native.tools import (
    McpClientFactory,
    Tool,
    ToolExecutor,
    ToolSet,
    complete_step_tool,
    file_editor_tool,
    finish_tool,
    mcp_tools,
    terminal_tool,
    think_tool,
    write_plan_tool,
)
from synthorg.engine.native.tools.delegate import Delegator, delegate_tool
from synthorg.engine.native.turn import CheckpointHook, TurnEngine
from synthorg.engine.no_op import CONTROL_TOOLS
from synthorg.engine.protocol import GatewayAccess, LoopContext

ModelClientFactory = Callable[[GatewayAccess, str, NativeLoopSettings], ModelClient]
"""(gateway access, model id, settings) -> a model client for one run."""


def http_model_client(
    gateway: GatewayAccess, model: str, settings: NativeLoopSettings, *, uds: Path | None = None
) -> ModelClient:
    """The default: chat completions to the gateway with the run's bearer.

    With ``uds`` the requests go through the gateway's unix socket (the URL's host is then
    only what the gateway sees in ``Host``).
    """
    import httpx  # not at module import: see synthorg.engine.native.model

    return OpenAICompatClient(
        gateway.base_url,
        gateway.bearer,
        model,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        timeout_s=settings.request_timeout_s,
        transport=httpx.AsyncHTTPTransport(uds=str(uds), verify=shared_tls())
        if uds is not None
        else None,
    )


@dataclass(frozen=True)
class NativeLoopDeps:
    """Dependencies of the native loops for one run (required via ``LoopDependencies``)."""

    executor: ToolExecutor
    """Runs terminal commands and file edits: the run's sandbox toolbox."""
    checkpoint: CheckpointHook | None = None
    """Snapshots the workspace before each mutating action (None: no checkpoints)."""
    settle: CheckpointHook | None = None
    """Snapshots it again after each mutating action, before its observation is logged (a
    travelling worktree: a successor elsewhere resumes from what the log says was done)."""
    mcp_client_factory: McpClientFactory | None = None
    """Builds the MCP client when the run has an MCP endpoint (None: no MCP tools)."""
    model_client_factory: ModelClientFactory = http_model_client
    """Builds the model client; the default talks HTTP to the gateway."""
    settings: NativeLoopSettings = field(default_factory=NativeLoopSettings)
    """Model call, tool and loop bounds."""
    delegator: Delegator | None = None
    """Runs sub-tasks as child conversations (None: no delegate tool is offered)."""

    def work_tools(self) -> list[Tool]:
        """Terminal, file editor and think (and delegate, when this run may delegate)."""
        s = self.settings
        tools = [
            terminal_tool(
                self.executor,
                default_timeout_s=s.command_timeout_s,
                max_timeout_s=s.max_command_timeout_s,
                max_output=s.max_output_bytes,
            ),
            file_editor_tool(self.executor),
            think_tool(),
        ]
        if self.delegator is not None:
            tools.append(delegate_tool(self.delegator))
        return tools


_CONTROL_TOOL_FACTORIES: dict[str, Callable[[], Tool]] = {
    "finish": finish_tool,
    "think": think_tool,
    "write_plan": write_plan_tool,
    "complete_step": complete_step_tool,
}
# The names are engine.no_op's (the NO_OP rule's) one list; a control tool added here only
# would count as work there.
if frozenset(_CONTROL_TOOL_FACTORIES) != CONTROL_TOOLS:
    raise RuntimeError("the native control tools differ from engine.no_op.CONTROL_TOOLS")


def control_tools(*names: str) -> list[Tool]:
    """Fresh control tools by name."""
    return [_CONTROL_TOOL_FACTORIES[name]() for name in names]


LoopBody = Callable[[TurnEngine, ToolSet, LoopContext], Awaitable[str]]
"""A native loop's own logic: turns until done; returns the final message (COMPLETED)."""


async def run_native(
    deps: NativeLoopDeps, context: LoopContext, loop_type: str, prompt: str, body: LoopBody
) -> ExecutionResult:
    """Run ``body`` on a started engine with the work tools (native + MCP)."""
    model = deps.model_client_factory(context.gateway, context.model, deps.settings)
    try:
        tools = deps.work_tools()
        if deps.mcp_client_factory is not None and context.gateway.mcp_base_url:
            client = deps.mcp_client_factory(context.gateway.mcp_base_url, context.gateway.bearer)
            reserved = [t.name for t in tools] + sorted(CONTROL_TOOLS)
            tools += await mcp_tools(client, reserved)
        engine = TurnEngine(
            context,
            loop_type,
            model,
            checkpoint=deps.checkpoint,
            settle=deps.settle,
            stuck_after=deps.settings.stuck_after,
        )
        work = ToolSet(tools)
        result = await engine.run(
            prompt.format(workspace=deps.executor.workspace), lambda: body(engine, work, context)
        )
        if deps.delegator is not None and deps.delegator.spent():
            result = result.model_copy(update={"delegated_cost_usd": deps.delegator.spent()})
        return result
    finally:
        await model.aclose()


class NativeLoop:
    """What the native loops share: their deps, their name and system prompt, and
    ``run_native`` around their own ``_run`` (the only part each writes)."""

    loop_type: ClassVar[str]
    prompt: ClassVar[str]

    def __init__(self, deps: NativeLoopDeps) -> None:
        self._deps = deps

    def get_loop_type(self) -> str:
        return self.loop_type

    async def execute(self, context: LoopContext) -> ExecutionResult:
        return await run_native(self._deps, context, self.loop_type, self.prompt, self._run)

    async def _run(self, engine: TurnEngine, work: ToolSet, context: LoopContext) -> str:
        raise NotImplementedError
