"""A build Job whose pod cannot start, against the real API server, controllers and scheduler.

The status names what holds the pod (the scheduler's words, or the Job's FailedCreate Event) and
the fix, within seconds, instead of "Job ... is running the build"; and it clears once the cause
goes. kwok nodes are enough: the scheduler and the Job controller are real.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_harness import (
    events,
    prepare_namespace,
    run_operator,
    store_objects,
    wait_condition,
    wait_ready,
)
from tests.cluster.test_operator import SMALL, small
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

CLAIM = "tritonllm-model-store"


def unbound_claim(namespace: str) -> dict[str, Any]:
    """A claim no volume will ever bind (no class, no provisioner, no volume for it)."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM, "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                     "resources": {"requests": {"storage": "100Gi"}}}}


def test_build_pod_on_an_unbound_claim_is_named_then_clears(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace, store=False)
    cluster.apply([unbound_claim(namespace)])
    with run_operator(cluster, namespace, tmp_path):
        start = time.monotonic()
        cluster.apply([small("stuck", namespace)])
        obj = wait_condition(cluster, namespace, "stuck", "EngineReady", "False",
                             reason="Unschedulable", timeout=60)
        took = time.monotonic() - start
        print(f"\n[measure] build pod on an unbound claim: apply -> named {took:.1f} s")
        cond = next(x for x in obj["status"]["conditions"] if x["type"] == "EngineReady")
        job = obj["status"]["engine"]["buildJob"]
        message = cond["message"]
        print(f"EngineReady={cond['status']} {cond['reason']}: {message}")
        assert message.startswith(f"Job {job} cannot start its build pod: pod {job}-"), message
        assert "unbound immediate PersistentVolumeClaims" in message, message
        assert f"claim {CLAIM} (spec.storage.claimName) is not bound" in message, message
        assert f"kubectl describe pvc {CLAIM} -n {namespace}" in message, message
        progressing = next(x for x in obj["status"]["conditions"] if x["type"] == "Progressing")
        assert progressing["reason"] == obj["status"]["reason"] == "Unschedulable", obj["status"]
        # The same words as a Warning Event on the deployment.
        warned = [e for e in events(cluster, namespace, "stuck")
                  if e["reason"] == "Unschedulable" and e["type"] == "Warning"]
        assert [e["message"] for e in warned] == [message], warned

        # A volume for the claim: the pod is scheduled, the build runs and finishes.
        volume = store_objects(namespace)[0]
        cluster.apply([volume])
        wait_condition(cluster, namespace, "stuck", "EngineReady", "True", timeout=180)


def _refuser(kind: str, namespace: str) -> dict[str, Any]:
    meta = {"name": "no-pods" if kind == "ResourceQuota" else "small-containers",
            "namespace": namespace}
    spec = ({"hard": {"pods": "0"}} if kind == "ResourceQuota"
            else {"limits": [{"type": "Container", "max": {"memory": "1Gi"}}]})
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, "spec": spec}


@pytest.mark.parametrize(("kind", "reason", "says", "fix"), [
    ("ResourceQuota", "QuotaExceeded", "exceeded quota: no-pods",
     "raise the namespace's ResourceQuota"),
    # A LimitRange's message names the limit, not the object: the fix says where to look.
    ("LimitRange", "LimitRangeExceeded", "maximum memory usage per Container is 1Gi",
     "kubectl describe limitrange -n "),
])
def test_build_pod_refused_by_a_quota_or_limit_range_is_degraded(
    cluster: LocalCluster, namespace: str, tmp_path: Path, kind: str, reason: str, says: str,
    fix: str,
) -> None:
    """The Job controller's FailedCreate Event carries the API server's words: the deployment
    is Degraded with them and the fix, within seconds."""
    prepare_namespace(cluster, namespace)
    cluster.apply([_refuser(kind, namespace)])
    with run_operator(cluster, namespace, tmp_path):
        start = time.monotonic()
        cluster.apply([small("refused", namespace)])
        obj = wait_condition(cluster, namespace, "refused", "Degraded", "True",
                             reason=reason, timeout=60)
        print(f"\n[measure] build pod refused by a {kind}: apply -> named "
              f"{time.monotonic() - start:.1f} s")
    degraded = next(x for x in obj["status"]["conditions"] if x["type"] == "Degraded")
    job = obj["status"]["engine"]["buildJob"]
    print(f"Degraded={degraded['status']} {degraded['reason']}: {degraded['message']}")
    assert degraded["message"].startswith(f"Job {job} cannot create its build pod: "), degraded
    assert says in degraded["message"] and fix in degraded["message"], degraded
    engine = next(x for x in obj["status"]["conditions"] if x["type"] == "EngineReady")
    assert engine["reason"] == reason, engine
    assert any(e["reason"] == reason and e["type"] == "Warning"
               for e in events(cluster, namespace, "refused"))


def test_repository_pod_refused_by_a_quota_is_degraded(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """A second deployment reuses the first one's engine (a cache hit: no build) with another
    serving setting (another repository: an identical one would share the first one's finished
    Job), and a quota that the first one's pods have filled refuses its repository Job's pod:
    the deployment is Degraded, naming the repository Job and the quota."""
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("first", namespace)])
        wait_ready(cluster, namespace, "first")
        running = [p for p in cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
                   if p["status"].get("phase") not in ("Succeeded", "Failed")]
        cluster.apply([{"apiVersion": "v1", "kind": "ResourceQuota",
                        "metadata": {"name": "full", "namespace": namespace},
                        "spec": {"hard": {"pods": str(len(running))}}}])
        wait_for(lambda: (cluster.kubectl_json("get", "resourcequota", "full", "-n", namespace)
                          .get("status") or {}).get("used"), timeout=30, what="quota status")
        start = time.monotonic()
        cluster.apply([small("second", namespace,
                             serving={**SMALL["spec"].get("serving", {}),
                                      "maxQueueDelayMicroseconds": 100})])
        obj = wait_condition(cluster, namespace, "second", "Degraded", "True",
                             reason="QuotaExceeded", timeout=90)
        print(f"\n[measure] repository pod refused by a quota: apply -> named "
              f"{time.monotonic() - start:.1f} s")
    conds = {x["type"]: x for x in obj["status"]["conditions"]}
    print(f"Degraded={conds['Degraded']['reason']}: {conds['Degraded']['message']}")
    assert conds["EngineReady"]["reason"] == "EngineCached", conds["EngineReady"]
    repository = conds["RepositoryReady"]
    assert repository["reason"] == "QuotaExceeded", repository
    assert "cannot create its repository pod" in repository["message"], repository
    assert "this pod asks for 100m CPU" in repository["message"], repository
    assert "exceeded quota: full" in conds["Degraded"]["message"], conds["Degraded"]
    assert any(e["reason"] == "QuotaExceeded" and e["type"] == "Warning"
               for e in events(cluster, namespace, "second"))
