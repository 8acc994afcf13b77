"""The host-only marker of a worktree creation in progress: what it made, so a retry of a
creation killed half-way removes exactly that (and nothing it did not make) and starts over.

Written beside the worktree (where its record goes, out of the sandbox's reach) before the
branch or the worktree is made, removed once the record is written: a marker without a record
is a creation that never finished, whose half-checked-out files must not be adopted.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

_SUFFIX = ".creating.json"


class CreationMarker(BaseModel):
    """What one creation of a conversation's worktree is about to make."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    conversation_id: str = Field(description="The conversation the worktree is made for.")
    path: Path = Field(description="The worktree being made.")
    common_dir: Path = Field(description="The git dir of the repository it is registered in.")
    refs: tuple[str, ...] = Field(
        description="Refs this creation makes (they did not exist before): removed on undo."
    )


def marker_file(worktree: Path) -> Path:
    """Where the marker of ``worktree``'s creation lives (beside its record)."""
    return worktree.parent / f".{worktree.name}{_SUFFIX}"


def write_marker(marker: CreationMarker) -> None:
    """Durably record a creation about to start (a kill right after must still find it)."""
    path = marker_file(marker.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(marker.model_dump_json())
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)


def read_marker(worktree: Path) -> CreationMarker | None:
    """The marker of an unfinished creation of ``worktree``, None when there is none."""
    try:
        raw = marker_file(worktree).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    return CreationMarker.model_validate_json(raw)


def clear_marker(worktree: Path) -> None:
    """The creation finished (its record is written) or was undone."""
    marker_file(worktree).unlink(missing_ok=True)
