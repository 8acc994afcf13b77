"""Risk of actions for the confirmation policy: what a terminal command or an edit may do."""

from __future__ import annotations

import re

from synthorg.domain import RiskLevel

# Destructive, networked or publishing commands: a person should see them before they run.
_HIGH = re.compile(
    r"""
    \brm\s+(-[a-zA-Z]*[rf][a-zA-Z]*\s+)*-[a-zA-Z]*[rf]   # rm -rf / -r / -f in any order
    | \b(curl|wget|ssh|scp|sftp|rsync|nc|ncat|telnet|ftp)\b
    | \bgit\s+(push|reset\s+--hard|clean\s+-[a-z]*f|filter-branch|update-ref\s+-d)
    | \b(sudo|su|doas|mkfs\w*|dd|shred|chown|shutdown|reboot|kill|pkill|killall)\b
    | \bchmod\s+(-R|777)
    | \b(pip|pip3|npm|yarn|pnpm|cargo|gem)\s+(install|publish|upload)
    | \btwine\s+upload
    | >\s*/dev/(sd|nvme|disk)
    | :\(\)\s*\{                                            # fork bomb
    """,
    re.VERBOSE,
)

# Commands that only read: when a command is exactly one of these with no chaining or
# redirection, it is LOW risk.
_READ_ONLY = frozenset(
    {
        "ls",
        "cat",
        "head",
        "tail",
        "wc",
        "pwd",
        "grep",
        "rg",
        "find",
        "tree",
        "stat",
        "file",
        "echo",
        "diff",
        "which",
        "env",
        "du",
        "df",
    }
)
_READ_ONLY_GIT = frozenset({"status", "diff", "log", "show", "branch", "rev-parse", "blame"})
_SHELL_CONTROL = re.compile(r"[;&|<>`$]|\bexec\b|-delete\b|-exec\b")


def terminal_risk(command: str) -> RiskLevel:
    """HIGH for destructive/networked/publishing commands, LOW for plain reads, else MEDIUM."""
    if _HIGH.search(command):
        return RiskLevel.HIGH
    words = command.split()
    if not words or _SHELL_CONTROL.search(command):
        return RiskLevel.MEDIUM
    if words[0] in _READ_ONLY:
        return RiskLevel.LOW
    if words[0] == "git" and len(words) > 1 and words[1] in _READ_ONLY_GIT:
        return RiskLevel.LOW
    return RiskLevel.MEDIUM


def edit_risk(command: str) -> RiskLevel:
    """Viewing is LOW; every change to a file is MEDIUM."""
    return RiskLevel.LOW if command == "view" else RiskLevel.MEDIUM
