"""Fixtures for the tiers that need Kubernetes (cluster, chart): one local control plane per
session, a namespace per test.

The binaries are built (or found in the cache) once, right after collection and before any test
runs, so that a cold build (tens of minutes) does not count against a test's timeout. Tests never
skip for lack of binaries: they build them.

``TRITONLLM_TEST_CLUSTER`` picks the cluster name (default ``pytest``). A cluster that already
runs under that name is reused and left running; one started here is stopped at session end, and
the teardown checks that nothing of it is left on the host (processes, mounts, cgroups, the
bridge, veths, iptables rules). The cluster has a real node (kubelet + containerd) beside the
kwok nodes; ``TRITONLLM_TEST_REAL_NODE=0`` leaves it out (the real-node tests then fail).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType

import pytest

from tests.helpers import pyz
from tritonllm_dev import host, images
from tritonllm_dev.build import ensure_all
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import fresh_namespace

__all__ = ["pyz"]  # fixtures every tier shares (tests/helpers.py)


def _cluster_tests_selected(session: pytest.Session) -> bool:
    # gitops tests run the argocd binary, built with the cluster's binaries
    return any(
        item.get_closest_marker("cluster") or item.get_closest_marker("gitops")
        for item in session.items
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    if not _cluster_tests_selected(session):
        return
    capman = session.config.pluginmanager.getplugin("capturemanager")
    ctx = capman.global_and_fixture_disabled() if capman else None
    if ctx is None:
        ensure_all()
        return  # pragma: no cover - pytest always has its capture manager
    with ctx:
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


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    """The running local cluster: ``.kubeconfig``, ``.kubectl(*args)``, ``.apply(objs)``..."""
    real = os.environ.get("TRITONLLM_TEST_REAL_NODE", "1") != "0"
    instance = LocalCluster(name=os.environ.get("TRITONLLM_TEST_CLUSTER", "pytest"), real_node=real)
    started = not instance.is_running()
    previous = signal.getsignal(signal.SIGTERM)
    if started:
        # The cluster runs in its own sessions, so a CI runner killing pytest's process group
        # would leave it behind: turn SIGTERM into KeyboardInterrupt so the teardown below runs.
        signal.signal(signal.SIGTERM, _interrupt)
        instance.up()
    try:
        yield instance
    finally:
        if started:
            left = instance.down()
            signal.signal(signal.SIGTERM, previous)
            assert not left, f"cluster processes survived teardown: {left}"
            strays = instance.stray_processes()
            assert not strays, f"processes of the test cluster left running: {strays}"
            assert not instance.host_problems, instance.host_problems
            leftovers = host.leftovers(instance.state_dir)
            assert not leftovers, f"left on the host after `down`: {leftovers}"


@pytest.fixture
def namespace(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount), deleted after the test."""
    with fresh_namespace(cluster, request.node.name) as name:
        yield name
