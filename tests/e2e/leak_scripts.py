"""The leak probe's scripted model: work, dump what the sandbox sees, push, open a PR, finish.

Importable as ``tests.e2e.leak_scripts:leak_probe_script``. The credentials are made here (fresh
per process) so the probe can hunt for them inside the sandbox. The model never writes a
credential, nor any 8-character piece of one, into a command: commands assemble the secrets in
the shell from pieces of at most five characters, so the event log (which records every
command) stays a fair place to look for leaks.
"""

from __future__ import annotations

import base64
import os
import secrets
import string
from collections.abc import Sequence

from synthorg.engine.native.scripts import Tools, offered, steps_of
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage

_ALPHABET = string.ascii_letters + string.digits


def _token(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(36))


GIT_TOKEN = _token("ghs_")
"""The git remote's credential (Basic auth as GIT_USERNAME)."""
FORGE_TOKEN = _token("ghp_")
"""The forge API's credential (Bearer)."""
GIT_USERNAME = "x-access-token"
GIT_TOKEN_ENV = "LEAKTEST_GIT_TOKEN"
FORGE_TOKEN_ENV = "LEAKTEST_FORGE_TOKEN"

PROBE_FILE = "leak-probe.txt"
PROBE_FILE_TEXT = "written in the sandbox by the leak probe\n"
PR_TITLE = "Leak probe"
PR_BASE = "main"
CANARY = "/tmp/leak-canary/planted"
"""A file the grep probe plants with a credential fragment: proof the grep can find one."""

ENV_HEADER = "==LEAK-PROBE:ENV=="
PROC_HEADER = "==LEAK-PROBE:PROC-ENVIRON=="
FS_HEADER = "==LEAK-PROBE:FS=="
GREP_HEADER = "==LEAK-PROBE:GREP=="
PROBE_END = "==LEAK-PROBE:END=="


def _assemble(var: str, secret: str) -> str:
    """Shell that builds ``secret`` in ``var`` from pieces too short to be a leak themselves."""
    pieces = [secret[i : i + 5] for i in range(0, len(secret), 5)]
    return f"{var}=''; " + " ".join(f"{var}+='{p}';" for p in pieces)


ENV_PROBE = (
    f"echo '{ENV_HEADER}'; env; "
    f"echo '{PROC_HEADER}'; tr '\\0' '\\n' < /proc/self/environ; "
    # Every process the sandbox can see, its command line and environment (pid 1 included).
    "for p in /proc/[0-9]*; do "
    "echo \"-- $p: $(tr '\\0' ' ' < \"$p/cmdline\" 2>/dev/null)\"; "
    "tr '\\0' '\\n' < \"$p/environ\" 2>/dev/null; done; "
    f"echo '{PROBE_END}'"
)

FS_PROBE = (
    f"echo '{FS_HEADER}'; "
    "ls -la / /tmp /tmp/home /state /run /run/synthorg /workspace /opt/synthorg 2>&1; "
    "cat /workspace/.git 2>&1; ls -la ~ 2>&1; cat ~/.gitconfig ~/.git-credentials 2>&1; "
    "git -C /workspace config --list --show-origin 2>&1; "
    f"echo '{PROBE_END}'"
)

_FRAGMENTS = 'frags() { local s=$1 i; for ((i=0; i+8<=${#s}; i++)); do echo "${s:i:8}"; done; }; '

