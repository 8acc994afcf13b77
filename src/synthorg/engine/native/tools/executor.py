"""The ToolExecutor boundary: where terminal commands and file edits run (the sandbox toolbox)."""

from __future__ import annotations

from typing import Protocol

from synthorg.sandbox.toolbox_client import CommandResult, EditCommand, EditResult


class ToolExecutor(Protocol):
    """Runs commands and edits in the workspace; ``synthorg.sandbox.ToolboxClient`` is one."""

    @property
    def workspace(self) -> str:
        """The workspace path as commands see it."""
        ...

    async def run(
        self, command: str, timeout_s: float = 120.0, max_output: int = 100_000
    ) -> CommandResult:
        """Run ``bash -c command`` in the workspace; a timeout kills its process group."""
        ...

    async def edit(
        self,
        command: EditCommand,
        path: str,
        *,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
    ) -> EditResult:
        """One file-editor operation; refusals come back as ok=False with an error."""
        ...
