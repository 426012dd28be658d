"""A multi-node deployment autoscaled as a unit: KEDA scales the LeaderWorkerSet through its scale
subresource, one whole group (leader and worker) at a time, and back; the operator renders the
PodMonitor once the Prometheus operator's CRDs exist and never writes the replica count.

Real: the API server with the Prometheus operator's CRDs (v0.89.0, from its Go module), the
LeaderWorkerSet controller, Prometheus, the chart's recording rules, KEDA (operator and metrics
API server) and the HPA controller, the operator. Simulated: the GPU nodes and the group's pods
(kwok), so the leader's Triton metric comes from an exporter in this test that writes the
leader pod's own labels (the real-node tests read the same metric from a real tritonserver).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.autoscaling.helpers import SimulatedExporter, replica_managers, replica_writes
from tests.cases import ROOT, cr
from tests.cluster.operator_harness import prepare_namespace, run_operator, wait_ready
from tritonllm.api import constants as c
from tritonllm_dev.autoscaling import AutoscalingStack, install_prometheus_operator_crds
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.manifests import H100
from tritonllm_dev.testing import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.autoscaling]

RULES = ROOT / "charts" / "tritonllm" / "files"
NAME = "group"


def _group_cr(namespace: str) -> dict[str, Any]:
    """tp 4 x pp 2 on 4-GPU slices of the H100 nodes: a replica is a group of two pods."""
    return cr(
        {
            "gpu": {"product": H100, "perNode": 4},
            "engine": {"parallelism": {"tensor": 4, "pipeline": 2}},
            "podTemplate": {"runAsUser": 1000},
            "storage": {"create": {"size": "10Gi"}},
            "autoscaling": {"autoscaler": "KEDA", "minReplicas": 1, "maxReplicas": 2,
                            "metric": "pendingRequests", "target": "2",
                            "pollingIntervalSeconds": 2, "scaleUpWindowSeconds": 0,
                            "scaleDownWindowSeconds": 5},
        },
        metadata={"name": NAME, "namespace": namespace},
    )


def _serving_pods(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    pods = cluster.kubectl_json("get", "pods", "-n", ns, "-l",
                                f"{c.LABEL_INSTANCE}={NAME}")["items"]
    return [p for p in pods if p["metadata"]["labels"].get(c.LABEL_COMPONENT)
            in (c.COMPONENT_SERVER, c.COMPONENT_WORKER) and p["status"].get("phase") == "Running"]


def _groups(cluster: LocalCluster, ns: str) -> tuple[int, int]:
    """(LeaderWorkerSet spec.replicas, running serving pods)."""
    lws = cluster.kubectl_json("get", "leaderworkerset", NAME, "-n", ns)
    return int(lws["spec"].get("replicas", 0)), len(_serving_pods(cluster, ns))


def test_keda_scales_a_multi_node_group_as_a_unit(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    install_prometheus_operator_crds(cluster)
    prepare_namespace(cluster, namespace)
    exporter = SimulatedExporter()
    simulated = exporter.scrape_config("simulated-leader")
    try:
        with AutoscalingStack(cluster, tmp_path / "stack",
                              recording_rules=RULES / "recording-rules.yaml",
                              adapter_rules=RULES / "adapter-rules.yaml",
                              extra_scrape_configs=[simulated]) as stack, \
                run_operator(cluster, namespace, tmp_path,
                             env={"TRITONLLM_PROMETHEUS_URL": stack.prometheus_url}) as op:
            cluster.apply([_group_cr(namespace)])
            ready = wait_ready(cluster, namespace, NAME, timeout=240)
            scaling = ready["status"]["scaling"]
            # two 8-GPU H100 nodes: four 4-GPU pods, two groups of two
            assert (scaling["autoscaler"], scaling["capacity"]) == ("KEDA", 2), scaling
            monitor = cluster.kubectl_json("get", "podmonitor", NAME, "-n", namespace)
            assert monitor["spec"]["podTargetLabels"] == [c.LABEL_INSTANCE, c.LABEL_COMPONENT]
            scaled = cluster.kubectl_json("get", "scaledobject", NAME, "-n", namespace)
            assert scaled["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
            wait_for(lambda: _groups(cluster, namespace) == (1, 2), timeout=60, interval=1,
                     what="one group of two pods")
            (leader,) = [p["metadata"]["name"] for p in _serving_pods(cluster, namespace)
                         if p["metadata"]["labels"][c.LABEL_COMPONENT] == c.COMPONENT_SERVER]
            labels = {"namespace": namespace, "pod": leader, "app_kubernetes_io_instance": NAME,
                      "model": "tensorrt_llm", "version": "1"}

            exporter.set("nv_inference_pending_request_count", labels, 6)  # 3 replicas' worth
            wait_for(lambda: _groups(cluster, namespace) == (2, 4), timeout=120, interval=1,
                     what="KEDA scales to two whole groups (capped by maxReplicas)")
            exporter.set("nv_inference_pending_request_count", labels, 0)
            wait_for(lambda: _groups(cluster, namespace) == (1, 2), timeout=120, interval=1,
                     what="back to one group")
            assert replica_writes(op) == 0
            lws = cluster.kubectl_json("get", "leaderworkerset", NAME, "-n", namespace,
                                       "--show-managed-fields")
            owners = replica_managers(lws)
            assert c.FIELD_MANAGER not in owners, owners
    finally:
        exporter.server.shutdown()
