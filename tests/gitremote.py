"""A real git remote on loopback for tests: ``git daemon`` with push enabled, on a free port."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from synthorg.workspace.git import run_git_sync
from tests.support import free_port

_READY_S = 60.0


@dataclass
class GitDaemon:
    """``git daemon`` serving the bare repositories under ``root`` (fetch and push)."""

    root: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        argv = ["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack"]
        argv += ["--informative-errors", "--listen=127.0.0.1", f"--port={self.port}"]
        self.proc = subprocess.Popen(
            [*argv, f"--base-path={self.root}", str(self.root)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + _READY_S
        while True:  # until it accepts connections (bounded), or it died
            assert self.proc.poll() is None, "git daemon exited"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "git daemon did not listen"
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}.git"

    def bare(self, name: str) -> Path:
        return self.root / f"{name}.git"

    def publish(self, name: str, source: Path, branch: str = "main") -> Path:
        """A bare repository ``name`` holding ``source``'s ``branch`` (pushed from disk)."""
        bare = self.bare(name)
        run_git_sync(["init", "-q", "--bare", "--initial-branch", branch, str(bare)], self.root)
        # The operator's own push (plain git: SynthOrg's hardened runner allows no transport).
        subprocess.run(
            ["git", "-C", str(source), "push", "--quiet", str(bare), f"{branch}:{branch}"],
            check=True,
            capture_output=True,
        )
        return bare

    def refs(self, name: str, prefix: str = "refs/") -> dict[str, str]:
        """The refs of remote ``name`` under ``prefix``: name -> sha (read on the server side)."""
        out = run_git_sync(
            ["for-each-ref", "--format=%(refname) %(objectname)", prefix], self.bare(name)
        ).text
        pairs = (line.split(" ", 1) for line in out.splitlines())
        return {ref: sha for ref, sha in pairs}


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[GitDaemon]:
    """A git daemon for the test, serving ``tmp_path/served`` (import it into the module)."""
    served = GitDaemon(tmp_path / "served")
    served.start()
    try:
        yield served
    finally:
        served.stop()
