"""STDLIB-ONLY in-sandbox launcher: forward 127.0.0.1 ports to unix sockets, then run argv.

Usage: python3 -I -S launcher.py [--subreaper] [--forward PORT=SOCKET]... -- PROGRAM [ARGS...]

Each forwarder listens on 127.0.0.1:PORT inside the sandbox's own network namespace and
relays every connection, byte for byte, to the unix socket bound in from the host (the
gateway or the MCP server), so ordinary ``http://127.0.0.1:PORT`` base URLs work while no
other route out exists. The listeners are bound before PROGRAM starts, so it never races them.

With --subreaper (the unisolated local backend, which has no pid namespace to do it) the
launcher adopts orphaned descendants and kills them all when PROGRAM ends.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading

_CHUNK = 65536


def _pump(src: socket.socket, dst: socket.socket, done: threading.Semaphore) -> None:
    """Copy src to dst until EOF, then half-close dst so the peer sees the end."""
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        done.release()


def _relay(client: socket.socket, socket_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(socket_path)
    except OSError as exc:
        sys.stderr.write(f"synthorg-forwarder: cannot reach {socket_path}: {exc}\n")
        client.close()
        upstream.close()
        return
    done = threading.Semaphore(0)
    back = threading.Thread(target=_pump, args=(upstream, client, done), daemon=True)
    back.start()
    _pump(client, upstream, done)
    done.acquire()
    done.acquire()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, socket_path: str) -> None:
    while True:
        client, _ = listener.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_relay, args=(client, socket_path), daemon=True).start()


def start_forwarder(port: int, socket_path: str) -> socket.socket:
    """Listen on 127.0.0.1:port and relay each connection to socket_path (daemon thread)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    threading.Thread(target=_serve, args=(listener, socket_path), daemon=True).start()
    return listener


def parse_args(args: list[str]) -> tuple[bool, list[tuple[int, str]], list[str]]:
    """Split the command line into the subreaper flag, (port, socket) forwards and argv."""
    subreaper = bool(args) and args[0] == "--subreaper"
    args = args[1:] if subreaper else args
    forwards: list[tuple[int, str]] = []
    while args and args[0] == "--forward":
        port, _, path = args[1].partition("=")
        forwards.append((int(port), path))
        args = args[2:]
    if not args or args[0] != "--" or len(args) < 2:
        raise SystemExit("usage: launcher.py [--subreaper] [--forward PORT=SOCKET]... -- ARGV")
    return subreaper, forwards, args[1:]


def become_subreaper() -> None:
    """Orphaned descendants get reparented to us instead of init (prctl via ctypes)."""
    import ctypes

    pr_set_child_subreaper = 36
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)


def kill_descendants() -> None:
    """SIGKILL every descendant and reap them, until none is left."""
    me = os.getpid()
    while True:
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as fh:
                        parents[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    pass
        found: list[int] = []
        frontier = {me}
        while frontier:
            frontier = {pid for pid, ppid in parents.items() if ppid in frontier}
            found += frontier
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            if not found:
                return
        if not found:
            return


def main(args: list[str]) -> int:
    subreaper, forwards, argv = parse_args(args)
    if subreaper:
        become_subreaper()
    for port, path in forwards:
        start_forwarder(port, path)
    try:  # posix_spawn, not subprocess: importing subprocess costs more than the spawn
        child = os.posix_spawnp(argv[0], argv, os.environ)
    except OSError as exc:
        sys.stderr.write(f"synthorg-launcher: cannot start {argv[0]}: {exc}\n")
        return 127
    status = os.waitpid(child, 0)[1]
    if subreaper:
        kill_descendants()
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)  # mirror a shell: killed by signal N => 128+N
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)  # forwarder threads are daemons: do not wait for open connections
