"""``synthorg run``: one governed run from the terminal, streamed live, landed by the gate."""

from __future__ import annotations

import asyncio
import contextlib
from decimal import Decimal
from pathlib import Path

import typer
from pydantic import ValidationError
from rich.panel import Panel
from rich.table import Table

from synthorg.cli.common import ConfigOption, console, fail, run_async, settings_from
from synthorg.cli.render import event_line
from synthorg.cli.signals import treat_termination_as_interrupt
from synthorg.domain import (
    Complexity,
    ConfirmationPolicy,
    ConversationRecord,
    ExecutionResult,
    Task,
    TerminationReason,
    new_id,
)
from synthorg.engine import Decision
from synthorg.service.boot import Components, boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.options import RunOptions
from synthorg.settings import Settings


def run(
    task: str = typer.Argument("", help="What the agent should do (omit with --resume)."),
    repo: Path = typer.Option(Path("."), "--repo", "-r", help="The git repository to work on."),
    loop: str | None = typer.Option(
        None, help="Force a loop: react, plan_execute, hybrid, openhands."
    ),
    model: str | None = typer.Option(None, help="Model id (default from [run] config)."),
    provider: str | None = typer.Option(None, help="Provider serving the model."),
    max_turns: int | None = typer.Option(None, min=1, help="Turn cap."),
    budget: Decimal | None = typer.Option(None, min=0, help="Hard cost ceiling in USD."),
    complexity: Complexity = typer.Option(Complexity.MODERATE, help="Task complexity (selection)."),
    project: str = typer.Option("default", help="Project id (scopes credentialed tools)."),
    confirm: ConfirmationPolicy = typer.Option(
        ConfirmationPolicy.NEVER, help="When risky actions wait for your approval."
    ),
    no_worktree: bool = typer.Option(False, "--no-worktree", help="Work in the repo directly."),
    resume: str | None = typer.Option(None, help="Continue this conversation id."),
    message: str | None = typer.Option(None, help="With --resume: a message for the agent."),
    config: Path | None = ConfigOption,
) -> None:
    """Run a task on a repository: worktree, gateway, sandbox, loop, commit gate."""
    settings = settings_from(config)
    if resume is None and not task.strip():
        fail('give a task: synthorg run "fix the failing test" --repo PATH (or --resume ID)')
    try:
        options = RunOptions(
            loop=loop,
            model=model,
            provider=provider,
            max_turns=max_turns,
            budget_usd=budget,
            confirmation_policy=confirm,
            worktree=not no_worktree,
        )
    except ValidationError as exc:
        fail("; ".join(f"--{e['loc'][0]}: {e['msg']}" for e in exc.errors()))
    task_model = None
    if resume is None:
        task_model = Task(
            id=new_id("task"),
            project_id=project,
            prompt=task,
            complexity=complexity,
            repository=str(repo.expanduser().resolve()),
        )
    result, _ = run_async(execute_run(settings, task_model, options, resume, message))
    raise typer.Exit(0 if result.termination_reason is TerminationReason.COMPLETED else 1)


async def execute_run(
    settings: Settings,
    task: Task | None,
    options: RunOptions,
    resume: str | None,
    message: str | None,
) -> tuple[ExecutionResult, ConversationRecord]:
    """Create (or resume) a conversation, run it with live output, print the summary."""
    treat_termination_as_interrupt()
    async with boot(
        settings, registry=default_registry(), provisioner=default_provisioner
    ) as components:
        service = components.service
        if task is not None:
            record = await service.create(task, options)
        else:
            assert resume is not None
            record = await components.store.get_conversation(resume)
        _print_header(record, components)
        after = await components.store.last_seq(record.id)
        await service.start(record.id, message=message)
        printer = asyncio.create_task(_print_events(components, record.id, after))
        try:
            result = await service.wait(record.id)
        except asyncio.CancelledError:
            console.print("\n[bold yellow]cancelling...[/]")
            await service.cancel(record.id, by="cli")
            result = await service.wait(record.id)
        finally:
            await asyncio.sleep(0.3)  # let the tail print the last events
            printer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await printer
        assert result is not None
        final = await components.store.get_conversation(record.id)
        _print_summary(final, result)
        return result, final


def _print_header(record: ConversationRecord, components: Components) -> None:
    scripted = record.provider == "scripted" or record.model.startswith("scripted")
    model = f"{record.provider}/{record.model}" + (
        " [bold magenta](SCRIPTED demo model)[/]" if scripted else ""
    )
    workspace = record.workspace
    console.print(
        Panel.fit(
            f"conversation [bold]{record.id}[/]\n"
            f"task: {record.task.title}\n"
            f"loop: [bold]{record.loop_type}[/]   model: {model}\n"
            f"workspace: {workspace.path if workspace else '?'}"
            f"   branch: {(workspace.branch if workspace else None) or '(none)'}\n"
            f"sandbox: {components.sandbox.name}   budget: "
            f"{'$' + str(record.budget_usd) if record.budget_usd is not None else 'none'}",
            title="synthorg run",
        )
    )


async def _print_events(components: Components, conversation_id: str, after: int) -> None:
    service = components.service
    async for stored in components.store.tail(conversation_id, after=after):
        console.print(event_line(stored))
        event = stored.event
        if event.kind == "confirmation_request":
            await _ask(service, conversation_id, [p.action_id for p in event.pending])


async def _ask(service: object, conversation_id: str, action_ids: list[str]) -> None:
    from synthorg.service.runs import LocalRunService

    assert isinstance(service, LocalRunService)
    answer = await asyncio.to_thread(console.input, f"approve {', '.join(action_ids)}? [y/N] ")
    approved = answer.strip().lower() in {"y", "yes"}
    ids = frozenset(action_ids)
    await service.decide(
        conversation_id,
        Decision(
            accepted=ids if approved else frozenset(),
            rejected=frozenset() if approved else ids,
            approver="cli-user",
            reason="" if approved else "rejected at the terminal",
        ),
    )


def _diffstat(repo: str, sha: str) -> str:
    # Asked of the user's repository (the commit is in its object store), never of the
    # worktree, whose .git the agent could have rewritten; through the hardened git runner.
    from synthorg.workspace.git import run_git_sync

    args = ["show", "--stat", "--no-textconv", "--no-ext-diff", "--format=", sha]
    return run_git_sync(args, Path(repo).expanduser(), check=False).text.rstrip()


def _print_summary(record: ConversationRecord, result: ExecutionResult) -> None:
    table = Table(show_header=False, title="result")
    reason = result.termination_reason.value
    color = "green" if result.termination_reason is TerminationReason.COMPLETED else "red"
    table.add_row("termination", f"[bold {color}]{reason}[/]")
    table.add_row("status", record.status.value)
    table.add_row("branch", result.branch or "(none)")
    table.add_row("commit", result.commit_sha or "(no commit)")
    table.add_row("turns", str(len(result.turns)))
    table.add_row("tokens", f"{result.usage.tokens_in} in / {result.usage.tokens_out} out")
    table.add_row("cost", f"${result.usage.cost_usd:.4f}")
    if result.error or record.error:
        table.add_row("error", result.error or record.error or "")
    console.print(table)
    if result.commit_sha and record.workspace is not None:
        console.print(_diffstat(record.task.repository, result.commit_sha))
    console.print(f"conversation: {record.id}  (synthorg conversations events {record.id})")
