"""A full governed run pushes and opens a pull request; its credentials show up nowhere.

The whole service runs for real (store, gateway, MCP server, bwrap sandbox, worktree, commit
gate) around a scripted model that probes the sandbox from the inside: it dumps the
environment of every process it can see, lists the file system and greps every file for every
8-character piece of both credentials, then calls git_push and open_pull_request against
loopback servers that demand those credentials, and probes again.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from synthorg.domain import (
    ActionEvent,
    ObservationEvent,
    Task,
    TerminationReason,
    ToolAuditEvent,
    new_id,
)
from synthorg.logging import configure_logging
from synthorg.service.options import RunOptions
from synthorg.settings import Settings
from tests.mcp.mcp_servers import (
    FetchHandler,
    FetchState,
    ForgeHandler,
    ForgeState,
    GitRemoteHandler,
    GitRemoteState,
    serving,
)
from tests.support import boot_real

from . import leak_scripts as probe
from .leak_scan import LeakFinder, Secret, all_git_objects, files_under

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

MODEL = "scripted-leak-probe"
PROJECT = "leakproj"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "Leak Test",
    "GIT_AUTHOR_EMAIL": "leak@synthorg.invalid",
    "GIT_COMMITTER_NAME": "Leak Test",
    "GIT_COMMITTER_EMAIL": "leak@synthorg.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}
FINDER = LeakFinder(
    [
        Secret("git token", probe.GIT_TOKEN, probe.GIT_USERNAME),
        Secret("forge token", probe.FORGE_TOKEN, probe.GIT_USERNAME),
    ]
)


def git(*args: str, cwd: Path | None = None) -> str:
    """git for the test's own setup and checks (fixed identity, no user config)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEAKTEST_")}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={**env, **_IDENTITY}, capture_output=True, text=True
    )
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout.strip()


class _CurrentStderr:
    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@pytest.fixture
def structured_logs() -> Iterator[list[str]]:
    """The service's structlog output at DEBUG, to stderr (captured) and kept as event dicts."""
    kept: list[str] = []

    def keep(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        kept.append(repr(event))
        return event

    saved = structlog.get_config()
    configure_logging("DEBUG")
    config = structlog.get_config()
    structlog.configure(
        processors=[keep, *config["processors"]],
        # Whatever sys.stderr is when a line is written (pytest swaps it between phases).
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
    )
    try:
        yield kept
    finally:
        structlog.configure(**saved)


def _section(text: str, header: str) -> list[str]:
    """The lines a probe printed after ``header`` up to the next probe marker."""
    lines = text.splitlines()
    start = lines.index(header) + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("==LEAK-PROBE:"))
    return lines[start:end]


def _probe_outputs(events: list[Any]) -> dict[str, list[str]]:
    """Terminal observations by the probe that produced them (each probe must have finished)."""
    commands = {
        e.action_id: e.arguments.get("command", "")
        for e in events
        if isinstance(e, ActionEvent) and e.tool_name == "terminal"
    }
    outputs: dict[str, list[str]] = {}
    names = {probe.ENV_PROBE: "env", probe.FS_PROBE: "fs", probe.GREP_PROBE: "grep"}
    for event in events:
        if isinstance(event, ObservationEvent) and event.action_id in commands:
            name = names[commands[event.action_id]]
            assert probe.PROBE_END in event.content, f"{name} probe cut short: {event.content}"
            outputs.setdefault(name, []).append(event.content)
    return outputs


def _make_project(tmp: Path) -> tuple[Path, Path]:
    repo = tmp / "project"
    repo.mkdir()
    git("init", "-q", "-b", "main", str(repo))
    (repo / "README.md").write_text("a project whose branch gets pushed\n")
    git("add", "README.md", cwd=repo)
    git("commit", "-q", "-m", "initial", cwd=repo)
    remote = tmp / "served" / "project.git"
    git("init", "-q", "--bare", "-b", "main", str(remote))
    git("--git-dir", str(repo / ".git"), "push", "-q", str(remote), "main:main")
    return repo, remote


