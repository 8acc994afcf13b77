"""``synthorg doctor``: what this host has, what is missing, and how to fix it."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from synthorg.cli.common import console
from synthorg.errors import ConfigError, SynthOrgError
from synthorg.sandbox.protocol import BoundaryStatus
from synthorg.settings import Settings, section
from synthorg.workspace.git import run_git_sync


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
    version = run_git_sync(["--version"], Path.cwd(), check=False).text.strip()
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
    # Namespaces alone are not enough: in a container the default seccomp profile refuses
    # sethostname and a masked /proc refuses a new procfs, both of which every sandbox does.
    sandbox_like = ["--hostname", "sandbox", "--proc", "/proc", "--dev", "/dev"]
    probe = subprocess.run(
        [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", *sandbox_like, "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return [
            CheckResult(
                "bubblewrap",
                Level.FAIL,
                f"cannot make a sandbox: {probe.stderr.strip()}; runs are refused "
                "(never started unsandboxed)",
                "enable unprivileged user namespaces or run as root; in a container run it "
                "with seccomp=unconfined, systempaths=unconfined (podman: unmask=ALL) and "
                "apparmor=unconfined (deploy/compose.yaml, docs/deploy.md); under chroot "
                "isolation (buildah --isolation chroot) sandboxes cannot nest at all",
            )
        ]
    return [CheckResult("bubblewrap", Level.OK, bwrap)]


def check_sandbox(settings: Settings) -> list[CheckResult]:
    """The configured backend's boundary table as it holds on this host."""
    from synthorg.sandbox import make_sandbox
    from synthorg.service.config import SandboxSettings

    config = section(settings, "sandbox", SandboxSettings)
    try:
        backend = make_sandbox(config.backend, allow_local=config.allow_local)
    except SynthOrgError as exc:  # e.g. root without the sandbox user: say how to fix it
        return [CheckResult("sandbox", Level.FAIL, str(exc), "run scripts/bootstrap.sh as root")]
    declaration = backend.boundary()
    results = []
    for row in declaration.rows:
        level = Level.OK if row.status is BoundaryStatus.ENFORCED else Level.WARN
        if config.backend == "local":
            level = Level.WARN
        detail = f"[{declaration.backend}] {row.on_this_host}"
        results.append(CheckResult(f"sandbox {row.boundary}", level, detail, row.warning or ""))
    if config.backend == "local":
        results.append(
            CheckResult(
                "sandbox backend",
                Level.WARN,
                "LOCAL backend: NO ISOLATION. Agents run with your user's full access.",
                'set [sandbox] backend = "bwrap"',
            )
        )
    return results


def check_sandbox_tools(_: Settings) -> list[CheckResult]:
    """What the bwrap backend's protections need: the uid drop, seccomp, the disk quota."""
    from synthorg.sandbox.identity import IdentityMode, resolve_identity
    from synthorg.sandbox.quota import unavailable_reason
    from synthorg.sandbox.seccomp import filter_program

    results = []
    try:
        identity = resolve_identity()
        level = Level.WARN if identity.mode is IdentityMode.ROOT else Level.OK
        results.append(CheckResult("sandbox user", level, identity.describe))
    except SynthOrgError as exc:
        results.append(
            CheckResult("sandbox user", Level.FAIL, str(exc), "run scripts/bootstrap.sh as root")
        )
    if shutil.which("setpriv", path="/usr/bin:/bin") is None:
        fix = "apt-get install -y util-linux"
        results.append(CheckResult("setpriv", Level.FAIL, "missing: no uid drop", fix))
    try:
        size = len(filter_program())
        results.append(CheckResult("seccomp", Level.OK, f"filter compiled ({size} bytes of BPF)"))
    except SynthOrgError as exc:
        fix = "apt-get install -y libseccomp2"
        results.append(CheckResult("seccomp", Level.FAIL, str(exc), fix))
    why = unavailable_reason()
    if why is None:
        results.append(CheckResult("disk quota", Level.OK, "loop ext4 per run (mkfs.ext4, rsync)"))
    else:
        fix = "run as root with e2fsprogs and rsync installed (scripts/bootstrap.sh)"
        results.append(CheckResult("disk quota", Level.WARN, why, fix))
    return results


