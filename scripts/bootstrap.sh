#!/usr/bin/env bash
# Make this machine ready to run SynthOrg and its tests. Idempotent; safe to run every time.
# Installs: Debian packages (git, bubblewrap, tmux, and for the sandbox's protections
# setpriv, libseccomp, mkfs.ext4, rsync), uv for Python 3.12, the project venv; as root,
# creates the unprivileged user sandboxes run as (synthorg-sandbox); starts PostgreSQL when
# it is installed but not running; sets a git identity if none.
# With --tests it also builds the OpenHands runtime the test suite uses.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[bootstrap] %s\n' "$*" >&2; }

need=()
command -v git >/dev/null || need+=(git)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v tmux >/dev/null || need+=(tmux)
command -v setpriv >/dev/null || need+=(util-linux)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v rsync >/dev/null || need+=(rsync)
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || need+=(libseccomp2)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    log "missing ${need[*]}: install them (sudo apt-get install -y ${need[*]})"; exit 1
  fi
fi

# Run as root, sandboxes drop to this unprivileged user (synthorg.sandbox.identity).
if [ "$(id -u)" = 0 ] && ! getent passwd synthorg-sandbox >/dev/null; then
  log "creating the sandbox user synthorg-sandbox"
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin synthorg-sandbox
fi

# uv for the interpreter .python-version selects (pyenv shims resolve it inside the repo).
if ! uv --version >/dev/null 2>&1; then
  log "installing uv"
  python -m pip install -q uv
fi
uv sync --frozen --quiet
# Bytecode for the venv and src/ (incremental: only what changed is compiled again). With
# PYTHONDONTWRITEBYTECODE set (some shells and CI images) Python never writes it, and every
# fresh `synthorg` process would compile each module it imports: 2-3x its start-up CPU.
uv run --frozen python -m compileall -q -j0 src "$(uv run --frozen python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true

git config --global user.name >/dev/null 2>&1 || git config --global user.name "SynthOrg CI"
git config --global user.email >/dev/null 2>&1 || git config --global user.email "ci@synthorg.invalid"

if command -v pg_isready >/dev/null && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  if [ -d /etc/postgresql ]; then
    log "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
    for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
  fi
fi
if [ "${1:-}" = "--tests" ] && [ "$(id -u)" = 0 ]; then
  # The image test (tests/packaging/test_image.py) builds with buildah on a debootstrapped base
  # and strips its binaries.
  img_need=()
  command -v buildah >/dev/null || img_need+=(buildah)
  command -v debootstrap >/dev/null || img_need+=(debootstrap)
  command -v strip >/dev/null || img_need+=(binutils)
  # runc: the smoke test runs the image with OCI isolation so bubblewrap can nest in it.
  command -v runc >/dev/null || img_need+=(runc)
  if [ ${#img_need[@]} -gt 0 ]; then
    log "installing ${img_need[*]} for the image test"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${img_need[@]}" >/dev/null
  fi
fi
if [ "${1:-}" = "--tests" ]; then
  # The web console's browser tests drive Debian's Chromium through Playwright (the Python
  # package comes with the dev dependencies; `playwright install` would download, never run it).
  if ! [ -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ]; then
      log "installing chromium for the browser tests"
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
      log "missing chromium for the browser tests: sudo apt-get install -y chromium"; exit 1
    fi
  fi
  # The OpenHands runtime the test suite drives, built here rather than inside a test's
  # timeout: about a minute cold with uv's cache, a second when the lock is unchanged.
  log "OpenHands runtime for the tests"
  SYNTHORG_HOME="${SYNTHORG_HOME:-$HOME/.cache/synthorg-tests/home}" uv run synthorg runtime build openhands
  # The judge hidden checks run with (a hash-pinned pytest venv; seconds with uv's cache).
  log "judge runtime for the tests"
  SYNTHORG_HOME="${SYNTHORG_HOME:-$HOME/.cache/synthorg-tests/home}" uv run synthorg eval judge
fi
log "ready"
