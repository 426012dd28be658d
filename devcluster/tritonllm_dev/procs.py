"""Process and socket inspection through /proc, for teardown and for the leak checks.

Why /proc and not ``ps``/``ss``: no parsing of human-oriented output, no dependency on procps or
iproute2 being installed, and socket-to-process attribution works for our own processes without
privileges. Linux only, like the rest of the local cluster.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_TCP_LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket owned by a process."""

    pid: int
    command: str
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback

    def __str__(self) -> str:
        return f"{self.command}[{self.pid}] {self.address}:{self.port}"


def cmdline(pid: int) -> list[str]:
    """The argv of ``pid``; empty for a dead process or a zombie."""
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (zombies count as dead, and are reaped if they are our children)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    if state in ("Z", "X"):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc/<pid>/task/*/children)."""
    out: list[int] = []
    for task in (_PROC / str(pid) / "task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def descendants(pids: Iterable[int]) -> set[int]:
    """``pids`` and all their descendants that are alive."""
    seen: set[int] = set()
    todo = [p for p in pids if alive(p)]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo += children(pid)
    return seen


def processes_matching(needle: str) -> dict[int, list[str]]:
    """Live processes whose command line contains ``needle`` (e.g. a cluster's state dir)."""
    found: dict[int, list[str]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        args = cmdline(pid)
        if args and any(needle in a for a in args) and alive(pid):
            found[pid] = args
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    fd_dir = _PROC / str(pid) / "fd"
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _parse_addr(hex_addr: str) -> tuple[str, int]:
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        addr = str(ipaddress.IPv4Address(raw[::-1]))
    else:  # IPv6: four little-endian 32-bit words
        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        ip6 = ipaddress.IPv6Address(words)
        addr = str(ip6.ipv4_mapped) if ip6.ipv4_mapped else str(ip6)
    return addr, int(port, 16)


def listeners(pids: Iterable[int]) -> list[Listener]:
    """Listening TCP sockets (IPv4 and IPv6) owned by ``pids``."""
    by_inode: dict[str, int] = {}
    for pid in pids:
        for inode in _socket_inodes(pid):
            by_inode[inode] = pid
    out: list[Listener] = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _TCP_LISTEN or fields[9] not in by_inode:
                continue
            pid = by_inode[fields[9]]
            addr, port = _parse_addr(fields[1])
            args = cmdline(pid)
            out.append(Listener(pid, Path(args[0]).name if args else "?", addr, port))
    return sorted(out, key=lambda item: (item.pid, item.port))


def terminate(pids: Iterable[int], timeout: float = 15.0) -> list[int]:
    """SIGTERM each process group, wait, then SIGKILL what is left; return pids still alive.

    Every cluster process is started in its own session, so its pid is also its process group and
    killing the group takes any helper it spawned along.
    """
    pids = [p for p in pids if alive(p)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    for pid in [p for p in pids if alive(p)]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def listen_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:`port` (connections of a stopped listener in TIME_WAIT do
    not count: the cluster's servers bind with SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


#: How many earlier runs' logs of one process are kept beside its current log.
LOG_GENERATIONS = 5


def rotate(log: Path, keep: int = LOG_GENERATIONS) -> None:
    """Move `log` to ``<log>.1`` (``.1`` to ``.2``..., the oldest beyond `keep` dropped), so that
    a process started again (a restarted API server, a cluster stopped and started) does not
    erase what the previous run logged: the log of a failure is read after the run."""
    if keep < 1 or not log.exists():
        return
    older = [log.with_name(f"{log.name}.{n}") for n in range(1, keep + 1)]
    older[-1].unlink(missing_ok=True)
    for n in range(keep - 1, 0, -1):
        if older[n - 1].exists():
            older[n - 1].replace(older[n])
    log.replace(older[0])


def spawn(argv: list[str], log: Path, *, cwd: Path, env: dict[str, str] | None = None,
          header: bytes = b"") -> subprocess.Popen[bytes]:
    """Start a long-running process in its own session, stdout and stderr into `log` (a new
    file after `header`; the earlier ones rotated, see `rotate`), stdin closed, the environment
    extended with `env`."""
    rotate(log)
    with log.open("wb") as fh:
        if header:
            fh.write(header)
            fh.flush()
        return subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
            env={**os.environ, **(env or {})},
        )
