"""Names SynthOrg gives to branches and hidden refs, and the check that makes them safe."""

from __future__ import annotations

from synthorg.domain.ids import is_valid_id
from synthorg.errors import UsageError

BRANCH_PREFIX = "synthorg/"
BASE_REFS = "refs/synthorg/base/"
CHECKPOINT_REFS = "refs/synthorg/checkpoints/"


def check_conversation_id(conversation_id: str) -> str:
    """Return ``conversation_id`` if it is safe as a directory and ref component, else raise."""
    if (
        not is_valid_id(conversation_id)
        or ".." in conversation_id
        or conversation_id.endswith((".lock", "."))
    ):
        raise UsageError(
            f"conversation id {conversation_id!r} cannot name a worktree or git ref: use letters, "
            "digits, '.', '_' and '-' (no '..', not ending in '.lock' or '.'), at most 128 chars"
        )
    return conversation_id


def branch_name(conversation_id: str) -> str:
    """The conversation's branch: ``synthorg/<conversation-id>``."""
    return BRANCH_PREFIX + check_conversation_id(conversation_id)


def base_ref(conversation_id: str) -> str:
    """Hidden ref remembering the commit the conversation started from (survives restarts)."""
    return BASE_REFS + check_conversation_id(conversation_id)


def checkpoint_prefix(conversation_id: str) -> str:
    """Namespace of the conversation's checkpoint refs (ends with '/')."""
    return CHECKPOINT_REFS + check_conversation_id(conversation_id) + "/"


def checkpoint_ref(conversation_id: str, index: int) -> str:
    """The ref of checkpoint ``index``."""
    return f"{checkpoint_prefix(conversation_id)}{index}"
