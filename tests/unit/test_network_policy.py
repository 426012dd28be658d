"""The rendered NetworkPolicy against the pod templates it must cover.

The policy is read the way a network plugin reads it: its label selectors are evaluated against
the labels the rendered pod templates really carry (the Deployment's pods, the LeaderWorkerSet's
leader and worker pods), so a selector that misses a pod kind fails here, not on a cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.cases import EXAMPLES, cr
from tests.helpers import example
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.render import Rendered, render_all

MULTI_NODE = {"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}}
SERVING_PORTS = [c.HTTP_PORT, c.GRPC_PORT, c.METRICS_PORT]
FOREIGN_POD = {c.LABEL_NAME: c.APP_NAME, c.LABEL_INSTANCE: "other", c.LABEL_COMPONENT: "server"}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics (an empty selector selects everything)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def pod_labels(r: Rendered) -> dict[str, dict[str, str]]:
    """The labels of every serving pod template, by role."""
    spec = r.workload["spec"]
    if "template" in spec:
        return {"server": spec["template"]["metadata"]["labels"]}
    lwt = spec["leaderWorkerTemplate"]
    return {
        "leader": lwt["leaderTemplate"]["metadata"]["labels"],
        "worker": lwt["workerTemplate"]["metadata"]["labels"],
    }


def other_pod_labels(r: Rendered) -> dict[str, dict[str, str]]:
    """The deployment's pods that are not serving pods (its Jobs)."""
    return {
        "build": r.build_job["spec"]["template"]["metadata"]["labels"],
        "repository": r.repository_job["spec"]["template"]["metadata"]["labels"],
    }


def admitted_ports(r: Rendered, peer: dict[str, str]) -> Any:
    """What a pod of the deployment's namespace with labels `peer` may reach on the selected
    pods: "all", or the list of ports."""
    assert r.network_policy is not None
    ports: set[int] = set()
    for rule in r.network_policy["spec"]["ingress"]:
        for source in rule["from"]:
            if "podSelector" not in source or "namespaceSelector" in source:
                continue
            if selects(source["podSelector"], peer):
                if "ports" not in rule:
                    return "all"
                ports |= {p["port"] for p in rule["ports"]}
    return sorted(ports)


def test_single_node_policy_selects_the_serving_pods_and_opens_only_the_serving_ports() -> None:
    r = render_all(parse_deployment(cr()))
    np = r.network_policy
    assert np is not None
    selector = np["spec"]["podSelector"]
    assert [selects(selector, labels) for labels in pod_labels(r).values()] == [True]
    # Only serving pods: the Jobs of the deployment are not held by this policy.
    assert not any(selects(selector, labels) for labels in other_pod_labels(r).values())
    assert not selects(selector, FOREIGN_POD)
    assert np["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = np["spec"]["ingress"]  # one node: no traffic between serving pods is needed
    assert sorted(p["port"] for p in rule["ports"]) == SERVING_PORTS
    assert c.MPI_SSH_PORT not in [p["port"] for p in rule["ports"]]


def test_multi_node_policy_selects_the_leader_and_the_worker_pods() -> None:
    r = render_all(parse_deployment(cr(MULTI_NODE)))
    labels = pod_labels(r)
    assert labels["worker"][c.LABEL_COMPONENT] == c.COMPONENT_WORKER
    assert labels["leader"][c.LABEL_COMPONENT] == c.COMPONENT_SERVER
    assert r.network_policy is not None
    selector = r.network_policy["spec"]["podSelector"]
    assert selects(selector, labels["leader"]) and selects(selector, labels["worker"])
    assert not selects(selector, FOREIGN_POD)
    assert not any(selects(selector, x) for x in other_pod_labels(r).values())


def test_multi_node_sshd_and_mpi_are_open_only_inside_the_group() -> None:
    r = render_all(parse_deployment(cr(MULTI_NODE)))
    labels = pod_labels(r)
    # Leader and workers reach each other on every port (sshd 2222, orted, NCCL), both ways.
    assert admitted_ports(r, labels["leader"]) == "all"
    assert admitted_ports(r, labels["worker"]) == "all"
    # Any other pod, of the namespace or of this deployment's Jobs: the serving ports only.
    for peer in (FOREIGN_POD, {"app": "client"}, *other_pod_labels(r).values()):
        assert admitted_ports(r, peer) == SERVING_PORTS, peer
    # Other namespaces and CIDRs appear only in the serving-ports rule.
    assert r.network_policy is not None
    serving, group = r.network_policy["spec"]["ingress"]
    assert "ports" not in group
    assert group["from"] == [{"podSelector": r.network_policy["spec"]["podSelector"]}]
    assert c.MPI_SSH_PORT not in [p["port"] for p in serving["ports"]]


def test_other_namespaces_and_cidrs_reach_the_serving_ports_only() -> None:
    r = render_all(parse_deployment(cr({
        **MULTI_NODE,
        "networkPolicy": {"fromNamespaces": ["gateway"], "fromCidrs": ["10.8.0.0/16"]},
    })))
    assert r.network_policy is not None
    for rule in r.network_policy["spec"]["ingress"]:
        outside = [s for s in rule["from"] if "namespaceSelector" in s or "ipBlock" in s]
        if outside:
            assert sorted(p["port"] for p in rule["ports"]) == SERVING_PORTS
            assert len(outside) == 2


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_policy_covers_every_serving_pod(path) -> None:
    r = render_all(example(path.stem))
    if r.network_policy is None:
        return
    selector = r.network_policy["spec"]["podSelector"]
    for role, labels in pod_labels(r).items():
        assert selects(selector, labels), (path.stem, role)
        # Its own group reaches it on every port exactly when it is multi node.
        multi = "leader" in pod_labels(r)
        assert (admitted_ports(r, labels) == "all") is multi, (path.stem, role)
