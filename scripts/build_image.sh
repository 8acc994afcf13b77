#!/usr/bin/env bash
# Build the SynthOrg image here without a container engine or a registry (issue 22):
#   1. a bookworm root filesystem with debootstrap (Debian's packages), plus this host's
#      CPython 3.12 installed under /usr/local (the layout of python:3.12-slim-bookworm),
#      imported as the base image localhost/synthorg-base:bookworm-py3.12;
#   2. deploy/Containerfile built on it with buildah (vfs storage, chroot isolation).
# Usage: scripts/build_image.sh [TAG]   (default localhost/synthorg:dev)
# Env: SYNTHORG_IMAGE_WORK (default /var/tmp/synthorg-image): buildah storage, logs;
#      SYNTHORG_IMAGE_CACHE (default $SYNTHORG_IMAGE_WORK/cache): the base rootfs, shareable;
#      WITH_OPENHANDS=1 to build the OpenHands runtime into the image; EXTRAS (default
#      "postgres temporal") the optional extras installed.
# Needs root, buildah, debootstrap and binutils (strip); bootstrap.sh --tests installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[build_image] %s\n' "$*" >&2; }

tag="${1:-localhost/synthorg:dev}"
work="${SYNTHORG_IMAGE_WORK:-/var/tmp/synthorg-image}"
# The debootstrapped rootfs outlives the work dir in $cache: builds with their own work dirs
# (CI runs side by side on one machine, tests/packaging/test_image.py) share it.
cache="${SYNTHORG_IMAGE_CACHE:-$work/cache}"
buildah=(buildah --storage-driver vfs --root "$work/storage" --runroot "$work/run")
mkdir -p "$work"

# The interpreter to carry into the base: CPython 3.12, built with --enable-shared as the
# official image is (libpython in <prefix>/lib, found through ld.so.conf's /usr/local/lib).
py="$(command -v python3.12 || true)"
[ -n "$py" ] || { log "python3.12 not found on PATH"; exit 1; }
prefix="$("$py" -c 'import sys; print(sys.base_prefix)')"
version="$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"

# The base is cached in $work between builds (CI reuses it: a cold base is the debootstrap
# download), keyed by its inputs: the recipe below (up to "fi  # the base"), the interpreter
# and its libpython. Any change makes a new base; older ones are dropped.
recipe="$(awk '/^if ! .*inspect --type image/,/^fi  # the base$/' "$0")"
key="$( { echo "$recipe"; echo "$prefix $version"; sha256sum "$prefix"/lib/libpython3.12.so.1.0; } \
  | sha256sum | cut -c1-12)"
base="localhost/synthorg-base:bookworm-py$version-$key"

if ! "${buildah[@]}" inspect --type image "$base" >/dev/null 2>&1; then
  # Builds sharing the cache take turns here: one debootstraps, the others wait and reuse it.
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock 9
  rootfs="$cache/rootfs-$key"
  if ! [ -d "$rootfs" ]; then
    rm -rf "$cache"/.rootfs-*  # what a killed build left (we hold the lock: nobody uses it)
    new="$(mktemp -d "$cache/.rootfs-$key.XXXXXX")"
    chmod 755 "$new"  # it becomes the image's /: mktemp made it 0700
    log "debootstrap bookworm into $new"
    debootstrap --variant=minbase \
      --include=ca-certificates,netbase,tzdata,libssl3,libffi8,libsqlite3-0,zlib1g,libbz2-1.0,liblzma5,libreadline8,libncursesw6,libtinfo6,libgdbm6,libgdbm-compat4,libuuid1,libexpat1,libdb5.3 \
      bookworm "$new" >"$new.log" 2>&1 || { tail -20 "$new.log"; exit 1; }
    # Like Debian's slim images: no docs, man pages or translations from later apt installs.
    cat >"$new/etc/dpkg/dpkg.cfg.d/synthorg-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
