"""Unit tests of the local-cluster tooling that need no binaries (the cluster tier runs them)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from tritonllm_dev import procs
from tritonllm_dev.build import _version_ldflags, main
from tritonllm_dev.local import ClusterError, LocalCluster, Ports
from tritonllm_dev.manifests import (
    DEFAULT_NODES,
    GPU_RESOURCE,
    lws_configuration,
    lws_webhooks,
    node_manifest,
)
from tritonllm_dev.versions import COMPONENTS, KUBERNETES, RUNC, cache_root


def _stages() -> dict[str, dict[str, Any]]:
    text = resources.files("tritonllm_dev").joinpath("kwok-stages.yaml").read_text()
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(text)}


def test_kwok_stages_cover_the_whole_lifecycle() -> None:
    # kwok drops all built-in stages once any is configured: every phase must be here.
    stages = _stages()
    assert set(stages) == {
        "node-initialize",
        "node-heartbeat",
        "pod-ready",
        "pod-complete",
        "pod-fail",
        "pod-crash",
        "pod-terminate-on-delete",
        "pod-delete",
    }
    assert all(s["kind"] == "Stage" for s in stages.values())


def test_failure_stages_outweigh_completion() -> None:
    stages = _stages()
    for name in ("pod-fail", "pod-crash"):
        spec = stages[name]["spec"]
        assert isinstance(spec, dict)
        assert spec["weight"] > 0
        keys = [e["key"] for e in spec["selector"]["matchExpressions"]]
        assert '.metadata.labels["tritonllm.io/fail"]' in keys


def test_nodes_two_h100_one_a100_with_taint() -> None:
    manifests = [node_manifest(n, i) for i, n in enumerate(DEFAULT_NODES)]
    gpus = {
        m["metadata"]["labels"].get("nvidia.com/gpu.product"): m["status"]["capacity"].get(
            GPU_RESOURCE
        )
        for m in manifests
        if GPU_RESOURCE in m["status"]["capacity"]
    }
    products = [m["metadata"]["labels"].get("nvidia.com/gpu.product") for m in manifests]
    assert products.count("NVIDIA-H100-80GB-HBM3") == 2
    assert gpus == {"NVIDIA-H100-80GB-HBM3": "8", "NVIDIA-A100-SXM4-80GB": "4"}
    for m in manifests:
        assert {"cpu", "memory", "pods"} <= set(m["status"]["capacity"])
        if GPU_RESOURCE in m["status"]["capacity"]:
            assert m["spec"]["taints"] == [
                {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
            ]


def test_lws_listens_on_loopback_only(tmp_path: Path) -> None:
    config = lws_configuration(9443, tmp_path)
    assert config["webhook"]["host"] == "127.0.0.1"
    assert config["metrics"]["bindAddress"] == "0"
    assert config["health"]["healthProbeBindAddress"] == "0"
    urls = [w["clientConfig"]["url"] for c in lws_webhooks(9443, b"ca") for w in c["webhooks"]]
    assert urls and all(u.startswith("https://127.0.0.1:9443/") for u in urls)


def test_ports_are_distinct_and_free() -> None:
    ports = Ports()
    ports.allocate()
    values = list(ports.__dict__.values())
    assert len(set(values)) == len(values) and all(values)


def test_listeners_sees_our_socket() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        found = [item for item in procs.listeners([os.getpid()]) if item.port == port]
    assert found and found[0].loopback and found[0].address == "127.0.0.1"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0100007F:1F90", ("127.0.0.1", 8080)),
        ("00000000:0050", ("0.0.0.0", 80)),
        ("00000000000000000000000001000000:0050", ("::1", 80)),
        ("0000000000000000FFFF00000100007F:0050", ("127.0.0.1", 80)),
    ],
)
def test_parse_proc_net_address(raw: str, expected: tuple[str, int]) -> None:
    assert procs._parse_addr(raw) == expected


def test_version_ldflags_stamp_component_base_and_client_go() -> None:
    flags = _version_ldflags("v1.36.3", "2026-01-01T00:00:00Z")
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMinor=36" in flags


def test_cache_is_keyed_by_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRITONLLM_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    assert KUBERNETES.bindir == tmp_path / "bin" / f"k8s-{KUBERNETES.version}"
    assert {c.name for c in COMPONENTS} == {
        "k8s",
        "etcd",
        "kwok",
        "lws",
        "helm",  # the control plane
        "containerd",
        "runc",
        "coredns",
        "registry",
        "local-path",
        "pause",
        "kube-router",  # the real node
        "argocd",  # the GitOps tier
        "prometheus",
        "prometheus-adapter",
        "keda",
        "prometheus-operator-crds",  # the autoscaling tier
    }
    assert main(["--list"]) == 0
    with pytest.raises(SystemExit):
        main(["nonsense"])


# ---- the real node: configuration is pure and checked here; running it is tests/cluster --------


def test_real_node_configs_keep_traffic_inside_the_cluster(tmp_path: Path) -> None:
    import tomllib

    from tritonllm_dev import host, node

    paths = node.NodePaths(tmp_path / "node")
    cni = node.cni_conflist(paths)
    bridge = cni["plugins"][0]
    assert bridge["bridge"] == host.BRIDGE and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": host.POD_SUBNET, "gateway": host.GATEWAY}]]
    corefile = node.corefile(tmp_path / "kc", 1, 2)
    assert "forward" not in corefile  # nothing is ever resolved outside this machine
    assert f"bind {host.GATEWAY}" in corefile
    containerd = tomllib.loads(node.containerd_config(paths))
    assert containerd["grpc"]["address"] == str(paths.containerd_sock)
    runtime = containerd["plugins"]["io.containerd.cri.v1.runtime"]
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc["BinaryName"] == str(RUNC.path("runc")) and runc["SystemdCgroup"] is False
    assert runtime["restrict_oom_score_adj"] is True  # the VM withholds CAP_SYS_RESOURCE
    images = containerd["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == node.PAUSE_IMAGE
    kubelet = node.kubelet_config(paths, tmp_path / "ca.crt", 10250, 10248, tmp_path / "r")
    assert kubelet["failCgroupV1"] is False and kubelet["address"] == host.GATEWAY
    assert kubelet["healthzBindAddress"] == "127.0.0.1" and kubelet["readOnlyPort"] == 0
    proxy = node.kube_proxy_config(tmp_path / "kc", 1, 2)
    assert proxy["healthzBindAddress"].startswith("127.0.0.1:")
    assert proxy["conntrack"]["maxPerCore"] == 0  # host conntrack sysctls untouched


def test_confinement_rules_allow_only_cluster_ranges() -> None:
    from tritonllm_dev import host

    rules = host._confine_rules([host.POD_SUBNET, "10.96.0.0/16"])
    assert rules[-1] == ["-j", "DROP"]
    assert [r[1] for r in rules[:-1]] == [host.POD_SUBNET, "10.96.0.0/16"]


def test_missing_cni_plugins_are_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tritonllm_dev import host

    monkeypatch.setattr(host.os, "geteuid", lambda: 0)
    monkeypatch.setattr(host, "CNI_BIN_DIR", tmp_path)
    with pytest.raises(host.HostError) as exc:
        host.check_host()
    message = str(exc.value)
    assert "\n" not in message
    assert "CNI plugins" in message and "apt-get install containernetworking-plugins" in message


def test_missing_cgroup_controller_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tritonllm_dev import host

    monkeypatch.setattr(host.os, "geteuid", lambda: 0)
    monkeypatch.setattr(host, "CGROUP_FS", tmp_path)  # no controller mounted there
    monkeypatch.setattr(host, "CNI_BIN_DIR", tmp_path)
    for plugin in host.CNI_PLUGINS:
        (tmp_path / plugin).write_text("")
    with pytest.raises(host.HostError) as exc:
        host.check_host()
    assert "cgroup v1 controllers" in str(exc.value) and "\n" not in str(exc.value)


def test_non_root_cannot_start_a_real_node(monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonllm_dev import host

    monkeypatch.setattr(host.os, "geteuid", lambda: 1000)
    with pytest.raises(host.HostError, match="needs root"):
        host.check_host()


def test_local_path_is_the_default_class_and_provisions_only_on_the_real_node(
    tmp_path: Path,
) -> None:
    """A PVC that names no class gets local-path (as in kind and minikube); its pod is placed on
    the real node, the only one whose volumes local-path can make (docs/local-cluster.md)."""
    from tritonllm_dev import node

    (sc,) = [o for o in node.local_path_objects(tmp_path) if o["kind"] == "StorageClass"]
    assert sc["metadata"]["annotations"] == {
        "storageclass.kubernetes.io/is-default-class": "true"}
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer"
    assert sc["allowedTopologies"] == [{"matchLabelExpressions": [
        {"key": "kubernetes.io/hostname", "values": [node.NODE_NAME]}]}]
    assert node.local_path_config(tmp_path)["nodePathMap"][0]["node"] == node.NODE_NAME


def test_the_dev_command_offers_only_the_dev_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    """`tritonllm-dev` (devcluster/, outside the operator's wheel) dispatches `cluster` and `demo`
    like `tritonllm` does, and nothing else."""
    from tritonllm_dev.main import main as dev

    with pytest.raises(SystemExit) as done:
        dev(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tritonllm-dev") and "cluster" in out and "demo" in out
    with pytest.raises(SystemExit) as refused:
        dev(["render"])
    assert refused.value.code == 2
    assert "invalid choice: 'render'" in capsys.readouterr().err


def test_a_process_started_again_keeps_the_earlier_runs_logs(tmp_path: Path) -> None:
    """A restarted API server (or a cluster stopped and started) writes a new log; what the
    earlier runs logged stays readable, the newest in ``.1``, at most LOG_GENERATIONS of them."""
    log = tmp_path / "kube-apiserver.log"
    for run in range(procs.LOG_GENERATIONS + 2):
        child = procs.spawn(["/bin/sh", "-c", f"echo run {run}"], log, cwd=tmp_path,
                            header=f"==== start {run}\n".encode())
        assert child.wait(timeout=10) == 0
    last = procs.LOG_GENERATIONS + 1
    assert log.read_text() == f"==== start {last}\nrun {last}\n"
    for n in range(1, procs.LOG_GENERATIONS + 1):
        assert (tmp_path / f"kube-apiserver.log.{n}").read_text().endswith(f"run {last - n}\n")
    # the oldest beyond the bound went; nothing else is left in the directory
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["kube-apiserver.log", *(f"kube-apiserver.log.{n}"
                                 for n in range(1, procs.LOG_GENERATIONS + 1))]
    )


def _crd(name: str, *conditions: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "status": {"conditions": [{"type": t, "status": s, "reason": r, "message": r.lower()}
                                  for t, s, r in conditions]},
    }


INSTALLING = (("NamesAccepted", "True", "NoConflicts"), ("Established", "False", "Installing"))
ESTABLISHED = (("NamesAccepted", "True", "NoConflicts"),
               ("Established", "True", "InitialNamesAccepted"))


class _KubectlGetCrd:
    """``kubectl get crd NAME... -o json --ignore-not-found`` as kubectl prints it: the object
    itself for one name, a List for several, nothing when none exists; each call reads the next
    state of the API server's CRDs (the last one repeats)."""

    def __init__(self, states: list[dict[str, dict[str, Any]]]) -> None:
        self.states: Iterator[dict[str, dict[str, Any]]] = iter(states)
        self.now = states[0]
        self.asked: list[list[str]] = []

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert args[:2] == ("get", "crd") and not check
        names = [a for a in args[2:] if not a.startswith("-") and a != "json"]
        self.asked.append(names)
        self.now = next(self.states, self.now)
        found = [self.now[n] for n in names if n in self.now]
        if len(names) > 1:
            out = json.dumps({"apiVersion": "v1", "kind": "List", "items": found})
        else:
            out = json.dumps(found[0]) if found else ""
        return subprocess.CompletedProcess(["kubectl", *args], 0, out, "")


def test_the_crd_wait_sees_the_last_pending_crd_established(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CRDs of a set become Established one by one on a loaded machine: once one is left,
    kubectl prints it bare rather than in a List, and the wait must still see it."""
    names = ("podmonitors.monitoring.coreos.com", "servicemonitors.monitoring.coreos.com")
    cluster = LocalCluster("unit", state_dir=tmp_path)
    kubectl = _KubectlGetCrd([
        {n: _crd(n, *INSTALLING) for n in names},
        {names[0]: _crd(names[0], *ESTABLISHED), names[1]: _crd(names[1], *INSTALLING)},
        {n: _crd(n, *ESTABLISHED) for n in names},
    ])
    monkeypatch.setattr(cluster, "kubectl", kubectl)
    cluster.wait_established(*names, timeout=5, interval=0)
    assert kubectl.asked == [list(names), list(names), [names[1]]]


def test_a_crd_wait_that_gives_up_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = LocalCluster("unit", state_dir=tmp_path)
    crd = _crd("servicemonitors.monitoring.coreos.com", *INSTALLING)
    crd["metadata"] = {"name": "servicemonitors.monitoring.coreos.com",
                       "deletionTimestamp": "2026-01-01T00:00:00Z"}
    monkeypatch.setattr(cluster, "kubectl", _KubectlGetCrd([{crd["metadata"]["name"]: crd}]))
    with pytest.raises(ClusterError) as err:
        cluster.wait_established("servicemonitors.monitoring.coreos.com", "x.example.com",
                                 timeout=0, interval=0)
    assert str(err.value) == (
        "CRDs not Established within 0s: servicemonitors.monitoring.coreos.com: "
        "NamesAccepted=True (NoConflicts: noconflicts), Established=False (Installing: "
        "installing), being deleted since 2026-01-01T00:00:00Z; x.example.com: not found"
    )
