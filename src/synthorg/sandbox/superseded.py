"""Stopping what a superseded owner on this host still runs for a conversation: its sandboxes.

A frozen owner (SIGSTOP, a stall) whose run was taken over cannot stop its own sandbox, which
goes on running the call the successor answered "effect unknown" and writing the worktree the
successor is about to judge. On the same host the successor stops it: a bwrap process below
the old owner whose working directory is the conversation's worktree (the host-only marker the
bwrap backend sets) is killed with everything below it. Linux ``/proc`` only, as bwrap is.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import defaultdict
from pathlib import Path

_PROC = Path("/proc")


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, of every process visible here."""
    tree: dict[int, list[int]] = defaultdict(list)
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        tree[int(fields[1])].append(int(entry.name))
    return tree


def _below(tree: dict[int, list[int]], pid: int) -> list[int]:
    """Every descendant of ``pid``, parents before their children."""
    found: list[int] = []
    todo = list(tree.get(pid, ()))
    while todo:
        child = todo.pop(0)
        found.append(child)
        todo.extend(tree.get(child, ()))
    return found


def _is_sandbox_of(pid: int, worktree: Path) -> bool:
    try:
        comm = (_PROC / str(pid) / "comm").read_text().strip()
        cwd = os.readlink(_PROC / str(pid) / "cwd")
    except OSError:
        return False
    return comm == "bwrap" and Path(cwd) == worktree


def stop_sandboxes(worktree: Path) -> int:
    """Kill every sandbox on this host that runs in ``worktree`` (and all below it), except
    this process's own; how many were stopped. Whoever else runs one there is an owner this
    process superseded (one live owner per conversation, one worktree per conversation), also
    when that owner's record is gone already: a sweep that found its lease lapsed released it
    before this takeover could read who it was."""
    tree = _children()
    spared = {os.getpid(), *_below(tree, os.getpid())}
    stopped = 0
    for pid in _below(tree, 0):  # every process, outermost first
        if pid in spared or not _is_sandbox_of(pid, worktree):
            continue
        victims = _freeze(pid)
        for victim in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(victim, signal.SIGKILL)
        spared.update(victims)  # a nested bwrap below it is gone with it
        stopped += 1
    return stopped


def _freeze(pid: int) -> list[int]:
    """SIGSTOP ``pid`` and everything below it, listed again until nothing new appears (a
    process not yet stopped may fork); the stopped pids, outermost first.

    Every one is stopped before any is killed: killed one by one, a shell whose child died
    first ran its next command (``sleep 60; echo late >> late.txt`` wrote late.txt after
    the takeover, tests/distributed/test_zombie_fence.py under load)."""
    stopped: list[int] = []
    seen: set[int] = set()
    while True:
        fresh = [p for p in (pid, *_below(_children(), pid)) if p not in seen]
        if not fresh:
            return stopped
        for victim in fresh:
            seen.add(victim)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(victim, signal.SIGSTOP)
                stopped.append(victim)