GREP_PROBE = (
    f"echo '{GREP_HEADER}'; "
    + _assemble("G", GIT_TOKEN)
    + " "
    + _assemble("F", FORGE_TOKEN)
    + " "
    + _FRAGMENTS
    # The Basic forms; the first 20 base64 characters encode only the user name: skip them.
    + f"BG=$(printf '{GIT_USERNAME}:%s' \"$G\" | base64 -w0); "
    + f"BF=$(printf '{GIT_USERNAME}:%s' \"$F\" | base64 -w0); "
    + f'mkdir -p "$(dirname {CANARY})"; printf \'%s\\n\' "${{G:7:8}}" > {CANARY}; '
    # Every file but the host's read-only system files (/usr, the interpreter) and the kernel's
    # (/proc is dumped by the environment probe), against every 8-character fragment. The
    # patterns travel in grep's argv only, which nothing but /proc shows.
    + "PYD=$(python3 -I -S -c 'import sys; print(sys.base_prefix)'); "
    + 'PATS=$(frags "$G"; frags "$F"; frags "${BG:20}"; frags "${BF:20}"); '
    + 'find / \\( -path /proc -o -path /sys -o -path /dev -o -path /usr -o -path "$PYD" \\) '
    + '-prune -o -type f -print0 | xargs -0 -r grep -IlsF -e "$PATS"; '
    + f"rm -rf \"$(dirname {CANARY})\"; echo '{PROBE_END}'"
)

FETCH_BASE_ENV = "LEAK_PROBE_FETCH_BASE"
"""Where the test serves pages that echo the credentials back (read when the script runs)."""
FETCH_CAP = 120
"""The size cap of the truncation probe: it lands inside the echoed git token."""


def echo_pages() -> dict[str, str]:
    """Pages a careless upstream might serve: the credentials hex-encoded, in Basic headers
    (every base64 alignment, with its tail), and across the fetch's size cap."""
    basic = " ".join(
        base64.b64encode(f"{user}:{token}".encode()).decode()
        for user in (GIT_USERNAME, "ab", "a", "")
        for token in (GIT_TOKEN, FORGE_TOKEN)
    )
    return {
        "/allowed/echo-hex": f"{GIT_TOKEN.encode().hex()} {FORGE_TOKEN.encode().hex().upper()}",
        "/allowed/echo-basic": basic,
        "/allowed/echo-cut": "z" * (FETCH_CAP - 11) + GIT_TOKEN + FORGE_TOKEN,
    }


def _fetches() -> tuple[tuple[str, dict[str, object]], ...]:
    base = os.environ[FETCH_BASE_ENV]
    return (
        ("http_fetch", {"url": f"{base}/allowed/echo-hex"}),
        ("http_fetch", {"url": f"{base}/allowed/echo-basic"}),
        ("http_fetch", {"url": f"{base}/allowed/echo-cut", "max_bytes": FETCH_CAP}),
    )


_TURNS: tuple[tuple[str, dict[str, object]], ...] = (
    ("file_editor", {"command": "create", "path": PROBE_FILE, "file_text": PROBE_FILE_TEXT}),
    ("terminal", {"command": ENV_PROBE}),
    ("terminal", {"command": FS_PROBE}),
    ("terminal", {"command": GREP_PROBE}),
    ("git_push", {}),
    (
        "open_pull_request",
        {"title": PR_TITLE, "body": "Opened by the leak probe.", "base": PR_BASE},
    ),
    # Once more after the credentialed calls: nothing may have appeared in the meantime.
    ("terminal", {"command": ENV_PROBE}),
    ("terminal", {"command": GREP_PROBE}),
)
PROBE_COUNT = sum(1 for name, _ in _TURNS if name == "terminal")


def leak_probe_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """One step of _TURNS per turn, then finish; refuses to go on if the MCP tools are missing."""
    missing = {"git_push", "open_pull_request", "http_fetch"} - offered(tools)
    if missing:
        return ScriptedTurn.call("finish", message=f"MCP tools not offered: {sorted(missing)}")
    done = len(steps_of(messages))
    turns = _TURNS[:-2] + _fetches() + _TURNS[-2:]  # the last probes run after the fetches
    if done < len(turns):
        name, arguments = turns[done]
        return ScriptedTurn.call(name, f"Leak probe step {done + 1}.", **arguments)
    return ScriptedTurn.call("finish", message="leak probe done")
