"""The git hardening every host-side git process gets: settings no config file can undo.

One home for the workspace's git (workspace.git) and the MCP server's push (mcp git_push),
which may not import each other's component: command-line-scope settings that name no program
to run, the environment that carries them, and the git program resolved to an absolute path.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable

# Command-line scope (the highest): wins over every config file git reads, so no file (the
# repository's, or an agent-written one that slipped through) can name a program to run.
HARDENED: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.sshCommand", "false"),
    ("core.askPass", "false"),
    ("core.attributesFile", os.devnull),
    ("credential.helper", ""),
    ("gpg.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.x509.program", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
)


def config_env(settings: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``settings`` as git's command-line-scope environment (``GIT_CONFIG_COUNT``/``KEY``/
    ``VALUE``): they win over every config file git reads, and reach only that process."""
    pairs = list(settings)
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for n, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    return env


_FOUND: tuple[str | None, str] = (None, "git")


def git_program() -> str:
    """The git that ``PATH`` names, as a path: found once per ``PATH`` value, where a bare
    name has every spawn try each ``PATH`` directory in turn (11 failed execs per git
    process on this machine). ``git`` itself when ``PATH`` has none (the spawn says so).
    Always absolute: a relative ``PATH`` entry is resolved here, never in a work tree."""
    global _FOUND
    path = os.environ.get("PATH")
    if _FOUND[0] != path or not os.access(_FOUND[1], os.X_OK):
        found = shutil.which("git", path=path)
        _FOUND = (path, os.path.abspath(found) if found else "git")
    return _FOUND[1]
