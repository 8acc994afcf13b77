"""Logging: structlog loads with the first line, and the configuration made before it holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
from synthorg.logging import configure_logging, get_logger
from synthorg.sandbox import bwrap  # a module that makes its logger at import time
log = get_logger("probe")
configure_logging("WARNING")
assert "structlog" not in sys.modules, "structlog loaded before any line was logged"
log.info("HIDDEN")
log.warning("SHOWN", n=1)
bwrap.log.error("SANDBOX_LINE")
"""


def test_a_configuration_made_before_structlog_loads_applies_to_the_first_line() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # structlog's default would print to stdout
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(x["event"], x["level"]) for x in lines] == [
        ("SHOWN", "warning"),
        ("SANDBOX_LINE", "error"),
    ]
    assert lines[0]["n"] == 1 and "timestamp" in lines[0]


def test_every_module_logs_through_synthorg_logging() -> None:
    # A module holding structlog's own logger could write before the configuration is applied
    # (structlog's default goes to stdout: an MCP stdio server's protocol channel).
    src = Path(__file__).resolve().parents[1] / "src" / "synthorg"
    direct = [
        str(path.relative_to(src))
        for path in sorted(src.rglob("*.py"))
        if path.name != "logging.py" and "structlog" in path.read_text(encoding="utf-8")
    ]
    assert direct == []
