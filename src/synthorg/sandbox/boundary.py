"""Boundary declarations of each backend, as they hold on this host, and their rendering."""

from __future__ import annotations

import subprocess

from synthorg.sandbox.cgroups import CgroupMode, CgroupSupport
from synthorg.sandbox.identity import IdentityMode, SandboxIdentity
from synthorg.sandbox.protocol import BoundaryDeclaration, BoundaryRow, BoundaryStatus

E, W, N = BoundaryStatus.ENFORCED, BoundaryStatus.WEAKER, BoundaryStatus.NOT_ENFORCED

_DECLARED = {
    "filesystem": "read-only /usr, interpreter and runtime binds; read-write worktree "
    "(/workspace) and state dir only; private size-capped /tmp; host home, data dir and keys "
    "invisible; /proc/sys read-only; no host path or id in /proc/1/cmdline, and no path naming "
    "the data dir, the conversation, the runtime, the host home or the interpreter's install "
    "dir in /proc/self/mountinfo",
    "network": "own network namespace; the only way out is the forwarded gateway and MCP "
    "unix sockets, reached via 127.0.0.1 forwarders; no DNS",
    "processes": "own pid namespace; dies with its parent; pid-1 killed on every exit path; "
    "seccomp filter (mount, ptrace, bpf, namespaces, kernel modules, socket families "
    "but unix, inet, inet6 and route netlink... refused)",
    "identity": "never host root: programs run as an unprivileged host uid",
    "resources": "process count, memory and CPU capped per run; /tmp and file size capped; "
    "no core files; wall-clock and idle timeouts",
    "secrets": "cleared environment (only the run spec's variables); no provider keys or "
    "tool credentials inside",
}


def _bwrap_version(bwrap: str) -> str:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unusable ({exc})"
    return out.stdout.strip() or f"unusable (status {out.returncode})"


_DISK = "tmpfs /tmp capped (ENOSPC), RLIMIT_FSIZE per file (EFBIG), RLIMIT_CORE=0"


def _disk(quota_unavailable: str | None) -> tuple[str, str | None]:
    """What the host gives for disk, and the warning when the worktree has no quota."""
    if quota_unavailable is None:
        return f"worktree on its own loop ext4 per run (ENOSPC past its quota); {_DISK}", None
    return f"{_DISK}; NO worktree quota", f"no worktree disk quota: {quota_unavailable}"


def _resources_row(
    cg: CgroupSupport, identity: SandboxIdentity, quota_unavailable: str | None = None
) -> BoundaryRow:
    declared = _DECLARED["resources"]
    disk, disk_warning = _disk(quota_unavailable)
    if cg.mode is not CgroupMode.NONE and not cg.missing:
        return BoundaryRow(
            boundary="resources",
            declared=declared,
            on_this_host=f"{cg.detail}: pids, memory and cpu quota per run; {disk}; timeouts",
            status=E if disk_warning is None else W,
            warning=disk_warning,
        )
    # The kernel never applies RLIMIT_NPROC to uid 0.
    nproc = (
        "no process cap (RLIMIT_NPROC is ignored for root)"
        if identity.uid == 0
        else ("RLIMIT_NPROC per user")
    )
    fallback = ", ".join(
        {"pids": nproc, "memory": "RLIMIT_AS per process", "cpu": "no CPU quota"}[c]
        for c in cg.missing
    )
    return BoundaryRow(
        boundary="resources",
        declared=declared,
        on_this_host=f"{cg.detail}; rlimits instead: {fallback}; {disk}; timeouts enforced",
        status=W,
        warning=f"cgroups unavailable for {', '.join(cg.missing)}: caps are per process or "
        "per user, not per sandbox (run as root with writable cgroups, or delegate a v2 "
        "cgroup via SYNTHORG_SANDBOX_CGROUP)" + (f"; {disk_warning}" if disk_warning else ""),
    )


def _identity_row(identity: SandboxIdentity) -> BoundaryRow:
    if identity.mode is IdentityMode.ROOT:
        return BoundaryRow(
            boundary="identity",
            declared=_DECLARED["identity"],
            on_this_host=identity.describe,
            status=N,
            warning="sandboxes run as host root: files they create are root's and any "
            "kernel or file permission bug is a host root bug; create the sandbox user "
            "(scripts/bootstrap.sh) and unset SYNTHORG_SANDBOX_ALLOW_ROOT",
        )
    return BoundaryRow(
        boundary="identity",
        declared=_DECLARED["identity"],
        on_this_host=identity.describe,
        status=E,
    )


