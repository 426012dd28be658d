"""The real node: pods run as real containers (containerd + crun), pulled from the local registry,
on the cluster's own bridge, with CoreDNS, kube-proxy and local-path PVCs.

Nothing here is simulated except the GPUs the node advertises (an extended resource with no GPU
behind it). Every address a test talks to is loopback or the cluster's own bridge and Services.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from tritonllm_dev import host
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.node import (
    NODE_NAME,
    REGISTRY_ADDR,
    STANDIN_GPUS,
    STANDIN_PRODUCT,
    STORAGE_CLASS,
    TAINT_KEY,
    tolerations,
)
from tritonllm_dev.testing import fresh_namespace, wait_for

pytestmark = pytest.mark.cluster

BUSYBOX = f"{REGISTRY_ADDR}/tritonllm/busybox:1.35"


def real_pod(
    name: str, command: list[str], *, restart: str = "Never", **spec: Any
) -> dict[str, Any]:
    """A pod pinned to the real node, running busybox from the local registry."""
    container: dict[str, Any] = {
        "name": "main",
        "image": BUSYBOX,
        "imagePullPolicy": "Always",
        "command": command,
        **spec.pop("container", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE_NAME},
            "tolerations": tolerations(),
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
            **spec,
        },
    }


def phase(cluster: LocalCluster, ns: str, name: str) -> str:
    out = cluster.kubectl("get", "pod", name, "-n", ns, "-o", "jsonpath={.status.phase}")
    return str(out.stdout)


def wait_phase(cluster: LocalCluster, ns: str, name: str, want: str, timeout: float = 120) -> None:
    def probe() -> bool:
        got = phase(cluster, ns, name)
        assert got != "Failed" or want == "Failed", cluster.kubectl(
            "describe", "pod", name, "-n", ns
        ).stdout
        return got == want

    wait_for(probe, timeout=timeout, what=f"pod {ns}/{name} {want}")


def http_get(host_: str, port: int = 80) -> str:
    """A shell command that GETs / from ``host_`` with busybox nc (prints the response)."""
    return f"printf 'GET / HTTP/1.0\\r\\nHost: {host_}\\r\\n\\r\\n' | nc -w 5 {host_} {port}"


def logs(cluster: LocalCluster, ns: str, name: str) -> str:
    return str(cluster.kubectl("logs", name, "-n", ns).stdout)


def test_node_is_real_and_advertises_standin_gpus(cluster: LocalCluster) -> None:
    node = cluster.kubectl_json("get", "node", NODE_NAME)
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://2.")
    assert info["kubeletVersion"] == "v1.36.3"
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == STANDIN_PRODUCT
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(STANDIN_GPUS)
    assert {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]


def test_plain_pod_runs_and_logs_pulled_from_local_registry(
    cluster: LocalCluster, namespace: str
) -> None:
    cluster.apply(
        [real_pod("hello", ["sh", "-c", "echo hello from $(hostname); id -u"])], namespace=namespace
    )
    wait_phase(cluster, namespace, "hello", "Succeeded")
    assert logs(cluster, namespace, "hello").split() == ["hello", "from", "hello", "0"]
    status = cluster.kubectl_json("get", "pod", "hello", "-n", namespace)["status"]
    image_id = status["containerStatuses"][0]["imageID"]
    assert image_id.startswith(f"{REGISTRY_ADDR}/tritonllm/busybox@sha256:"), image_id
    events = cluster.kubectl_json("get", "events", "-n", namespace)["items"]
    assert any(e["reason"] == "Pulling" for e in events), "imagePullPolicy Always: no pull event"


def test_service_resolves_by_dns_and_answers_from_another_pod(
    cluster: LocalCluster, namespace: str
) -> None:
    server = real_pod(
        "web",
        ["sh", "-c", "mkdir -p /w && echo served-by-web > /w/index.html && httpd -f -p 8080 -h /w"],
        restart="Always",
        container={"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}},
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    cluster.apply([server, service], namespace=namespace)
    wait_for(
        lambda: (
            cluster.kubectl(
                "get",
                "pod",
                "web",
                "-n",
                namespace,
                "-o",
                "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
            ).stdout
            == "True"
        ),
        timeout=120,
        what="web Ready",
    )
    fqdn = f"web.{namespace}.svc.cluster.local"
    client = real_pod(
        "client",
        [
            "sh",
            "-c",
            # busybox-static's wget crashes in its glibc resolver; nc + a raw request does not.
            f"nslookup {fqdn} && {http_get('web')} && {http_get(fqdn)}",
        ],
    )
    cluster.apply([client], namespace=namespace)
    wait_phase(cluster, namespace, "client", "Succeeded")
    out = logs(cluster, namespace, "client")
    cluster_ip = cluster.kubectl_json("get", "svc", "web", "-n", namespace)["spec"]["clusterIP"]
    assert cluster_ip in out
    assert out.count("served-by-web") == 2


def test_pvc_from_local_path_is_written_then_read_by_next_pod(
    cluster: LocalCluster, namespace: str
) -> None:
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {
            "storageClassName": STORAGE_CLASS,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "16Mi"}},
        },
    }
    volume = {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
    mount = {"volumeMounts": [{"name": "d", "mountPath": "/data"}]}
    writer = real_pod("writer", ["sh", "-c", "echo persisted > /data/f"], container=mount, **volume)
    cluster.apply([pvc, writer], namespace=namespace)
    wait_phase(cluster, namespace, "writer", "Succeeded", timeout=180)
    reader = real_pod("reader", ["cat", "/data/f"], container=mount, **volume)
    cluster.apply([reader], namespace=namespace)
    wait_phase(cluster, namespace, "reader", "Succeeded")
    assert logs(cluster, namespace, "reader").strip() == "persisted"
    claim = cluster.kubectl_json("get", "pvc", "data", "-n", namespace)
    pv = cluster.kubectl_json("get", "pv", claim["spec"]["volumeName"])
    assert pv["spec"]["storageClassName"] == STORAGE_CLASS
    assert str(cluster.state_dir) in pv["spec"]["hostPath"]["path"]


def test_plain_pvc_gets_the_default_class_and_binds_on_the_real_node(
    cluster: LocalCluster, namespace: str
) -> None:
    """A newcomer's claim names no class: the API server gives it local-path (the default), and
    a pod using it (tolerating the real node's taint, as every pod meant to run here does, and
    not pinned to it) is placed on the real node and binds it (WaitForFirstConsumer)."""
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "plain"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
    }
    cluster.apply([pvc], namespace=namespace)
    claim = cluster.kubectl_json("get", "pvc", "plain", "-n", namespace)
    assert claim["spec"]["storageClassName"] == STORAGE_CLASS  # filled in at admission
    assert claim["status"]["phase"] == "Pending"  # waits for its first consumer
    user = real_pod("user", ["sh", "-c", "echo bound > /data/f && cat /data/f"],
                    container={"volumeMounts": [{"name": "d", "mountPath": "/data"}]},
                    volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "plain"}}])
    del user["spec"]["nodeSelector"]  # the class's allowedTopologies place it
    cluster.apply([user], namespace=namespace)
    wait_phase(cluster, namespace, "user", "Succeeded", timeout=180)
    assert logs(cluster, namespace, "user").strip() == "bound"
    assert cluster.kubectl_json("get", "pod", "user", "-n", namespace)["spec"]["nodeName"] \
        == NODE_NAME
    claim = cluster.kubectl_json("get", "pvc", "plain", "-n", namespace)
    assert claim["status"]["phase"] == "Bound"
    pv = cluster.kubectl_json("get", "pv", claim["spec"]["volumeName"])
    assert pv["spec"]["storageClassName"] == STORAGE_CLASS


def test_gpu_requesting_pod_lands_on_real_node_and_runs(
    cluster: LocalCluster, namespace: str
) -> None:
    gpu = real_pod(
        "gpu",
        ["sh", "-c", "echo ran"],
        container={"resources": {"limits": {"nvidia.com/gpu": "2"}}},
        nodeSelector={"nvidia.com/gpu.product": STANDIN_PRODUCT},
    )
    cluster.apply([gpu], namespace=namespace)
    wait_phase(cluster, namespace, "gpu", "Succeeded")
    pod = cluster.kubectl_json("get", "pod", "gpu", "-n", namespace)
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert logs(cluster, namespace, "gpu").strip() == "ran"


def _host_addresses() -> list[str]:
    """This machine's own IPv4 addresses outside loopback and the cluster's bridge."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True)
    addrs = []
    for line in out.stdout.splitlines():
        fields = line.split()
        if fields[1] not in ("lo", host.BRIDGE):
            addrs.append(fields[3].split("/")[0])
    return addrs


