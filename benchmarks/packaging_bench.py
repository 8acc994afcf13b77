"""Packaging figures: wheel size, a cold ``pip install`` of the wheel, image size, and
container start -> ``/ready``, each beside a baseline measured in the same run.

- wheel size: ``uv build --wheel`` of this checkout;
- cold ``pip install``: a fresh venv, ``pip install --no-cache-dir`` of the wheel (every
  dependency downloaded); baseline: ``uv pip install`` of the same wheel with uv's warm cache;
- image (``--image TAG``, built by scripts/build_image.sh into ``--work``): its size, and
  ``buildah run ... synthorg serve`` start -> ``/ready``; baseline: the same command from the
  freshly installed venv on the host.

    uv run python benchmarks/packaging_bench.py [--image localhost/synthorg:dev --work DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from uv import find_uv_bin

from support import free_port

REPO = Path(__file__).resolve().parents[1]


def start_to_ready(argv: list[str], port: int, env: dict[str, str]) -> float:
    started = time.monotonic()
    with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as p:
        try:
            while time.monotonic() - started < 300:
                if p.poll() is not None:
                    raise SystemExit(f"{argv[0]} exited {p.returncode} before /ready")
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                        return time.monotonic() - started
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            raise SystemExit("not ready within 300 s")
        finally:
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--image", help="image tag built by scripts/build_image.sh")
    parser.add_argument("--work", default="/var/tmp/synthorg-image", help="its work dir")
    args = parser.parse_args()
    uv = find_uv_bin()
    with tempfile.TemporaryDirectory() as raw:
        scratch = Path(raw)
        subprocess.run([uv, "build", "--wheel", "--out-dir", str(scratch)], cwd=REPO,
                       check=True, capture_output=True)  # fmt: skip
        wheel = next(scratch.glob("synthorg-*.whl"))
        print(f"wheel: {wheel.name} {wheel.stat().st_size / 1e6:.2f} MB")

        pip_venv = scratch / "pip-venv"
        subprocess.run(["python3.12", "-m", "venv", str(pip_venv)], check=True)
        started = time.monotonic()
        subprocess.run([str(pip_venv / "bin" / "pip"), "install", "-q", "--no-cache-dir",
                        str(wheel)], check=True)  # fmt: skip
        pip_s = time.monotonic() - started

        uv_venv = scratch / "uv-venv"
        subprocess.run([uv, "venv", "-q", "--python", "3.12", str(uv_venv)], check=True)
        started = time.monotonic()
        subprocess.run([uv, "pip", "install", "-q", "--python", str(uv_venv / "bin" / "python"),
                        str(wheel)], check=True)  # fmt: skip
        uv_s = time.monotonic() - started
        print(f"cold pip install: {pip_s:.1f} s; warm uv install {uv_s:.1f} s "
              f"(ratio {pip_s / uv_s:.1f}x)")  # fmt: skip

        env = {**os.environ, "SYNTHORG_HOME": str(scratch / "home")}
        port = free_port()
        host_s = start_to_ready(
            [str(pip_venv / "bin" / "synthorg"), "serve", "--port", str(port)], port, env
        )
        print(f"host venv start -> /ready: {host_s:.2f} s")
        if not args.image:
            return
        work = Path(args.work)
        buildah = ["buildah", "--storage-driver", "vfs", "--root", str(work / "storage"),
                   "--runroot", str(work / "run")]  # fmt: skip
        images = subprocess.run([*buildah, "images", "--format", "{{.Name}}:{{.Tag}} {{.Size}}"],
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
        print(f"images:\n{images.strip()}")
        # What a registry would move: the layers gzip-compressed (an OCI layout's blobs).
        layout = scratch / "layout"
        subprocess.run([*buildah, "push", "--quiet", args.image, f"oci:{layout}"],
                       check=True, capture_output=True)  # fmt: skip
        blobs = sum(p.stat().st_size for p in (layout / "blobs").rglob("*") if p.is_file())
        print(f"compressed (OCI layout, gzip layers): {blobs / 1e6:.0f} MB")
        # Run as the image declares (docs/deploy.md): OCI isolation, /proc unmasked, no seccomp
        # profile on the container, so its bubblewrap sandboxes nest.
        ctr = subprocess.run([*buildah, "from", "--pull-never", "--security-opt",
                              "seccomp=unconfined", args.image],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        try:
            port = free_port()
            image_s = start_to_ready(
                [*buildah, "run", "--isolation", "oci", "--runtime",
                 str(REPO / "scripts" / "runc_unmasked.py"), "--network", "host", ctr, "--",
                 "synthorg", "serve", "--host", "127.0.0.1", "--port", str(port)],
                port, dict(os.environ),
            )  # fmt: skip
        finally:
            subprocess.run([*buildah, "rm", ctr], capture_output=True, check=False)
        print(f"container start -> /ready: {image_s:.2f} s (ratio to host {image_s / host_s:.2f}x)")


if __name__ == "__main__":
    main()
