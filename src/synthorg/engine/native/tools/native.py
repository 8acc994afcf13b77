"""The native tools: terminal, file editor, think and finish, with their argument schemas."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from synthorg.domain import RiskLevel
from synthorg.engine.native.tools.base import Finish, ModelTool, Tool, ToolResult
from synthorg.engine.native.tools.executor import ToolExecutor
from synthorg.engine.native.tools.risk import edit_risk, terminal_risk

_ARGS = ConfigDict(extra="forbid")


class TerminalArgs(BaseModel):
    """Arguments of the terminal tool."""

    model_config = _ARGS

    command: str = Field(min_length=1, description="A bash command run in the workspace root.")
    timeout: float | None = Field(
        default=None, gt=0, le=3600, description="Seconds before the command is killed."
    )


EditorCommand = Literal["view", "create", "str_replace", "insert", "undo_edit"]

# Which optional fields each editor command needs (required) and accepts (allowed).
_EDITOR_FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "view": (frozenset(), frozenset({"view_range"})),
    "create": (frozenset({"file_text"}), frozenset({"file_text"})),
    "str_replace": (frozenset({"old_str"}), frozenset({"old_str", "new_str"})),
    "insert": (frozenset({"insert_line", "new_str"}), frozenset({"insert_line", "new_str"})),
    "undo_edit": (frozenset(), frozenset()),
}


class FileEditorArgs(BaseModel):
    """Arguments of the file editor tool."""

    model_config = _ARGS

    command: EditorCommand = Field(description="view, create, str_replace, insert or undo_edit.")
    path: str = Field(min_length=1, description="File (or directory, for view) in the workspace.")
    file_text: str | None = Field(default=None, description="create: the whole file content.")
    old_str: str | None = Field(
        default=None, description="str_replace: text occurring exactly once in the file."
    )
    new_str: str | None = Field(
        default=None, description="str_replace: the replacement; insert: the text to insert."
    )
    insert_line: int | None = Field(
        default=None, ge=0, description="insert: insert after this line (0 = at the top)."
    )
    view_range: list[int] | None = Field(
        default=None, min_length=2, max_length=2, description="view: [first, last] line, -1 = end."
    )

    @model_validator(mode="after")
    def _fields_fit_command(self) -> Self:
        required, allowed = _EDITOR_FIELDS[self.command]
        given = {
            name
            for name in ("file_text", "old_str", "new_str", "insert_line", "view_range")
            if getattr(self, name) is not None
        }
        missing = required - given
        if missing:
            raise ValueError(f"{self.command} needs {', '.join(sorted(missing))}")
        extra = given - allowed
        if extra:
            raise ValueError(f"{self.command} does not take {', '.join(sorted(extra))}")
        return self


class ThinkArgs(BaseModel):
    """Arguments of the think tool."""

    model_config = _ARGS

    thought: str = Field(description="Your reasoning; it changes nothing.")


class FinishArgs(BaseModel):
    """Arguments of the finish tool."""

    model_config = _ARGS

    message: str = Field(description="What was done, for the person who asked.")


def terminal_tool(
    executor: ToolExecutor, *, default_timeout_s: float, max_timeout_s: float, max_output: int
) -> Tool:
    """Runs bash commands in the workspace through the executor."""

    async def run(args: TerminalArgs) -> ToolResult:
        timeout = min(args.timeout or default_timeout_s, max_timeout_s)
        result = await executor.run(args.command, timeout_s=timeout, max_output=max_output)
        notes = []
        if result.timed_out:
            notes.append(f"[timed out after {timeout:g}s; the command's processes were killed]")
        if result.truncated:
            notes.append("[output truncated: head and tail kept]")
        if result.exit_code is not None:
            notes.append(f"[exit code: {result.exit_code}]")
        content = (result.output.rstrip("\n") + "\n" + "\n".join(notes)).lstrip("\n")
        return ToolResult(
            content=content,
            is_error=result.timed_out or result.exit_code != 0,
            exit_code=result.exit_code,
        )

    return ModelTool(
        name="terminal",
        description=(
            f"Run a bash command in the workspace root ({executor.workspace}). Output "
            f"(stdout+stderr) is capped at {max_output} bytes; the default timeout is "
            f"{default_timeout_s:g}s. No interactive programs."
        ),
        args_model=TerminalArgs,
        execute=run,
        risk_of=lambda a: terminal_risk(a.command),
        mutates_if=lambda a: terminal_risk(a.command) is not RiskLevel.LOW,
        # Whole: a cut summary once hid the tail of a command from its approver.
        summarize=lambda a: f"$ {a.command}",
    )


def file_editor_tool(executor: ToolExecutor) -> Tool:
    """Views, creates and edits files in the workspace through the executor."""

    async def run(args: FileEditorArgs) -> ToolResult:
        result = await executor.edit(
            args.command,
            args.path,
            file_text=args.file_text,
            old_str=args.old_str,
            new_str=args.new_str,
            insert_line=args.insert_line,
            view_range=args.view_range,
        )
        if not result.ok:
            return ToolResult(content=result.error or "the edit failed", is_error=True)
        return ToolResult(content=result.output)

    return ModelTool(
        name="file_editor",
        description=(
            "View a file (with line numbers) or directory, create a file, replace a unique "
            "string (str_replace), insert text after a line, or undo the last edit of a file. "
            "Paths are relative to the workspace root."
        ),
        args_model=FileEditorArgs,
        execute=run,
        risk_of=lambda a: edit_risk(a.command, a.path),
        mutates_if=lambda a: a.command != "view",
        summarize=lambda a: f"{a.command} {a.path}",
    )


def think_tool() -> Tool:
    """Lets the model reason in the open without acting."""

    async def run(args: ThinkArgs) -> ToolResult:
        return ToolResult(content="Your thought has been logged.")

    return ModelTool(
        name="think",
        description="Think through the problem step by step; nothing is executed.",
        args_model=ThinkArgs,
        execute=run,
        summarize=lambda a: "think: " + a.thought[:120],
    )


def finish_tool() -> Tool:
    """Ends the run: the task is done."""

    async def run(args: FinishArgs) -> ToolResult:
        return ToolResult(content="Task marked as finished.", signal=Finish(args.message))

    return ModelTool(
        name="finish",
        description="Call when the whole task is done, with a summary of what you did.",
        args_model=FinishArgs,
        execute=run,
        summarize=lambda a: "finish: " + a.message[:120],
    )