CFG
    rm -rf "$new"/usr/share/man/* "$new"/usr/share/info/* "$new"/usr/share/locale/*/LC_MESSAGES
    # Like Debian's images: no package lists (49 MB; apt-get update fetches them) or .debs.
    rm -rf "$new"/var/lib/apt/lists/* "$new"/var/cache/apt/*.bin "$new"/var/cache/apt/archives/*.deb
    find "$new/usr/share/doc" -type f ! -name copyright -delete
    log "CPython $version from $prefix into /usr/local"
    install -d "$new/usr/local/bin" "$new/usr/local/lib" "$new/usr/local/include"
    cp -a "$prefix/bin/python3.12" "$new/usr/local/bin/"
    cp -a "$prefix"/lib/libpython3.12.so* "$new/usr/local/lib/"
    cp -a "$prefix/include/python3.12" "$new/usr/local/include/"
    # The standard library without its tests, caches, or whatever this host installed.
    tar -C "$prefix/lib" --exclude='python3.12/test' --exclude='python3.12/idlelib' \
      --exclude='python3.12/tkinter' --exclude='python3.12/turtledemo' \
      --exclude='__pycache__' --exclude='python3.12/site-packages/*' --exclude='*.a' \
      --exclude='python3.12/lib-dynload/_test*' --exclude='python3.12/lib-dynload/xx*' \
      --exclude='python3.12/lib-dynload/_xxtestfuzz*' --exclude='python3.12/lib-dynload/_ctypes_test*' \
      -cf - python3.12 | tar -C "$new/usr/local/lib" -xf -
    # No debug info or symbol tables (libpython alone: 30 MB -> 7 MB), as the official image.
    find "$new/usr/local/bin/python3.12" "$new/usr/local/lib" -type f \
      \( -name 'python3.12' -o -name '*.so' -o -name '*.so.*' \) -exec strip --strip-unneeded {} +
    for name in python3 python; do ln -sf python3.12 "$new/usr/local/bin/$name"; done
    chroot "$new" /sbin/ldconfig
    PIP_ROOT_USER_ACTION=ignore chroot "$new" /usr/local/bin/python3 -m ensurepip --default-pip >/dev/null
    # Bytecode for the standard library: the image's user cannot write it, so without it every
    # start would compile the imports again.
    chroot "$new" /usr/local/bin/python3 -m compileall -q -j 0 /usr/local/lib/python3.12 >/dev/null || true
    chroot "$new" /usr/local/bin/python3 -c 'import ssl, sqlite3, ctypes, venv, zlib, lzma, bz2'
    # Published whole (a build killed before this leaves only a .rootfs-* dir); one key at a time.
    find "$cache" -maxdepth 1 -name 'rootfs-*' -exec rm -rf {} +
    mv "$new" "$rootfs"
    rm -f "$new.log"
  fi
  # One base at a time: earlier keys' images are only disk (vfs stores every layer whole).
  "${buildah[@]}" images --format '{{.Name}}:{{.Tag}}' | grep '^localhost/synthorg-base:' \
    | xargs -r "${buildah[@]}" rmi >/dev/null 2>&1 || true
  log "importing the base image $base"
  ctr="$("${buildah[@]}" from scratch)"
  mnt="$("${buildah[@]}" mount "$ctr")"
  tar -C "$rootfs" -cf - . | tar -C "$mnt" -xf -
  "${buildah[@]}" umount "$ctr" >/dev/null
  exec 9>&-  # the copy is taken: another build may replace the cached rootfs now
  "${buildah[@]}" config --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$ctr"
  "${buildah[@]}" commit --quiet --rm "$ctr" "$base" >/dev/null
fi  # the base

# A host whose TLS goes through an inspecting proxy trusts its CA through SSL_CERT_FILE: bind
# that bundle over the build's system store for the RUN steps (a bind is never committed).
ca_bind=()
if [ -n "${SSL_CERT_FILE:-}" ] && [ -f "$SSL_CERT_FILE" ]; then
  ca_bind=(--volume "$SSL_CERT_FILE:/etc/ssl/certs/ca-certificates.crt:ro")
fi
log "building $tag from deploy/Containerfile on $base"
"${buildah[@]}" bud --isolation chroot --format docker --layers=false "${ca_bind[@]}" \
  --build-arg BASE="$base" --build-arg WITH_OPENHANDS="${WITH_OPENHANDS:-0}" \
  --build-arg EXTRAS="${EXTRAS:-postgres temporal}" \
  -f deploy/Containerfile -t "$tag" . >"$work/bud.log" 2>&1 || { tail -40 "$work/bud.log"; exit 1; }
# The previous build of the same tag is now dangling: drop it, or vfs storage grows every run.
"${buildah[@]}" rmi --prune >/dev/null 2>&1 || true
log "built $tag"
