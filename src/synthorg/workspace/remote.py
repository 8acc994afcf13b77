"""Projects reached by URL (``[projects.NAME] remote = ...``) and git's transport to them.

A project with a remote travels: every worker keeps its own mirror of it and publishes the
conversation's refs there. Credentials are the worker's: an HTTPS token read from an
environment variable the operator names (``token_env``), or an SSH key file
(``ssh_key_file``; without one, the worker user's own ssh config and agent). They reach git
only through its environment (``GIT_CONFIG_KEY_n``: never the command line, never a config
file), and only the process that fetches or pushes has them: the sandbox sees a worktree,
never the mirror, the worker's environment or the key file.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, RootModel, model_validator

from synthorg.errors import ConfigError

PROJECT_PREFIX = "project:"
"""A task's ``repository`` naming a configured project instead of a path: ``project:NAME``."""
PROJECT_NAME = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
"""A project's name (``[projects.NAME]``), as a regular expression without anchors."""
PROJECT_REFERENCE = re.escape(PROJECT_PREFIX) + PROJECT_NAME
"""``project:NAME`` as a regular expression without anchors (what a client may send)."""

SCHEMES = frozenset({"file", "git", "http", "https", "ssh"})
_NAME = re.compile(PROJECT_NAME)
_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")  # fullmatch: `$` lets "\n" by


def check_remote_url(url: str) -> str:
    """``url`` if it is a remote SynthOrg may fetch from and push to, else ValueError.

    Only the schemes git speaks natively (no ``ext::`` helpers, no scp-like shorthand that
    git could read as a local path), and no credentials: a password or token in the URL
    would end up in logs, in the store and in every process listing.
    """
    if url != url.strip() or any(ord(c) < 0x20 or c == "\x7f" for c in url):
        raise ValueError("the remote URL has whitespace or control characters")
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(
            f"remote URL scheme {parts.scheme or '(none)'!r} is not one of "
            f"{', '.join(sorted(SCHEMES))} (write ssh://host/path, not host:path)"
        )
    if parts.password is not None or (parts.username is not None and parts.scheme != "ssh"):
        raise ValueError(
            "the remote URL carries credentials: remove them and name them with token_env "
            "(HTTPS) or ssh_key_file (SSH) instead"
        )
    if parts.fragment:
        raise ValueError("the remote URL has a fragment")
    if parts.scheme == "file" and (parts.netloc or not parts.path.startswith("/")):
        raise ValueError("a file remote is file:///absolute/path")
    if parts.scheme != "file" and not parts.hostname:
        raise ValueError("the remote URL names no host")
    return url


def _check_branch(branch: str) -> str:
    if not _BRANCH.fullmatch(branch) or ".." in branch or branch.endswith((".lock", "/", ".")):
        raise ValueError(f"{branch!r} is not a branch name SynthOrg accepts")
    return branch


class ProjectRemote(BaseModel):
    """One ``[projects.NAME]`` table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    remote: Annotated[str, AfterValidator(check_remote_url)] = Field(
        description="Where the project lives: file://, git://, http(s):// or ssh:// URL."
    )
    branch: Annotated[str, AfterValidator(_check_branch)] = Field(
        default="main", description="The branch new conversations start from."
    )
    token_env: str | None = Field(
        default=None,
        pattern=r"^[A-Z_][A-Z0-9_]{0,127}$",
        description="HTTPS only: the worker's environment variable holding the access token.",
    )
    token_user: str = Field(
        default="x-access-token",
        pattern=r"^[A-Za-z0-9._-]{1,64}$",
        description="The user name sent with the token (HTTP basic auth).",
    )
    ssh_key_file: Path | None = Field(
        default=None, description="SSH only: the worker's private key file for this remote."
    )

    @property
    def scheme(self) -> str:
        """The URL scheme (the one transport git is allowed for this remote)."""
        return urlsplit(self.remote).scheme

    def transport(self) -> list[tuple[str, str]]:
        """Git settings for one fetch or push: this scheme allowed, the credentials attached.

        Read when called (a rotated token is picked up on the next fetch); a named but
        missing credential is a configuration error, said without its value.
        """
        settings = [(f"protocol.{self.scheme}.allow", "always")]
        if self.token_env is not None:
            if self.scheme != "https":
                raise ConfigError("token_env is for https remotes only (never sent in clear)")
            token = os.environ.get(self.token_env)
            if not token:
                raise ConfigError(f"the worker's environment has no {self.token_env}")
            basic = base64.b64encode(f"{self.token_user}:{token}".encode()).decode()
            settings += [
                ("http.extraHeader", f"Authorization: Basic {basic}"),
                # A redirect must not carry the token to another host.
                ("http.followRedirects", "false"),
            ]
        if self.scheme == "ssh":
            ssh = ["ssh", "-o", "BatchMode=yes"]
            if self.ssh_key_file is not None:
                ssh += ["-o", "IdentitiesOnly=yes", "-i", str(self.ssh_key_file)]
            settings.append(("core.sshCommand", shlex.join(ssh)))
        elif self.ssh_key_file is not None:
            raise ConfigError("ssh_key_file is for ssh:// remotes only")
        return settings


class ProjectsConfig(RootModel[dict[str, ProjectRemote]]):
    """The ``[projects]`` section: project name -> its remote."""

    root: dict[str, ProjectRemote] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names(self) -> ProjectsConfig:
        bad = [name for name in self.root if not _NAME.fullmatch(name)]
        if bad:
            raise ValueError(
                f"project names {bad} must be letters, digits, '_' and '-' (at most 64)"
            )
        return self


def project_name(repository: str) -> str | None:
    """The project a task's ``repository`` names (``project:NAME``), None for a path: the one
    reader of a project reference (clients are held to ``PROJECT_REFERENCE`` first)."""
    if not repository.startswith(PROJECT_PREFIX):
        return None
    return repository.removeprefix(PROJECT_PREFIX)
