"""``synthorg run``: one governed run from the terminal, streamed live, landed by the gate."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import typer
from rich.text import Text

from synthorg.cli.common import ConfigOption, console, fail, run_async, settings_from
from synthorg.cli.signals import interrupts_ignored, terminate_like_interrupt
from synthorg.cli.untrusted import visible
from synthorg.domain import Complexity, ConfirmationPolicy
from synthorg.errors import SynthOrgError

if TYPE_CHECKING:
    from synthorg.domain import ConversationRecord, ExecutionResult, StoredEvent, Task
    from synthorg.engine.control import Decision
    from synthorg.localsock import Found
    from synthorg.service.options import RunOptions
    from synthorg.settings import Settings

ENGINES = ("auto", "embedded", "serve", "temporal")


def run(
    task: str = typer.Argument("", help="What the agent should do (omit with --resume)."),
    task_file: Path | None = typer.Option(
        None,
        "--task-file",
        "-f",
        help="Read the task from this file ('-': stdin), for tasks too long for an argument.",
        allow_dash=True,
    ),
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
        ConfirmationPolicy.NEVER, help="When risky actions wait for your approval (needs a TTY)."
    ),
    no_worktree: bool = typer.Option(False, "--no-worktree", help="Work in the repo directly."),
    resume: str | None = typer.Option(None, help="Continue this conversation id."),
    message: str | None = typer.Option(None, help="With --resume: a message for the agent."),
    engine: str | None = typer.Option(
        None,
        help="auto (this data dir's running `synthorg serve` if one answers, else this "
        "process), embedded (this process), serve (the running serve, or fail), temporal "
        "(on workers). Default: auto, or temporal when [distributed] engine says so.",
    ),
    config: Path | None = ConfigOption,
) -> None:
    """Run a task on a repository: worktree, gateway, sandbox, loop, commit gate."""
    from pydantic import ValidationError

    from synthorg.domain import Task, TerminationReason, new_id
    from synthorg.service.options import RunOptions
    from synthorg.workspace.remote import project_name

    settings = settings_from(config)
    from_stdin = task_file is not None and str(task_file) == "-"
    if task_file is not None:
        if task.strip():
            fail("give the task either as an argument or with --task-file, not both")
        task = _read_task(task_file)
    if resume is None and not task.strip():
        fail('give a task: synthorg run "fix the failing test" --repo PATH (or --resume ID)')
    require_answers(confirm, from_stdin)
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
            # ``project:NAME`` names a configured remote project, not a path.
            repository=str(repo)
            if project_name(str(repo)) is not None
            else str(repo.expanduser().resolve()),
        )
    engine = _engine(settings, engine)
    if engine == "temporal":
        from synthorg.cli.run_temporal import execute_temporal_run

        with terminate_like_interrupt():
            outcome = run_async(
                execute_temporal_run(settings, task_model, options, resume, message)
            )
        raise typer.Exit(0 if outcome.get("termination_reason") == "completed" else 1)
    result = None
    if engine != "embedded":
        found = _local_serve(settings, required=engine == "serve")
        if found is not None:
            with terminate_like_interrupt():
                result = run_async(
                    execute_via_serve(
                        found, task_model, options, resume, message, required=engine == "serve"
                    )
                )
    if result is None:
        with terminate_like_interrupt():
            result, _ = run_async(execute_run(settings, task_model, options, resume, message))
    raise typer.Exit(0 if result.termination_reason is TerminationReason.COMPLETED else 1)


def _engine(settings: Settings, chosen: str | None) -> str:
    """The engine for this run: the option, else auto (or temporal: ``[distributed]``)."""
    from synthorg.distributed.config import distributed_config

    configured = distributed_config(settings).engine
    engine = chosen or ("temporal" if configured == "temporal" else "auto")
    if engine not in ENGINES:
        fail(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    return engine


def _local_serve(settings: Settings, *, required: bool) -> Found | None:
    """The serve of this data dir to hand the run to; None (said why) to run here."""
    from synthorg.localsock import find_serve

    found, why = find_serve(settings.home)
    if found is None and required:
        fail(why or "no `synthorg serve` runs for this data dir (start one, or --engine auto)")
    if why is not None:
        _running_here(why)
    return found


def _running_here(why: str) -> None:
    """The one line saying the run goes on in this process instead of a serve."""
    console.print(Text(f"{visible(why)}: running in this process"), style="yellow")


def require_answers(confirm: ConfirmationPolicy, task_from_stdin: bool) -> None:
    """Fail fast when ``--confirm`` could never be answered from this terminal."""
    from synthorg.cli.confirm import require_terminal

    require_terminal(confirm.value, task_from_stdin=task_from_stdin)


def _read_task(path: Path) -> str:
    try:
        if str(path) == "-":
            return sys.stdin.read()
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read the task from {path}: {exc}")


async def execute_run(
    settings: Settings,
    task: Task | None,
    options: RunOptions,
    resume: str | None,
    message: str | None,
) -> tuple[ExecutionResult, ConversationRecord]:
    """Create (or resume) a conversation, run it with live output, print the summary."""
    from synthorg.service.boot import boot
    from synthorg.service.loops import default_provisioner, default_registry

    with contextlib.ExitStack() as after_the_run:
        async with boot(
            settings,
            registry=default_registry(),
            provisioner=default_provisioner,
            # Started at boot, the sandbox's SDK import overlaps the rest of the start-up.
            openhands_pool="once" if options.loop == "openhands" else "none",
        ) as components:
            here = _Engine(
                components.service,
                components.store,
                components.sandbox.name,
                "embedded (this process)",
            )
            return await _run_and_report(here, task, options, resume, message, after_the_run)


async def execute_via_serve(
    found: Found,
    task: Task | None,
    options: RunOptions,
    resume: str | None,
    message: str | None,
    *,
    required: bool,
) -> ExecutionResult | None:
    """The run handed to the local serve, followed here as ``execute_run`` follows its own;
    None (said why) when the serve refused it before anything started and it may run here."""
    from synthorg.cli.local_serve import LocalServe
    from synthorg.errors import BoundaryError
    from synthorg.service.repositories import RepositoryRefused

    with contextlib.ExitStack() as after_the_run:
        async with LocalServe.client(found) as client:
            serve = LocalServe(client, found)
            try:
                hello = await serve.hello()
            except BoundaryError as exc:
                if required:
                    raise
                _running_here(str(exc))
                return None
            where = f"via serve pid {found.peer.pid} ({found.path})"
            try:
                # Created first: a refusal of the serve's own rules leaves nothing behind.
                record = None if task is None else await serve.create(task, options)
            except RepositoryRefused as exc:
                if required:
                    raise
                _running_here(f"serve pid {found.peer.pid} refuses this repository ({exc})")
                return None
            engine = _Engine(serve, serve, str(hello["sandbox"]), where)
            result, _ = await _run_and_report(
                engine, record or task, options, resume, message, after_the_run
            )
            return result


class _Controls(Protocol):
    """What the terminal asks of a run service (the embedded one, or a serve's)."""

    async def create(self, task: Task, options: RunOptions) -> ConversationRecord: ...
    async def start(self, conversation_id: str, *, message: str | None = None) -> None: ...
    async def wait(self, conversation_id: str) -> ExecutionResult | None: ...
    async def cancel(self, conversation_id: str, *, by: str) -> None: ...
    async def decide(self, conversation_id: str, decision: Decision) -> None: ...


class _Log(Protocol):
    """What the terminal reads of the store (its own, or a serve's)."""

    async def get_conversation(self, conversation_id: str) -> ConversationRecord: ...
    async def last_seq(self, conversation_id: str) -> int: ...
    def tail(self, conversation_id: str, *, after: int = 0) -> AsyncIterator[StoredEvent]: ...


@dataclass(frozen=True, slots=True)
class _Engine:
    """Where the run executes, as the terminal drives and shows it."""

    service: _Controls
    store: _Log
    sandbox: str
    where: str
    """Shown in the header: "embedded (this process)" or "via serve pid N (socket)"."""


async def _run_and_report(
    engine: _Engine,
    task: Task | ConversationRecord | None,
    options: RunOptions,
    resume: str | None,
    message: str | None,
    after_the_run: contextlib.ExitStack,
) -> tuple[ExecutionResult, ConversationRecord]:
    """The run in the foreground: header, live events, the summary. ``task``: the task to
    create a conversation for, or the conversation already created for it."""
    from synthorg.domain import ConversationRecord

    service = engine.service
    if isinstance(task, ConversationRecord):
        record = task
    elif task is not None:
        record = await service.create(task, options)
    else:
        assert resume is not None
        record = await engine.store.get_conversation(resume)
    _print_header(record, engine)
    after = await engine.store.last_seq(record.id)
    try:
        await service.start(record.id, message=message)
    except asyncio.CancelledError:
        # Ctrl-C while the start was on its way: on a serve the run may have begun anyway.
        with contextlib.suppress(SynthOrgError):
            await service.cancel(record.id, by="cli")
        raise
    printer = _Printer(engine, record.id)
    printing = asyncio.create_task(printer.follow(after))
    try:
        result = await service.wait(record.id)
        # The run has ended and is recorded: what is left (the last lines, the summary, the
        # bounded teardown of the embedded servers) an interrupt would only turn into a
        # traceback.
        after_the_run.enter_context(interrupts_ignored())
    except asyncio.CancelledError:
        console.print("\ncancelling...", style="bold yellow")
        await service.cancel(record.id, by="cli")
        result = await service.wait(record.id)
        after_the_run.enter_context(interrupts_ignored())
    finally:
        await printer.catch_up(printing)
    assert result is not None
    final = await engine.store.get_conversation(record.id)
    _print_summary(final, result)
    return result, final


class _Printer:
    """Prints the live tail and answers confirmation requests until the run's last event."""

    def __init__(self, engine: _Engine, conversation_id: str) -> None:
        self._engine = engine
        self._id = conversation_id
        self._printed = 0
        self._last: int | None = None
        self._caught_up = asyncio.Event()

    async def follow(self, after: int) -> None:
        from synthorg.cli.confirm import ask
        from synthorg.cli.render import event_line

        service = self._engine.service
        async for stored in self._engine.store.tail(self._id, after=after):
            console.print(event_line(stored))
            self._printed = stored.seq
            if self._last is not None and self._printed >= self._last:
                break
            event = stored.event
            if event.kind == "confirmation_request" and not await ask(
                service, self._id, event.pending
            ):
                # Nobody can answer: end the run (resumable) rather than wait forever.
                with contextlib.suppress(SynthOrgError):
                    await service.cancel(self._id, by="cli (stdin closed at a confirmation)")
        self._caught_up.set()

    async def catch_up(self, printing: asyncio.Task[None]) -> None:
        """Let the tail print up to the last stored event, then stop it (always: a store that
        went away must not leave the tail's failure to surface later as a traceback)."""
        try:
            self._last = await self._engine.store.last_seq(self._id)
            if self._printed < self._last and not printing.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._caught_up.wait(), timeout=10)
        finally:
            printing.cancel()
            # The store's failure is reported once, by the run's own path.
            with contextlib.suppress(asyncio.CancelledError, SynthOrgError):
                await printing


