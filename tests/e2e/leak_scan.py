"""Finding a credential in any form: plain, hex, base64 (any alignment), any 8-character piece."""

from __future__ import annotations

import base64
import os
import re
import stat
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

FRAGMENT = 8
"""The shortest piece of a credential that counts as a leak."""


def _windows(text: str) -> set[str]:
    return {text[i : i + FRAGMENT] for i in range(len(text) - FRAGMENT + 1)}


@dataclass(frozen=True)
class Secret:
    """One credential and the user name it is sent with in a Basic header."""

    name: str
    value: str
    basic_user: str

    def forms(self) -> set[str]:
        """Every 8-character piece of the credential, of its hex, and of its base64.

        base64("user:token") is cut where the token starts when ``len("user:")`` is a
        multiple of 3; then its tail is base64(token), whose pieces are what a leak shows. The
        token's own base64 characters at the two other alignments (after 1 or 2 other bytes)
        and its hex (either case) count too.
        """
        prefix = f"{self.basic_user}:".encode()
        basic = base64.b64encode(prefix + self.value.encode()).decode()
        cut = (len(prefix) // 3) * 4
        raw = self.value.encode()
        forms = _windows(self.value) | _windows(basic[cut:])
        forms |= _windows(raw.hex()) | _windows(raw.hex().upper())
        for pad in (1, 2):
            encoded = base64.b64encode(b"\xfe" * pad + raw).decode()
            forms |= _windows(encoded[-(-8 * pad // 6) :])
        return forms


class LeakFinder:
    """Looks for every form of a set of secrets in text, bytes and directory trees."""

    def __init__(self, secrets: Iterable[Secret]) -> None:
        self.secrets = tuple(secrets)
        forms = {form: s.name for s in self.secrets for form in s.forms()}
        self._owner = forms
        # One alternation of literals: a single pass over each text or file.
        pattern = "|".join(sorted(map(re.escape, forms), key=len, reverse=True))
        self._text = re.compile(pattern)
        self._bytes = re.compile(pattern.encode())

    def in_text(self, text: str) -> list[str]:
        """Which secrets appear in ``text`` (with the matched piece, never the whole)."""
        return sorted({f"{self._owner[m]} ({len(m)} chars)" for m in self._text.findall(text)})

    def in_bytes(self, data: bytes) -> list[str]:
        """Which secrets appear in ``data``."""
        found = {m.decode() for m in self._bytes.findall(data)}
        return sorted({f"{self._owner[m]} ({len(m)} chars)" for m in found})

    def in_tree(self, root: Path, *, max_bytes: int = 64 << 20) -> Iterator[tuple[Path, list[str]]]:
        """(file, secrets) for every regular file under ``root`` holding a secret."""
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = Path(dirpath) / name
                try:
                    info = path.lstat()
                    if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
                        continue
                    data = path.read_bytes()
                except (FileNotFoundError, PermissionError):
                    continue  # a temp file that vanished while we walked
                found = self.in_bytes(data)
                if found:
                    yield path, found


def files_under(root: Path) -> int:
    """How many regular files ``root`` holds (to show a scan covered something)."""
    return sum(len(names) for _, _, names in os.walk(root))


def all_git_objects(git_dir: Path) -> bytes:
    """Every object of a repository, decompressed (packs and loose, reachable or not)."""
    done = subprocess.run(
        ["git", "--git-dir", str(git_dir), "cat-file", "--batch-all-objects", "--batch"],
        capture_output=True,
        check=True,
    )
    return done.stdout
