"""The OpenHands lockfile is fully hash-pinned and excludes the agent server."""

from __future__ import annotations

import re

from synthorg.runtime.files import lockfile_path
from synthorg.runtime.openhands import lock_hash


def requirements() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes), parsed from the continuation-line format uv writes."""
    text = lockfile_path().read_text()
    entries: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=\S)", text):
        first = block.splitlines()[0]
        if first.startswith("#") or not first.strip():
            continue
        match = re.match(r"([A-Za-z0-9_.\-]+)==(\S+)", first)
        assert match, f"unpinned requirement line: {first!r}"
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
        entries[match.group(1).lower()] = (match.group(2), hashes)
    return entries


def test_every_requirement_is_pinned_with_hashes() -> None:
    entries = requirements()
    assert len(entries) > 50  # the SDK's closure, not just the two top-level names
    missing = [name for name, (_, hashes) in entries.items() if not hashes]
    assert missing == []


def test_sdk_and_tools_pinned_to_158_without_agent_server() -> None:
    entries = requirements()
    assert entries["openhands-sdk"][0].startswith("1.58.")
    assert entries["openhands-tools"][0].startswith("1.58.")
    assert "openhands-agent-server" not in entries


def test_lock_hash_is_16_hex_of_the_file() -> None:
    digest = lock_hash()
    assert re.fullmatch(r"[0-9a-f]{16}", digest)
    assert lock_hash() == digest
