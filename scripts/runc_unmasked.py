#!/usr/bin/env python3
"""runc, minus the container spec's masked and read-only /proc paths (an OCI runtime for buildah).

The image's sandboxes are bubblewrap namespaces inside the container. The kernel lets a user
namespace mount a new procfs only when the container's /proc is fully visible, so the image
is run as ``docker run --security-opt systempaths=unconfined`` (podman: ``unmask=ALL``).
buildah 1.28 has no such option; given as ``buildah run --runtime`` this does the same: drop
``linux.maskedPaths``/``linux.readonlyPaths`` from the bundle's config.json, then exec runc.
"""

import json
import os
import shutil
import sys


def main() -> None:
    args = sys.argv[1:]
    if "create" in args or "run" in args:
        bundle = "."
        for flag in ("--bundle", "-b"):
            if flag in args:
                bundle = args[args.index(flag) + 1]
        path = os.path.join(bundle, "config.json")
        with open(path) as f:
            spec = json.load(f)
        spec.get("linux", {}).pop("maskedPaths", None)
        spec.get("linux", {}).pop("readonlyPaths", None)
        with open(path, "w") as f:
            json.dump(spec, f)
    runc = shutil.which("runc", path="/usr/sbin:/usr/bin:/sbin:/bin")
    if runc is None:
        sys.exit("runc is not installed: apt-get install runc (scripts/bootstrap.sh --tests)")
    os.execv(runc, ["runc", *args])  # noqa: S606 - becomes runc, with its arguments


if __name__ == "__main__":
    main()