def check_host_work(settings: Settings) -> list[CheckResult]:
    """What confines a run's host-side work (host git, mkfs, rsync) and its budget."""
    from synthorg.sandbox.hostcgroup import describe, host_parent
    from synthorg.service.config import HostWorkSettings

    limits = section(settings, "limits", HostWorkSettings)
    budget = (
        f"; budget {limits.host_work_cpu_s:g} CPU-s per run, {limits.host_work_wall_s:g} s per "
        f"step, {limits.host_work_cpu_quota:g} cores"
    )
    if host_parent() is None:
        fix = "run as root with a writable cpu cgroup, or delegate a v2 cgroup"
        return [CheckResult("host work", Level.WARN, describe() + budget, fix)]
    return [CheckResult("host work", Level.OK, describe() + budget)]


def check_store(settings: Settings) -> list[CheckResult]:
    """The configured store opens and answers."""
    from synthorg.service.store import opened_store, store_config
    from synthorg.store.config import describe

    where = describe(store_config(settings).resolved_url())

    async def probe() -> int:
        async with opened_store(settings) as store:
            return await store.count_conversations()

    try:
        count = asyncio.run(probe())
    except Exception as exc:  # report, don't crash: doctor is for broken setups
        return [CheckResult("store", Level.FAIL, f"{where}: {exc}", "check [store] url")]
    return [CheckResult("store", Level.OK, f"{where} ({count} conversations)")]


def check_providers(settings: Settings) -> list[CheckResult]:
    """Providers flagged for reporting more usage than a request was admitted for."""
    from synthorg.service.store import opened_store

    async def probe() -> dict[str, int]:
        async with opened_store(settings) as store:
            return await store.overreporting_providers()

    try:
        flagged = asyncio.run(probe())
    except Exception as exc:  # the store check reports the store itself
        return [CheckResult("providers", Level.WARN, f"could not read the ledger: {exc}")]
    if not flagged:
        return [CheckResult("providers", Level.OK, "no provider over-reported usage")]
    return [
        CheckResult(
            f"provider {name}",
            Level.WARN,
            f"reported more usage than admitted for {count} run(s), each killed "
            "(upstream_overreport): it ignores max_tokens or misreports",
            "check the provider, its model's max_output_tokens, and the ledger's killed runs",
        )
        for name, count in flagged.items()
    ]


def check_openhands_runtime(settings: Settings) -> list[CheckResult]:
    """Whether the OpenHands runtime venv is built for the current lockfile."""
    from synthorg.runtime.installer import find_uv
    from synthorg.runtime.openhands import runtime_status

    status = runtime_status(settings.home)
    if status.built:
        return [CheckResult("openhands runtime", Level.OK, f"built at {status.venv_path}")]
    try:
        find_uv()
        fix = "synthorg runtime build openhands"
    except ConfigError as exc:  # the all-in-one image without the runtime ships no uv
        fix = str(exc)
    return [
        CheckResult(
            "openhands runtime",
            Level.WARN,
            f"not built (lock {status.lock_hash}); the openhands loop is unavailable",
            fix,
        )
    ]


def check_temporal(settings: Settings) -> list[CheckResult]:
    """With ``[distributed] engine = "temporal"``: the server answers, which workers poll."""
    from synthorg.distributed.config import distributed_config

    config = distributed_config(settings)
    if config.engine != "temporal":
        return [CheckResult("temporal", Level.OK, "not used (embedded engine)")]
    try:
        from synthorg.distributed.health import probe
    except ImportError as exc:
        from synthorg.extras import install_hint

        return [CheckResult("temporal", Level.FAIL, str(exc), install_hint("temporal"))]
    where = f"{config.address} namespace {config.namespace} queue {config.task_queue}"
    try:
        health = asyncio.run(probe(config))
    except Exception as exc:  # report, don't crash: doctor is for broken setups
        detail = f"{where}: {type(exc).__name__}: {exc}"
        return [CheckResult("temporal", Level.FAIL, detail, "start Temporal; check [distributed]")]
    results = [CheckResult("temporal", Level.OK, f"{where}, server {health.server_version}")]
    if health.workers:
        results.append(
            CheckResult(
                "temporal workers", Level.OK, f"{len(health.workers)}: " + ", ".join(health.workers)
            )
        )
    else:
        results.append(
            CheckResult(
                "temporal workers", Level.WARN, "none polling: runs wait", "synthorg worker"
            )
        )
    return results


DEFAULT_CHECKS: list[Check] = [
    check_python,
    check_git,
    check_bwrap,
    check_sandbox_tools,
    check_sandbox,
    check_host_work,
    check_store,
    check_providers,
    check_openhands_runtime,
    check_temporal,
]


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
            escape(result.detail),
            escape(result.fix),
        )
    console.print(table)
