"""``synthorg conversations``: list, show and follow conversations in the store."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from synthorg.cli.common import ConfigOption, console, run_async, settings_from
from synthorg.cli.render import cells, conversation_summary, event_line
from synthorg.domain import SEQ_MAX, ConversationStatus

app = typer.Typer(help="Inspect conversations and their event logs.", no_args_is_help=True)


@app.command("list")
def list_(
    status: ConversationStatus | None = typer.Option(None, help="Only this status."),
    project: str | None = typer.Option(None, help="Only this project id."),
    limit: int = typer.Option(20, min=1, max=500, help="Page size."),
    cursor: str | None = typer.Option(None, help="Cursor from the previous page."),
    search: str | None = typer.Option(
        None, help="Only conversations whose task text contains this (ASCII case-insensitive)."
    ),
    config: Path | None = ConfigOption,
) -> None:
    """Conversations, newest first (a dead owner's run shown as interrupted, reconciled)."""
    from synthorg.service.ownership import reconciled_page
    from synthorg.service.store import opened_store

    settings = settings_from(config)

    async def go() -> None:
        async with opened_store(settings) as store:
            page = await store.list_conversations(
                status=status, project_id=project, limit=limit, cursor=cursor, search=search
            )
            page = await reconciled_page(store, page)
        columns = ("id", "status", "loop", "task", "turns", "cost", "created")
        table = Table(*columns)
        for record in page.items:
            table.add_row(*cells(conversation_summary(record), columns))
        console.print(table)
        if page.next_cursor:
            console.print(Text(f"next page: --cursor {page.next_cursor}", style="dim"))

    run_async(go())


@app.command()
def show(conversation_id: str, config: Path | None = ConfigOption) -> None:
    """One conversation's base state (a dead owner's run reconciled first)."""
    from synthorg.service.ownership import reconciled
    from synthorg.service.store import opened_store

    settings = settings_from(config)

    async def go() -> None:
        async with opened_store(settings) as store:
            record = await reconciled(store, await store.get_conversation(conversation_id))
        table = Table(show_header=False)
        for key, value in conversation_summary(record).items():
            table.add_row(key, Text(value))
        console.print(table)

    run_async(go())


@app.command()
def tree(conversation_id: str, config: Path | None = ConfigOption) -> None:
    """The conversation and the runs it delegated: status, loop and ledger spend of each."""
    from rich.tree import Tree

    from synthorg.cli.untrusted import visible
    from synthorg.service.store import opened_store
    from synthorg.service.tree import RunNode, run_tree

    settings = settings_from(config)

    def label(node: RunNode) -> Text:
        reason = node.termination_reason.value if node.termination_reason else "-"
        title = visible(node.title, newlines=False)
        return Text(
            f"{node.id}  {node.status.value} ({reason})  {node.loop_type}  "
            f"${node.cost_usd} own / ${node.tree_cost_usd} tree  {title}"
        )

    def grow(branch: Tree, node: RunNode) -> None:
        for child in node.children:
            grow(branch.add(label(child)), child)

    async def go() -> None:
        async with opened_store(settings) as store:
            root = await run_tree(store, conversation_id)
        top = Tree(label(root))
        grow(top, root)
        console.print(top)

    run_async(go())


@app.command()
def events(
    conversation_id: str,
    after: int = typer.Option(
        0, min=0, max=SEQ_MAX, help="Only events after this sequence number."
    ),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events."),
    config: Path | None = ConfigOption,
) -> None:
    """A conversation's events; with --follow, the live tail until Ctrl-C."""
    from synthorg.service.store import opened_store

    settings = settings_from(config)

    async def go() -> None:
        async with opened_store(settings) as store:
            await store.get_conversation(conversation_id)
            if follow:
                async for stored in store.tail(conversation_id, after=after):
                    console.print(event_line(stored))
                return
            cursor = after
            while True:
                page = await store.history(conversation_id, after=cursor, limit=500)
                for stored in page:
                    console.print(event_line(stored))
                if len(page) < 500:
                    return
                cursor = page[-1].seq

    try:
        run_async(go())
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
