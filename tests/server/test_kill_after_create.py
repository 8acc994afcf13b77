"""`synthorg serve` killed with SIGKILL right after a create (15.6): after the restart the record
and the log agree, the log's transitions form one chain, and a resume does not repeat one."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from .helpers import events
from .real_server import create_conversation, operator_headers, served_client, wait_for

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def transitions(log: list[dict[str, Any]]) -> list[tuple[str | None, str]]:
    return [
        (e["event"]["old"], e["event"]["new"]) for e in log if e["event"]["kind"] == "status_change"
    ]


def assert_one_chain(chain: list[tuple[str | None, str]], status: str) -> None:
    """Each transition starts where the previous ended; the last one is the record's status."""
    for (_, before), (after, _) in itertools.pairwise(chain):
        assert after == before, chain
    assert (chain[-1][1] if chain else "created") == status, (chain, status)
    assert len([t for t in chain if t == ("created", "running")]) <= 1, chain


@pytest.mark.parametrize("kill_after_s", [0.0, 0.3])
async def test_killed_right_after_create_then_restart_and_resume_agree(
    home: Path,
    repo: Path,
    tmp_path: Path,
    kill_after_s: float,
) -> None:
    headers = operator_headers(home)
    log = tmp_path / "server.log"
    async with served_client(home, log, headers, end="kill") as client:
        cid = (await create_conversation(client, repo, "slow50"))["id"]
        if kill_after_s:
            await asyncio.sleep(kill_after_s)  # the moment under test, not a sync point

    async with served_client(home, log, headers) as client:
        body = (await client.get(f"/api/conversations/{cid}")).json()
        assert body["active"] is False
        assert_one_chain(transitions(await events(client, cid)), body["status"])
        resumed = await client.post(f"/api/conversations/{cid}/resume")
        assert resumed.status_code == 200, resumed.text

        async def observed() -> bool:
            return len(await events(client, cid, kind="observation")) >= 1

        await wait_for(observed, f"{cid} observed", timeout=30)
        assert (await client.post(f"/api/conversations/{cid}/cancel")).status_code == 200
        final = (await client.get(f"/api/conversations/{cid}")).json()
        assert final["status"] == "cancelled"
        assert_one_chain(transitions(await events(client, cid)), "cancelled")
