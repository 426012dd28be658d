"""The autoscaling tier against the local cluster: Prometheus discovers and scrapes, the custom and
external metrics APIs are served through the aggregator, an HPA and a KEDA ScaledObject scale
Deployments (KEDA from zero and back).

Real: Prometheus, prometheus-adapter and KEDA's operator and metrics API server (built from their
Go modules), running on the host against the local API server; the aggregation layer;
kube-controller-manager's HPA controller; Prometheus's pod discovery through the API server.
Simulated: the pods are kwok pods (nothing runs, their IPs lead nowhere), so the series that
stand for their metrics come from a small HTTP exporter in this test, scraped by a static job with
``honor_labels`` that keeps the ``namespace`` and ``pod`` labels it writes.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from tests.autoscaling.helpers import SimulatedExporter
from tritonllm_dev.autoscaling import (
    OPERATOR_JOB,
    PODS_JOB,
    AutoscalingStack,
    install_prometheus_operator_crds,
)
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import FAKE_IMAGE, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.autoscaling]

QUEUE = "tritonllm_test_queue"
DEMAND = "tritonllm_test_demand"
RECORDED = "namespace:tritonllm_test_queue:sum"
RULES = f"""
groups:
- name: test
  rules:
  - record: {RECORDED}
    expr: sum by (namespace) ({QUEUE})
