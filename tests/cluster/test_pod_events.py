"""Serving pods that fail, on the local cluster (kwok's pods crash when labelled): a pod that
only carries the deployment's labels, which anyone who may create pods can write, is not read at
all, not even while the deployment has no ready replica (when a failure read would be
reported)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_harness import (
    condition,
    get_cr,
    prepare_namespace,
    run_operator,
    wait_ready,
)
from tests.cluster.test_faults import small
from tritonllm.api import constants as c
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

NAME = "pf"


def serving_pod(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    items = cluster.kubectl_json("get", "pods", "-n", namespace, "-l",
                                 f"{c.LABEL_INSTANCE}={NAME},{c.LABEL_COMPONENT}=server")["items"]
    return dict(next(p for p in items if p["metadata"].get("ownerReferences")))


def crashed(cluster: LocalCluster, namespace: str, pod: str) -> bool:
    live = cluster.kubectl_json("get", "pod", pod, "-n", namespace)
    return any((cs.get("lastState") or {}).get("terminated")
               for cs in (live.get("status") or {}).get("containerStatuses") or [])


def test_only_a_pod_of_the_deployments_workload_is_read(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path) as op:
        cluster.apply([small(NAME, namespace)])
        wait_ready(cluster, namespace, NAME)
        ours = serving_pod(cluster, namespace)
        name = ours["metadata"]["name"]
        # Its own pod fails: no replica is ready, so a failure read now would be reported.
        cluster.kubectl("label", "pod", name, "-n", namespace, "tritonllm.io/fail=true")
        wait_for(lambda: get_cr(cluster, namespace, NAME)["status"].get("readyReplicas") == 0,
                 timeout=60, what=f"{NAME} with no ready replica")

        # The same labels on a pod of no workload, on the same node: it fails too, with a
        # message of the kind that made redaction slow.
        forged = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "forged", "namespace": namespace,
                "labels": {**{k: ours["metadata"]["labels"][k]
                              for k in (c.LABEL_MANAGED_BY, c.LABEL_INSTANCE,
                                        c.LABEL_COMPONENT)},
                           "tritonllm.io/fail": "true"},
                "annotations": {"tritonllm.io/fail-message": "forged " + "-a" * 2048},
            },
            "spec": {"nodeName": ours["spec"]["nodeName"],
                     "tolerations": ours["spec"].get("tolerations") or [],
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "triton", "image": "registry.invalid/forged",
                                     "securityContext": {
                                         "allowPrivilegeEscalation": False,
                                         "capabilities": {"drop": ["ALL"]}}}]},
        }
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(forged))
        wait_for(lambda: crashed(cluster, namespace, "forged"), timeout=60,
                 what="the forged pod's container failed")
        time.sleep(6)  # two resyncs: a failure read from it would be in the status by now
        degraded = condition(get_cr(cluster, namespace, NAME), "Degraded")
        assert "forged" not in degraded.get("message", ""), degraded
        assert "forged" not in op.logs()
