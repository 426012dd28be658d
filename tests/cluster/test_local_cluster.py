"""The local control plane itself: versions, GPU nodes, scheduling, kwok stages, LWS, hygiene."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from tritonllm_dev import procs
from tritonllm_dev.host import GATEWAY
from tritonllm_dev.local import ClusterError, LocalCluster
from tritonllm_dev.manifests import A100, GPU_PRODUCT_LABEL, GPU_RESOURCE, H100
from tritonllm_dev.testing import FAIL_LABEL, gpu_pod_spec, job, pod, wait_for
from tritonllm_dev.versions import KUBERNETES_VERSION

pytestmark = pytest.mark.cluster

#: Acceptance: a warm `tritonllm cluster up` (binaries cached) takes less than this.
WARM_START_LIMIT_S = float(os.environ.get("TRITONLLM_WARM_START_LIMIT", "30"))


def _get(cluster: LocalCluster, namespace: str, *args: str) -> Any:
    return cluster.kubectl_json("get", "-n", namespace, *args)


def test_server_version_and_readiness(cluster: LocalCluster) -> None:
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == KUBERNETES_VERSION
    assert cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    assert cluster.kubeconfig.is_file()
    assert ".kube" not in str(cluster.kubeconfig)


def test_the_crd_wait_reads_one_crd_as_well_as_several(cluster: LocalCluster) -> None:
    """kubectl prints several CRDs as a List but one by itself: a wait whose last pending CRD was
    alone never saw it Established (prometheus-operator's, in the autoscaling tier)."""
    names = ("tritonllmdeployments.tritonllm.io", "tritonllmengines.tritonllm.io")
    start = time.monotonic()
    cluster.wait_established(*names, timeout=20)
    cluster.wait_established(names[0], timeout=20)
    assert time.monotonic() - start < 10
    with pytest.raises(ClusterError, match=r"absent\.example\.com: not found$"):
        cluster.wait_established(names[1], "absent.example.com", timeout=1)


def test_gpu_nodes(cluster: LocalCluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in cluster.kubectl_json("get", "nodes")["items"]}
    gpu = {
        name: (n["metadata"]["labels"].get(GPU_PRODUCT_LABEL), n["status"]["allocatable"])
        for name, n in nodes.items()
        if GPU_RESOURCE in n["status"]["allocatable"]
    }
    h100 = [a[GPU_RESOURCE] for product, a in gpu.values() if product == H100]
    a100 = [a[GPU_RESOURCE] for product, a in gpu.values() if product == A100]
    assert h100 == ["8", "8"]
    assert a100 == ["4"]
    for name in gpu:
        node = nodes[name]
        assert {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"} in node["spec"][
            "taints"
        ]
        for res in ("cpu", "memory", "pods"):
            assert res in node["status"]["allocatable"]
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"


def test_pod_with_4_h100_gpus_is_scheduled_and_ready(cluster: LocalCluster, namespace: str) -> None:
    cluster.apply([pod("gpu4", gpu_pod_spec(4, H100))], namespace=namespace)
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/gpu4", "--timeout=60s")
    obj = _get(cluster, namespace, "pod", "gpu4")
    node = cluster.kubectl_json("get", "node", obj["spec"]["nodeName"])
    assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == H100
    assert obj["status"]["phase"] == "Running"
    assert obj["status"].get("podIP")


def test_pod_with_16_gpus_stays_pending(cluster: LocalCluster, namespace: str) -> None:
    cluster.apply([pod("gpu16", gpu_pod_spec(16, H100))], namespace=namespace)

    def failed_scheduling() -> list[dict[str, Any]]:
        events = _get(cluster, namespace, "events", "--field-selector=involvedObject.name=gpu16")
        return [e for e in events["items"] if e["reason"] == "FailedScheduling"]

    events = wait_for(failed_scheduling, timeout=60, what="a FailedScheduling event")
    assert GPU_RESOURCE in events[0]["message"]
    obj = _get(cluster, namespace, "pod", "gpu16")
    assert obj["status"]["phase"] == "Pending"
    assert not obj["spec"].get("nodeName")


def test_job_completes_through_kwok(cluster: LocalCluster, namespace: str) -> None:
    started = time.monotonic()
    cluster.apply(
        [job("ok", annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "1s"})],
        namespace=namespace,
    )
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Complete", "job/ok", "--timeout=90s")
    assert time.monotonic() - started >= 1
    assert _get(cluster, namespace, "job", "ok")["status"]["succeeded"] == 1


def test_job_pod_with_fail_label_fails(cluster: LocalCluster, namespace: str) -> None:
    annotations = {
        "tritonllm.io/fail-exit-code": "3",
        "tritonllm.io/fail-message": "engine build exploded",
        "tritonllm.io/fail-delay": "500ms",
    }
    cluster.apply(
        [job("bad", labels={FAIL_LABEL: "true"}, annotations=annotations)], namespace=namespace
    )
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Failed", "job/bad", "--timeout=90s")
    pods = _get(cluster, namespace, "pods", "-l", "job-name=bad")["items"]
    assert pods and pods[0]["status"]["phase"] == "Failed"
    terminated = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["message"] == "engine build exploded"


