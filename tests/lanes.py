"""How the test tiers share one local cluster when pytest runs them side by side (``-n``).

`scripts/test` runs pytest with workers (pytest-xdist, ``--dist loadgroup``). Every test that
needs the cluster goes into a lane, and each lane runs its tests one after another on one
worker, as a plain run would:

- ``kwok-operator`` and ``kwok``: the tests whose pods run on the simulated GPU nodes
  (``tests/cluster/test_operator.py`` in the first, the others, Argo CD's included, in the
  second). Two lanes share the kwok nodes' GPUs (16 H100s, 4 A100s): each test in them asks for
  a few at a time; the tests that take them all (a fifth 4-GPU replica left Pending, a tp 8 x
  pp 2 group) are exclusive.
- ``real-node``: the tests whose pods run on the real node (kubelet, containerd, tritonserver on
  its CPU). One lane, because its stand-in GPUs and its CPU are one machine's.
- ``exclusive``: the tests that change what every namespace shares (the API server's restart, a
  lost node, the CRDs replaced, operators and autoscalers that act on every namespace, the
  cluster itself stopped and started). Each takes the cluster for itself: it waits until no
  other cluster test runs, and no other cluster test starts until it ends (below).

Tests in the three shared lanes run at the same time, each in its own namespace with its own
operator watching only that namespace (Argo CD's test installs the chart with
``settings.namespaces`` set to its namespace; Argo CD itself only reads the rest). The tiers
without a cluster (unit, contract, chart rendering) spread over the workers test by test; the
real tritonserver (``triton``) and image (``images``) tiers get a lane each, as their processes
share the host's ports and build store.

The cluster-wide lock is a readers-writer lock (flock) on two files in
``~/.cache/tritonllm/locks/<cluster>/``:
a shared-lane test holds it shared for its run, an exclusive test holds it exclusively, and a
turnstile taken first keeps a waiting exclusive test from being overtaken by new shared ones.
An exclusive test that passed keeps the lock while the next test on its worker is exclusive too,
so the exclusive lane drains the others once rather than once per test; one that failed (in its
setup, call or teardown) releases it at once, so the shared lanes' waiting tests run before the
next exclusive one rather than behind the rest of the exclusive lane. A worker that must wait says
so on the terminal at once, with the test it waits for. A plain ``pytest`` run (no workers)
takes the same locks, never waits, and behaves as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from tritonllm_dev.versions import cache_root

#: Held by a worker while it builds or checks the cached binaries and images: the workers of a
#: run all collect, and one builds while the others wait for its cache.
BUILD_LOCK = cache_root() / "locks" / "build.lock"

#: Cluster tests whose pods run on the real node (path prefixes, from the repository root).
REAL_NODE = ("tests/cluster/test_real_",)

#: Cluster tests that take the whole cluster, and why (path prefixes or node ids).
EXCLUSIVE = {
    "tests/cluster/test_faults.py::test_api_server_restart": "restarts the API server",
    "tests/cluster/test_faults.py::test_node_lost": "deletes a GPU node and brings it back",
    "tests/cluster/test_faults.py::test_a_refused_finalizer": "an admission policy on every "
    "namespace's deployments",
    "tests/cluster/test_real_node.py::test_down_then_up": "stops and starts the whole cluster",
    "tests/cluster/test_local_cluster.py::test_cli_up_down": "starts a second cluster on the host",
    "tests/cluster/test_local_cluster.py::test_only_loopback": "lists every listener on the host",
    "tests/chart/": "the chart's operator watches every namespace; the upgrade replaces the CRDs",
    "tests/cluster/test_operator.py::test_a_serving_pod_the_scheduler_cannot_place": "takes "
    "all 16 H100s",
    "tests/cluster/test_network_policy.py": "a tp 8 x pp 2 group: all 16 H100s",
    "tests/autoscaling/": "prometheus-adapter serves the cluster's metrics APIs, KEDA acts on "
    "every namespace's ScaledObjects",
}

#: Cluster tests in a lane of their own (path prefixes); the other kwok tests go to ``kwok``.
KWOK_LANES = {"tests/cluster/test_operator.py": "kwok-operator"}

#: Host-level tiers that need no cluster but share the host with themselves.
HOST_LANES = {"tests/triton/": "triton", "tests/images/": "images"}

#: A test whose wait for the cluster lock passes this is told so in its report.
SLOW_WAIT_S = 1.0


def _path(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def needs_cluster(item: pytest.Item) -> bool:
    return bool(item.get_closest_marker("cluster") or item.get_closest_marker("gitops"))


def lane(item: pytest.Item) -> str | None:
    """The lane an item runs in; None for a test that may run anywhere."""
    path = _path(item)
    if needs_cluster(item):
        if any(item.nodeid.startswith(p) for p in EXCLUSIVE):
            return "exclusive"
        if path.startswith(REAL_NODE):
            return "real-node"
        return next((n for prefix, n in KWOK_LANES.items() if path.startswith(prefix)), "kwok")
    return next((name for prefix, name in HOST_LANES.items() if path.startswith(prefix)), None)


def assign(items: list[pytest.Item]) -> None:
    """Put each item in its lane: an ``xdist_group`` marker (kept together on one worker under
    ``--dist loadgroup``; ignored without workers)."""
    for item in items:
        name = lane(item)
        if name is not None:
            item.add_marker(pytest.mark.xdist_group(name))


class ClusterLock:
    """The readers-writer lock the cluster tests of one cluster share (see the module doc)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._paths = (directory / "tests.turnstile.lock", directory / "tests.lock")
        self._holder = directory / "exclusive-holder"  # who holds it exclusively, and since when
        self._files: tuple[IO[bytes], IO[bytes]] | None = None
        self.mode: str | None = None

    def _open(self) -> tuple[IO[bytes], IO[bytes]]:
        if self._files is None:
            a, b = (open(p, "ab") for p in self._paths)  # noqa: SIM115 - held for the session
            self._files = (a, b)
        return self._files

    def holder(self) -> str:
        """The exclusive test that holds the lock or last held it, with when it took it."""
        try:
            return self._holder.read_text()
        except OSError:
            return "none recorded"

    def hold(
        self, mode: str, who: str = "", on_wait: Callable[[str], None] | None = None
    ) -> float:
        """Take the lock (``shared`` or ``exclusive``) for test `who` unless held so already; the
        seconds waited. When it must wait, ``on_wait`` hears once why."""
        if self.mode == mode:
            return 0.0
        self.release()
        turnstile, main = self._open()
        start = time.monotonic()
        told = False

        def take(f: IO[bytes], op: int) -> None:
            nonlocal told
            try:
                fcntl.flock(f, op | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if on_wait is not None and not told:
                    told = True
                    busy = (f"an exclusive test ({self.holder()})" if f is turnstile or
                            mode == "shared" else "the shared lanes' running tests")
                    on_wait(f"{who} waits ({mode}) for {busy} to end")
            fcntl.flock(f, op)

        take(turnstile, fcntl.LOCK_EX)
        if mode == "exclusive":
            self._holder.write_text(f"{who}, since {time.strftime('%H:%M:%S')}")
            take(main, fcntl.LOCK_EX)  # the turnstile stays held: no new shared holder
        else:
            take(main, fcntl.LOCK_SH)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        self.mode = mode
        return time.monotonic() - start

    def release(self) -> None:
        if self.mode is None or self._files is None:
            return
        turnstile, main = self._files
        fcntl.flock(main, fcntl.LOCK_UN)
        if self.mode == "exclusive":
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        self.mode = None


class ClusterUsers:
    """The pytest runs that use one cluster: each holds a shared flock on ``users.lock`` from its
    first cluster test to its end. The run that started the cluster stops it at its end only if
    no other run uses it (``alone``); independent runs (several ``pytest`` commands at once) then
    never stop a cluster under each other's tests."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / "users.lock"
        self._file: IO[bytes] | None = None

    def join(self) -> None:
        if self._file is None:
            self._file = open(self._path, "ab")  # noqa: SIM115 - held for the session
            fcntl.flock(self._file, fcntl.LOCK_SH)

    def alone(self) -> bool:
        """No other run uses the cluster now (this one's own use ends here)."""
        self.leave()
        with open(self._path, "ab") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(f, fcntl.LOCK_UN)
            return True

    def leave(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file releases its flock
            self._file = None


def lock_mode(item: pytest.Item | None) -> str | None:
    if item is None or not needs_cluster(item):
        return None
    return "exclusive" if lane(item) == "exclusive" else "shared"


#: Set on a test (tests/conftest.py) when one of its phases failed.
FAILED = pytest.StashKey[bool]()


def keeps_lock(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """Whether the worker keeps the cluster lock after `item`: only when an exclusive test that
    passed is followed on its worker by another exclusive one. A failed test never keeps it: a
    failure is often a slow one (a wait that timed out), and the shared lanes have waited for it
    already."""
    return (
        lock_mode(item) == "exclusive"
        and lock_mode(nextitem) == "exclusive"
        and not item.stash.get(FAILED, False)
    )


@contextlib.contextmanager
def file_lock(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive flock on `path` for the block (one worker at a time); ``on_wait`` is called
    first when another worker holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def uncaptured(config: pytest.Config) -> contextlib.AbstractContextManager[object]:
    """pytest's output capture off for the block: what is printed reaches the terminal now (from
    a worker too: its stderr is the run's)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    return capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()


def worker() -> str | None:
    """This process's pytest-xdist worker id (``gw0``...), None outside a worker."""
    return os.environ.get("PYTEST_XDIST_WORKER")
