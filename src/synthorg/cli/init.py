"""``synthorg init``: write a commented ``synthorg.toml`` for a repository and check the host.

The file is rendered from the packaged template, validated with the project's own config
loader before it is placed, and placed with a hard link, which fails if the name exists: an
existing file is never clobbered, even by a concurrent ``init``. Nothing secret is written:
providers and tools name the environment variables that hold their keys.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from importlib import resources
from pathlib import Path
from string import Template

import typer

from synthorg.cli.common import console, fail

CONFIG_NAME = "synthorg.toml"
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def project_id_for(repository: Path) -> str:
    """An identifier (``[A-Za-z0-9][A-Za-z0-9._-]*``, ≤128) made from the repository's name."""
    cleaned = _ID_UNSAFE.sub("-", repository.name).strip("-._")[:128]
    return cleaned or "project"


def render_config(repository: Path) -> str:
    """The commented config for ``repository`` (an absolute path), from the packaged template."""
    template = resources.files("synthorg.cli").joinpath("templates", CONFIG_NAME).read_text()
    # A JSON string is a valid TOML basic string for any text; paths that are not UTF-8
    # (surrogate escapes) cannot be written in TOML at all.
    path = str(repository)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        fail(f"the repository path {path!r} is not valid UTF-8; TOML cannot name it")
    return Template(template).substitute(
        project_id=project_id_for(repository), repository=json.dumps(path)
    )


def repository_root(directory: Path) -> Path:
    """The top of the git work tree holding ``directory``."""
    from synthorg.workspace.git import run_git_sync

    result = run_git_sync(["rev-parse", "--show-toplevel"], directory, check=False)
    if result.returncode != 0:
        fail(f"{directory} is not inside a git repository: `git init` it first")
    return Path(result.stdout.decode().strip()).resolve()


def validate_config(path: Path) -> None:
    """Load ``path`` with the config loader and validate every section with its owner's model."""
    from pydantic import BaseModel

    from synthorg.gateway.config import GatewayConfig
    from synthorg.mcp.config import McpConfig
    from synthorg.server.config import ServerSettings
    from synthorg.service.config import GateSettings, RunDefaults, SandboxSettings
    from synthorg.settings import load_settings, section
    from synthorg.store.config import StoreConfig

    settings = load_settings(path, env={})
    _ = settings.engine
    models: dict[str, type[BaseModel]] = {
        "gateway": GatewayConfig,
        "mcp": McpConfig,
        "run": RunDefaults,
        "sandbox": SandboxSettings,
        "gate": GateSettings,
        "server": ServerSettings,
        "store": StoreConfig,
    }
    for name, model in models.items():
        section(settings, name, model)


def place_new(target: Path, text: str) -> bool:
    """Write ``text`` to ``target`` only if nothing is there; False when something is.

    The text is validated by the config loader from a temporary file next to the target; the
    hard link that publishes it fails with EEXIST instead of replacing an existing file.
    """
    fd, temp_name = tempfile.mkstemp(prefix=".synthorg-init-", suffix=".toml", dir=target.parent)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(temp, 0o644)
        validate_config(temp)  # a template that does not load is a bug: never place it
        try:
            os.link(temp, target)
        except FileExistsError:
            return False
        return True
    finally:
        temp.unlink(missing_ok=True)


def init(
    directory: Path = typer.Argument(
        Path("."), help="A directory inside the repository (default: the current one)."
    ),
    check_host: bool = typer.Option(
        True, "--check/--no-check", help="Also run the doctor's host checks."
    ),
) -> None:
    """Write a commented synthorg.toml at the repository's root and check this host.

    An existing synthorg.toml is left as it is. Exits 1 when a host check fails (the file is
    written all the same).
    """
    root = repository_root(directory.expanduser().resolve())
    target = root / CONFIG_NAME
    if target.exists() or target.is_symlink():
        console.print(f"{target} exists: left unchanged")
    elif place_new(target, render_config(root)):
        console.print(f"wrote {target}")
        console.print(f"use it with: export SYNTHORG_CONFIG={target}")
    else:
        console.print(f"{target} appeared meanwhile: left unchanged")
    if not check_host:
        return
    from synthorg.cli import doctor as doctor_checks
    from synthorg.settings import load_settings

    settings = load_settings(target)
    results = doctor_checks.run_checks(settings, doctor_checks.DEFAULT_CHECKS)
    doctor_checks.render(results)
    if any(result.level is doctor_checks.Level.FAIL for result in results):
        raise typer.Exit(1)