def test_serving_pod_with_fail_label_crashloops(cluster: LocalCluster, namespace: str) -> None:
    spec = gpu_pod_spec(1, H100)
    cluster.apply([pod("crash", spec, labels={FAIL_LABEL: "true"})], namespace=namespace)

    def crashed() -> dict[str, Any] | None:
        status = _get(cluster, namespace, "pod", "crash")["status"]
        cs = (status.get("containerStatuses") or [{}])[0]
        waiting = cs.get("state", {}).get("waiting", {})
        return cs if waiting.get("reason") == "CrashLoopBackOff" else None

    cs = wait_for(crashed, timeout=60, what="CrashLoopBackOff")
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["ready"] is False


def test_leaderworkerset_of_size_2_becomes_ready(cluster: LocalCluster, namespace: str) -> None:
    worker = {"spec": gpu_pod_spec(4, H100)}
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "multi"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": worker}},
    }
    cluster.apply([lws], namespace=namespace)

    def ready_pods() -> list[dict[str, Any]] | None:
        items = _get(cluster, namespace, "pods", "-l", "leaderworkerset.sigs.k8s.io/name=multi")
        ready = [
            p
            for p in items["items"]
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", [])
            )
        ]
        return ready if len(ready) == 2 else None

    pods = wait_for(ready_pods, timeout=120, what="2 ready LWS pods")
    indexes = sorted(
        p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] for p in pods
    )
    assert indexes == ["0", "1"]  # set by LWS's pod webhook
    for p in pods:
        node = cluster.kubectl_json("get", "node", p["spec"]["nodeName"])
        assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == H100


def test_only_loopback_listeners(cluster: LocalCluster) -> None:
    pids = cluster.pids()
    assert set(pids) >= {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
    listening = procs.listeners(procs.descendants(pids.values()))
    assert listening, "no listeners found: /proc inspection is broken"
    # The real node's kubelet and CoreDNS listen on the cluster's own bridge, nothing elsewhere.
    bad = [str(item) for item in listening if not item.loopback and item.address != GATEWAY]
    assert not bad, f"listeners beyond loopback and the cluster bridge: {bad}"
    by_name = {item.command for item in listening}
    assert {"etcd", "kube-apiserver", "lws"} <= by_name


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tritonllm.cli.main", "cluster", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_cli_up_down_is_fast_and_leaves_nothing(cluster: LocalCluster) -> None:
    """A second cluster through the CLI: warm start time, loopback only, nothing left after down.

    Depends on ``cluster`` only so that the binaries are known to be built.
    """
    name = "pytest-updown"
    other = LocalCluster(name=name)
    other.down()
    started = time.monotonic()
    up = _cli("up", "--name", name, "--no-build", "--no-real-node")
    elapsed = time.monotonic() - started
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert up.stdout.strip().splitlines()[-1] == str(other.kubeconfig)
        status = _cli("status", "--name", name)
        assert status.returncode == 0, status.stdout + status.stderr
        pids = other.pids()
        assert len(pids) == 6
        listening = procs.listeners(procs.descendants(pids.values()))
        assert listening and all(item.loopback for item in listening), listening
    finally:
        down = _cli("down", "--name", name)
    assert down.returncode == 0, down.stdout + down.stderr
    assert other.stray_processes() == {}
    assert all(not procs.alive(pid) for pid in pids.values())
    assert _cli("status", "--name", name).returncode == 1
    print(f"warm `tritonllm cluster up`: {elapsed:.1f}s")
    assert elapsed < WARM_START_LIMIT_S, f"warm start took {elapsed:.1f}s"


def test_default_storage_class_only_with_the_real_node_and_prebound_claims_still_bind(
    cluster: LocalCluster, namespace: str
) -> None:
    """local-path is the default class where it can provision (the real node's cluster); a
    kwok-only cluster has no provisioner and no default. Either way the simulated scenarios'
    pre-bound claims (storageClassName "") bind to their volume, as before."""
    from tests.cluster.operator_harness import store_objects

    classes = cluster.kubectl_json("get", "storageclass")["items"]
    defaults = [sc["metadata"]["name"] for sc in classes
                if (sc["metadata"].get("annotations") or {}).get(
                    "storageclass.kubernetes.io/is-default-class") == "true"]
    assert defaults == (["local-path"] if cluster.real_node else [])
    volume, claim = store_objects(namespace, claim="prebound")
    volume["metadata"]["name"] = f"{namespace}-prebound"
    cluster.apply([volume, claim])
    try:
        wait_for(lambda: _get(cluster, namespace, "pvc", "prebound")["status"]["phase"] == "Bound",
                 timeout=60, what="the pre-bound claim binds")
        bound = _get(cluster, namespace, "pvc", "prebound")
        assert bound["spec"]["storageClassName"] == ""
        assert bound["spec"]["volumeName"] == volume["metadata"]["name"]
    finally:
        cluster.kubectl("delete", "pv", volume["metadata"]["name"], "--wait=false", check=False)
