"""A program run inside a sandbox: tries socket() and socketpair() for every address family.

Prints one JSON object: per family, which of a few socket types opened (a list of type names)
and otherwise the errno each call failed with. The families are numbers (0..63), so one not
named by this host's headers is tried too; so are a family with high bits set (the kernel
reads an int) and every netlink protocol.
"""

SOURCE = r"""
import ctypes, errno, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.argtypes = [ctypes.c_long] * 5
TYPES = {"stream": 1, "dgram": 2, "raw": 3, "seqpacket": 5}
NR = {"x86_64": (41, 53), "aarch64": (198, 199)}[platform.machine()]

def attempt(nr, family, kind, protocol=0):
    pair = (ctypes.c_int * 2)()
    args = (family, kind, protocol, ctypes.cast(pair, ctypes.c_void_p).value or 0)
    fd = libc.syscall(nr, *args)
    if fd >= 0:
        for opened in ((fd,) if nr == NR[0] else (pair[0], pair[1])):
            os.close(opened)
        return "opened"
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

out = {"socket": {}, "socketpair": {}, "netlink": {}, "high_bits": {}}
for call, nr in zip(("socket", "socketpair"), NR):
    for family in range(64):
        out[call][family] = {name: attempt(nr, family, kind) for name, kind in TYPES.items()}
for protocol in range(32):
    out["netlink"][protocol] = attempt(NR[0], 16, 3, protocol)
for family in (1, 2, 10, 16, 40):
    out["high_bits"][family] = attempt(NR[0], (1 << 32) | family, 1)
print(json.dumps(out))
"""

VSOCK = 40
NETLINK = 16
NETLINK_ROUTE = 0
ALLOWED = {1: "AF_UNIX", 2: "AF_INET", 10: "AF_INET6", NETLINK: "AF_NETLINK (route)"}
REFUSED = {"EAFNOSUPPORT", "EPERM"}


def check(report: dict[str, dict[str, object]]) -> None:
    """Every family but the allowed ones is refused for every type; the allowed still open."""
    for call in ("socket", "socketpair"):
        opened = {
            int(family): sorted(k for k, v in kinds.items() if v == "opened")  # type: ignore[attr-defined]
            for family, kinds in report[call].items()
        }
        leaked = {f: kinds for f, kinds in opened.items() if kinds and f not in ALLOWED}
        assert not leaked, (call, leaked)
        for family, kinds in report[call].items():
            if int(family) not in ALLOWED:
                errnos = set(kinds.values())  # type: ignore[attr-defined]
                assert errnos <= REFUSED, (call, family, kinds)
    # Controls: the families a run needs still work (AF_UNIX pairs for tmux and the forwarders).
    sock = report["socket"]
    for family in ("1", "2", "10"):
        assert sock[family]["stream"] == "opened", (family, sock[family])  # type: ignore[index]
    assert report["socketpair"]["1"]["stream"] == "opened", report["socketpair"]["1"]  # type: ignore[index]
    netlink = report["netlink"]
    assert netlink[str(NETLINK_ROUTE)] == "opened", netlink
    others = {p: e for p, e in netlink.items() if p != str(NETLINK_ROUTE)}
    assert set(others.values()) <= REFUSED, others  # uevent (15), audit, sock_diag, ...
    assert set(report["high_bits"].values()) <= REFUSED, report["high_bits"]
