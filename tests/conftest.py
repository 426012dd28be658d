"""Fixtures for the tiers that need Kubernetes (cluster, chart): one local control plane per
session, a namespace per test.

The binaries are built (or found in the cache) once, right after collection and before any test
runs, so that a cold build (tens of minutes) does not count against a test's timeout. Tests never
skip for lack of binaries: they build them.

``TRITONLLM_TEST_CLUSTER`` picks the cluster name (default ``pytest``). A cluster that already
runs under that name is reused and left running; one started here is stopped at session end
unless another run (a second `pytest` command) still uses it, and the teardown checks that
nothing of it is left on the host (processes, mounts, cgroups, the bridge, veths, iptables
rules). With workers (``pytest -n``, as `scripts/test` runs), the first worker that needs the
cluster starts it and the controlling process stops and checks it once every worker is done;
tests/lanes.py says which tests run side by side and which take the cluster for themselves.
The cluster has a real node (kubelet + containerd) beside the kwok nodes;
``TRITONLLM_TEST_REAL_NODE=0`` leaves it out (the real-node tests then fail).
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Generator, Iterator
from types import FrameType

import pytest

from tests import lanes
from tests.helpers import pyz
from tritonllm_dev import host, images
from tritonllm_dev.build import ensure_all
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import fresh_namespace
from tritonllm_dev.versions import cache_root

__all__ = ["pyz"]  # fixtures every tier shares (tests/helpers.py)


def _cluster_tests_selected(session: pytest.Session) -> bool:
    # gitops tests run the argocd binary, built with the cluster's binaries
    return any(
        item.get_closest_marker("cluster") or item.get_closest_marker("gitops")
        for item in session.items
    )


CLUSTER_NAME = os.environ.get("TRITONLLM_TEST_CLUSTER", "pytest")
#: Where the workers of a run meet: the cluster lock, who started the cluster.
LOCKS = cache_root() / "locks" / CLUSTER_NAME
#: The run's id of the run whose worker started the cluster (its controlling process stops it).
OWNER = LOCKS / "started-by"
#: The run's id, set by the controlling process and inherited by its workers.
RUN_ENV = "TRITONLLM_TEST_RUN"
_cluster_lock = lanes.ClusterLock(LOCKS)
_users = lanes.ClusterUsers(LOCKS)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controlling process (or a run without workers)
        os.environ[RUN_ENV] = uuid.uuid4().hex


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    lanes.assign(items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    mode = lanes.lock_mode(item)
    if mode is not None:
        waited = _cluster_lock.hold(mode, item.nodeid, lambda why: _say(item.config, why))
        if waited > lanes.SLOW_WAIT_S:
            item.add_report_section("setup", "cluster lock", f"waited {waited:.1f} s ({mode})")
            _say(item.config, f"{item.nodeid} got the cluster after {waited:.1f} s")
    try:
        yield
    finally:
        if not lanes.keeps_lock(item, nextitem):
            _cluster_lock.release()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Mark a test whose setup, call or teardown failed (lanes.keeps_lock reads it)."""
    report = yield
    if report.failed:
        item.stash[lanes.FAILED] = True
    return report


def _say(config: pytest.Config, line: str) -> None:
    """A line on the terminal now: what a lane waits for is never silent."""
    with lanes.uncaptured(config):
        # a line of its own: the progress dots do not end theirs
        print(f"\n[cluster lock] {lanes.worker() or 'main'}: {line}", file=sys.stderr, flush=True)


def pytest_collection_finish(session: pytest.Session) -> None:
    if not _cluster_tests_selected(session):
        return
    # Every worker collects: one builds (or finds the cache), the others wait for it.
    with lanes.uncaptured(session.config), lanes.file_lock(lanes.BUILD_LOCK):
        ensure_all(
            progress=lambda msg: print(f"[cluster build] {msg}", file=sys.stderr, flush=True)
        )
        if os.environ.get("TRITONLLM_TEST_REAL_NODE", "1") != "0":
            # The real node's images too (minutes when cold), outside any test's timeout.
            images.build_images(
                lambda msg: print(f"[image build] {msg}", file=sys.stderr, flush=True)
            )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _instance() -> LocalCluster:
    real = os.environ.get("TRITONLLM_TEST_REAL_NODE", "1") != "0"
    return LocalCluster(name=CLUSTER_NAME, real_node=real)


def _stop_and_check(instance: LocalCluster) -> list[str]:
    """Stop a cluster this run started; what was left of it (empty when nothing)."""
    problems: list[str] = []
    left = instance.down()
    if left:
        problems.append(f"cluster processes survived teardown: {left}")
    strays = instance.stray_processes()
    if strays:
        problems.append(f"processes of the test cluster left running: {strays}")
    problems += instance.host_problems
    leftovers = host.leftovers(instance.state_dir)
    if leftovers:
        problems.append(f"left on the host after `down`: {leftovers}")
    return problems


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """The running local cluster: ``.kubeconfig``, ``.kubectl(*args)``, ``.apply(objs)``..."""
    instance = _instance()
    if lanes.worker() is not None:
        # A worker: the first to get here starts the cluster; the controlling process stops it
        # once every worker is done (pytest_sessionfinish below).
        said = "waits for another worker to start the cluster"
        with lanes.file_lock(LOCKS / "start.lock", lambda: _say(request.config, said)):
            _users.join()
            if not instance.is_running():
                instance.up()
                OWNER.write_text(os.environ.get(RUN_ENV, ""))
        yield instance
        return
    # Another run (a second `pytest` command) may be starting or stopping the same cluster.
    said = "waits for another run to start or stop the cluster"
    with lanes.file_lock(LOCKS / "start.lock", lambda: _say(request.config, said)):
        _users.join()
        started = not instance.is_running()
        previous = signal.getsignal(signal.SIGTERM)
        if started:
            # The cluster runs in its own sessions, so a CI runner killing pytest's process
            # group would leave it behind: turn SIGTERM into KeyboardInterrupt so the teardown
            # below runs.
            signal.signal(signal.SIGTERM, _interrupt)
            instance.up()
    try:
        yield instance
    finally:
        if started:
            with lanes.file_lock(LOCKS / "start.lock"):
                problems = _stop_and_check(instance) if _users.alone() else []
            signal.signal(signal.SIGTERM, previous)
            assert not problems, "\n".join(problems)
        _users.leave()


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput") or not session.config.getoption("numprocesses", None):
        return
    # The controlling process of a run with workers: a CI runner's SIGTERM still stops the
    # cluster the workers started (pytest_sessionfinish).
    signal.signal(signal.SIGTERM, _interrupt)


@pytest.hookimpl(trylast=True)  # after pytest-xdist has stopped the workers
def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return
    if not OWNER.is_file() or OWNER.read_text() != os.environ.get(RUN_ENV):
        return
    OWNER.unlink()
    with lanes.file_lock(LOCKS / "start.lock"):  # left running while another run uses it
        problems = _stop_and_check(_instance()) if _users.alone() else []
    if problems:
        reporter = session.config.pluginmanager.getplugin("terminalreporter")
        for line in problems:
            if reporter is not None:
                reporter.write_line(f"cluster teardown: {line}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def namespace(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount), deleted after the test."""
    with fresh_namespace(cluster, request.node.name) as name:
        yield name
