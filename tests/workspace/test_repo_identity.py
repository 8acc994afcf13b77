"""Landing survives a repository deleted and re-created at the same path (issue 15, item 2).

State that decides landing must follow the repository's identity, never its path: real runs
(bwrap sandbox, scripted model, react loop, checkpoints, the gate) in one long-lived process.
"""

from __future__ import annotations

import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from synthorg.domain import ConversationStatus, TerminationReason
from synthorg.service.options import RunOptions
from synthorg.workspace.errors import WorkspaceTamperedError
from synthorg.workspace.gate import CommitGate
from synthorg.workspace.models import GateSummary
from tests.support import boot_real, make_task, scripted_settings

from .gitfixtures import git, make_repo

pytestmark = pytest.mark.bwrap

MODEL = "scripted-identity"
SCRIPT = "tests.service.scripts:progress_five"
FILES = {"README.md": b"hello\n", "app.py": b"print('v1')\n"}


async def test_a_recreated_repository_lands_every_run(tmp_path: Path) -> None:
    repo = tmp_path / "proj"
    settings = scripted_settings(tmp_path / "home", SCRIPT, model=MODEL)
    async with boot_real(settings) as components:
        service = components.service
        landed = []
        for generation in range(3):
            if repo.exists():
                shutil.rmtree(repo)  # deleted and re-created (a fresh clone at the same path)
            make_repo(repo, {**FILES, "gen.txt": f"{generation}\n".encode()})
            record = await service.create(make_task(repo, "count to five"), RunOptions())
            result = await service.run(record.id)
            assert result.termination_reason is TerminationReason.COMPLETED, result.error
            assert result.commit_sha is not None, (generation, result)
            final = await components.store.get_conversation(record.id)
            assert final.status is ConversationStatus.FINISHED
            assert final.commit_sha == result.commit_sha
            shown = git(repo, "show", f"{result.commit_sha}:progress.txt")
            assert shown.split() == ["1", "2", "3", "4", "5"]
            landed.append(result.commit_sha)
        assert len(set(landed)) == 3


async def test_a_worktree_of_a_replaced_repository_is_refused(tmp_path: Path) -> None:
    from synthorg.workspace.worktrees import WorktreeManager

    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    manager = WorktreeManager(tmp_path / "home")
    ws = await manager.create(repo, "conv-old")
    (ws.path / "app.py").write_text("print('edited')\n")
    shutil.rmtree(repo)
    make_repo(repo, FILES)  # same path, another repository
    summary = GateSummary(
        task_id="t",
        title="edit",
        conversation_id="conv-old",
        loop_type="react",
        turns=1,
        cost_usd=Decimal(0),
    )
    with pytest.raises(WorkspaceTamperedError, match="re-created"):
        await CommitGate().land(ws, summary)