"""


@pytest.fixture(scope="module")
def exporter() -> Iterator[SimulatedExporter]:
    instance = SimulatedExporter()
    yield instance
    instance.server.shutdown()


@pytest.fixture(scope="module")
def operator_endpoint() -> Iterator[SimulatedExporter]:
    """Stands in for the operator's metrics endpoint (its own series, none of the pods')."""
    instance = SimulatedExporter()
    instance.set("tritonllm_test_operator_up", {}, 1)
    yield instance
    instance.server.shutdown()


@pytest.fixture(scope="module")
def stack(
    cluster: LocalCluster,
    exporter: SimulatedExporter,
    operator_endpoint: SimulatedExporter,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AutoscalingStack]:
    simulated = exporter.scrape_config("simulated-pods")
    with AutoscalingStack(
        cluster,
        tmp_path_factory.mktemp("autoscaling"),
        recording_rules=RULES,
        operator_metrics=[operator_endpoint.address],
        extra_scrape_configs=[simulated],
    ) as instance:
        yield instance


def deployment(
    name: str, replicas: int, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Deployment of kwok pods (on the CPU kwok node, never on a real node)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                "spec": {
                    "nodeSelector": {"type": "kwok"},
                    "containers": [{"name": "main", "image": FAKE_IMAGE,
                                    "ports": [{"containerPort": 8002, "name": "metrics"}]}],
                },
            },
        },
    }


def running_pods(cluster: LocalCluster, namespace: str, app: str) -> list[dict[str, Any]]:
    pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", f"app={app}")["items"]
    return [p for p in pods if p["status"].get("phase") == "Running"]


def replicas(cluster: LocalCluster, namespace: str, name: str) -> int:
    out = cluster.kubectl_json("get", "deployment", name, "-n", namespace)
    return int(out["spec"].get("replicas", 0))


def raw(cluster: LocalCluster, path: str) -> Any:
    proc = cluster.kubectl("get", "--raw", path, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def test_annotated_pods_and_the_operator_endpoint_are_scrape_targets(
    cluster: LocalCluster, stack: AutoscalingStack, namespace: str
) -> None:
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": "8002",
                   "prometheus.io/path": "/metrics"}
    cluster.apply([deployment("scraped", 1, annotations), deployment("unscraped", 1)],
                  namespace=namespace)
    pod = wait_for(lambda: running_pods(cluster, namespace, "scraped"), 60, what="kwok pod")[0]
    wait_for(lambda: running_pods(cluster, namespace, "unscraped"), 60, what="kwok pod")

    def discovered() -> list[dict[str, Any]]:
        return [t for t in stack.targets() if t["labels"].get("job") == PODS_JOB
                and t["labels"].get("namespace") == namespace]

    targets = wait_for(discovered, 30, what="pod target discovered through the API server")
    assert [t["labels"]["pod"] for t in targets] == [pod["metadata"]["name"]]
    assert targets[0]["labels"]["app"] == "scraped"  # pod labels become series labels
    assert targets[0]["scrapeUrl"] == f"http://{pod['status']['podIP']}:8002/metrics"
    operator = wait_for(
        lambda: [t for t in stack.targets()
                 if t["labels"]["job"] == OPERATOR_JOB and t["health"] == "up"],
        30, what="operator metrics target up",
    )
    assert operator[0]["labels"]["instance"] == stack.operator_metrics[0]


def test_simulated_pod_series_served_as_custom_metric_and_hpa_scales_up(
    cluster: LocalCluster, stack: AutoscalingStack, exporter: SimulatedExporter, namespace: str
) -> None:
    cluster.apply([deployment("load", 1)], namespace=namespace)
    pod = wait_for(lambda: running_pods(cluster, namespace, "load"), 60, what="kwok pod")[0]
    pod_name = pod["metadata"]["name"]
    exporter.set(QUEUE, {"namespace": namespace, "pod": pod_name}, 8)
    recorded = wait_for(lambda: stack.query(f'{RECORDED}{{namespace="{namespace}"}}'), 30,
                        what="recording rule evaluated")
    assert recorded[0]["value"][1] == "8"

    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/*/{QUEUE}"
    served = wait_for(lambda: (raw(cluster, path) or {}).get("items"), 60,
                      what="custom metric through the aggregator")
    assert [(i["describedObject"]["name"], i["value"]) for i in served] == [(pod_name, "8")]
    discovery = raw(cluster, "/apis/custom.metrics.k8s.io/v1beta1")
    assert f"pods/{QUEUE}" in {r["name"] for r in discovery["resources"]}

    cluster.apply([{
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "load"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "load"},
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": [{"type": "Pods", "pods": {
                "metric": {"name": QUEUE},
                "target": {"type": "AverageValue", "averageValue": "2"},
            }}],
        },
    }], namespace=namespace)
    wait_for(lambda: replicas(cluster, namespace, "load") == 3, 60, what="HPA scaled to 3")
    hpa = cluster.kubectl_json("get", "hpa", "load", "-n", namespace)
    current = hpa["status"]["currentMetrics"][0]["pods"]
    assert current["metric"]["name"] == QUEUE


def test_keda_scales_from_zero_on_activation_and_back_to_zero(
    cluster: LocalCluster, stack: AutoscalingStack, exporter: SimulatedExporter, namespace: str
) -> None:
    exporter.set(DEMAND, {"namespace": namespace}, 0)
    query = f'sum({DEMAND}{{namespace="{namespace}"}})'
    wait_for(lambda: stack.query(query), 30, what="demand series scraped")
    cluster.apply([deployment("worker", 0), {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "worker"},
        "spec": {
            "scaleTargetRef": {"name": "worker"},
            "minReplicaCount": 0,
            "maxReplicaCount": 3,
            "pollingInterval": 1,
            "cooldownPeriod": 3,
            "triggers": [{"type": "prometheus", "metadata": {
                "serverAddress": stack.prometheus_url,
                "query": query,
                "threshold": "5",
                "activationThreshold": "1",
            }}],
        },
    }], namespace=namespace)

    def condition(kind: str) -> str:
        so = cluster.kubectl_json("get", "scaledobject", "worker", "-n", namespace)
        found = [c for c in so.get("status", {}).get("conditions", []) if c["type"] == kind]
        return str(found[0]["status"]) if found else ""

    wait_for(lambda: condition("Ready") == "True", 60, what="ScaledObject Ready")
    wait_for(lambda: condition("Active") == "False", 30, what="ScaledObject inactive at 0")
    hpa = cluster.kubectl_json("get", "hpa", "keda-hpa-worker", "-n", namespace)
    assert hpa["spec"]["maxReplicas"] == 3
    assert replicas(cluster, namespace, "worker") == 0

    exporter.set(DEMAND, {"namespace": namespace}, 3)  # above activation, below one target
    wait_for(lambda: replicas(cluster, namespace, "worker") == 1, 60, what="activated to 1")
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]
    selector = urllib.parse.quote("scaledobject.keda.sh/name=worker")
    served = raw(cluster, f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/"
                          f"{metric['name']}?labelSelector={selector}")
    assert served["items"][0]["value"] == "3"

    exporter.set(DEMAND, {"namespace": namespace}, 12)  # 12 / 5 per replica -> 3
    wait_for(lambda: replicas(cluster, namespace, "worker") == 3, 60, what="HPA scaled to 3")

    exporter.set(DEMAND, {"namespace": namespace}, 0)
    wait_for(lambda: replicas(cluster, namespace, "worker") == 0, 60, what="back to zero")
    stack.check_alive()  # every process of the tier still runs


def test_prometheus_operator_crds_accept_monitors(cluster: LocalCluster, namespace: str) -> None:
    names = install_prometheus_operator_crds(cluster)
    assert "podmonitors.monitoring.coreos.com" in names
    cluster.apply([{
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "triton"},
        "spec": {"selector": {"matchLabels": {"app": "triton"}},
                 "podMetricsEndpoints": [{"port": "metrics", "interval": "2s"}]},
    }], namespace=namespace)
    pm = cluster.kubectl_json("get", "podmonitor", "triton", "-n", namespace)
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
