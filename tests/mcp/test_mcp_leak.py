"""The credentials never leave the server: not in events, logs, tool outputs, files or argv."""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path

import pytest
import structlog
from mcp_world import CONVERSATION, FORGE_TOKEN, GIT_TOKEN, World, call

from synthorg.mcp import McpEndpoints

BRANCH = f"synthorg/{CONVERSATION}"


def _forms(token: str) -> list[str]:
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return [token, basic, token[4:-4]]


def _windows(text: str, size: int = 8) -> set[str]:
    return {text[i : i + size] for i in range(len(text) - size + 1)}


def _pieces(token: str) -> set[str]:
    """Every 8-character piece of the token, its hex, and its base64 at each alignment."""
    raw = token.encode()
    pieces = _windows(token) | _windows(raw.hex()) | _windows(raw.hex().upper())
    for pad in range(3):
        encoded = base64.b64encode(b"\xfe" * pad + raw).decode()
        pieces |= _windows(encoded[-(-8 * pad // 6) :])
    return pieces


def _leaks(text: str) -> list[str]:
    found = [form for t in (GIT_TOKEN, FORGE_TOKEN) for form in _forms(t) if form in text]
    return found + sorted(p for t in (GIT_TOKEN, FORGE_TOKEN) for p in _pieces(t) if p in text)


@pytest.fixture
def argv_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every git command line the server runs, recorded by a wrapper first on PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "git-argv.log"
    wrapper = bindir / "git"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\nexec /usr/bin/git "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return log


async def test_no_credential_escapes_a_push_and_pull_request_session(
    world: World,
    endpoints: McpEndpoints,
    argv_log: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    outputs: list[str] = []
    with structlog.testing.capture_logs() as structured:
        bearer = world.bearer()
        world.commit_on(BRANCH)
        for tool, arguments in [
            ("git_push", {}),
            ("open_pull_request", {"title": "Ship it", "body": "see branch"}),
            ("open_pull_request", {"title": "echo"}),  # the forge echoes the token back
            ("git_push", {"branch": "main"}),
            ("http_fetch", {"url": f"{world.fetch_url}/allowed/hello"}),
        ]:
            result = await call(endpoints, bearer, tool, arguments)
            outputs.append(result.text)

    # The calls did what they should (so the test exercised the credentials for real).
    assert outputs[0].startswith("pushed") and outputs[1].startswith("opened pull request #1")
    assert "[REDACTED]" in outputs[2] and "HTTP 422" in outputs[2]
    assert world.git_state.authorized > 0
    assert world.forge_state.auth_headers[0] == f"Bearer {FORGE_TOKEN}"

    events = await world.audit.of(CONVERSATION)
    assert len(events) == len(outputs)
    event_text = "\n".join(e.model_dump_json() for e in events)
    assert "[REDACTED]" in event_text  # the echoed token, redacted from the detail

    seen = {
        "tool outputs": "\n".join(outputs),
        "audit events": event_text,
        "structured logs": repr(structured),
        "stdlib logs": "\n".join(f"{r.name} {r.getMessage()} {r.__dict__}" for r in caplog.records),
        "stdout/stderr": "".join(capfd.readouterr()),
        "git command lines": argv_log.read_text(),
    }
    assert "push" in seen["git command lines"]
    for where, text in seen.items():
        assert _leaks(text) == [], f"credential found in {where}"

    # Nothing was persisted to disk: not in the project repo, the remote, or anywhere else
    # under the test's directories (git config, reflogs, credential stores, temp files).
    for path in world.tmp.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes().decode("latin-1")
            assert _leaks(data) == [], f"credential written to {path}"


async def test_a_secret_sent_by_the_caller_is_redacted_from_audit_and_outputs(
    world: World, endpoints: McpEndpoints
) -> None:
    # A run that somehow learned a credential must not get it recorded or echoed back
    # (the caller's own transport logs are the caller's business).
    bearer = world.bearer()
    with structlog.testing.capture_logs() as structured:
        fetched = await call(
            endpoints, bearer, "http_fetch", {"url": f"{world.fetch_url}/allowed/x?t={GIT_TOKEN}"}
        )
        pushed = await call(endpoints, bearer, "git_push", {"branch": f"synthorg/{FORGE_TOKEN}"})
    assert fetched.is_error and pushed.is_error
    assert "the arguments contain a credential held by this server" in fetched.text
    assert [e.outcome for e in await world.audit.of(CONVERSATION)] == ["refused", "refused"]
    events = await world.audit.of(CONVERSATION)
    for where, text in {
        "tool outputs": fetched.text + pushed.text,
        "audit events": "\n".join(e.model_dump_json() for e in events),
        "structured logs": repr(structured),
    }.items():
        assert _leaks(text) == [], f"credential found in {where}"
        assert where == "tool outputs" or "[REDACTED]" in text


async def test_no_piece_escapes_when_upstreams_echo_tokens_encoded_or_at_a_cut(
    world: World, endpoints: McpEndpoints, caplog: pytest.LogCaptureFixture
) -> None:
    """Truncation, hex and base64-tail cases: every encoded echo, at every cap, redacted."""
    caplog.set_level(logging.DEBUG)
    pages = {
        "/allowed/hex": f"sha: {GIT_TOKEN.encode().hex()} / {FORGE_TOKEN.encode().hex().upper()}",
        "/allowed/b64": " ".join(
            base64.b64encode(f"{user}:{token}".encode()).decode()
            for user in ("x-access-token", "ab", "a", "")
            for token in (GIT_TOKEN, FORGE_TOKEN)
        ),
        "/allowed/straddle": "z" * 100 + GIT_TOKEN + FORGE_TOKEN + "z" * 100,
    }
    for path, body in pages.items():
        world.fetch_state.pages[path] = (body.encode(), {})
    bearer = world.bearer()
    outputs: list[str] = []
    with structlog.testing.capture_logs() as structured:
        for path in pages:
            # Caps that land everywhere in and around the echoed tokens.
            for cap in (None, 105, 111, 120, 136, 141, 150, 170, 176):
                arguments: dict[str, object] = {"url": f"{world.fetch_url}{path}"}
                if cap is not None:
                    arguments["max_bytes"] = cap
                result = await call(endpoints, bearer, "http_fetch", arguments)
                assert not result.is_error, result.text
                outputs.append(result.text)
        outputs.append(
            (await call(endpoints, bearer, "open_pull_request", {"title": "echo-long"})).text
        )
    assert sum("[REDACTED]" in o for o in outputs) >= 10  # the echoes were there, and redacted
    events = await world.audit.log(CONVERSATION)
    seen = {
        "tool outputs": "\n".join(outputs),
        "audit events": "\n".join(e.model_dump_json() for e in events),
        "structured logs": repr(structured),
        "stdlib logs": "\n".join(f"{r.name} {r.getMessage()} {r.__dict__}" for r in caplog.records),
    }
    for where, text in seen.items():
        assert _leaks(text) == [], f"credential piece found in {where}"
