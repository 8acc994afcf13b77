"""`synthorg run` at a terminal: hostile output, confirmation, long tasks, start-up and host errors.

Each test runs the real command in a subprocess with a scripted model and the bwrap sandbox.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from synthorg.service.demo import create_demo_repo
from tests.cli.cli_support import RAW_CONTROL, SYNTHORG, cli_env, sandboxes_of, scripted_config
from tests.cli.serving import serving

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def _run(args: list[str], home: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SYNTHORG, *args],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("engine", ["embedded", "serve"])
def test_escape_sequences_from_the_tool_the_model_and_the_task_never_reach_the_terminal(
    tmp_path: Path, engine: str
) -> None:
    """Also when the run is handed to a serve: its events, record and errors reach this
    terminal over the local socket, and are shown as the in-process run's are."""
    repo = create_demo_repo(tmp_path / "calc")
    config = scripted_config(tmp_path / "c.toml", "tests.cli.scripts:hostile_output")
    with config.open("a") as more:
        more.write(f"[server]\nrepository_roots = [{json.dumps(str(tmp_path))}]\n")
    task = "tidy up \x1b]0;task-title\x07 \x1b[2K\rand \u202eevil"
    home = tmp_path / "home"
    argv = ["run", task, "--repo", str(repo), "-c", str(config), "--engine", engine]
    with contextlib.ExitStack() as stack:
        serve = stack.enter_context(serving(home, config)) if engine == "serve" else None
        done = _run(argv, home)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    if serve is not None:
        assert f"via serve pid {serve.proc.pid}" in out, out
    raw = sorted({f"{ord(c):#04x}" for c in out if c in RAW_CONTROL})
    assert not raw, f"raw control characters on the terminal: {raw}\n{out!r}"
    assert "\u202e" not in out
    # Shown, not interpreted: the reader sees what the tool tried to do.
    assert "\\x1b]52;c;ZXZpbCBjbGlwYm9hcmQ=\\x07" in out
    assert "\\x1b]0;task-title\\x07" in out and "\\u202e" in out
    assert "\\x9b31mc1-csi" in out
    assert "\\x1b]0;finish-title\\x07" in out
    # The imitation of our own line stays inside the observation's gutter.
    fakes = [ln for ln in out.splitlines() if "✔ finished all good" in ln and "printf" not in ln]
    assert fakes and all("│" in fake.split("✔")[0] for fake in fakes), fakes


