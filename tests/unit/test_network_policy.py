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
from tritonllm.render import Rendered, autoscaling, render_all

MULTI_NODE = {"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}}
# Triton's ports and the OpenAI frontend's (on by default).
SERVING_PORTS = [c.HTTP_PORT, c.GRPC_PORT, c.METRICS_PORT, c.OPENAI_PORT]
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


# --- scale to zero: the activator's pods are the ones the Service selects ----------------------

GATEWAY = {"fromNamespaces": ["gateway"], "fromCidrs": ["10.8.0.0/16"]}


def policies(r: Rendered) -> list[dict[str, Any]]:
    return [o.body for o in r.objects if o.kind == "NetworkPolicy"]


def service_pods(r: Rendered) -> dict[str, dict[str, str]]:
    """The labels of every pod template the deployment's Service selects (its clients reach
    exactly these pods), by the workload that makes them."""
    workloads = [r.workload, *(o for o in r.activator if o.kind == "Deployment")]
    selector = {"matchLabels": r.service["spec"]["selector"]}
    found = {}
    for wl in workloads:
        for role, labels in _templates(wl.body).items():
            if selects(selector, labels):
                found[f"{wl.name}/{role}"] = labels
    return found


def _templates(workload: dict[str, Any]) -> dict[str, dict[str, str]]:
    spec = workload["spec"]
    if "template" in spec:
        return {"pod": spec["template"]["metadata"]["labels"]}
    lwt = spec["leaderWorkerTemplate"]
    return {"leader": lwt["leaderTemplate"]["metadata"]["labels"],
            "worker": lwt["workerTemplate"]["metadata"]["labels"]}


def sources_of(policy: dict[str, Any], port: int) -> list[dict[str, Any]]:
    """Every source a policy admits to `port`."""
    return [s for rule in policy["spec"]["ingress"]
            if any(p["port"] == port for p in rule.get("ports", [{"port": port}]))
            for s in rule["from"]]


def test_at_zero_the_activator_pods_admit_exactly_the_serving_pods_sources() -> None:
    dep = example("cpu-standin-autoscaling", networkPolicy=GATEWAY)
    r = render_all(dep)
    assert r.network_policy is not None
    serving_sources = r.network_policy["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "In", "values": ["gateway"]}]}} \
        in serving_sources
    targets = service_pods(r)
    assert list(targets) == ["cpu-standin-autoscaling-activator/pod"]  # the Service at zero
    for where, labels in targets.items():
        held = [p for p in policies(r) if selects(p["spec"]["podSelector"], labels)]
        assert held, f"{where}: no NetworkPolicy selects the pods the Service sends clients to"
        for port in (c.HTTP_PORT, c.GRPC_PORT, autoscaling.ACTIVATOR_STATS_PORT):
            admitted = [s for p in held for s in sources_of(p, port)]
            assert admitted == serving_sources, (where, port)
        assert all(p["spec"]["policyTypes"] == ["Ingress"] for p in held)
    # The activator's policy is applied before the activator's pods exist.
    order = [(o.kind, o.name) for o in r.objects]
    name = autoscaling.activator_name(dep)
    assert order.index(("NetworkPolicy", name)) < order.index(("Deployment", name))


def test_the_serving_pods_admit_the_activator_that_forwards_to_them() -> None:
    r = render_all(example("cpu-standin-autoscaling", networkPolicy=GATEWAY))
    (activator,) = [o for o in r.activator if o.kind == "Deployment"]
    labels = activator["spec"]["template"]["metadata"]["labels"]
    assert admitted_ports(r, labels) == SERVING_PORTS


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_pod_the_service_selects_is_held_by_a_policy(path) -> None:
    r = render_all(example(path.stem))
    if r.network_policy is None:
        return
    for where, labels in service_pods(r).items():
        assert any(selects(p["spec"]["podSelector"], labels) for p in policies(r)), where


def test_no_activator_policy_when_policies_are_off() -> None:
    r = render_all(example("cpu-standin-autoscaling", networkPolicy={"enabled": False}))
    assert r.activator and not policies(r)
