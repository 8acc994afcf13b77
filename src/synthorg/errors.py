"""The one rooted error taxonomy of SynthOrg."""

from __future__ import annotations


class SynthOrgError(Exception):
    """Root of every error SynthOrg raises on purpose."""


class ConfigError(SynthOrgError):
    """The operator's configuration is wrong; the message says what to change."""


class UsageError(SynthOrgError):
    """A caller used an API or command wrongly; the message says how to use it."""


class NotFoundError(SynthOrgError):
    """A named thing (conversation, execution, worktree, ...) does not exist."""


class ConflictError(SynthOrgError):
    """The request conflicts with the current state (a run already active, a stale decision)."""


class BoundaryError(SynthOrgError):
    """A failure at a boundary to the outside world (subprocess, database, HTTP upstream).

    Always raised ``from`` the underlying cause so the original error is kept.
    """


class UnavailableError(SynthOrgError):
    """Something the request needs is unreachable for now (a frozen or cut-off worker).

    The message is written for the caller: what was not confirmed, and what to do (retry).
    """
