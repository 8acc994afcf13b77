"""Identifier types and their generation."""

from __future__ import annotations

import re
import secrets
import time
from typing import Annotated

from pydantic import StringConstraints

_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_ID_RE = re.compile(_ID_PATTERN)

Identifier = Annotated[str, StringConstraints(pattern=_ID_PATTERN)]
"""A safe identifier: usable in file names, git refs and URLs without escaping."""

ConversationId = Identifier
ExecutionId = Identifier
TaskId = Identifier
ProjectId = Identifier
AgentId = Identifier
ActionId = Identifier


def new_id(prefix: str) -> str:
    """A sortable, unique, URL- and ref-safe id such as ``conv-0192ab...``.

    Time-ordered so ids sort by creation, random so they never collide across processes.
    """
    millis = int(time.time() * 1000)
    return f"{prefix}-{millis:012x}{secrets.token_hex(6)}"


def is_valid_id(value: str) -> bool:
    """Whether ``value`` is a safe identifier."""
    return bool(_ID_RE.match(value))
