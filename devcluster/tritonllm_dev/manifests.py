"""Objects the local cluster installs: simulated GPU nodes, LWS configuration and webhooks.

Why these nodes: the operator places engine builds and servers by GPU product (node affinity on
``nvidia.com/gpu.product``), GPU count (``nvidia.com/gpu`` extended resource) and tolerates the
usual GPU taint, so the cluster offers two products, 8- and 4-GPU nodes, and one untainted CPU node
for ordinary pods (the operator itself, in the chart tests). kwok manages every node annotated
``kwok.x-k8s.io/node: fake`` (heartbeats, pod lifecycles from ``kwok-stages.yaml``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_TAINT: dict[str, str] = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class NodeSpec:
    """One simulated node."""

    name: str
    gpus: int = 0
    product: str = ""
    cpu: str = "96"
    memory: str = "1536Gi"
    pods: str = "110"
    extra_labels: dict[str, str] = field(default_factory=dict)


#: The default node pool: 2 x 8 H100, 1 x 4 A100, 1 CPU-only node.
DEFAULT_NODES: tuple[NodeSpec, ...] = (
    NodeSpec("gpu-h100-0", gpus=8, product=H100),
    NodeSpec("gpu-h100-1", gpus=8, product=H100),
    NodeSpec("gpu-a100-0", gpus=4, product=A100, cpu="64", memory="1024Gi"),
    NodeSpec("cpu-0", cpu="32", memory="128Gi"),
)


def node_manifest(spec: NodeSpec, index: int) -> dict[str, Any]:
    """A Node with its status (the API server keeps status given on create; kwok keeps capacity)."""
    labels = {
        "type": "kwok",
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **spec.extra_labels,
    }
    capacity = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": spec.pods,
        "ephemeral-storage": "2Ti",
    }
    taints: list[dict[str, str]] = []
    if spec.gpus:
        labels[GPU_PRODUCT_LABEL] = spec.product
        labels["nvidia.com/gpu.count"] = str(spec.gpus)
        labels["nvidia.com/gpu.present"] = "true"
        capacity[GPU_RESOURCE] = str(spec.gpus)
        taints.append(dict(GPU_TAINT))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": labels,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": taints} if taints else {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "addresses": [
                {"type": "InternalIP", "address": f"10.1.0.{index + 10}"},
                {"type": "Hostname", "address": spec.name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
                "containerRuntimeVersion": "kwok",
                "bootID": "",
                "kernelVersion": "",
                "machineID": "",
                "osImage": "kwok",
                "systemUUID": "",
            },
            "phase": "Running",
        },
    }


def lws_configuration(webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """LWS controller config for running out of cluster: no leader election, no cert manager,
    webhooks on 127.0.0.1 with our certificate, metrics and health endpoints off."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": "0"},
    }


def _webhook(
    name: str,
    path: str,
    port: int,
    ca: bytes,
    group: str,
    resource: str,
    operations: list[str],
    lws_pods_only: bool,
) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "url": f"https://127.0.0.1:{port}{path}",
            "caBundle": base64.b64encode(ca).decode(),
        },
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "timeoutSeconds": 10,
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": ["v1"],
                "operations": operations,
                "resources": [resource],
            }
        ],
    }
    if lws_pods_only:
        hook["objectSelector"] = {
            "matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]
        }
    return hook


def lws_webhooks(port: int, ca: bytes) -> list[dict[str, Any]]:
    """LWS's admission webhooks pointed at the out-of-cluster controller by URL.

    They matter: the pod webhook labels LWS pods (group/worker index) and the LWS webhook defaults
    the spec. Paths and rules mirror LWS's ``config/webhook`` kustomization (with its patches that
    limit the pod webhooks to LWS pods).
    """
    lws = ("leaderworkerset.x-k8s.io", "leaderworkersets")
    create_update = ["CREATE", "UPDATE"]
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "lws-mutating-webhook-configuration"},
            "webhooks": [
                _webhook(
                    "mleaderworkerset.kb.io",
                    "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                    port,
                    ca,
                    *lws,
                    create_update,
                    False,
                ),
                _webhook("mpod.kb.io", "/mutate--v1-pod", port, ca, "", "pods", ["CREATE"], True),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "lws-validating-webhook-configuration"},
            "webhooks": [
                _webhook(
                    "vleaderworkerset.kb.io",
                    "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                    port,
                    ca,
                    *lws,
                    create_update,
                    False,
                ),
                _webhook(
                    "vpod.kb.io", "/validate--v1-pod", port, ca, "", "pods", create_update, True
                ),
            ],
        },
    ]
