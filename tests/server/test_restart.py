"""`synthorg serve` as a real process: killed with SIGKILL mid-tool-call, restarted, reconciled;
stopped with SIGTERM, its running conversation ends SHUTDOWN and is resumable."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest

from tests.sandbox.helpers import sandboxes_in

from .helpers import events
from .real_server import create_conversation, operator_headers, served_client, wait_for

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def sandbox_processes(worktree: Path) -> list[psutil.Process]:
    return sandboxes_in(worktree)  # by host-side cwd: bwrap's command line names no host path


async def test_sigkill_mid_tool_call_then_restart_reconciles(
    home: Path, repo: Path, tmp_path: Path
) -> None:
    headers = operator_headers(home)
    log = tmp_path / "server.log"
    async with served_client(home, log, headers, end="kill") as client:
        created = await create_conversation(client, repo, "stuck")
        cid = created["id"]
        worktree = Path(created["workspace"]["path"])

        async def mid_tool_call() -> bool:
            # The command prints confirmed-1, then sleeps: the file is written, no result yet.
            actions = await events(client, cid, kind="action")
            observations = await events(client, cid, kind="observation")
            return bool(actions) and not observations and (worktree / "progress.txt").exists()

        await wait_for(mid_tool_call, f"{cid} mid tool call")
        [action] = await events(client, cid, kind="action")
        action_id = action["event"]["action_id"]
    # --die-with-parent: the sandbox of the killed server is gone too.
    for _ in range(100):
        if not sandbox_processes(worktree):
            break
        await asyncio.sleep(0.05)
    assert sandbox_processes(worktree) == []

    async with served_client(home, log, headers) as client:
        body = (await client.get(f"/api/conversations/{cid}")).json()
        assert body["status"] == "interrupted" and "died" in body["error"]
        assert body["active"] is False
        log_after = await events(client, cid)
        observations = [e["event"] for e in log_after if e["event"]["kind"] == "observation"]
        assert [(o["action_id"], o["is_error"], o["non_retryable"]) for o in observations] == [
            (action_id, True, True)
        ]
        last = log_after[-1]["event"]
        assert last["kind"] == "status_change" and last["new"] == "interrupted"
        # Interrupted is resumable: a new run starts (and is cancelled here).
        resumed = await client.post(f"/api/conversations/{cid}/resume")
        assert resumed.status_code == 200
        cancel = await client.post(f"/api/conversations/{cid}/cancel")
        assert cancel.status_code in (200, 409)


async def test_sigterm_stops_runs_with_shutdown_and_they_resume(
    home: Path, repo: Path, tmp_path: Path
) -> None:
    headers = operator_headers(home)
    log = tmp_path / "server.log"
    async with served_client(home, log, headers) as client:
        cid = (await create_conversation(client, repo, "slow50"))["id"]

        async def working() -> bool:
            return len(await events(client, cid, kind="observation")) >= 2

        await wait_for(working, f"{cid} working")
    async with served_client(home, log, headers) as client:
        body = (await client.get(f"/api/conversations/{cid}")).json()
        assert body["status"] == "paused" and body["termination_reason"] == "shutdown"
        done = len(await events(client, cid, kind="observation"))
        assert (await client.post(f"/api/conversations/{cid}/resume")).status_code == 200

        async def progressed() -> bool:
            return len(await events(client, cid, kind="observation")) > done

        await wait_for(progressed, f"{cid} progressed")
        assert (await client.post(f"/api/conversations/{cid}/cancel")).status_code == 200
