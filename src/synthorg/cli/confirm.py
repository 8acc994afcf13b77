"""Answering confirmation requests at the terminal: a real terminal, or a clear refusal."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import TYPE_CHECKING, Protocol

from rich.text import Text

from synthorg.cli.common import console, fail
from synthorg.cli.untrusted import visible

if TYPE_CHECKING:
    from synthorg.domain import PendingAction
    from synthorg.engine import Decision

APPROVER = "cli-user"


class Decides(Protocol):
    """Where a decision goes: the run service here, or a local serve's."""

    async def decide(self, conversation_id: str, decision: Decision) -> None: ...


def require_terminal(policy: str, *, task_from_stdin: bool) -> None:
    """Exit with a clear message when ``--confirm`` could never be answered here."""
    if policy == "never":
        return
    if task_from_stdin:
        fail(
            f"--confirm {policy} reads your answers from stdin, and --task-file - reads the "
            "task from it: pass the task with --task-file PATH instead"
        )
    if not sys.stdin.isatty():
        fail(
            f"--confirm {policy} needs a terminal to answer on, and stdin is not one: run it "
            "in a terminal, use --confirm never, or decide through `synthorg serve`'s API"
        )


async def read_line() -> str | None:
    """One line from stdin without a thread (cancellable); None at end of input."""
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()
    ready = asyncio.Event()
    loop.add_reader(fd, ready.set)
    try:
        await ready.wait()
    finally:
        loop.remove_reader(fd)
    data = os.read(fd, 4096)
    return data.decode(errors="replace") if data else None


async def ask(service: Decides, conversation_id: str, pending: tuple[PendingAction, ...]) -> bool:
    """Ask whether to run ``pending``; deliver the decision. False when stdin ended (no answer)."""
    from synthorg.engine import Decision

    prompt = Text("approve ", style="bold magenta")
    what = (f"{p.action_id} ({p.summary or p.tool_name}, {p.risk} risk)" for p in pending)
    prompt.append(visible(", ".join(what), newlines=False))
    prompt.append("? [y/N] ")
    console.print(prompt, end="")
    answer = await read_line()
    if answer is None:
        console.print("\nno answer: stdin was closed", style="bold yellow")
        return False
    approved = answer.strip().lower() in {"y", "yes"}
    ids = frozenset(p.action_id for p in pending)
    await service.decide(
        conversation_id,
        Decision(
            accepted=ids if approved else frozenset(),
            rejected=frozenset() if approved else ids,
            approver=APPROVER,
            reason="" if approved else "rejected at the terminal",
        ),
    )
    return True
