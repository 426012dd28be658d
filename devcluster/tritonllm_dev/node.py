"""The real node: configuration files, command lines and cluster objects of its processes.

A real node runs beside the kwok nodes, on this machine, the way kind runs one in a container:

============================  =================================================================
process                       role
============================  =================================================================
registry (distribution)       images on ``REGISTRY`` (127.0.0.1), storage in the cache
containerd + runc             CRI runtime; pods on the bridge through the CNI bridge plugin
kubelet                       registers node ``NODE_NAME`` (cgroupfs on hybrid cgroups)
kube-proxy                    Services (iptables mode) for the real node's pods
CoreDNS                       cluster DNS on the bridge gateway; answers cluster names only
local-path-provisioner        dynamic PVCs (StorageClass ``local-path``, the default) on disk
forward                       the API server on the bridge gateway, for pods (kubernetes.default)
============================  =================================================================

All of them are host processes with a kubeconfig (only workloads run in containers). The node is
tainted ``tritonllm.io/real-node=true:NoSchedule`` (and ``nvidia.com/gpu=present:NoSchedule``, as
every GPU node) so that only pods meant for it land there: the simulated scenarios keep running on
kwok nodes unchanged. It advertises ``nvidia.com/gpu`` as an
extended resource with GPU-feature-discovery labels (product ``NVIDIA-CPU-STANDIN``) so that the
pods the operator renders for GPUs schedule and run on it; no GPU exists behind that number.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonllm_dev.host import BRIDGE, CGROUP_ROOT, CNI_BIN_DIR, GATEWAY, POD_SUBNET
from tritonllm_dev.versions import (
    CONTAINERD,
    COREDNS,
    KUBE_ROUTER,
    KUBERNETES,
    LOCAL_PATH,
    PAUSE_VERSION,
    REGISTRY,
    RUNC,
)

NODE_NAME = "real-0"
#: Taint that keeps every pod off the real node unless it tolerates it.
TAINT_KEY = "tritonllm.io/real-node"
REAL_NODE_LABEL = "tritonllm.io/real-node"
#: The product label a real node advertises: a CPU that stands in for GPUs.
STANDIN_PRODUCT = "NVIDIA-CPU-STANDIN"
STANDIN_GPUS = 8
#: Where images are served. Fixed (not a random port) so image names in examples stay stable.
REGISTRY_ADDR = os.environ.get("TRITONLLM_REGISTRY", "127.0.0.1:5000")
PAUSE_IMAGE = f"{REGISTRY_ADDR}/tritonllm/pause:{PAUSE_VERSION}"
#: local-path-provisioner's helper pods (mkdir/rm of volume directories).
HELPER_IMAGE = f"{REGISTRY_ADDR}/tritonllm/busybox:1.35"
LOCAL_PATH_NAMESPACE = "local-path-storage"
LOCAL_PATH_SA = "local-path-provisioner-service-account"
STORAGE_CLASS = "local-path"
#: Marks the cluster's default StorageClass (the one a PVC without storageClassName gets).
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
CLUSTER_DOMAIN = "cluster.local"


#: Taints of the real node: its own, and the one every (simulated) GPU node carries.
TAINTS = (
    {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
)


def tolerations() -> list[dict[str, str]]:
    """The tolerations a pod needs to run on the real node."""
    return [{"key": t["key"], "operator": "Exists", "effect": t["effect"]} for t in TAINTS]


@dataclass(frozen=True)
class NodePaths:
    """Everything of the real node lives under ``<state>/node``; wiped on every ``up``."""

    root: Path

    @property
    def containerd_sock(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    def sub(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)


def registry_config(storage: Path) -> dict[str, Any]:
    return {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": REGISTRY_ADDR},
    }


def containerd_config(paths: NodePaths) -> str:
    """containerd 2.x configuration (version 3): runc (built here) through its shim, CNI bridge."""
    cd = paths.sub("containerd")
    images = "plugins.'io.containerd.cri.v1.images'"
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    runc = f"{runtime}.containerd.runtimes.runc"
    return f"""version = 3