def bwrap_boundary(
    bwrap: str,
    cgroups: CgroupSupport,
    identity: SandboxIdentity,
    *,
    seccomp: bool,
    quota_unavailable: str | None = None,
    view_fallbacks: list[str] | None = None,
) -> BoundaryDeclaration:
    """The bwrap backend's table, checked against this host.

    view_fallbacks: what runs so far had to bind from its host path (views.py could not make
    a neutral source), each said as a warning.
    """
    version = _bwrap_version(bwrap)
    usable = version.startswith("bubblewrap")
    if not usable:
        rows = [
            BoundaryRow(
                boundary=b,
                declared=d,
                on_this_host=f"bwrap {version}",
                status=N,
                warning="bubblewrap does not run here: nothing is enforced",
            )
            for b, d in _DECLARED.items()
        ]
        return BoundaryDeclaration(backend="bwrap", rows=rows)
    rows = [
        _filesystem_row(version, quota_unavailable, view_fallbacks or []),
        BoundaryRow(
            boundary="network",
            declared=_DECLARED["network"],
            on_this_host="--unshare-net (only lo); unix sockets bound read-only",
            status=E,
        ),
        BoundaryRow(
            boundary="processes",
            declared=_DECLARED["processes"],
            on_this_host="--unshare-pid --die-with-parent --new-session --cap-drop ALL; "
            + (
                "seccomp filter (libseccomp, Docker's default deny list, socket families)"
                if seccomp
                else "NO seccomp filter"
            ),
            status=E if seccomp else W,
            warning=None if seccomp else "no seccomp filter: every syscall reaches the kernel",
        ),
        _identity_row(identity),
        _resources_row(cgroups, identity, quota_unavailable),
        BoundaryRow(
            boundary="secrets",
            declared=_DECLARED["secrets"],
            on_this_host="--clearenv; PATH/HOME/LANG plus the request's env",
            status=E,
        ),
    ]
    return BoundaryDeclaration(backend="bwrap", rows=rows)


def _filesystem_row(
    version: str, quota_unavailable: str | None, view_fallbacks: list[str]
) -> BoundaryRow:
    leaks = list(view_fallbacks)
    if quota_unavailable is not None:
        leaks.insert(0, "mountinfo inside shows the worktree's host path (no per-run filesystem)")
    return BoundaryRow(
        boundary="filesystem",
        declared=_DECLARED["filesystem"],
        on_this_host=f"{version}: mount namespace, --remount-ro /, only listed binds; "
        "/proc/sys bound read-only; options passed via --args; worktree from its per-run "
        "filesystem; state dir, runtime, interpreter (/opt/python) and sockets bound at "
        "neutral paths from neutral sources (renamed state dir, hard-link views, per-run "
        "socket links); /etc files and helper scripts copied in, not bound",
        status=W if leaks else E,
        warning="; ".join(leaks) or None,
    )


def local_boundary() -> BoundaryDeclaration:
    """The local backend's table: nothing is enforced, and every row says so."""
    rows = [
        BoundaryRow(
            boundary=b,
            declared="nothing (local backend: no isolation)",
            on_this_host="the program runs as this user on this host",
            status=N,
            warning=f"local backend: no {b} isolation",
        )
        for b in _DECLARED
    ]
    return BoundaryDeclaration(backend="local", rows=rows)


def render_boundary(decl: BoundaryDeclaration) -> str:
    """Plain-text table of a declaration, warnings last (for logs and `doctor`)."""
    width = max(len(r.boundary) for r in decl.rows)
    lines = [f"sandbox backend: {decl.backend}"]
    for r in decl.rows:
        lines.append(f"  {r.boundary:<{width}}  [{r.status.value}] {r.on_this_host}")
        lines.append(f"  {'':<{width}}  declared: {r.declared}")
    lines += [f"  WARNING {w}" for w in decl.warnings]
    return "\n".join(lines)
