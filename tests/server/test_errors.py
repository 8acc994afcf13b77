"""Errors are mapped at the boundary (15.5): user mistakes are 4xx naming the rule; failures
are 5xx with a log reference; no body carries a command line, a server path or a trace."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from .helpers import create

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def no_internals(response: httpx.Response, *paths: Path) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert set(body) == {"detail", "code"}, body
    text = response.text
    for marker in ("git ", "diff-tree", "Traceback", 'File "', *map(str, paths)):
        assert marker not in text, (marker, text)
    return body


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "a/../../b", ".", "a//b"])
async def test_a_diff_path_outside_the_worktree_is_a_400_without_internals(
    operator: httpx.AsyncClient, repo: Path, home: Path, path: str
) -> None:
    body = await create(operator, repo)
    response = await operator.get(f"/api/conversations/{body['id']}/diff", params={"path": path})
    assert response.status_code == 400, response.text
    detail = no_internals(response, home, repo, Path(body["workspace"]["path"]))["detail"]
    assert "relative to the worktree root" in detail


async def test_a_failing_git_is_a_5xx_with_a_reference_only(
    operator: httpx.AsyncClient, repo: Path, home: Path
) -> None:
    body = await create(operator, repo)
    # The objects the views need are gone (a broken disk, a hostile cleanup): git fails.
    shutil.rmtree(repo / ".git" / "objects")
    (repo / ".git" / "objects").mkdir()
    response = await operator.get(f"/api/conversations/{body['id']}/diff")
    assert response.status_code >= 500 or response.status_code == 409, response.text
    detail = no_internals(response, home, repo, Path(body["workspace"]["path"]))["detail"]
    if response.status_code >= 500:
        assert "reference" in detail


async def test_every_refusal_body_is_free_of_internals(
    operator: httpx.AsyncClient, repo: Path, home: Path, tmp_path: Path
) -> None:
    cid = (await create(operator, repo))["id"]
    plain = tmp_path / "plain"
    plain.mkdir()
    refusals = [
        await operator.post("/api/conversations", json={"repository": "relative", "prompt": "x"}),
        await operator.post(
            "/api/conversations", json={"repository": str(repo), "prompt": "x", "base_ref": "nope"}
        ),
        await operator.post(
            "/api/conversations", json={"repository": str(tmp_path / "absent"), "prompt": "x"}
        ),
        await operator.get("/api/conversations", params={"cursor": "%%%"}),
        await operator.get(f"/api/conversations/{cid}/diff", params={"path": "/etc"}),
        await operator.get("/api/conversations/conv-nope"),
        await operator.post(f"/api/conversations/{cid}/pause"),
        await operator.put(f"/api/conversations/{cid}/changes"),
        await operator.post(f"/api/conversations/{cid}/messages", content=b"{not json"),
    ]
    for response in refusals:
        assert 400 <= response.status_code < 500, response.text
        for marker in ("Traceback", str(home), "git ", "diff-tree"):
            assert marker not in response.text, (marker, response.text)
