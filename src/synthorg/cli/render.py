"""Rendering conversations and events for people in a terminal."""

from __future__ import annotations

from rich.text import Text

from synthorg.domain import ConversationRecord, StoredEvent

_MAX_CONTENT = 400


def _short(text: str, limit: int = _MAX_CONTENT) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def event_line(stored: StoredEvent) -> Text:
    """One event as one or a few lines of styled text."""
    event = stored.event
    head = Text(f"{stored.seq:>5} ", style="dim")
    match event.kind:
        case "message":
            head.append(f"{event.role}: ", style="bold cyan")
            head.append(_short(event.text))
        case "action":
            head.append(f"▶ {event.tool_name} ", style="bold yellow")
            head.append(_short(event.summary or str(event.arguments), 200))
            if event.usage is not None:
                head.append(
                    f"  [{event.usage.tokens_in}+{event.usage.tokens_out} tok, "
                    f"${event.usage.cost_usd:.4f}]",
                    style="dim",
                )
        case "observation":
            style = "red" if event.is_error else "green"
            code = "" if event.exit_code is None else f" (exit {event.exit_code})"
            head.append(f"◀ observation{code}\n", style=style)
            head.append(_short(event.content), style="dim")
        case "finished":
            head.append("✔ finished ", style="bold green")
            head.append(_short(event.message))
        case "error":
            head.append(f"✖ error [{event.code}] ", style="bold red")
            head.append(event.message)
        case "status_change":
            head.append(f"status {event.old} → {event.new}", style="magenta")
            if event.reason:
                head.append(f" ({_short(event.reason, 200)})", style="dim")
        case "confirmation_request":
            head.append("? waiting for confirmation: ", style="bold magenta")
            head.append(", ".join(f"{p.action_id} {p.tool_name} [{p.risk}]" for p in event.pending))
        case "confirmation_decision":
            head.append(f"decision by {event.approver}: ", style="magenta")
            head.append(f"accepted {list(event.accepted)} rejected {list(event.rejected)}")
        case "tool_audit":
            head.append(f"audit {event.tool} → {event.outcome} ", style="blue")
            head.append(_short(event.detail, 200), style="dim")
        case "checkpoint":
            head.append(f"checkpoint {event.index} ", style="dim")
        case _:
            head.append(event.kind)
    return head


def conversation_summary(record: ConversationRecord) -> dict[str, str]:
    """The fields people look at, as strings."""
    workspace = record.workspace
    return {
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
