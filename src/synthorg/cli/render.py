"""Rendering conversations and events for people in a terminal.

Every field of an event or a conversation may come from the agent, the model or the task's
author: all of it goes through :func:`synthorg.cli.untrusted.visible`, and the lines of a
multi-line field are indented under a gutter, so output can neither carry escape sequences
nor draw a line that looks like one of ours (a fake ``✔ finished``).
"""

from __future__ import annotations

from rich.text import Text

from synthorg.cli.untrusted import visible, without_cursor_moves
from synthorg.domain import ConversationRecord, StoredEvent

_MAX_CONTENT = 400
_GUTTER = "      │ "


def _short(text: str, limit: int = _MAX_CONTENT) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(text: str, limit: int = 200) -> str:
    return visible(_short(text, limit), newlines=False)


def _block(text: str, limit: int = _MAX_CONTENT) -> str:
    """Untrusted multi-line text, each line under the gutter."""
    lines = visible(_short(text, limit)).split("\n")
    return lines[0] + "".join(f"\n{_GUTTER}{line}" for line in lines[1:])


def event_line(stored: StoredEvent) -> Text:
    """One event as one or a few lines of styled text."""
    event = stored.event
    head = Text(f"{stored.seq:>5} ", style="dim")
    match event.kind:
        case "message":
            head.append(f"{event.role}: ", style="bold cyan")
            head.append(_block(event.text))
        case "action":
            head.append(f"▶ {_one_line(event.tool_name, 60)} ", style="bold yellow")
            head.append(_one_line(event.summary or str(event.arguments)))
            if event.usage is not None:
                head.append(
                    f"  [{event.usage.tokens_in}+{event.usage.tokens_out} tok, "
                    f"${event.usage.cost_usd:.4f}]",
                    style="dim",
                )
        case "observation":
            style = "red" if event.is_error else "green"
            code = "" if event.exit_code is None else f" (exit {event.exit_code})"
            head.append(f"◀ observation{code}\n{_GUTTER}", style=style)
            head.append(_block(without_cursor_moves(event.content)), style="dim")
        case "finished":
            head.append("✔ finished ", style="bold green")
            head.append(_block(event.message))
        case "error":
            head.append(f"✖ error [{_one_line(event.code, 60)}] ", style="bold red")
            head.append(_block(event.message, 2000))
        case "status_change":
            head.append(f"status {event.old} → {event.new}", style="magenta")
            if event.reason:
                head.append(f" ({_one_line(event.reason)})", style="dim")
        case "confirmation_request":
            head.append("? waiting for confirmation: ", style="bold magenta")
            head.append(
                ", ".join(
                    f"{_one_line(p.action_id, 80)} {_one_line(p.tool_name, 60)} [{p.risk}]"
                    for p in event.pending
                )
            )
        case "confirmation_decision":
            head.append(f"decision by {_one_line(event.approver, 80)}: ", style="magenta")
            head.append(
                _one_line(f"accepted {list(event.accepted)} rejected {list(event.rejected)}")
            )
        case "tool_audit":
            head.append(f"audit {_one_line(event.tool, 60)} → {event.outcome} ", style="blue")
            head.append(_one_line(event.detail), style="dim")
        case "checkpoint":
            head.append(f"checkpoint {event.index} ", style="dim")
        case _:
            head.append(_one_line(event.kind, 60))
    return head


def conversation_summary(record: ConversationRecord) -> dict[str, str]:
    """The fields people look at, as one-line strings with control characters made visible."""
    workspace = record.workspace
    fields = {
        "id": record.id,
        "status": record.status.value,
        "loop": record.loop_type,
        "model": f"{record.provider}/{record.model}",
        "task": record.task.title,
        "repository": record.task.repository,
        "workspace": workspace.path if workspace else "",
        "branch": (workspace.branch or "") if workspace else "",
        "termination": record.termination_reason.value if record.termination_reason else "",
        "turns": str(record.turns),
        "tokens": f"{record.usage.tokens_in} in / {record.usage.tokens_out} out",
        "cost": f"${record.usage.cost_usd:.4f}",
        "commit": record.commit_sha or "",
        "error": record.error or "",
        "created": record.created_at.isoformat(timespec="seconds"),
    }
    return {key: visible(value, newlines=key == "error") for key, value in fields.items()}


def cells(values: dict[str, str], columns: tuple[str, ...]) -> list[Text]:
    """Table cells as rich Text (never parsed as markup)."""
    return [Text(values[column]) for column in columns]
