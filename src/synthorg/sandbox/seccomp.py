"""The sandbox's seccomp filter: compiled once per process with libseccomp, handed to bwrap.

Why libseccomp (through ``pyseccomp``, a ctypes binding to the system's libseccomp.so.2)
rather than a checked-in BPF blob: libseccomp resolves syscall numbers per architecture,
kills foreign-ABI calls (i386 / x32 on x86_64) and emits the BPF that ``bwrap --seccomp``
loads, so nothing architecture-specific lives in this repository.

The deny list follows Docker's default profile: syscalls that reconfigure the kernel or
other namespaces, reach other processes' memory, or open kernel attack surface a coding
agent never needs. Denied calls fail with EPERM (ENOSYS for clone3, so libc falls back to
clone, whose namespace flags are then checked). personality() may only query or set
PER_LINUX (see PERSONALITY_ALLOWED). socket() and socketpair() may only open the families a
run needs (see SOCKET_FAMILIES); every other family fails with EAFNOSUPPORT.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

from synthorg.sandbox.errors import SandboxUnavailableError

#: Denied outright (EPERM). Names unknown on this architecture are skipped.
DENIED = (
    # filesystems and mounts
    "mount", "umount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount",
    "fspick", "move_mount", "open_tree", "mount_setattr", "swapon", "swapoff", "quotactl",
    "quotactl_fd", "name_to_handle_at", "open_by_handle_at",
    # namespaces (clone's flags are checked separately)
    "unshare", "setns",
    # kernel code, keys, tracing and the BPF/perf/io_uring attack surface
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "keyctl", "add_key", "request_key", "lookup_dcookie",
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # the machine
    "reboot", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "syslog", "vhangup", "iopl", "ioperm", "uselib", "ustat", "sysfs", "_sysctl",
    "nfsservctl",
)  # fmt: skip
#: clone with any of these flags creates a namespace: refused.
NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}


PERSONALITY_ALLOWED = (0x00000000, 0xFFFFFFFF)
"""personality(): only PER_LINUX and the query pass (stricter than Docker's list): a persona
with ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC would weaken ASLR and NX for what it runs."""


AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
NETLINK_ROUTE = 0
SOCKET_FAMILIES = (AF_UNIX, AF_INET, AF_INET6)
"""The families socket()/socketpair() may open: local IPC (tmux, the forwarders) and IP in the
sandbox's own network namespace. Not AF_VSOCK (reaches the hypervisor past the namespace),
AF_PACKET, AF_BLUETOOTH, AF_ALG (kernel crypto attack surface), AF_XDP, ..."""
NETLINK_PROTOCOLS = (NETLINK_ROUTE,)
"""AF_NETLINK is allowed for NETLINK_ROUTE only: getifaddrs() (``ip addr``, Node's
os.networkInterfaces, Go's net.Interfaces, psutil) reads it and sees the namespace's own
``lo``; changing anything needs CAP_NET_ADMIN, which is dropped. Every other netlink protocol
(KOBJECT_UEVENT, AUDIT, SOCK_DIAG, XFRM, ...) is refused."""


def socket_denials() -> list[list[tuple[int, str, int]]]:
    """Rules (each a list of (arg, op, value) comparisons, all of which must hold) any of
    which refuses a socket()/socketpair() call.

    One rule may compare an argument once, so "family not allowed" is said as one equality
    per refused family below the largest allowed one, plus "greater than it". Compared as
    64-bit values, a family or protocol with high bits set (the kernel reads an int) is
    refused too: the filter fails closed.
    """
    allowed = (*SOCKET_FAMILIES, AF_NETLINK)
    rules = [[(0, "EQ", family)] for family in range(max(allowed)) if family not in allowed]
    rules.append([(0, "GT", max(allowed))])
    rules.append([(0, "EQ", AF_NETLINK), (2, "GT", max(NETLINK_PROTOCOLS))])
    return rules


def personality_denials() -> list[tuple[int, int]]:
    """(mask, value) pairs, any of which refuses a personality() call.

    The kernel reads only the low 32 bits (an unsigned int), so the high ones must not
    decide. A filter rule may test an argument once, so "low 32 bits neither all 0 nor all
    1" is said as "two adjacent low bits differ": 62 masked-equal rules, one per pair.
    """
    return [(0b11 << i, v << i) for i in range(31) for v in (0b01, 0b10)]


@functools.cache
def filter_program() -> bytes:
    """The compiled BPF program (cached: compiling costs ~1 ms, loading it is per start)."""
    try:
        import pyseccomp as sc  # type: ignore[import-untyped]
    except (ImportError, OSError) as exc:  # pyseccomp loads libseccomp.so.2 at import
        raise SandboxUnavailableError(
            f"cannot load libseccomp ({exc}): `apt-get install -y libseccomp2`"
        ) from exc
    flt = sc.SyscallFilter(sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        try:
            flt.add_rule(eperm, name)
        except OSError:
            continue  # not a syscall on this architecture (e.g. iopl on arm64)
    for flag in NAMESPACE_FLAGS.values():
        flt.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory a filter cannot read: make libc fall back to clone.
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    refuse_family = sc.ERRNO(errno.EAFNOSUPPORT)
    for call in ("socket", "socketpair"):
        for rule in socket_denials():
            args = [sc.Arg(arg, getattr(sc, op), value) for arg, op, value in rule]
            flt.add_rule(refuse_family, call, *args)
    for mask, value in personality_denials():
        flt.add_rule(eperm, "personality", sc.Arg(0, sc.MASKED_EQ, mask, value))
    with tempfile.TemporaryFile() as out:
        flt.export_bpf(out)
        out.seek(0)
        return out.read()


def program_fd() -> int:
    """A fresh readable fd holding the program, for one ``bwrap --seccomp FD`` (caller closes)."""
    data = filter_program()
    fd = os.memfd_create("synthorg-seccomp", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
