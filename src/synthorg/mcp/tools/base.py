"""What every credentialed tool is: a name, an argument model, and a run in a scope."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from synthorg.mcp.errors import ToolRefusedError
from synthorg.mcp.redact import Redactor
from synthorg.mcp.scope import RunScope
from synthorg.mcp.vault import CredentialVault


@dataclass(slots=True)
class ToolContext:
    """What a tool call may use: the caller's scope and the server's vault and locks."""

    scope: RunScope
    vault: CredentialVault
    redactor: Redactor
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def lock(self, key: str) -> asyncio.Lock:
        """A lock serialising calls on one resource (e.g. one branch's pushes)."""
        return self.locks.setdefault(key, asyncio.Lock())


class CredentialedTool(Protocol):
    """One MCP tool; ``run`` raises ToolRefusedError or ToolFailedError, else returns text."""

    @property
    def name(self) -> str:
        """The tool's MCP name."""
        ...

    @property
    def description(self) -> str:
        """What the model is told the tool does."""
        ...

    @property
    def args_model(self) -> type[BaseModel]:
        """The pydantic model its arguments validate against."""
        ...

    @property
    def read_only(self) -> bool:
        """It changes nothing outside (MCP readOnlyHint)."""
        ...

    @property
    def destructive(self) -> bool:
        """It may overwrite or delete something (MCP destructiveHint)."""
        ...

    @property
    def idempotent(self) -> bool:
        """Calling it again with the same arguments has no further effect (idempotentHint)."""
        ...

    async def run(self, ctx: ToolContext, args: Any) -> str:
        """Do the call; the returned text is shown to the model (after redaction)."""
        ...


def input_schema(tool: CredentialedTool) -> dict[str, Any]:
    """The JSON schema of the tool's arguments as MCP lists it."""
    schema = tool.args_model.model_json_schema()
    schema.pop("title", None)
    return schema


def parse_args(tool: CredentialedTool, arguments: dict[str, Any] | None) -> BaseModel:
    """The validated arguments; a ToolRefusedError listing every problem otherwise."""
    try:
        return tool.args_model.model_validate(arguments or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)
        )
        raise ToolRefusedError(f"invalid arguments for {tool.name}: {problems}") from exc
