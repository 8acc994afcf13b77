"""``synthorg doctor``: what this host has, what is missing, and how to fix it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from rich.table import Table

from synthorg.cli.common import console
from synthorg.settings import Settings


class Level(StrEnum):
    """Outcome of one check."""

    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"


@dataclass(frozen=True)
class CheckResult:
    """One doctor line: what was checked, how it went, and the fix when it didn't."""

    name: str
    level: Level
    detail: str
    fix: str = ""


Check = Callable[[Settings], list[CheckResult]]


def check_python(_: Settings) -> list[CheckResult]:
    """The interpreter (the package itself requires Python >= 3.12)."""
    version = ".".join(map(str, sys.version_info[:3]))
    return [CheckResult("python", Level.OK, f"{version} at {sys.executable}")]


def check_git(_: Settings) -> list[CheckResult]:
    """git on PATH, with an identity for commits."""
    git = shutil.which("git")
    if git is None:
        return [CheckResult("git", Level.FAIL, "not found", "apt-get install -y git")]
    version = subprocess.run(
        [git, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return [CheckResult("git", Level.OK, version)]


def check_bwrap(_: Settings) -> list[CheckResult]:
    """bubblewrap present and able to create namespaces here."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return [
            CheckResult(
                "bubblewrap",
                Level.FAIL,
                "not found: runs cannot be sandboxed",
                "apt-get install -y bubblewrap",
            )
        ]
    probe = subprocess.run(
        [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return [
            CheckResult(
                "bubblewrap",
                Level.FAIL,
                f"cannot create namespaces: {probe.stderr.strip()}",
                "enable unprivileged user namespaces or run as root",
            )
        ]
    return [CheckResult("bubblewrap", Level.OK, bwrap)]


DEFAULT_CHECKS: list[Check] = [check_python, check_git, check_bwrap]


def run_checks(settings: Settings, checks: list[Check]) -> list[CheckResult]:
    """Every check's results; a check that crashes is reported, not fatal."""
    results: list[CheckResult] = []
    for check in checks:
        try:
            results.extend(check(settings))
        except Exception as exc:  # doctor must always finish its report
            results.append(CheckResult(check.__name__, Level.FAIL, f"check crashed: {exc!r}"))
    return results


def render(results: list[CheckResult]) -> None:
    """Print the results as a table with the fixes."""
    table = Table(title="synthorg doctor", show_lines=False)
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail")
    table.add_column("how to fix")
    colors = {Level.OK: "green", Level.WARN: "yellow", Level.FAIL: "red"}
    for result in results:
        table.add_row(
            result.name,
            f"[{colors[result.level]}]{result.level.value}[/]",
            result.detail,
            result.fix,
        )
    console.print(table)
