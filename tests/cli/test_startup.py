"""CLI start-up: a command imports only what it uses (timings are in benchmarks/cli_bench.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from synthorg.cli.app import COMMANDS, load_command

HEAVY = (
    "fastapi",
    "mcp",
    "psycopg",
    "uvicorn",
    "httpx",
    "starlette",
    "openai",
    "litellm",
    "temporalio",
)
ROOT = Path(__file__).resolve().parents[2]


def _modules_after(code: str, home: Path) -> set[str]:
    """Top-level packages loaded by ``code`` in a fresh interpreter."""
    probe = (
        "import json, sys\n"
        "try:\n"
        + "".join(f"    {line}\n" for line in code.splitlines())
        + "except SystemExit:\n    pass\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} | set(sys.modules))),"
        " file=sys.__stderr__)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(SYNTHORG_HOME=str(home), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_importing_the_cli_pulls_in_no_server_or_network_library(tmp_path: Path) -> None:
    loaded = _modules_after("import synthorg.cli.app", tmp_path)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    # Not even pydantic, rich or structlog: `synthorg --help` needs typer alone.
    assert not loaded & {"pydantic", "rich", "structlog"}, sorted(loaded)


def test_help_lists_every_command_without_importing_any(tmp_path: Path) -> None:
    loaded = _modules_after(
        "sys.argv = ['synthorg', '--help']\nfrom synthorg.cli.app import main\nmain()", tmp_path
    )
    modules = {target.partition(":")[0] for target, _help in COMMANDS.values()}
    assert not loaded & modules, sorted(loaded & modules)
    assert not loaded & {*HEAVY, "pydantic", "rich"}, sorted(loaded & {*HEAVY, "pydantic"})


def test_listing_conversations_loads_no_server_library(tmp_path: Path) -> None:
    loaded = _modules_after(
        "sys.argv = ['synthorg', 'conversations', 'list']\n"
        "from synthorg.cli.app import main\nmain()",
        tmp_path,
    )
    assert "synthorg.cli.conversations" in loaded and "synthorg.store.sqlite" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    assert "synthorg.engine.runner" not in loaded
    # Nothing is logged, so structlog (and rich's traceback printers it loads) stays out.
    assert not loaded & {"structlog", "rich.traceback"}, sorted(loaded & {"structlog"})


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_lazy_command_loads_and_has_help(name: str) -> None:
    command = load_command(name)
    assert command.name == name
    assert command.get_short_help_str().strip()
