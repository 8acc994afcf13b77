"""A creation killed after git registered the worktree (before its files and record): the next
creation removes exactly what the dead one made and makes it whole, never adopting it half-done."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from synthorg.faultpoints import ANNOUNCE, PAUSE_ENV
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, make_repo, tree_state, worktree_count

FILES = {f"src/m{i}.py": f"x = {i}\n".encode() for i in range(50)}
CREATE = (
    "import asyncio, sys; from pathlib import Path; "
    "from synthorg.workspace.worktrees import WorktreeManager; "
    "asyncio.run(WorktreeManager(Path(sys.argv[1])).create(Path(sys.argv[2]), 'conv-k'))"
)


async def _create_killed_at(home: Path, repo: Path, point: str) -> None:
    """Run a creation in its own process, SIGKILL it once it stops at ``point``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CREATE, str(home), str(repo),
        env={**os.environ, PAUSE_ENV: point},
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(120):
            while ANNOUNCE.encode() not in (line := await proc.stderr.readline()):
                assert line, "the creation ended without reaching the pause point"
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()


async def test_a_creation_killed_half_way_is_made_again_whole(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    base = make_repo(repo, FILES)
    await _create_killed_at(home, repo, "worktree-registered")
    target = home / "worktrees" / "conv-k" / "proj"
    assert (target / ".git").is_file() and not (target / "src").exists()  # killed half-way

    ws = await WorktreeManager(home).create(repo, "conv-k")

    assert ws.note == "new worktree" and ws.path == target and ws.base_ref == base
    assert tree_state(ws.path) == {k: (v, False) for k, v in FILES.items()}
    assert git(ws.path, "status", "--porcelain") == ""
    assert worktree_count(repo) == 2
    assert not list(target.parent.glob(".*.creating.json"))
