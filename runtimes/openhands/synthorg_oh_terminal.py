"""The agent's terminal, started before the run spec is read: the SDK's own TerminalExecutor.

Why: the SDK's subprocess terminal sleeps a fixed 1.0 s after configuring bash
(``SubprocessTerminal.initialize``); started when the agent resolves its tools, on the first
``send_message``, that second lies between the spec and the first model request. The host
names the workspace's path inside the sandbox at launch (argv), so the same executor the SDK
would make starts there early: while a pooled sandbox waits for its run, or while a cold one
imports the rest of the SDK. The SDK takes it through its public extension points
(``TerminalTool.create(executor=...)``, ``register_tool`` with a tool instance).

It is used only when the spec asks for what was started (the subprocess backend at that
path); otherwise it is closed and the SDK starts its own, as before. The shell's cwd is the
workspace mount itself, which a pooled sandbox keeps when the host fills it (the quota image
is the mount before and after), and its environment is the entrypoint's, set before the
import and never changed by the spec. The process serves one run, so the terminal does too.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

BACKEND = "subprocess"
"""The only backend started early (the host's default); another is the SDK's to start."""


class EarlyTerminal:
    """A TerminalExecutor starting on a thread at a known working dir."""

    def __init__(self, working_dir: str) -> None:
        self.working_dir = working_dir
        self._executor: Any = None
        self._thread = threading.Thread(target=self._start, name="early-terminal", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        from openhands.tools.terminal import TerminalExecutor

        try:
            self._executor = TerminalExecutor(working_dir=self.working_dir, terminal_type=BACKEND)
        except Exception as exc:  # the SDK starts its own, which reports the failure itself
            print(f"early terminal not started: {exc!r}", file=sys.stderr)

    def take(self, workspace_path: str, terminal_type: str | None) -> Any:
        """The started executor if the spec wants exactly it, else None (and it is closed)."""
        self._thread.join()
        executor, self._executor = self._executor, None
        if executor is None:
            return None
        if workspace_path == self.working_dir and terminal_type == BACKEND:
            return executor
        executor.close()
        return None


def adopt(executor: Any, state: Any) -> None:
    """Have the conversation's agent resolve its terminal tool to ``executor``.

    What ``TerminalTool.create`` does with the conversation's state, but for the executor it
    would otherwise start: the same tool, registered under the same name as a fixed instance
    (the agent's tool spec then carries no params: the instance already has them).
    """
    from openhands.sdk.tool import register_tool
    from openhands.tools.terminal import TerminalTool

    # The only state-dependent argument of the executor: where long outputs are saved.
    executor.full_output_save_dir = state.env_observation_persistence_dir
    (tool,) = TerminalTool.create(state, executor=executor)
    register_tool(TerminalTool.name, tool)
