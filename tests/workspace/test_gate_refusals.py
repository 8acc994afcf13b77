"""The gate refuses core dumps and files over its size limit, committing nothing."""

from __future__ import annotations

import struct
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synthorg.workspace.blobs import is_core_name, is_elf_core
from synthorg.workspace.errors import CoreFileError, GateRefusedError, OversizeFileError
from synthorg.workspace.gate import CommitGate
from synthorg.workspace.models import GateSummary
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, make_repo

SUMMARY = GateSummary(
    task_id="task-1",
    title="Work",
    conversation_id="conv-big",
    loop_type="react",
    turns=1,
    cost_usd=Decimal("0.01"),
)


def elf_header(e_type: int, *, little: bool = True) -> bytes:
    """The first 20 bytes of a 64-bit ELF file of type ``e_type`` (4 is a core dump)."""
    order = "<" if little else ">"
    ident = b"\x7fELF" + bytes([2, 1 if little else 2, 1]) + bytes(9)
    return ident + struct.pack(f"{order}HHI", e_type, 62, 1)


@pytest.mark.parametrize("little", [True, False])
def test_elf_core_is_recognised_by_its_header(little: bool) -> None:
    assert is_elf_core(elf_header(4, little=little))
    assert not is_elf_core(elf_header(2, little=little))  # an executable
    assert not is_elf_core(elf_header(3, little=little))  # a shared object
    assert not is_elf_core(b"\x7fELF")


@given(st.binary(max_size=64))
def test_random_bytes_are_a_core_only_with_the_elf_core_header(data: bytes) -> None:
    expected = (
        len(data) >= 20
        and data[:4] == b"\x7fELF"
        and int.from_bytes(data[16:18], "little" if data[5] == 1 else "big") == 4
    )
    assert is_elf_core(data[:20]) is expected


def test_core_names() -> None:
    for name in ("core", "core.1234", "sub/dir/core.7", "vgcore.99"):
        assert is_core_name(name), name
    for name in ("core.py", "score", "core.d/file", "lib/core_utils.c", "cores"):
        assert not is_core_name(name), name


async def _worktree(tmp_path: Path, home: Path) -> tuple[Path, WorktreeManager, Path]:
    repo = tmp_path / "proj"
    make_repo(repo, {"app.py": b"x = 1\n", "lib/core.py": b"# a module named core.py\n"})
    manager = WorktreeManager(home)
    ws = await manager.create(repo, "conv-big")
    return repo, manager, ws.path


async def test_core_dumps_are_refused(tmp_path: Path, home: Path) -> None:
    repo, manager, path = await _worktree(tmp_path, home)
    ws = await manager.get("conv-big")
    assert ws is not None
    (path / "app.py").write_text("x = 2\n")
    (path / "core.4242").write_bytes(b"anything")  # by name
    (path / "crash.dump").write_bytes(elf_header(4) + bytes(200))  # by content
    (path / "tool").write_bytes(elf_header(2) + bytes(200))  # an ELF executable is fine
    before = git(repo, "rev-parse", "synthorg/conv-big")
    with pytest.raises(CoreFileError) as caught:
        await CommitGate().land(ws, SUMMARY)
    assert caught.value.files == ["core.4242", "crash.dump"]
    assert isinstance(caught.value, GateRefusedError)
    assert "Nothing was committed" in str(caught.value)
    assert git(repo, "rev-parse", "synthorg/conv-big") == before
    (path / "core.4242").unlink()
    (path / "crash.dump").unlink()
    landed = await CommitGate().land(ws, SUMMARY)
    assert landed.committed and landed.files == ["app.py", "tool"]


async def test_files_over_the_limit_are_refused(tmp_path: Path, home: Path) -> None:
    repo, manager, path = await _worktree(tmp_path, home)
    ws = await manager.get("conv-big")
    assert ws is not None
    (path / "exact.bin").write_bytes(b"a" * 1000)
    (path / "big.bin").write_bytes(b"b" * 1001)
    gate = CommitGate(max_file_bytes=1000)
    with pytest.raises(OversizeFileError) as caught:
        await gate.land(ws, SUMMARY)
    assert caught.value.files == [("big.bin", 1001)]
    assert "1000 bytes" in str(caught.value) and "max_file_bytes" in str(caught.value)
    assert "big.bin" not in git(repo, "ls-tree", "-r", "--name-only", "synthorg/conv-big")
    (path / "big.bin").unlink()
    landed = await gate.land(ws, SUMMARY)
    assert landed.committed and landed.files == ["exact.bin"]
    with pytest.raises(ValueError, match="at least 1"):
        CommitGate(max_file_bytes=0)