root = '{cd / "root"}'
state = '{cd / "state"}'
[grpc]
  address = '{paths.containerd_sock}'
[ttrpc]
  address = '{cd / "containerd.sock.ttrpc"}'
[debug]
  address = ''
[metrics]
  address = ''
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
[{images}]
  snapshotter = 'overlayfs'
  [{images}.pinned_images]
    sandbox = '{PAUSE_IMAGE}'
  [{images}.registry]
    config_path = '{cd / "certs.d"}'
[{runtime}]
  enable_selinux = false
  # This VM withholds CAP_SYS_RESOURCE even from root: pods may not get a lower OOM score.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [{runtime}.containerd]
    default_runtime_name = 'runc'
  [{runc}]
    runtime_type = 'io.containerd.runc.v2'
  [{runc}.options]
    BinaryName = '{RUNC.path("runc")}'
    SystemdCgroup = false
  [{runtime}.cni]
    bin_dirs = ['{CNI_BIN_DIR}']
    conf_dir = '{paths.sub("cni", "net.d")}'
"""


def registry_hosts() -> str:
    """containerd ``hosts.toml``: plain HTTP to the local registry.

    Written for the local registry itself and as ``_default`` (every other registry): a pod
    naming ``docker.io/...`` or ``nvcr.io/...`` is answered by the local registry (and fails
    as not found unless that repository was pushed there), so no pull ever leaves the machine
    and no registry host name is looked up in the host's DNS.
    """
    return (
        f'server = "http://{REGISTRY_ADDR}"\n\n'
        f'[host."http://{REGISTRY_ADDR}"]\n  capabilities = ["pull", "resolve", "push"]\n'
    )


def cni_conflist(paths: NodePaths) -> dict[str, Any]:
    """One bridge, host-local addresses on ``POD_SUBNET``, no IP masquerade (no way out)."""
    return {
        "cniVersion": "1.0.0",
        "name": "tritonllm",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(paths.sub("cni", "ipam")),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(
    paths: NodePaths, ca_crt: Path, port: int, healthz_port: int, resolv: Path
) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The VM boots with hybrid cgroups, which kubelet >= 1.35 refuses unless told.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "failSwapOn": False,
        "address": GATEWAY,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "containerRuntimeEndpoint": f"unix://{paths.containerd_sock}",
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [GATEWAY],
        # Pods with dnsPolicy Default get no upstream resolver: nothing resolves outside.
        "resolvConf": str(resolv),
        "podLogsDir": str(paths.sub("pod-logs")),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_crt)},
        },
        "authorization": {"mode": "Webhook"},
        "imageGCHighThresholdPercent": 100,
        "evictionHard": {
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%",
        },
        "serializeImagePulls": False,
        "registerWithTaints": [dict(t) for t in TAINTS],
        "shutdownGracePeriod": "0s",
    }


def kubelet_argv(paths: NodePaths, config: Path, kubeconfig: Path) -> list[str]:
    labels = {
        REAL_NODE_LABEL: "true",
        "nvidia.com/gpu.product": STANDIN_PRODUCT,
        "nvidia.com/gpu.count": str(STANDIN_GPUS),
        "nvidia.com/gpu.present": "true",
    }
    return [
        str(KUBERNETES.path("kubelet")),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={GATEWAY}",
        f"--root-dir={paths.sub('kubelet')}",
        f"--cert-dir={paths.sub('kubelet', 'pki')}",
        "--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
        "--v=1",
    ]


def kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "mode": "iptables",
        "clusterCIDR": POD_SUBNET,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{GATEWAY}/32"],
        # 0 = leave the host's conntrack sysctls alone.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"minSyncPeriod": "1s", "localhostNodePorts": False},
    }


def corefile(kubeconfig: Path, health_port: int, ready_port: int) -> str:
    """Cluster names only: no ``forward``, so nothing is ever resolved outside this machine."""
    return f""".:53 {{
    bind {GATEWAY}
    errors
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        ttl 5
    }}
    cache 5
}}
"""


def coredns_argv(corefile_path: Path) -> list[str]:
    return [str(COREDNS.path("coredns")), "-conf", str(corefile_path)]


def kube_router_argv(kubeconfig: Path) -> list[str]:
    """kube-router as the node's NetworkPolicy enforcer only: its firewall (iptables chains per
    pod, ipsets per policy, also for bridged traffic between pods of the node) without its
    routing, service proxy or CNI, which the bridge CNI and kube-proxy provide."""
    return [
        str(KUBE_ROUTER.path("kube-router")),
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={NODE_NAME}",
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        "--run-loadbalancer=false",
        "--enable-cni=false",
        "--health-port=0",
        "--metrics-port=0",
        "--v=1",
    ]


def kube_router_cleanup_argv() -> list[str]:
    """Remove every chain and ipset kube-router made (the real node's teardown)."""
    return [str(KUBE_ROUTER.path("kube-router")), "--cleanup-config"]


def containerd_argv(config: Path) -> list[str]:
    return [str(CONTAINERD.path("containerd")), "--config", str(config), "--log-level", "warn"]


def registry_argv(config: Path) -> list[str]:
    return [str(REGISTRY.path("registry")), "serve", str(config)]


def local_path_argv(kubeconfig: Path, config: Path) -> list[str]:
    return [
        str(LOCAL_PATH.path("local-path-provisioner")),
        "start",
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        f"--namespace={LOCAL_PATH_NAMESPACE}",
        f"--helper-image={HELPER_IMAGE}",
        f"--service-account-name={LOCAL_PATH_SA}",
    ]


def local_path_config(volumes: Path) -> dict[str, Any]:
    return {"nodePathMap": [{"node": NODE_NAME, "paths": [str(volumes)]}]}


def local_path_objects(volumes: Path) -> list[dict[str, Any]]:
    """Namespace, ServiceAccount, ConfigMap (scripts, helper pod) and the StorageClass.

    The StorageClass is the cluster's default one, as in kind and minikube: a PVC that names no
    class gets ``local-path`` (the DefaultStorageClass admission plugin fills it in) and binds
    once a pod using it is scheduled (WaitForFirstConsumer). Its ``allowedTopologies`` hold only
    the real node, the one node that can host a local volume: the scheduler places such a pod
    there (it must tolerate the node's taint), never on a kwok node, whose volume could not be
    provisioned. Claims that must not get it set ``storageClassName: ""`` (the simulated
    scenarios' pre-bound claims do: tests/cluster/operator_harness.py, `tritonllm demo`). A
    cluster without the real node has no provisioner, and so no default class.
    """
    ns = LOCAL_PATH_NAMESPACE
    helper = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod"},
        "spec": {"containers": [{"name": "helper-pod", "image": HELPER_IMAGE}]},
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": LOCAL_PATH_SA, "namespace": ns},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "local-path-config", "namespace": ns},
            "data": {
                "config.json": json.dumps(local_path_config(volumes)),
                "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
                "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n',
                "helperPod.yaml": json.dumps(helper),
            },
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS, "annotations": {DEFAULT_CLASS: "true"}},
            "provisioner": "rancher.io/local-path",
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": "kubernetes.io/hostname", "values": [NODE_NAME]}
            ]}],
        },
    ]


def apiserver_endpoints(apiserver_port: int) -> dict[str, Any]:
    """The ``kubernetes`` Service's endpoint: the API server as pods reach it (the forwarder).

    The API server runs with ``--endpoint-reconciler-type=none`` and listens on loopback only,
    so the cluster publishes the bridge-side forwarder itself.
    """
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [GATEWAY], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": apiserver_port, "protocol": "TCP"}],
    }


def gpu_capacity_patch() -> dict[str, Any]:
    """Status patch advertising the stand-in GPUs as an extended resource."""
    gpus = str(STANDIN_GPUS)
    return {
        "status": {"capacity": {"nvidia.com/gpu": gpus}, "allocatable": {"nvidia.com/gpu": gpus}}
    }
