"""Rollback to a checkpoint through the API over the real LocalRunService: bwrap sandbox,
scripted model, native loop (which takes the checkpoints), worktree, commit gate."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastapi import FastAPI

from synthorg.workspace.git import run_git_sync

from .conftest import Keys, client_for
from .helpers import create, events, wait_running, wait_status

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def _at_checkpoint(repo: Path, cid: str, n: int, path: str) -> str | None:
    """``path`` as checkpoint ``n`` holds it (None: absent), read from the host's repo."""
    ref = f"refs/synthorg/checkpoints/{cid}/{n}"
    listed = run_git_sync(["ls-tree", "--name-only", ref, "--", path], repo).text.strip()
    return run_git_sync(["show", f"{ref}:{path}"], repo).text if listed else None


async def test_rollback_restores_refuses_while_running_and_is_attributed(
    app: FastAPI, keys: Keys, repo: Path
) -> None:
    async with (
        client_for(app, keys.operator) as operator,
        client_for(app, keys.viewer) as viewer,
    ):
        body = await create(operator, repo, start=True, model="slow50")
        cid = body["id"]
        base = f"/api/conversations/{cid}"
        await wait_running(operator, cid)
        refused = await operator.post(f"{base}/checkpoints/0/rollback")
        assert refused.status_code == 409, refused.text
        # Two commands observed: the worktree then differs from checkpoint 1 (one line).
        deadline = asyncio.get_running_loop().time() + 120
        while len(await events(operator, cid, kind="observation")) < 2:
            assert asyncio.get_running_loop().time() < deadline, "two commands never ran"
            await asyncio.sleep(0.05)
        assert (await operator.post(f"{base}/cancel")).status_code == 200
        await wait_status(operator, cid, "cancelled")

        worktree = Path(body["workspace"]["path"])
        edited = (worktree / "progress.txt").read_text()
        marks = [e["event"]["index"] for e in await events(operator, cid, kind="checkpoint")]
        assert len(marks) >= 2, marks
        # Checkpoint 1 is after the first command appended a line: a content to restore.
        restored = _at_checkpoint(repo, cid, 1, "progress.txt")
        assert restored is not None and restored != edited

        assert (await viewer.post(f"{base}/checkpoints/1/rollback")).status_code == 403
        assert (worktree / "progress.txt").read_text() == edited  # the viewer changed nothing
        missing = await operator.post(f"{base}/checkpoints/100000/rollback")
        assert missing.status_code == 404, missing.text

        done = await operator.post(f"{base}/checkpoints/1/rollback")
        assert done.status_code == 200, done.text
        assert done.json() == {"conversation_id": cid, "checkpoint": 1, "by": "olga"}
        assert (worktree / "progress.txt").read_text() == restored
        first = await operator.post(f"{base}/checkpoints/0/rollback")
        assert first.status_code == 200, first.text
        assert _at_checkpoint(repo, cid, 0, "progress.txt") is None
        assert not (worktree / "progress.txt").exists()

        notes = [
            e["event"]["text"]
            for e in await events(operator, cid, kind="message")
            if e["event"]["role"] == "system" and "rolled" in e["event"]["text"]
        ]
        assert notes == [
            "olga rolled the worktree back to checkpoint 1",
            "olga rolled the worktree back to checkpoint 0",
        ]
        # Not wedged: a run can start again after a rollback.
        assert (await operator.post(f"{base}/resume")).status_code == 200
        await wait_running(operator, cid)
        assert (await operator.post(f"{base}/cancel")).status_code == 200
        await wait_status(operator, cid, "cancelled")
