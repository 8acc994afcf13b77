"""Per-conversation worktrees, read-only git views, checkpoints with rollback, the commit gate."""
