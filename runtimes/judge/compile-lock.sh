#!/usr/bin/env bash
# Regenerate requirements.lock from requirements.in (CPython 3.12, linux x86_64, hash-pinned).
# The lock hash names the judge's runtime dir, so a new lock means a new judge venv.
set -euo pipefail
cd "$(dirname "$0")"
uv pip compile --generate-hashes --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
    --index-url https://pypi.org/simple \
    --custom-compile-command "runtimes/judge/compile-lock.sh" \
    requirements.in -o requirements.lock
