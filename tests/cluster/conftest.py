"""Fixtures for the cluster tier: one local control plane per session, a namespace per test.

The binaries are built (or found in the cache) once, right after collection and before any test
runs, so that a cold build (tens of minutes) does not count against a test's timeout. Tests never
skip for lack of binaries: they build them.

``TRITONLLM_TEST_CLUSTER`` picks the cluster name (default ``pytest``). A cluster that already
runs under that name is reused and left running; one started here is stopped at session end.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tritonllm.cluster.build import ensure_all
from tritonllm.cluster.local import LocalCluster
from tritonllm.cluster.testing import fresh_namespace


def _cluster_tests_selected(session: pytest.Session) -> bool:
    return any(item.get_closest_marker("cluster") for item in session.items)


def pytest_collection_finish(session: pytest.Session) -> None:
    if not _cluster_tests_selected(session):
        return
    capman = session.config.pluginmanager.getplugin("capturemanager")
    ctx = capman.global_and_fixture_disabled() if capman else None
    if ctx is None:
        ensure_all()
        return
    with ctx:
        ensure_all(
            progress=lambda msg: print(f"[cluster build] {msg}", file=sys.stderr, flush=True)
        )


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    """The running local cluster: ``.kubeconfig``, ``.kubectl(*args)``, ``.apply(objs)``..."""
    instance = LocalCluster(name=os.environ.get("TRITONLLM_TEST_CLUSTER", "pytest"))
    started = not instance.is_running()
    if started:
        instance.up()
    yield instance
    if started:
        left = instance.down()
        assert not left, f"cluster processes survived teardown: {left}"


@pytest.fixture
def namespace(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount), deleted after the test."""
    with fresh_namespace(cluster, request.node.name) as name:
        yield name