def _print_header(record: ConversationRecord, engine: _Engine) -> None:
    from rich.panel import Panel

    scripted = record.provider == "scripted" or record.model.startswith("scripted")
    workspace = record.workspace
    budget = f"${record.budget_usd}" if record.budget_usd is not None else "none"
    body = Text()
    body.append("conversation ")
    body.append(record.id, style="bold")
    body.append(f"\ntask: {visible(record.task.title, newlines=False)}")
    body.append("\nloop: ")
    body.append(visible(record.loop_type), style="bold")
    body.append(f"   model: {visible(f'{record.provider}/{record.model}', newlines=False)}")
    if scripted:
        body.append(" (SCRIPTED demo model)", style="bold magenta")
    path = visible(workspace.path if workspace else "?", newlines=False)
    branch = visible((workspace.branch if workspace else None) or "(none)", newlines=False)
    body.append(f"\nworkspace: {path}   branch: {branch}")
    body.append(f"\nsandbox: {visible(engine.sandbox)}   budget: {budget}")
    body.append(f"\nengine: {visible(engine.where, newlines=False)}")
    console.print(Panel.fit(body, title="synthorg run"))


_STAT_FILES = 50
_STAT_CHARS = 16_384  # names can be long: the cap on what is rendered, whatever git printed


def _diffstat(repo: str, sha: str) -> str:
    # Asked of the user's repository (the commit is in its object store), never of the
    # worktree, whose .git the agent could have rewritten; through the hardened git runner.
    from synthorg.workspace.git import is_object_id, run_git_sync
    from synthorg.workspace.remote import project_name

    if project_name(repo) is not None:
        return ""  # on the project's remote (and this process's mirror), not a local path
    if not is_object_id(sha):  # from a serve's answer too: never an option or a rev range
        return ""
    # The first files and the totals: a run's 200,000 files made a 3.4 MB diffstat that
    # rich took ~4 minutes to render.
    args = ["show", f"--stat-count={_STAT_FILES}", "--no-textconv", "--no-ext-diff", "--format=",
            sha]  # fmt: skip
    text = run_git_sync(args, Path(repo).expanduser(), check=False).text.rstrip()
    return visible(text[:_STAT_CHARS])


def _print_summary(record: ConversationRecord, result: ExecutionResult) -> None:
    from rich.table import Table

    from synthorg.domain import TerminationReason

    table = Table(show_header=False, title="result")
    reason = result.termination_reason.value
    color = "green" if result.termination_reason is TerminationReason.COMPLETED else "red"
    rows = {
        "status": record.status.value,
        "branch": result.branch or "(none)",
        "commit": result.commit_sha or "(no commit)",
        # The record counts every turn of the conversation, including a cancelled run's.
        "turns": str(max(record.turns, len(result.turns))),
        "tokens": f"{result.usage.tokens_in} in / {result.usage.tokens_out} out",
        "cost": f"${result.usage.cost_usd:.4f}",
    }
    table.add_row("termination", Text(reason, style=f"bold {color}"))
    for key, value in rows.items():
        table.add_row(key, Text(visible(value, newlines=False)))
    if result.error or record.error:
        table.add_row("error", Text(visible(result.error or record.error or "")))
    console.print(table)
    if result.commit_sha and record.workspace is not None:
        console.print(Text(_diffstat(record.task.repository, result.commit_sha)))
    console.print(Text(f"conversation: {record.id}  (synthorg conversations events {record.id})"))