def _dropped() -> int:
    out = subprocess.run(
        ["iptables", "-t", "raw", "-L", host.CONFINE_CHAIN, "-v", "-x", "-n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(int(line.split()[0]) for line in out.splitlines() if " DROP " in f" {line} ")


def test_an_unrouted_service_address_is_refused_here_not_sent_out(cluster: LocalCluster) -> None:
    """A Service address kube-proxy has not translated (no Service has it) is refused on this
    machine at once, from the host as from pods: it never follows the default route, where an
    intercepting egress proxy would accept the connection and answer 404 for any model."""
    from tritonllm_dev.local import SERVICE_CIDR

    rules = host.confinement_rules()
    assert f"-A OUTPUT -j {host.SERVICES_CHAIN}" in rules
    assert f"-A FORWARD -j {host.SERVICES_CHAIN}" in rules
    taken = {s["spec"].get("clusterIP") for s in cluster.kubectl_json(
        "get", "svc", "-A")["items"]}
    network = ipaddress.ip_network(SERVICE_CIDR)
    free = next(str(a) for a in network.hosts() if str(a) not in taken and a.packed[-1] > 200)
    t0 = time.monotonic()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((free, 8000), timeout=5).close()
    assert time.monotonic() - t0 < 2


def test_pod_traffic_outside_cluster_ranges_is_dropped(
    cluster: LocalCluster, namespace: str
) -> None:
    """The confinement rule is installed, stays while pods run, and drops a pod's packets to an
    address that is not the cluster's (this machine's own non-bridge address, never outside)."""
    rules = host.confinement_rules()
    assert f"-A PREROUTING -i {host.BRIDGE} -j {host.CONFINE_CHAIN}" in rules
    assert f"-A {host.CONFINE_CHAIN} -j DROP" in rules
    targets = _host_addresses()
    assert targets, "no non-loopback host address to aim at"
    before = _dropped()
    probe = real_pod(
        "escape",
        ["sh", "-c", f"ping -c 1 -W 2 {targets[0]} && echo REACHED || echo BLOCKED"],
    )
    cluster.apply([probe], namespace=namespace)
    wait_phase(cluster, namespace, "escape", "Succeeded")
    assert logs(cluster, namespace, "escape").strip().endswith("BLOCKED")
    assert _dropped() > before
    assert host.confinement_rules() == rules  # still in place, unchanged
    nat = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout
    assert f"-s {host.POD_SUBNET}" not in nat or "MASQUERADE" not in [
        line.split()[-1] for line in nat.splitlines() if f"-s {host.POD_SUBNET}" in line
    ]


def test_listeners_are_loopback_or_cluster_bridge(cluster: LocalCluster) -> None:
    from tritonllm_dev import procs

    pids = cluster.pids()
    assert {"kubelet", "containerd", "coredns", "registry"} <= set(pids)
    listening = procs.listeners(procs.descendants(pids.values()))
    bad = [str(x) for x in listening if not x.loopback and x.address != host.GATEWAY]
    assert not bad, f"listeners beyond loopback and the cluster bridge: {bad}"


def test_second_real_node_is_refused_with_one_clear_line(cluster: LocalCluster) -> None:
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonllm.cli.main",
            "cluster",
            "up",
            "--name",
            "pytest-second",
            "--no-build",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    assert f"cluster {cluster.name!r} runs this machine's real node" in lines[0]
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - start < 60
    assert json.loads((cluster.state_dir / "host.json").read_text()) is not None


def test_down_then_up_leaves_nothing_the_next_real_pod_trips_over(cluster: LocalCluster) -> None:
    """Two clusters one after the other (the README's demo, then its tests, on one machine):
    `down` leaves no host state (mounts, cgroups, bridge, veths, iptables chains) and the next
    `up`'s first real pod starts once, without its sandbox being recreated (SandboxChanged).
    Runs on the session's own cluster (each `up` starts from an empty etcd, so this is a new
    cluster on the same host), which is up again afterwards for the tests that follow."""
    left = cluster.down()
    assert not left, f"processes survived down: {left}"
    assert not cluster.host_problems, cluster.host_problems
    assert host.leftovers(cluster.state_dir) == []
    start = time.monotonic()
    cluster.up(build=False)
    up_took = time.monotonic() - start
    with fresh_namespace(cluster, "restart") as namespace:
        cluster.apply([real_pod("after-restart", ["sleep", "3600"])], namespace=namespace)
        wait_phase(cluster, namespace, "after-restart", "Running", timeout=90)
        running_after = time.monotonic() - start - up_took
        time.sleep(5)  # a sandbox recreated right after start would show by now
        pod = cluster.kubectl_json("get", "pod", "after-restart", "-n", namespace)
        events = cluster.kubectl_json("get", "events", "-n", namespace)["items"]
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    reasons = [e["reason"] for e in events if e["involvedObject"]["name"] == "after-restart"]
    assert "SandboxChanged" not in reasons, reasons
    assert reasons.count("Started") == 1, reasons
    print(f"cluster up again in {up_took:.1f} s; first real pod Running {running_after:.1f} s "
          f"after apply; events {reasons}")
