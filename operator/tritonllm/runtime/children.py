"""Child processes of the entry points (tools, mpirun): run with the output tailed, signals
forwarded, the local MPI ranks found."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from .report import EXIT_NOT_FOUND, Failure

ENOSPC_PATTERNS = ("No space left on device", "ENOSPC", "Disk quota exceeded")
# What a kubelet's stop (and ^C) sends; the entry points handle both alike.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclasses.dataclass
class ChildResult:
    returncode: int
    # Last output lines (only when captured), to classify failures such as ENOSPC.
    tail: list[str]
    signalled: int | None = None


def local_mpi_ranks(mpirun_pid: int) -> list[int]:
    """The ranks an mpirun started on this host: its direct children with an MPI rank
    (OMPI_COMM_WORLD_RANK or PMIX_RANK) in their environment. Not its ssh/orted helpers."""
    ranks = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(_stat_fields(entry / "stat")[1])
            if ppid != mpirun_pid:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if any(v.startswith((b"OMPI_COMM_WORLD_RANK=", b"PMIX_RANK=")) for v in environ):
            ranks.append(int(entry.name))
    return sorted(ranks)


def serving_processes(ranks: list[int], name: str = "tritonserver") -> list[int]:
    """The servers among local ranks and what they started: a rank that is `name` itself (one
    tritonserver per rank), or the processes of that name it started (under trtllm-llmapi-launch
    a rank is the launcher script, rank 0's tritonserver its descendant, the other ranks' LLM API
    workers are no server: they end with the group, not on their own). The ranks themselves when
    no server is up (yet)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat_fields(entry / "stat")[1])
            except (OSError, ValueError, IndexError):
                continue
    found = {p for p in ranks if _command_name(p) == name}
    found |= {p for p in parents
              if any(_descends(p, rank, parents) for rank in ranks) and _command_name(p) == name}
    return sorted(found) if found else list(ranks)


def _descends(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    seen = 0
    while pid in parents and seen < 64:  # bounded: /proc may change under us
        pid = parents[pid]
        if pid == ancestor:
            return True
        seen += 1
    return False


def _command_name(pid: int) -> str:
    """The basename of a process's argv[0] ("" when gone or unreadable)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return ""
    return Path(argv0.decode(errors="replace")).name


def _stat_fields(stat: Path) -> list[str]:
    """The fields of /proc/<pid>/stat after "pid (comm) ": state, ppid, ... (comm may hold
    spaces or parens)."""
    return stat.read_text().rsplit(")", 1)[1].split()


def running(pid: int) -> bool:
    """Alive and not a zombie waiting for its parent."""
    try:
        return _stat_fields(Path(f"/proc/{pid}/stat"))[0] != "Z"
    except (OSError, IndexError):
        return False


@contextlib.contextmanager
def on_stop_signals(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """While active, SIGTERM and SIGINT go to `handler`; the previous handlers come back."""
    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def forward_signals(
    proc: subprocess.Popen[Any],
    received: list[int],
    targets: Callable[[int], list[int]] | None = None,
) -> Iterator[None]:
    """While active, SIGTERM/SIGINT to us go to `proc` (a graceful drain), recorded in received.

    With `targets`, the first signal goes to the processes targets(proc.pid) names instead (when
    it names any), and a repeated one to `proc` itself.
    """

    def handler(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        if proc.poll() is not None:
            return
        pids = targets(proc.pid) if targets is not None and len(received) == 1 else []
        for pid in pids or [proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    with on_stop_signals(handler):
        yield


def run_child(
    argv: Sequence[str],
    *,
    capture: bool = False,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    signal_targets: Callable[[int], list[int]] | None = None,
) -> ChildResult:
    """Run a command in the foreground, forwarding SIGTERM/SIGINT to it (see forward_signals
    for signal_targets).

    With capture, its output is passed through line by line and the last lines are kept.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.STDOUT if capture else None,
            text=capture,
            errors="replace" if capture else None,
        )
    except FileNotFoundError as exc:
        raise Failure(EXIT_NOT_FOUND, f"{argv[0]}: command not found in this image") from exc
    tail: deque[str] = deque(maxlen=200)
    received: list[int] = []
    with forward_signals(proc, received, signal_targets):
        if capture and proc.stdout is not None:
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                tail.append(line.rstrip("\n"))
        code = proc.wait()
    return ChildResult(code, list(tail), received[0] if received else None)


def mentions_enospc(lines: Sequence[str]) -> bool:
    return any(p in line for line in lines for p in ENOSPC_PATTERNS)