async def test_full_run_pushes_opens_a_pull_request_and_leaks_no_credential(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    structured_logs: list[str],
) -> None:
    started = time.time()
    caplog.set_level(logging.DEBUG)
    home = tmp_path / "home"
    monkeypatch.setenv("SYNTHORG_HOME", str(home))
    # The only place the credentials exist outside the loopback servers: the variables the
    # MCP config names.
    monkeypatch.setenv(probe.GIT_TOKEN_ENV, probe.GIT_TOKEN)
    monkeypatch.setenv(probe.FORGE_TOKEN_ENV, probe.FORGE_TOKEN)
    repo, remote = _make_project(tmp_path)
    git_state = GitRemoteState(
        root=remote.parent, username=probe.GIT_USERNAME, token=probe.GIT_TOKEN
    )
    forge_state = ForgeState(owner="acme", repo="project", token=probe.FORGE_TOKEN, remote=remote)
    fetch_state = FetchState(pages={p: (b.encode(), {}) for p, b in probe.echo_pages().items()})

    with (
        serving(GitRemoteHandler, git_state) as git_url,
        serving(ForgeHandler, forge_state) as forge_url,
        serving(FetchHandler, fetch_state) as fetch_url,
    ):
        monkeypatch.setenv(probe.FETCH_BASE_ENV, fetch_url)
        settings = Settings(
            home=home,
            sections={
                "gateway": {
                    "providers": [
                        {
                            "name": "scripted",
                            "kind": "scripted",
                            "models": [MODEL],
                            "script": "tests.e2e.leak_scripts:leak_probe_script",
                        }
                    ],
                    "prices": {MODEL: {"input_per_mtok_usd": 3, "output_per_mtok_usd": 15}},
                },
                "run": {"model": MODEL, "shutdown_grace_s": 0.5},
                "mcp": {
                    "projects": [
                        {
                            "project_id": PROJECT,
                            "repository": str(repo),
                            "remote_url": f"{git_url}/project.git",
                            "git_token_env": probe.GIT_TOKEN_ENV,
                            "forge": {
                                "api_base_url": f"{forge_url}/api/v3",
                                "owner": "acme",
                                "repo": "project",
                                "token_env": probe.FORGE_TOKEN_ENV,
                                # Configured, so the forge is asked nothing but the pull.
                                "default_base": probe.PR_BASE,
                            },
                            "fetch": {"allow": [f"{fetch_url}/allowed/"]},
                        }
                    ]
                },
            },
        )
        async with boot_real(settings) as components:
            task = Task(
                id=new_id("task"),
                project_id=PROJECT,
                prompt="Add a probe file, push the branch and open a pull request.",
                repository=str(repo),
            )
            record = await components.service.create(task, RunOptions(loop="react"))
            result = await components.service.run(record.id)
            stored = await components.store.history(record.id, limit=10_000)
            final = await components.store.get_conversation(record.id)
            # While the store is open: its WAL still holds the recent writes.
            live_files = list(FINDER.in_tree(home))
            live_names = {p.name for p in home.rglob("*")}

    assert result.termination_reason is TerminationReason.COMPLETED, result.error
    branch = f"synthorg/{record.id}"
    assert result.branch == branch
    events = [s.event for s in stored]
    assert len(stored) < 10_000

    # -- the credentialed calls did their job, with the credentials -----------------------
    audits = {e.tool: e for e in events if isinstance(e, ToolAuditEvent)}
    assert audits["git_push"].outcome == "ok", audits["git_push"].detail
    assert audits["open_pull_request"].outcome == "ok", audits["open_pull_request"].detail
    pushed = git("--git-dir", str(remote), "rev-parse", f"refs/heads/{branch}")
    # Pushed during the run, before the commit gate committed the work: the branch as it was.
    assert re.search(rf"pushed {re.escape(branch)} at {pushed[:12]}\b", audits["git_push"].detail)
    assert pushed == record.workspace.base_ref  # type: ignore[union-attr]
    assert result.commit_sha is not None and result.commit_sha != pushed
    git("merge-base", "--is-ancestor", pushed, result.commit_sha, cwd=repo)
    assert git_state.authorized >= 2 and git_state.refused == 0  # discovery + pack upload
    assert [(p["head"], p["base"], p["title"]) for p in forge_state.pulls] == [
        (branch, probe.PR_BASE, probe.PR_TITLE)
    ]
    assert forge_state.auth_headers == [f"Bearer {probe.FORGE_TOKEN}"]
    assert "opened pull request #1" in audits["open_pull_request"].detail
    # The upstream echoed the credentials hex-encoded, in Basic headers and across the cap:
    # each fetch succeeded and came back redacted (the scans below find no piece of them).
    fetched = [e for e in events if isinstance(e, ToolAuditEvent) and e.tool == "http_fetch"]
    assert [e.outcome for e in fetched] == ["started", "ok"] * 3, fetched
    assert all("[REDACTED]" in e.detail for e in fetched if e.outcome == "ok")
    assert sorted(fetch_state.served) == sorted(probe.echo_pages())

    # -- the probes ran, to the end, and saw the sandbox ----------------------------------
    outputs = _probe_outputs(events)
    assert {k: len(v) for k, v in outputs.items()} == {"env": 2, "fs": 1, "grep": 2}
    for env_output in outputs["env"]:
        names = {line.split("=", 1)[0] for line in _section(env_output, probe.ENV_HEADER)}
        assert {"PATH", "HOME"} <= names, env_output  # env really printed the environment
        token_like = {n for n in names if "TOKEN" in n.upper() or n.startswith("LEAKTEST")}
        assert not token_like, f"token-like variables inside the sandbox: {token_like}"
        proc = _section(env_output, probe.PROC_HEADER)
        # pid 1 (bwrap, started by the host) is visible; its environment is readable, or
        # refused when the sandbox runs as the dropped user (pid 1 is root's then).
        pid1 = next(i for i, line in enumerate(proc) if line.startswith("-- /proc/1:"))
        seen = proc[pid1 + 1]
        assert ("=" in seen or "Permission denied" in seen) and not seen.startswith("-- "), (
            env_output
        )
    fs = _section(outputs["fs"][0], probe.FS_HEADER)
    assert any(line.endswith(f" {probe.PROBE_FILE}") for line in fs), fs
    for grep_output in outputs["grep"]:
        # The planted fragment is found (so the grep works) and nothing else is.
        assert _section(grep_output, probe.GREP_HEADER) == [probe.CANARY], grep_output
    worktree = Path(record.workspace.path)  # type: ignore[union-attr]
    assert (worktree / probe.PROBE_FILE).read_text() == probe.PROBE_FILE_TEXT

    # -- nowhere: event log, files, git objects, output streams, logs -----------------------
    kinds = {e.kind for e in events}
    assert {"action", "observation", "tool_audit", "checkpoint", "finished"} <= kinds, kinds
    leaks: dict[str, list[str]] = {}
    for name, model in (("run result", result), ("conversation record", final)):
        found = FINDER.in_text(model.model_dump_json())
        if found:
            leaks[name] = found
    for stored_event in stored:
        found = FINDER.in_text(stored_event.model_dump_json())
        if found:
            leaks[f"event #{stored_event.seq} ({stored_event.event.kind})"] = found
    for path, found in live_files:
        leaks[f"file {path} (store open)"] = found
    scanned_roots = [tmp_path, worktree, Path(os.environ["SYNTHORG_HOME"])]
    scanned_roots += [p for p in Path("/tmp").glob("synthorg-*") if p.stat().st_mtime >= started]
    for root in scanned_roots:
        for path, found in FINDER.in_tree(root):
            leaks[f"file {path}"] = found
    # The scans covered the store (with its WAL, while open), the worktree and the keys.
    assert {"store.db", "store.db-wal", probe.PROBE_FILE, "gateway-signing.key"} <= live_names
    assert files_under(worktree) >= 3
    for git_dir in (repo / ".git", remote):
        found = FINDER.in_bytes(all_git_objects(git_dir))
        if found:
            leaks[f"git objects of {git_dir}"] = found
    out, err = capfd.readouterr()
    sys.stderr.write(err[-4000:])  # keep the tail visible if an assertion below fails
    streams = {
        "stdout": out,
        "stderr": err,
        "structlog events": "\n".join(structured_logs),
        "stdlib logs": "\n".join(f"{r.name} {r.getMessage()} {r.__dict__}" for r in caplog.records),
    }
    for where, text in streams.items():
        found = FINDER.in_text(text)
        if found:
            leaks[where] = found
    assert not leaks, f"credential leaked: {leaks}"
    # The logs were captured for real: the service logged its boot and the MCP calls.
    assert "SYNTHORG_BOOTED" in err and "SYNTHORG_BOOTED" in streams["structlog events"]
    assert "git_push" in streams["structlog events"]
