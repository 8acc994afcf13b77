"""Server start-up imports only what it needs before listening (timings: serve_startup_bench)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_booting_a_server_imports_neither_mcp_nor_httpx(tmp_path: Path) -> None:
    # The MCP app is built in the background once the server listens (LazyAsgi), and the
    # Anthropic provider and the native model client (httpx) only when used: none belongs on
    # the start-up path. PyJWT (cryptography's x509) is loaded by the first bearer,
    # pygit2 by the first in-process ref read or checkpoint.
    probe = (
        "import json, sys\n"
        "import synthorg.cli.serve, synthorg.service.boot, synthorg.service.loops\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(SYNTHORG_HOME=str(tmp_path), PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded = {name.split(".")[0] for name in json.loads(done.stdout)}
    heavy = {"mcp", "mcp_types", "httpx", "jwt", "pygit2"}
    assert not loaded & heavy, sorted(loaded & heavy)
    assert "synthorg.gateway.providers.anthropic" not in json.loads(done.stdout)
