"""A Ready deployment does not need its finished repository Job: the Job's TTL (one day) removes
it, and the deployment stays Ready with no new Job and no write (the operator on the local
control plane; the deletion stands in for the TTL controller's)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cluster.operator_harness import (
    condition,
    dump,
    get_cr,
    jobs,
    prepare_namespace,
    run_operator,
    wait_ready,
)
from tests.cluster.test_operator import small
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster


def test_ready_survives_the_repository_jobs_ttl(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path, resync=2.0) as op:
        cluster.apply([small("mu", namespace)])
        ready = wait_ready(cluster, namespace, "mu")
        (job,) = jobs(cluster, namespace, "mu-repo-")
        record = ready["status"]["repository"]
        assert job == f"mu-repo-{record['key']}", dump(ready["status"])
        time.sleep(3)  # settle: the last status write of the rollout
        writes = op.writes()
        # What the TTL controller does a day after the Job finished.
        cluster.kubectl("delete", "job", job, "-n", namespace, "--cascade=background")
        wait_for(lambda: not jobs(cluster, namespace, "mu-repo-"), timeout=30, what="Job gone")
        time.sleep(8)  # the Job's delete event and several resyncs
        after = get_cr(cluster, namespace, "mu")
        assert jobs(cluster, namespace, "mu-repo-") == []  # no new repository Job
        assert op.writes() - writes == 0, op.metrics()  # not even a status write
    for type_ in ("Ready", "RepositoryReady", "Available"):
        now, before = condition(after, type_), condition(ready, type_)
        assert now["status"] == "True", dump(after["status"])
        assert now["lastTransitionTime"] == before["lastTransitionTime"], type_  # no flap
