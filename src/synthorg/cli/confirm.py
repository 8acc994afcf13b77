"""Answering confirmation requests at the terminal: a real terminal, or a clear refusal."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import TYPE_CHECKING, Protocol

from rich.text import Text

from synthorg.cli.common import console, fail
from synthorg.cli.untrusted import hidden_count, visible

if TYPE_CHECKING:
    from collections.abc import Iterator

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

    prompt = Text()
    for p in pending:
        prompt.append("approve ", style="bold magenta")
        prompt.append(visible(f"{p.action_id} ({p.tool_name}, {p.risk} risk)", newlines=False))
        prompt.append("\n")
        prompt.append_text(action_text(p))
    prompt.append("? [y/N] ")
    # soft_wrap: the terminal wraps, rich neither folds nor trims a padded command.
    console.print(prompt, end="", soft_wrap=True)
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


def _lines(label: str, text: str, sign: str = "│") -> Iterator[str]:
    yield f"  {label}:"
    for line in text.split("\n"):
        yield f"  {sign} {line}"


def _action_lines(p: PendingAction) -> Iterator[str]:
    """The complete action, as the console's approval box shows it (web/static/action.js)."""
    args = dict(p.arguments)
    if not args:
        yield f"  {p.summary or p.tool_name}"
        return
    if p.tool_name == "terminal" and isinstance(args.get("command"), str):
        yield f"  $ {args.pop('command')}"
    elif p.tool_name == "file_editor" and isinstance(args.get("command"), str):
        yield f"  {args.pop('command')} {args.pop('path', '')}"
        if isinstance(args.get("file_text"), str):
            yield from _lines("content", args.pop("file_text"))
        if isinstance(args.get("old_str"), str):
            yield from _lines("replace", args.pop("old_str"), "-")
        if isinstance(args.get("new_str"), str):
            yield from _lines("with", args.pop("new_str"), "+")
    for key, value in args.items():  # every other argument: nothing that will run is left out
        text = value if isinstance(value, str) else json.dumps(value, indent=2)
        yield from _lines(key, text)


def action_text(p: PendingAction) -> Text:
    """Every argument of ``p`` with hidden characters escaped, flagged when there are any."""
    raw = "\n".join(_action_lines(p))
    out = Text(visible(raw) + "\n")
    count = hidden_count(raw)
    if count:
        out.append(
            f"  ⚠ {count} invisible, bidirectional or control character"
            f"{'' if count == 1 else 's'}: shown as \\x/\\u escapes\n",
            style="bold red",
        )
    return out