def test_confirm_without_a_terminal_fails_fast_and_creates_nothing(tmp_path: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    config = scripted_config(tmp_path / "c.toml", "tests.cli.scripts:one_step")
    home = tmp_path / "home"
    done = _run(
        ["run", "go", "--repo", str(repo), "-c", str(config), "--confirm", "risky"],
        home,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--confirm risky needs a terminal" in done.stderr
    assert "Traceback" not in done.stderr
    listed = _run(["conversations", "list"], home)
    assert "conv-" not in listed.stdout, listed.stdout
    from_stdin = _run(
        ["run", "--task-file", "-", "--repo", str(repo), "-c", str(config), "--confirm", "always"],
        home,
        input="go",
    )
    assert from_stdin.returncode == 2 and "--task-file -" in from_stdin.stderr


def _read_until(
    fd: int, pattern: str, deadline: float, seen: list[str], chunk_size: int = 65536
) -> str:
    """Read the pty/pipe ``fd`` until ``pattern`` appears in everything read so far."""
    while pattern not in "".join(seen):
        left = deadline - time.monotonic()
        assert left > 0, f"timed out waiting for {pattern!r}:\n{''.join(seen)}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, chunk_size)
            except OSError:  # the pty closes when the process exits
                chunk = b""
            assert chunk, f"ended before {pattern!r}:\n{''.join(seen)}"
            seen.append(chunk.decode(errors="replace"))
    return "".join(seen)


@pytest.mark.parametrize("engine", ["embedded", "serve"])
@pytest.mark.parametrize(("answer", "ends"), [(b"n\n", "completed"), (b"\x04", "cancelled")])
def test_confirm_risky_asks_for_a_write_hidden_behind_find(
    tmp_path: Path, answer: bytes, ends: str, engine: str
) -> None:
    """`n` rejects the action and the run goes on; end of input (Ctrl-D) cancels the run; the
    same when the run is handed to a running serve (the prompt and the answer stay here)."""
    repo = create_demo_repo(tmp_path / "calc")
    config = scripted_config(tmp_path / "c.toml", "tests.cli.scripts:hidden_write")
    with config.open("a") as more:
        more.write(f"[server]\nrepository_roots = [{json.dumps(str(tmp_path))}]\n")
    home = tmp_path / "home"
    with contextlib.ExitStack() as stack:
        serve = stack.enter_context(serving(home, config)) if engine == "serve" else None
        out = _confirm_at_a_terminal(home, repo, config, answer, ends, engine)
        if serve is not None:
            assert f"engine: via serve pid {serve.proc.pid}" in out, out
    worktree = next((home / "worktrees").glob("*/*"))
    assert not (worktree / "found.txt").exists(), "a refused action ran"
    conversation = re.search(r"conversation (conv-[0-9a-f]+)", out)
    assert conversation, out
    shown = _run(["conversations", "show", conversation.group(1)], home)
    assert "waiting_confirmation" not in shown.stdout, shown.stdout
    if ends == "completed":
        assert "rejected" in out and (worktree / "progress.txt").exists()
    else:
        assert "stdin was closed" in out


def _confirm_at_a_terminal(
    home: Path, repo: Path, config: Path, answer: bytes, ends: str, engine: str
) -> str:
    argv = [*SYNTHORG, "run", "go", "--repo", str(repo), "-c", str(config), "--engine", engine]
    primary, secondary = pty.openpty()
    run = subprocess.Popen(
        [*argv, "--confirm", "risky"],
        env=cli_env(home),
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
    )
    os.close(secondary)
    try:
        seen: list[str] = []
        prompt = _read_until(primary, "[y/N]", time.monotonic() + 180, seen)
        assert "-fprintf" in prompt and "high risk" in prompt, prompt
        os.write(primary, answer)
        out = _read_until(primary, "conversations events", time.monotonic() + 180, seen)
        assert run.wait(timeout=60) == (0 if ends == "completed" else 1), out
    finally:
        if run.poll() is None:
            run.kill()
        os.close(primary)
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)  # a terminal gets our colours
    assert re.search(rf"termination\s+\S\s*{ends}", out), out
    return out


def test_a_task_longer_than_an_argument_can_be_comes_from_stdin(tmp_path: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    config = scripted_config(tmp_path / "c.toml", "tests.cli.scripts:one_step")
    home = tmp_path / "home"
    task = "Write one line.\n" + "context " * 40_000  # 320 KB: over Linux's 128 KiB per argument
    with pytest.raises(OSError, match="Argument list too long"):
        _run(["run", task, "--repo", str(repo), "-c", str(config)], home)
    done = _run(
        ["run", "--task-file", "-", "--repo", str(repo), "-c", str(config)], home, input=task
    )
    assert done.returncode == 0, done.stdout + done.stderr
    task_file = tmp_path / "task.md"
    task_file.write_text(task)
    again = _run(["run", "-f", str(task_file), "--repo", str(repo), "-c", str(config)], home)
    assert again.returncode == 0, again.stdout + again.stderr
    ids = re.findall(r"conversation (conv-[0-9a-f]+)", done.stdout + again.stdout)
    assert len(set(ids)) == 2
    for conversation in set(ids):
        shown = _run(["conversations", "events", conversation], home)
        assert "user: Write one line." in shown.stdout, shown.stdout[:2000]


def test_ctrl_c_during_start_up_prints_no_traceback(tmp_path: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    config = scripted_config(tmp_path / "c.toml", "tests.cli.scripts:one_step")
    args = ["--repo", str(repo), "-c", str(config)]
    # -X importtime reports each import as it completes: interrupt while the run's machinery
    # is still being imported, then as late in start-up as a held child allows.
    # The child's stderr is a one-page pipe the test stops reading at the marker: the child
    # then blocks at its next import line, so the signal lands inside start-up however busy
    # the machine is. Only a marker followed by more than a pipe's worth of import lines holds
    # it there (boot itself imports ~1 KiB: signalled at its marker, a descheduled test
    # could reach a run that had finished), so the late marker is the import that leaves
    # 8 KiB of them after it in an uninterrupted start-up of the same command.
    command = [*SYNTHORG[:1], "-X", "importtime", *SYNTHORG[1:], "run", "go", *args]
    reference = subprocess.run(
        command, env=cli_env(tmp_path / "ref-home"), capture_output=True, text=True, timeout=240
    )
    assert reference.returncode == 0, reference.stderr[-2000:]
    imports = [ln for ln in reference.stderr.splitlines() if ln.startswith("import time:")]
    tail, late = 0, imports[-1]
    for line in reversed(imports):
        tail += len(line) + 1
        late = line
        if tail > 8192:
            break
    late_marker = late.rsplit("|", 1)[1].strip()
    for marker in ("synthorg.cli.signals", late_marker):
        read_end, write_end = os.pipe()
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
        # As from a terminal: a suite started as a background job (SIGINT ignored, which an
        # exec'd child inherits) would otherwise test a child that rightly ignores Ctrl-C.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            run = subprocess.Popen(
                command,
                env=cli_env(tmp_path / "home"),
                stdout=subprocess.DEVNULL,
                stderr=write_end,
            )
        finally:
            signal.signal(signal.SIGINT, previous)
        os.close(write_end)
        seen: list[str] = []
        with open(read_end, "rb") as err_pipe:
            _read_until(read_end, f" {marker}\n", time.monotonic() + 120, seen, chunk_size=512)
            assert run.poll() is None, "the run got past start-up before the signal"
            run.send_signal(signal.SIGINT)
            err = err_pipe.read()
        run.wait(timeout=120)
        text = "".join(seen) + err.decode(errors="replace")
        assert "Traceback" not in text, text[-3000:]
        assert run.returncode in (1, 130), (marker, run.returncode, text[-2000:])
    assert not sandboxes_of(tmp_path / "home")


def test_host_problems_end_in_one_line_and_exit_2(tmp_path: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    config = scripted_config(tmp_path / "c.toml", "tests.cli.scripts:one_step")
    not_a_dir = tmp_path / "home-is-a-file"
    not_a_dir.write_text("")
    for args in (["conversations", "list"], ["run", "go", "--repo", str(repo), "-c", str(config)]):
        done = _run(args, not_a_dir)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "SYNTHORG_HOME" in done.stderr, done.stderr

    # A data dir on a read-only file system (bwrap binds it read-only for this one process).
    home = tmp_path / "ro-home"
    assert _run(["conversations", "list"], home).returncode == 0
    read_only_home = ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(home), str(home), "--"]
    read_only = subprocess.run(
        [*read_only_home, *SYNTHORG, "run", "go", "--repo", str(repo), "-c", str(config)],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert read_only.returncode == 2, read_only.stdout + read_only.stderr
    assert "Traceback" not in read_only.stderr
    assert "read-only" in read_only.stderr, read_only.stderr

    typo = tmp_path / "typo.toml"
    typo.write_text('[sandbx]\nbackend = "local"\n')
    done = _run(["conversations", "list", "-c", str(typo)], tmp_path / "home")
    assert done.returncode == 2 and "unknown config section [sandbx]" in done.stderr
