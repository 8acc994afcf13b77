"""The toolbox: file edits and commands in-process, then through ToolboxClient in a sandbox."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

import pytest

from synthorg.sandbox import SandboxLimits, SandboxStreamer, ToolboxClient, ToolboxError
from synthorg.sandbox.bwrap import BwrapSandbox
from synthorg.sandbox.toolbox import Editor, ToolError, run_command

from .helpers import processes_with, request


@pytest.fixture
def editor(tmp_path: Path) -> Editor:
    (tmp_path / "ws").mkdir()
    return Editor(str(tmp_path / "ws"))


def test_view_numbers_lines_and_lists_directories(editor: Editor) -> None:
    (Path(editor.root) / "pkg" / "sub" / "deep").mkdir(parents=True)
    (Path(editor.root) / ".git").mkdir()
    (Path(editor.root) / "a.py").write_text("one\ntwo\nthree\n")
    assert editor.view("a.py") == "     1\tone\n     2\ttwo\n     3\tthree"
    assert editor.view("a.py", [2, -1]) == "     2\ttwo\n     3\tthree"
    assert editor.view(".").split("\n") == ["a.py", "pkg/", "pkg/sub/"]
    with pytest.raises(ToolError, match="view_range"):
        editor.view("a.py", [3, 9])


def test_create_replace_insert_and_undo_in_order(editor: Editor) -> None:
    assert editor.create("new/f.txt", "alpha\nbeta\n") == "created new/f.txt"
    path = Path(editor.root) / "new" / "f.txt"
    editor.str_replace("new/f.txt", "beta", "BETA")
    editor.insert("new/f.txt", 0, "header")
    editor.insert("new/f.txt", 3, "footer")
    assert path.read_text() == "header\nalpha\nBETA\nfooter\n"
    editor.undo_edit("new/f.txt")
    editor.undo_edit("new/f.txt")
    assert path.read_text() == "alpha\nBETA\n"
    editor.undo_edit("new/f.txt")
    editor.undo_edit("new/f.txt")
    assert not path.exists()
    with pytest.raises(ToolError, match="no edit to undo"):
        editor.undo_edit("new/f.txt")


def test_str_replace_must_match_exactly_once(editor: Editor) -> None:
    (Path(editor.root) / "f.py").write_text("x = 1\ny = 1\nx = 1\n")
    with pytest.raises(ToolError, match=r"occurs 2 times .*lines 1, 3"):
        editor.str_replace("f.py", "x = 1", "x = 2")
    with pytest.raises(ToolError, match="not found"):
        editor.str_replace("f.py", "z = 1", "")
    assert "y = 2" in editor.str_replace("f.py", "y = 1", "y = 2")
    with pytest.raises(ToolError, match="insert_line 9"):
        editor.insert("f.py", 9, "nope")


def test_paths_must_resolve_inside_the_workspace(editor: Editor, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (Path(editor.root) / "link").symlink_to(outside)
    (Path(editor.root) / "dirlink").symlink_to(tmp_path)
    for path in (str(outside), "../secret.txt", "link", "dirlink/secret.txt", "/etc/passwd"):
        with pytest.raises(ToolError, match="outside the workspace"):
            editor.view(path)
        with pytest.raises(ToolError, match="outside the workspace"):
            editor.create(path, "pwned")
    assert outside.read_text() == "secret"


def test_run_command_reports_exit_code_and_merged_output(tmp_path: Path) -> None:
    result = run_command(tmp_path, "echo out; echo err >&2; pwd; exit 7", 10, 10_000)
    assert result["exit_code"] == 7 and not result["timed_out"] and not result["truncated"]
    assert result["output"] == f"out\nerr\n{tmp_path}\n"


def test_run_command_restores_the_signals_python_ignores(tmp_path: Path) -> None:
    """Over the file-size cap a writer dies of SIGXFSZ (the sandbox's RLIMIT_FSIZE relies on
    it), and a pipe reader closing early ends the writer with SIGPIPE."""
    capped = run_command(tmp_path, "ulimit -f 1; head -c 100000 /dev/zero > big; echo $?", 10, 1000)
    assert "File size limit exceeded" in capped["output"], capped
    assert capped["output"].endswith(f"{128 + 25}\n")
    piped = run_command(tmp_path, "yes | head -n 1; echo ${PIPESTATUS[0]}", 10, 1000)
    assert piped["output"] == "y\n141\n"


def test_run_command_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker = f"{5000 + secrets.randbelow(10**6)}.5"
    started = time.monotonic()
    result = run_command(tmp_path, f"sleep {marker} & sleep {marker}; echo never", 0.5, 1000)
    assert result["timed_out"] and result["exit_code"] is None
    assert time.monotonic() - started < 60  # not the 5000 s sleep: killed at its timeout
    deadline = time.monotonic() + 5  # SIGKILLed, but on a busy machine not yet dead
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert processes_with(marker) == []


def test_run_command_caps_output_keeping_head_and_tail(tmp_path: Path) -> None:
    result = run_command(
        tmp_path, "echo START; head -c 200000 /dev/zero | tr '\\0' x; echo; echo END", 10, 1000
    )
    assert result["truncated"] and result["exit_code"] == 0
    out = result["output"]
    assert out.startswith("START") and out.rstrip().endswith("END")
    assert "bytes truncated" in out and len(out) < 1100


def test_run_command_returns_while_a_background_job_keeps_running(tmp_path: Path) -> None:
    marker = f"{5000 + secrets.randbelow(10**6)}.25"
    started = time.monotonic()
    result = run_command(tmp_path, f"sleep {marker} & echo started", 10, 1000)
    assert result["output"] == "started\n" and time.monotonic() - started < 60  # not 5000 s
    leftovers = processes_with(marker)
    assert len(leftovers) == 1  # the job lives on, as in a terminal; the sandbox reaps it
    leftovers[0].kill()


@pytest.fixture(params=[pytest.param("bwrap", marks=pytest.mark.bwrap), "local"])
def sandbox(request: pytest.FixtureRequest) -> SandboxStreamer:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


async def test_client_runs_commands_and_edits_in_one_sandbox(
    sandbox: SandboxStreamer, workspace: Path
) -> None:
    async with ToolboxClient(sandbox, request(workspace, ["unused"])) as tb:
        created = await tb.edit("create", "src/app.py", file_text="print('hi')\n")
        assert created.ok, created
        replaced = await tb.edit("str_replace", "src/app.py", old_str="hi", new_str="bye")
        assert replaced.ok and "bye" in replaced.output
        ran = await tb.run("python3 src/app.py && echo $PWD", timeout_s=20)
        assert ran.exit_code == 0 and ran.output == f"bye\n{tb.workspace}\n"
        refused = await tb.edit("view", "../../keys")
        assert not refused.ok and "outside the workspace" in (refused.error or "")
        missing = await tb.edit("str_replace", "src/app.py", old_str="nope", new_str="x")
        assert not missing.ok and "not found" in (missing.error or "")
        # Concurrent calls are matched to their replies by id.
        results = await asyncio.gather(*(tb.run(f"echo {i}") for i in range(8)))
        assert [r.output for r in results] == [f"{i}\n" for i in range(8)]
        timed = await tb.run("sleep 30", timeout_s=0.3)
        assert timed.timed_out and timed.exit_code is None
        # One long-lived toolbox serves every call (its cost is in benchmarks/): each
        # command's shell has the same parent.
        parents = {(await tb.run("echo $PPID")).output for _ in range(10)}
        assert len(parents) == 1, parents
    assert (workspace / "src" / "app.py").read_text() == "print('bye')\n"
    assert tb.exit is not None and tb.exit.returncode == 0


async def test_client_fails_loud_when_the_toolbox_dies(
    sandbox: SandboxStreamer, workspace: Path
) -> None:
    req = request(workspace, ["unused"], limits=SandboxLimits(wall_timeout_s=30))
    async with ToolboxClient(sandbox, req) as tb:
        with pytest.raises(ToolboxError, match="toolbox"):
            await tb.run("kill -9 $PPID; sleep 5", timeout_s=10)
        with pytest.raises(ToolboxError, match="not running"):
            await tb.run("true")


class _NoInterpreter(BwrapSandbox):
    """A real bwrap sandbox whose toolbox program does not exist inside: bwrap has set the
    sandbox up (it started) and then fails to exec it, saying why on its stderr."""

    def toolbox_argv(self) -> list[str]:
        return ["/nonexistent/python3", "-I"]


@pytest.mark.bwrap
async def test_a_toolbox_whose_bwrap_died_after_starting_says_what_bwrap_said(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    req = request(workspace, ["unused"], limits=SandboxLimits(wall_timeout_s=30))
    with pytest.raises(ToolboxError) as raised:
        async with ToolboxClient(_NoInterpreter(), req):
            pass
    assert "/nonexistent/python3: No such file or directory" in str(raised.value)
