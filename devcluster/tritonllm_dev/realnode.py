"""Start and stop the real node of a :class:`~tritonllm_dev.local.LocalCluster`.

Configuration and command lines are in :mod:`tritonllm_dev.node`, host changes in
:mod:`tritonllm_dev.host`. One machine runs one real node (one kubelet, one containerd, one
bridge): a lock file names the cluster that holds it, and a second cluster asking for one gets a
clear error instead of a half-working node.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import yaml

from tritonllm_dev import host, node, procs
from tritonllm_dev.node import NODE_NAME, REGISTRY_ADDR, NodePaths
from tritonllm_dev.versions import KUBE_ROUTER, KUBERNETES, REAL_NODE, cache_root

#: Processes of the real node, in start order; ``STOP_ORDER`` stops them (then containers).
PROCESSES = (
    "registry",
    "containerd",
    "apiserver-forward",
    "kubelet",
    "kube-proxy",
    "kube-router",
    "coredns",
    "local-path",
)
STOP_FIRST = (
    "local-path", "coredns", "kube-router", "kube-proxy", "apiserver-forward", "kubelet"
)
STOP_LAST = ("containerd", "registry")


class NodeError(RuntimeError):
    """The real node could not be started; the message says what to fix."""


class Cluster(Protocol):
    """What the real node needs of its cluster (implemented by LocalCluster)."""

    name: str
    state_dir: Path
    progress: Callable[[str], None]

    @property
    def kubeconfig(self) -> Path: ...

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None: ...
    def wait_for(self, probe: Callable[[], bool], what: str) -> None: ...
    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> Any: ...
    def apply(self, objects: Any, *, namespace: str | None = None) -> str: ...


def registry_storage() -> Path:
    """Images pushed to the local registry survive cluster restarts (cached like binaries)."""
    return cache_root() / "registry"


def _lock_path() -> Path:
    return cache_root() / "cluster" / ".real-node.lock"


def holder() -> str | None:
    """Name of the cluster whose real node runs now, if any."""
    try:
        data = json.loads(_lock_path().read_text())
    except (OSError, ValueError):
        return None
    pid = int(data.get("kubelet_pid", 0))
    alive = pid > 0 and Path(f"/proc/{pid}").exists()
    return str(data.get("cluster")) if alive else None


class RealNode:
    """The real node of one cluster: ``start`` after the control plane, ``stop`` before it."""

    def __init__(self, cluster: Cluster, ports: Any) -> None:
        self.cluster = cluster
        self.ports = ports
        self.paths = NodePaths(cluster.state_dir / "node")
        self._host_file = cluster.state_dir / "host.json"

    # ---- start -------------------------------------------------------------------------------

    def preflight(self) -> None:
        """Everything that can fail before a process starts, each with a one-line fix."""
        host.check_host()
        missing = {c.key: c.missing() for c in (KUBERNETES, *REAL_NODE) if c.missing()}
        if missing:
            raise NodeError(
                f"real-node binaries missing (run `tritonllm cluster build`): {missing}"
            )
        other = holder()
        if other and other != self.cluster.name:
            raise NodeError(
                f"cluster {other!r} runs this machine's real node; stop it first "
                f"(`tritonllm cluster down --name {other}`) or start with --no-real-node"
            )
        for port, what in ((int(REGISTRY_ADDR.rsplit(":", 1)[1]), "registry"),):
            if not procs.listen_free(port) and not _registry_ok():
                raise NodeError(
                    f"port {port} ({what}, {REGISTRY_ADDR}) is in use by another program; free it "
                    "or set TRITONLLM_REGISTRY=127.0.0.1:<port>"
                )

    def start_registry(self) -> None:
        registry_storage().mkdir(parents=True, exist_ok=True)
        config = self._write(
            "registry.yml", yaml.safe_dump(node.registry_config(registry_storage()))
        )
        if not _registry_ok():
            self.cluster.spawn("registry", node.registry_argv(config))
            self.cluster.wait_for(_registry_ok, f"registry on {REGISTRY_ADDR}")

    def start(self, service_cidr: str) -> None:
        """Host preparation, containerd, kubelet and the add-ons; returns once the node is Ready."""
        c, p = self.cluster, self.ports
        shutil.rmtree(self.paths.root, ignore_errors=True)  # a fresh node with a fresh cluster
        self.paths.root.mkdir(parents=True)
        host.prepare_cgroups()
        self._host_file.write_text(json.dumps({"bridge": host.BRIDGE, "cgroup": host.CGROUP_ROOT}))
        host.setup_network(service_cidr)
        self._write_containerd()
        c.spawn("containerd", node.containerd_argv(self.paths.sub("containerd", "config.toml")))
        c.wait_for(lambda: self.paths.containerd_sock.exists(), "containerd socket")
        c.apply([node.apiserver_endpoints(p.apiserver)])
        c.spawn(
            "apiserver-forward",
            [
                sys.executable,
                "-m",
                "tritonllm_dev.forward",
                f"{host.GATEWAY}:{p.apiserver}",
                f"127.0.0.1:{p.apiserver}",
            ],
        )
        self._start_kubelet()
        self._claim()
        self._start_proxy_and_dns()
        c.apply(node.local_path_objects(self.paths.sub("volumes")))
        lp_config = self._write(
            "local-path.json", json.dumps(node.local_path_config(self.paths.sub("volumes")))
        )
        c.spawn("local-path", node.local_path_argv(c.kubeconfig, lp_config))
        c.wait_for(self._node_ready, f"node {NODE_NAME} Ready (kubelet, containerd, CNI)")
        c.kubectl(
            "patch",
            "node",
            NODE_NAME,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(node.gpu_capacity_patch()),
        )
        c.wait_for(lambda: _healthy(f"http://127.0.0.1:{p.coredns_ready}/ready"), "CoreDNS ready")

    def _write(self, name: str, text: str) -> Path:
        path = self.paths.sub("config", name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def _write_containerd(self) -> None:
        config = self.paths.sub("containerd", "config.toml")
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(node.containerd_config(self.paths))
        for registry in (REGISTRY_ADDR, "_default"):
            hosts = self.paths.sub("containerd", "certs.d", registry, "hosts.toml")
            hosts.parent.mkdir(parents=True, exist_ok=True)
            hosts.write_text(node.registry_hosts())
        conflist = self.paths.sub("cni", "net.d", "10-tritonllm.conflist")
        conflist.parent.mkdir(parents=True, exist_ok=True)
        conflist.write_text(json.dumps(node.cni_conflist(self.paths), indent=2))

    def _start_kubelet(self) -> None:
        c, p = self.cluster, self.ports
        pki = c.state_dir / "pki"
        kubeconfig = self._write("kubelet.kubeconfig", _node_kubeconfig(c.kubeconfig, pki))
        resolv = self._write("pod-resolv.conf", f"search {node.CLUSTER_DOMAIN}\n")
        config = self._write(
            "kubelet.yaml",
            yaml.safe_dump(
                node.kubelet_config(
                    self.paths, pki / "ca.crt", p.kubelet, p.kubelet_healthz, resolv
                )
            ),
        )
        c.spawn("kubelet", node.kubelet_argv(self.paths, config, kubeconfig))
        c.wait_for(
            lambda: _healthy(f"http://127.0.0.1:{p.kubelet_healthz}/healthz"), "kubelet /healthz"
        )

    def _start_proxy_and_dns(self) -> None:
        c, p = self.cluster, self.ports
        config = self._write(
            "kube-proxy.yaml",
            yaml.safe_dump(node.kube_proxy_config(c.kubeconfig, p.proxy_healthz, p.proxy_metrics)),
        )
        c.spawn("kube-proxy", [str(KUBERNETES.path("kube-proxy")), f"--config={config}", "--v=1"])
        corefile = self._write(
            "Corefile", node.corefile(c.kubeconfig, p.coredns_health, p.coredns_ready)
        )
        c.spawn("coredns", node.coredns_argv(corefile))
        # kube-router reads its own Node object at start and exits when it is not there yet:
        # the kubelet answers /healthz before it has registered the node (seconds, on a busy
        # machine after a down/up).
        c.wait_for(
            lambda: c.kubectl("get", "node", NODE_NAME, check=False).returncode == 0,
            f"node {NODE_NAME} registered",
        )
        c.spawn("kube-router", node.kube_router_argv(c.kubeconfig))
        c.wait_for(
            lambda: _healthy(f"http://127.0.0.1:{p.proxy_healthz}/healthz"), "kube-proxy /healthz"
        )
        c.wait_for(host.policy_chains_ready, "kube-router NetworkPolicy chains")

    def _node_ready(self) -> bool:
        out = self.cluster.kubectl(
            "get",
            "node",
            NODE_NAME,
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
            check=False,
        )
        return bool(out.returncode == 0 and out.stdout.strip() == "True")

    def _claim(self) -> None:
        pid = self.cluster_pid("kubelet")
        _lock_path().parent.mkdir(parents=True, exist_ok=True)
        with _lock_path().open("a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps({"cluster": self.cluster.name, "kubelet_pid": pid}))

    def cluster_pid(self, name: str) -> int:
        state = json.loads((self.cluster.state_dir / "state.json").read_text())
        return int(state["processes"][name]["pid"])

    # ---- stop --------------------------------------------------------------------------------

    @staticmethod
    def kill_containers(timeout: float = 10) -> None:
        """SIGKILL every process in the node's cgroups (the containers) until none is left."""
        deadline = time.monotonic() + timeout
        while (pids := host.cgroup_pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            time.sleep(0.1)

    def cleanup(self) -> list[str]:
        """After the node's processes stopped: containers, mounts, iptables, bridge, cgroups."""
        problems = []
        self.kill_containers()
        problems += [f"still mounted: {m}" for m in host.unmount_under(self.paths.root)]
        proxy = KUBERNETES.path("kube-proxy")
        if proxy.exists():
            subprocess.run(
                [str(proxy), "--cleanup", "--v=0"], capture_output=True, check=False, timeout=60
            )
        if KUBE_ROUTER.path("kube-router").exists():  # its chains and ipsets
            subprocess.run(node.kube_router_cleanup_argv(), capture_output=True, check=False,
                           timeout=60)
        host.remove_kube_chains()
        problems += host.teardown_network()
        problems += host.cleanup_cgroups()
        self._host_file.unlink(missing_ok=True)
        with contextlib.suppress(OSError, ValueError):
            if json.loads(_lock_path().read_text()).get("cluster") == self.cluster.name:
                _lock_path().unlink()
        return problems


def _node_kubeconfig(admin: Path, pki: Path) -> str:
    config = yaml.safe_load(admin.read_text())
    config["users"][0]["user"] = {
        "client-certificate": str(pki / "node.crt"),
        "client-key": str(pki / "node.key"),
    }
    return yaml.safe_dump(config)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _registry_ok() -> bool:
    return _healthy(f"http://{REGISTRY_ADDR}/v2/")


def wait_until(probe: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(interval)
    return False
