"""Helpers for sandbox tests: run a program to its end, find leftover processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil

from synthorg.sandbox import SandboxExit, SandboxLimits, SandboxRequest, SandboxStreamer


def request(workspace: Path, argv: list[str], **kwargs: Any) -> SandboxRequest:
    kwargs.setdefault("conversation_id", "test-run")
    return SandboxRequest(argv=argv, workspace=workspace, **kwargs)


def py(code: str) -> list[str]:
    return ["python3", "-c", code]


async def collect(
    sandbox: SandboxStreamer, req: SandboxRequest, first_line: str = "{}"
) -> tuple[list[str], SandboxExit]:
    lines: list[str] = []
    async with sandbox.stream(req, first_line) as proc:
        async for line in proc:
            lines.append(line)
    assert proc.exit is not None
    return lines, proc.exit


async def attack(
    sandbox: SandboxStreamer, workspace: Path, code: str, **kwargs: Any
) -> dict[str, Any]:
    """Run python code inside that prints one JSON object; return it."""
    kwargs.setdefault("limits", SandboxLimits(wall_timeout_s=20))
    lines, ended = await collect(sandbox, request(workspace, py(code), **kwargs))
    assert ended.returncode == 0, (lines, ended)
    return dict(json.loads(lines[-1]))


def processes_with(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(proc.info["cmdline"] or [])  # zombies report None: skipped below
        if marker in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def sandboxes_in(path: Path) -> list[psutil.Process]:
    """bwrap processes whose sandbox works in a worktree under path (their host-side cwd:
    the command line no longer names any host path)."""
    found = []
    for proc in psutil.process_iter(["name", "status"]):
        if proc.info["name"] != "bwrap" or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if Path(proc.cwd()).is_relative_to(path):
                found.append(proc)
        except psutil.Error:
            continue
    return found
