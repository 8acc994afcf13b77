"""The tool abstraction: a schema shown to the model, validation, risk, and how it runs."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from synthorg.domain import RiskLevel
from synthorg.errors import UsageError


@dataclass(frozen=True)
class Finish:
    """The agent declared the task done."""

    message: str


@dataclass(frozen=True)
class PlanWritten:
    """The agent wrote (or revised) its plan."""

    steps: tuple[str, ...]


@dataclass(frozen=True)
class StepCompleted:
    """The agent closed the current plan step."""

    done: bool
    summary: str


Signal = Finish | PlanWritten | StepCompleted
"""What a control tool tells the loop, beyond its observation."""


@dataclass(frozen=True)
class ToolResult:
    """What running a tool produced: the observation shown to the model, and any signal."""

    content: str
    is_error: bool = False
    exit_code: int | None = None
    signal: Signal | None = None


class ToolArgumentError(UsageError):
    """The model's arguments do not fit the tool's schema; the message is for the model."""


class Tool(Protocol):
    """A tool the model can call."""

    @property
    def name(self) -> str:
        """The name the model calls it by."""
        ...

    def spec(self) -> dict[str, Any]:
        """The OpenAI tools-format definition."""
        ...

    def parse(self, arguments: dict[str, Any]) -> Any:
        """Validated arguments, or ToolArgumentError saying what is wrong."""
        ...

    def risk(self, args: Any) -> RiskLevel:
        """Risk of running it with ``args`` (drives confirmation)."""
        ...

    def mutates(self, args: Any) -> bool:
        """Whether it may change the workspace (a checkpoint is taken before it runs)."""
        ...

    def summary(self, args: Any) -> str:
        """One line for people."""
        ...

    async def run(self, args: Any) -> ToolResult:
        """Execute it."""
        ...


def describe_validation_error(tool: str, exc: ValidationError) -> str:
    """A compact, model-readable account of what is wrong with the arguments."""
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg']}")
    return f"invalid arguments for {tool}: " + "; ".join(problems)


@dataclass(frozen=True)
class ModelTool[A: BaseModel]:
    """A tool whose arguments are a pydantic model (the schema is generated from it)."""

    name: str
    description: str
    args_model: type[A]
    execute: Callable[[A], Awaitable[ToolResult]]
    risk_of: Callable[[A], RiskLevel] = field(default=lambda _: RiskLevel.LOW)
    mutates_if: Callable[[A], bool] = field(default=lambda _: False)
    summarize: Callable[[A], str] | None = None

    def spec(self) -> dict[str, Any]:
        schema = json.loads(_parameters_json(self.args_model))  # a fresh copy per offer
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": schema},
        }

    def parse(self, arguments: dict[str, Any]) -> A:
        try:
            return self.args_model.model_validate(arguments, strict=True)
        except ValidationError as exc:
            raise ToolArgumentError(describe_validation_error(self.name, exc)) from exc

    def risk(self, args: A) -> RiskLevel:
        return self.risk_of(args)

    def mutates(self, args: A) -> bool:
        return self.mutates_if(args)

    def summary(self, args: A) -> str:
        if self.summarize is not None:
            return self.summarize(args)
        return f"{self.name} {json.dumps(args.model_dump(exclude_none=True))[:200]}"

    async def run(self, args: A) -> ToolResult:
        return await self.execute(args)


@functools.cache
def _parameters_json(args_model: type[BaseModel]) -> str:
    """The model's JSON schema without titles, generated once per class (pydantic's schema
    generation cost about a millisecond per tool, paid by every tool set of every turn)."""
    schema = args_model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return json.dumps(schema)


@dataclass(frozen=True)
class ParsedCall:
    """A requested call checked against the tool set: the tool and arguments, or an error."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    tool: Tool | None = None
    args: Any = None
    error: str | None = None

    @property
    def valid(self) -> bool:
        """Whether the call can run."""
        return self.error is None

    def risk(self) -> RiskLevel:
        """The call's risk (UNKNOWN for an invalid call, which never runs)."""
        return (
            self.tool.risk(self.args) if self.tool is not None and self.valid else RiskLevel.UNKNOWN
        )

    def summary(self) -> str:
        """One line for people."""
        if self.tool is not None and self.valid:
            return self.tool.summary(self.args)
        return f"{self.name} (invalid call)"


class ToolSet:
    """The tools offered in a turn; parses the model's calls against their schemas."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self._tools[tool.name] = tool
        self._specs = [tool.spec() for tool in self._tools.values()]

    @property
    def names(self) -> tuple[str, ...]:
        """Tool names, in offer order."""
        return tuple(self._tools)

    @property
    def specs(self) -> list[dict[str, Any]]:
        """OpenAI tools-format definitions."""
        return self._specs

    def with_tools(self, *extra: Tool) -> ToolSet:
        """This set plus ``extra`` (a later tool of the same name replaces an earlier one)."""
        return ToolSet([*self._tools.values(), *extra])

    def without(self, *names: str) -> ToolSet:
        """This set minus the named tools."""
        return ToolSet(t for n, t in self._tools.items() if n not in names)

    def parse(self, call_id: str, name: str, raw_arguments: str) -> ParsedCall:
        """Check one call; every failure comes back as a ParsedCall with an error."""
        arguments, error = _decode(raw_arguments)
        tool = self._tools.get(name)
        if tool is None:
            error = f"unknown tool {name!r}; available tools: {', '.join(self._tools)}"
            return ParsedCall(call_id, name or "unknown", arguments, error=error)
        if error is not None:
            return ParsedCall(call_id, name, arguments, tool=tool, error=f"{name}: {error}")
        try:
            args = tool.parse(arguments)
        except ToolArgumentError as exc:
            return ParsedCall(call_id, name, arguments, tool=tool, error=str(exc))
        return ParsedCall(call_id, name, arguments, tool=tool, args=args)


def _decode(raw: str) -> tuple[dict[str, Any], str | None]:
    if not raw.strip():
        return {}, None  # no arguments at all is an empty object, as OpenAI clients treat it
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return {"raw_arguments": raw[:2000]}, f"arguments are not valid JSON ({exc})"
    if not isinstance(value, Mapping):
        return {"raw_arguments": raw[:2000]}, "arguments must be a JSON object"
    return dict(value), None
