"""The multi-node NetworkPolicy in a real API server, against the pods the LeaderWorkerSet
controller really creates.

The rendered NetworkPolicy and LeaderWorkerSet of a tp 8 x pp 2 deployment are applied (not dry
run); the LWS controller creates the leader and the worker pods (with its own labels added); the
API server then evaluates the stored policy's selectors against those pods (`kubectl get pods -l`),
so the test shows that the policy holds both pod kinds, that its all-ports rule admits exactly the
group, and that a pod of another deployment in the namespace is neither held nor admitted.

Packets dropped and admitted between real pods (kube-router enforces policies on the real node):
tests/cluster/test_real_multinode.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.cases import cr
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.render import render_all
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import FAKE_IMAGE, wait_for

pytestmark = pytest.mark.cluster


def selector_string(selector: dict[str, Any]) -> str:
    """A metav1.LabelSelector (matchLabels, In expressions) as a `-l` argument."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        assert expr["operator"] == "In", expr
        parts.append(f"{expr['key']} in ({','.join(expr['values'])})")
    return ",".join(parts)


def pod_names(cluster: LocalCluster, namespace: str, selector: dict[str, Any]) -> set[str]:
    pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", selector_string(selector))
    return {p["metadata"]["name"] for p in pods["items"]}


def test_the_policy_holds_the_leader_and_the_workers_and_admits_only_the_group(
    cluster: LocalCluster, namespace: str
) -> None:
    obj = cr({"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}})
    obj["metadata"]["namespace"] = namespace
    r = render_all(parse_deployment(obj))
    assert r.network_policy is not None
    cluster.apply([dict(r.network_policy), dict(r.workload)])

    # The API server stored the policy as rendered (no field dropped or rewritten).
    stored = cluster.kubectl_json("get", "networkpolicy", r.network_policy.name, "-n", namespace)
    assert stored["spec"] == r.network_policy["spec"]

    # The LWS controller creates one leader and one worker (the volumes it names are missing,
    # so they stay Pending: only their labels matter here).
    def group() -> list[dict[str, Any]] | None:
        items = cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
        roles = {p["metadata"]["labels"].get(c.LABEL_COMPONENT) for p in items}
        return items if {c.COMPONENT_SERVER, c.COMPONENT_WORKER} <= roles else None

    pods = wait_for(group, timeout=90, what="the leader and worker pods")
    members = {p["metadata"]["name"] for p in pods}
    assert len(members) == 2

    # A pod of another deployment in the same namespace (a client, or another group).
    foreign = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "other-server", "namespace": namespace,
                     "labels": {c.LABEL_NAME: c.APP_NAME, c.LABEL_INSTANCE: "other",
                                c.LABEL_COMPONENT: c.COMPONENT_SERVER}},
        "spec": {"containers": [{"name": "c", "image": FAKE_IMAGE}]},
    }
    cluster.apply([foreign])

    spec = stored["spec"]
    assert pod_names(cluster, namespace, spec["podSelector"]) == members
    serving, intra = spec["ingress"]
    assert "ports" not in intra  # every port, sshd 2222 and MPI/NCCL included ...
    (peers,) = intra["from"]
    assert pod_names(cluster, namespace, peers["podSelector"]) == members  # ... from the group
    assert c.MPI_SSH_PORT not in [p["port"] for p in serving["ports"]]
