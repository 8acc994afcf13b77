"""The all-in-one image, built here with buildah on a debootstrapped base, then run:
``synthorg doctor``, ``synthorg serve`` answering ``/ready``, and one demo run.

The image is run as it declares (docs/deploy.md): OCI isolation (runc), no added capabilities,
the container's seccomp profile off and /proc unmasked, so the demo's bubblewrap sandbox nests
inside it. Without those (chroot isolation, or runc's default masks) bubblewrap cannot nest:
doctor fails and the demo is refused, never run unsandboxed.

Skipped locally unless SYNTHORG_TEST_IMAGE=1 (a cold build downloads the Debian base and the
dependencies: minutes); in CI a skip is a failure (tests/conftest.py), so CI always runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.packaging.conftest import REPO
from tests.packaging.image_build import BUILD, TOOLS, buildah
from tests.packaging.test_wheel import wait_ready
from tests.support import free_port

# runc with /proc unmasked: what `docker run --security-opt systempaths=unconfined` does.
UNMASKED_RUNC = REPO / "scripts" / "runc_unmasked.py"
# How the image is run: OCI isolation, host network (the test reaches serve on 127.0.0.1).
RUNC = shutil.which("runc") or "runc"
DECLARED = ("--isolation", "oci", "--runtime", str(UNMASKED_RUNC), "--network", "host")

pytestmark = [
    pytest.mark.image,
    pytest.mark.packaging,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        not (os.environ.get("CI") or os.environ.get("SYNTHORG_TEST_IMAGE") == "1"),
        reason="image build: set SYNTHORG_TEST_IMAGE=1 (always runs in CI)",
    ),
]


@dataclass(frozen=True)
class Container:
    """A working container and the work dir whose storage holds it."""

    name: str
    work: Path

    def command(self, *argv: str, how: tuple[str, ...] = DECLARED) -> list[str]:
        """``buildah run`` of ``argv`` in it."""
        return buildah(self.work, "run", *how, self.name, "--", *argv)


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    """The build's work dir (tests/packaging/conftest.py started it), removed afterwards."""
    assert os.geteuid() == 0, "buildah with vfs storage needs root here"
    for tool in TOOLS:
        assert shutil.which(tool), f"{tool} missing: scripts/bootstrap.sh --tests installs it"
    try:
        yield BUILD.start()
    finally:
        BUILD.remove()


@pytest.fixture(scope="module")
def image(work: Path) -> str:
    """The image, freshly built from this checkout (the debootstrapped base is cached)."""
    return BUILD.wait()


def _working_container(work: Path, image: str, *options: str) -> Iterator[Container]:
    name = subprocess.run(
        buildah(work, "from", "--pull-never", *options, image),
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    try:
        yield Container(name, work)
    finally:
        subprocess.run(buildah(work, "rm", name), capture_output=True, check=False)


@pytest.fixture(scope="module")
def container(work: Path, image: str) -> Iterator[Container]:
    """A working container of the image with the run options it declares (no added caps)."""
    yield from _working_container(work, image, "--security-opt", "seccomp=unconfined")


@pytest.fixture(scope="module")
def confined(work: Path, image: str) -> Iterator[Container]:
    """The same image with buildah's default seccomp profile (and, under runc, masks)."""
    yield from _working_container(work, image)


def run_in(
    container: Container, *argv: str, how: tuple[str, ...] = DECLARED, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``argv`` inside the container as the image's user, with the image's environment."""
    command = container.command(*argv, how=how)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def test_image_runs_as_non_root_with_its_data_dir(container: Container) -> None:
    who = run_in(container, "sh", "-c", 'id -un; echo "$SYNTHORG_HOME"; command -v synthorg')
    assert who.returncode == 0, who.stderr
    assert who.stdout.split() == ["synthorg", "/var/lib/synthorg", "/opt/synthorg/bin/synthorg"]


def test_doctor_in_the_image_finds_a_working_sandbox(container: Container) -> None:
    result = run_in(container, "env", "COLUMNS=200", "synthorg", "doctor")
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    bwrap_line = next(line for line in result.stdout.splitlines() if "bubblewrap" in line)
    assert " ok " in bwrap_line, result.stdout
    # Built without the runtime, the image has no uv: doctor says how to get the runtime.
    assert "WITH_OPENHANDS=1" in result.stdout, result.stdout


def test_serve_in_the_image_answers_ready(container: Container) -> None:
    port = free_port()
    command = container.command("synthorg", "serve", "--host", "127.0.0.1", "--port", str(port))
    started = time.monotonic()
    with subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as p:
        try:
            body = wait_ready(f"http://127.0.0.1:{port}/ready", p, deadline_s=180)
            print(f"container start -> /ready: {time.monotonic() - started:.2f} s")
            assert body == {"ready": True, "detail": ""}
            p.terminate()
            p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()


def test_one_demo_run_in_the_image_lands_its_fix_in_the_bwrap_sandbox(container: Container) -> None:
    demo = run_in(container, "synthorg", "demo", timeout=600)
    print(demo.stdout[-3000:], demo.stderr[-3000:])
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "sandbox: bwrap" in demo.stdout
    assert "tests PASS" in demo.stdout and "+    return a + b" in demo.stdout
    # A non-root server over a root-owned interpreter still gets neutral views (copied).
    assert "sandbox.view_fallback" not in demo.stdout + demo.stderr


@pytest.mark.parametrize(
    "how",
    [("--isolation", "chroot"), ("--isolation", "oci", "--runtime", RUNC)],
    ids=["chroot-isolation", "runc-default-masks"],
)
def test_without_the_declared_options_doctor_fails_and_the_demo_is_refused(
    confined: Container, how: tuple[str, ...]
) -> None:
    doctor = run_in(confined, "env", "COLUMNS=300", "synthorg", "doctor", how=how)
    print(doctor.stdout, doctor.stderr)
    bwrap_line = next(line for line in doctor.stdout.splitlines() if "bubblewrap" in line)
    assert doctor.returncode != 0 and "FAIL" in bwrap_line, doctor.stdout
    demo = run_in(confined, "synthorg", "demo", how=how, timeout=600)
    print(demo.stdout[-3000:], demo.stderr[-3000:])
    assert demo.returncode != 0  # never silently unsandboxed
    assert "tests PASS" not in demo.stdout
