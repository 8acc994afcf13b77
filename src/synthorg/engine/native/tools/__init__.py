"""Tools of the native loops: schemas, validation, risk and execution through the sandbox."""

from synthorg.engine.native.tools.base import (
    Finish,
    ModelTool,
    ParsedCall,
    PlanWritten,
    Signal,
    StepCompleted,
    Tool,
    ToolArgumentError,
    ToolResult,
    ToolSet,
)
from synthorg.engine.native.tools.executor import ToolExecutor
from synthorg.engine.native.tools.mcp import McpClient, McpClientFactory, mcp_tools
from synthorg.engine.native.tools.native import (
    file_editor_tool,
    finish_tool,
    terminal_tool,
    think_tool,
)
from synthorg.engine.native.tools.plan import complete_step_tool, render_plan, write_plan_tool
from synthorg.engine.native.tools.risk import edit_risk, terminal_risk

__all__ = [
    "Finish",
    "McpClient",
    "McpClientFactory",
    "ModelTool",
    "ParsedCall",
    "PlanWritten",
    "Signal",
    "StepCompleted",
    "Tool",
    "ToolArgumentError",
    "ToolExecutor",
    "ToolResult",
    "ToolSet",
    "complete_step_tool",
    "edit_risk",
    "file_editor_tool",
    "finish_tool",
    "mcp_tools",
    "render_plan",
    "terminal_risk",
    "terminal_tool",
    "think_tool",
    "write_plan_tool",
]
