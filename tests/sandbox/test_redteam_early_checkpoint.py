"""Red team, real governed runs: the early first-checkpoint scan (450dfb7) and the host-work
bound judged by stat data (2b0ec92, 450dfb7). Tests that CROSS assert the correct behaviour.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.sandbox.quota import unavailable_reason
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.workspace.refs import checkpoint_ref

from .test_landing_from_overlay import _git, _repo, _settings
from .test_redteam_more import attack

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]

MAX_FILE_BYTES = 10 * 1024 * 1024  # the gate's default


def _blobs_over(worktree: Path, ref: str, limit: int) -> list[str]:
    out = _git(worktree, "ls-tree", "-r", "-l", ref)
    sized = [(line, line.split()[3]) for line in out.splitlines()]
    return [line for line, size in sized if size != "-" and int(size) > limit]


async def test_gitlink_swapped_for_a_sparse_file_is_not_hashed(
    tmp_path: Path, quotas: Path
) -> None:
    """CROSSES (regression of 450dfb7's ``--ignore-submodules=all``): the agent makes an
    embedded repository (checkpoint 1 records a gitlink), replaces it by a 64 MiB sparse
    file (no quota cost) and touches .gitignore so the next checkpoint scans everything.
    ``pending``'s ``diff-files`` hides the gitlink's type change, so the bound never sees
    the file; ``git add -A`` hashes it and checkpoint 2 holds a 64 MiB blob."""
    repo = _repo(tmp_path)
    plan = [
        "cd /workspace && mkdir sub && cd sub && git init -q"
        " && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && echo ok",
        "cd /workspace && mv sub/.git /tmp/subgit && rmdir sub && truncate -s 64M sub"
        " && echo '#x' >> .gitignore && ls -ls sub",
        "echo more > /workspace/more.txt",
    ]
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(c, repo, plan)
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    gitlink = _git(worktree, "ls-tree", checkpoint_ref(cid, 1), "sub")
    assert gitlink.startswith("160000"), (out, gitlink)  # the precondition: a gitlink
    refs = _git(worktree, "for-each-ref", "--format=%(refname)", "refs/synthorg/").split()
    over = [(ref, line) for ref in refs for line in _blobs_over(worktree, ref, MAX_FILE_BYTES)]
    assert over == [], (out, result)


async def test_the_agent_cannot_make_a_file_of_4_gib(tmp_path: Path, quotas: Path) -> None:
    """The stat-judged bound relies on it (git keeps sizes modulo 2**32: a file grown by
    2**32 bytes matches its entry; tests/workspace/test_redteam_pending.py): the sandbox's
    largest file is under 4 GiB (``SandboxLimits.file_bytes``), so even a sparse one fails."""
    repo = _repo(tmp_path)
    plan = [
        "cd /workspace && (truncate -s 4294967301 big.txt) 2>&1; echo rc=$?;"
        " (dd if=/dev/zero of=big2.txt bs=1 count=1 seek=4294967300) 2>&1; echo rc=$?;"
        " stat -c SIZE=%s big.txt big2.txt 2>&1"
    ]
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        _, out, _ = await attack(c, repo, plan)
    assert "rc=0" not in out[0], out
    sizes = [int(line[5:]) for line in out[0].splitlines() if line.startswith("SIZE=")]
    assert all(size < 2**32 for size in sizes), out
