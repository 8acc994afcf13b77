"""``synthorg demo``: the whole pipeline on a sample repository with a scripted model."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from synthorg.cli.common import ConfigOption, console, run_async, settings_from
from synthorg.cli.signals import terminate_like_interrupt
from synthorg.cli.untrusted import visible

if TYPE_CHECKING:
    from synthorg.eval.check import CheckOutcome
    from synthorg.settings import Settings

DEMO_SCRIPTS = {
    "openhands": "synthorg.engine.openhands.scripts:openhands_fix_script",
}
"""The scripted demo model per loop; the native loops share one (their tools are the same)."""
NATIVE_DEMO_SCRIPT = "synthorg.engine.native.scripts:demo_fix_script"
DEMO_PROVIDER = "scripted-demo"
DEMO_MODEL = "scripted-demo"


def demo_settings(settings: Settings, loop: str) -> Settings:
    """``settings`` with one scripted provider serving the demo model with the demo-fix script.

    Providers that already serve the demo model are dropped so the binding stays explicit.
    """
    gateway = dict(settings.sections.get("gateway", {}))
    providers = [
        p
        for p in gateway.get("providers", [])
        if p.get("name") != DEMO_PROVIDER and DEMO_MODEL not in p.get("models", [])
    ]
    providers.append(
        {
            "name": DEMO_PROVIDER,
            "kind": "scripted",
            "models": [DEMO_MODEL],
            "script": DEMO_SCRIPTS.get(loop, NATIVE_DEMO_SCRIPT),
            "latency_ms": 20,
        }
    )
    gateway["providers"] = providers
    return settings.model_copy(update={"sections": {**settings.sections, "gateway": gateway}})


def demo(
    loop: str = typer.Option("react", help="Loop: react, plan_execute, hybrid, openhands."),
    directory: Path | None = typer.Option(
        None, help="Where to create the sample repository (default: a new temp dir)."
    ),
    config: Path | None = ConfigOption,
) -> None:
    """Fix a failing test in a sample repo, end to end, with a SCRIPTED model (no key needed)."""
    from synthorg.cli.run import execute_run
    from synthorg.domain import Complexity, Task, TerminationReason, new_id
    from synthorg.service.demo import DEMO_TASK, create_demo_repo
    from synthorg.service.options import RunOptions
    from synthorg.workspace.git import run_git_sync

    settings = demo_settings(settings_from(config), loop)
    # Outside the data dir: no repository may overlap it (service/repositories.py).
    repo = directory or Path(tempfile.mkdtemp(prefix="synthorg-demo-")) / "calc"
    create_demo_repo(repo)
    console.print(
        Panel.fit(
            f"sample repository: {escape(visible(str(repo)))}\n"
            "model: [bold magenta]SCRIPTED[/] (a deterministic demo model served by the gateway's "
            "scripted provider; no model key is used)\n"
            "pipeline: worktree → gateway (bearer, metering) → bwrap sandbox → tools → commit gate",
            title="synthorg demo",
        )
    )
    before = _tests(repo)
    console.print(f"tests before, on main: {'PASS' if before.returncode == 0 else 'FAIL'}")
    task = Task(
        id=new_id("task"),
        project_id="demo",
        prompt=DEMO_TASK,
        complexity=Complexity.SIMPLE,
        repository=str(repo),
    )
    options = RunOptions(loop=loop, model=DEMO_MODEL, provider=DEMO_PROVIDER)
    with terminate_like_interrupt():
        result, record = run_async(execute_run(settings, task, options, None, None))
    if record.workspace is None or result.commit_sha is None:
        console.print("[bold red]the demo did not land a commit[/]")
        raise typer.Exit(1)
    # The landed commit is the agent's code: its tests run in a fresh sandbox, never on the
    # host, and its diff is read from the user's repository through the hardened git runner.
    after = run_async(_tests_in_sandbox(settings, repo, result.commit_sha))
    # The tests, the diff and the commit message are the agent's work: untrusted text.
    tests_output = visible(after.output)
    console.print(Panel(Text(tests_output), title=Text(f"tests on {visible(result.branch or '')}")))
    show = ["show", "--no-textconv", "--no-ext-diff", "--format=%H%n%s%n%n%b", result.commit_sha]
    diff = run_git_sync(show, repo).text
    console.print(Syntax(visible(diff), "diff", theme="ansi_dark"))
    passed = after.passed and result.termination_reason is TerminationReason.COMPLETED
    console.print(
        Text(
            f"tests {'PASS' if passed else 'FAIL'} on branch {visible(result.branch or '')}, "
            f"commit {result.commit_sha[:12]}",
            style=f"bold {'green' if passed else 'red'}",
        )
    )
    raise typer.Exit(0 if passed else 1)


async def _tests_in_sandbox(settings: Settings, repo: Path, commit: str) -> CheckOutcome:
    from synthorg.eval.check import run_commit_in_sandbox
    from synthorg.sandbox import make_sandbox
    from synthorg.service.config import SandboxSettings
    from synthorg.settings import section

    chosen = section(settings, "sandbox", SandboxSettings)
    sandbox = make_sandbox(chosen.backend, allow_local=chosen.allow_local)
    with tempfile.TemporaryDirectory(prefix="synthorg-demo-check-") as scratch:
        return await run_commit_in_sandbox(
            sandbox,
            git_dir=repo / ".git",
            commit=commit,
            argv=["python3", "-m", "unittest", "-v"],
            scratch=Path(scratch),
        )


def _tests(path: Path) -> subprocess.CompletedProcess[str]:
    """The sample repository's tests before the run (SynthOrg wrote them: trusted)."""
    return subprocess.run(
        ["python3", "-m", "unittest", "-v"],
        cwd=path,
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
