"""What the tiers that run beside the local cluster share (Argo CD, autoscaling): host processes
started against the cluster's admin kubeconfig, logged into one work directory, stopped together.
"""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from tritonllm_dev import procs
from tritonllm_dev.local import ClusterError


class HostTier:
    """Processes of one tier, each logging to ``<workdir>/<name>.log``; a context manager that
    calls ``start`` on entry (stopping what started if it fails) and ``stop`` on exit."""

    #: How errors name the tier ("argo cd", "autoscaling").
    label = "tier"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> list[int]:
        """Stop every process (SIGTERM, then SIGKILL); return the pids still alive."""
        left = procs.terminate([p.pid for p in self.procs.values()])
        for proc in self.procs.values():
            if proc.poll() is None and proc.pid not in left:
                proc.wait(timeout=5)
        self.procs.clear()
        return left

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.procs[name] = procs.spawn(
            argv, self.workdir / f"{name}.log", cwd=self.workdir, env=env
        )

    def check_alive(self) -> None:
        """Raise ClusterError with the log's tail if any process has exited."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise ClusterError(
                    f"{self.label} {name} exited ({proc.returncode}):\n{self.log_tail(name)}"
                )

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def http_ok(url: str) -> bool:
    """``url`` answers 200 (plain HTTP, within 2 s)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False
