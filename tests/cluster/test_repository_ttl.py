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
        (job,) = jobs(cluster, namespace, "tritonllm-repo-")
        record = ready["status"]["repository"]
        assert job == f"tritonllm-repo-{record['key']}", dump(ready["status"])
        time.sleep(3)  # settle: the last status write of the rollout
        writes = op.writes()
        # What the TTL controller does a day after the Job finished.
        cluster.kubectl("delete", "job", job, "-n", namespace, "--cascade=background")
        wait_for(lambda: not jobs(cluster, namespace, "tritonllm-repo-"), timeout=30,
                 what="Job gone")
        time.sleep(8)  # the Job's delete event and several resyncs
        after = get_cr(cluster, namespace, "mu")
        assert jobs(cluster, namespace, "tritonllm-repo-") == []  # no new repository Job
        assert op.writes() - writes == 0, op.metrics()  # not even a status write
    for type_ in ("Ready", "RepositoryReady", "Available"):
        now, before = condition(after, type_), condition(ready, type_)
        assert now["status"] == "True", dump(after["status"])
        assert now["lastTransitionTime"] == before["lastTransitionTime"], type_  # no flap


def test_identical_deployments_share_one_repository_job(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """Three deployments of one namespace rendering the same repository: one Job writes it
    (the first to need it creates it, the others wait for it), all three serve from its
    directory; deleting the one that created it takes only that one's objects, the others stay
    Ready, and no Job is written again."""
    prepare_namespace(cluster, namespace)
    names = ("rho-a", "rho-b", "rho-c")
    with run_operator(cluster, namespace, tmp_path, resync=2.0):
        cluster.apply([small(n, namespace) for n in names])
        ready = {n: wait_ready(cluster, namespace, n) for n in names}
        records = {n: ready[n]["status"]["repository"] for n in names}
        (record,) = {tuple(sorted(r.items())) for r in records.values()}  # one revision
        key = dict(record)["key"]
        assert jobs(cluster, namespace, "tritonllm-repo-") == [f"tritonllm-repo-{key}"]
        job = cluster.kubectl_json("get", "job", f"tritonllm-repo-{key}", "-n", namespace)
        (creator,) = [r["name"] for r in job["metadata"]["ownerReferences"] if r["controller"]]
        served = {cluster.kubectl_json("get", "configmap", f"{n}-{key}", "-n", namespace)
                  ["metadata"]["name"] for n in names}
        assert len(served) == 3  # each deployment's own plan ConfigMap, one repository

        cluster.kubectl("delete", "tllm", creator, "-n", namespace, "--wait=true")
        wait_for(lambda: not jobs(cluster, namespace, "tritonllm-repo-"), timeout=60,
                 what="the creator's Job collected with it")
        time.sleep(6)  # the Job's delete event and several resyncs
        for n in names:
            if n == creator:
                continue
            after = get_cr(cluster, namespace, n)
            assert condition(after, "Ready")["status"] == "True", dump(after["status"])
            assert (condition(after, "Ready")["lastTransitionTime"]
                    == condition(ready[n], "Ready")["lastTransitionTime"])
        assert jobs(cluster, namespace, "tritonllm-repo-") == []  # the record stands for it
