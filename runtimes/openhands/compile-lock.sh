#!/usr/bin/env bash
# Regenerate requirements.lock from requirements.in (CPython 3.12, linux x86_64, hash-pinned).
# The lock hash names the runtime dir, so a new lock means `synthorg runtime build openhands`.
set -euo pipefail
cd "$(dirname "$0")"
uv pip compile --generate-hashes --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
    --index-url https://pypi.org/simple \
    --custom-compile-command "runtimes/openhands/compile-lock.sh" \
    requirements.in -o requirements.lock
