"""Run the local control plane as plain processes bound to 127.0.0.1.

Why our own process management rather than ``kwokctl --runtime=binary``: kwokctl binds 0.0.0.0
unless configured, probes each binary's version to choose flags, and would need its own build;
starting six processes ourselves keeps every flag visible here, lets us bind everything to
loopback, and makes teardown exact (we kill the process groups we recorded, nothing else).

Layout of the state directory (default ``~/.cache/tritonllm/cluster/<name>/``)::

    kubeconfig      admin kubeconfig (never merged into ~/.kube/config)
    state.json      ports and pids of the running processes
    pki/            CA, serving and client certificates (kept across restarts)
    etcd/           etcd data (wiped on every `up`: each start is a fresh cluster)
    logs/<proc>.log output of each process; its earlier starts' in <proc>.log.1 (newest) to .5
    run/            per-process scratch (self-signed serving certs, configs)

Start order: etcd, kube-apiserver (wait for /readyz), CRDs and nodes, then kube-controller-manager,
kube-scheduler, kwok and the LeaderWorkerSet controller (whose webhooks the API server calls by
URL), then wait until the nodes are Ready and the default ServiceAccount exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from tritonllm_dev import procs, realnode
from tritonllm_dev.build import ensure_all
from tritonllm_dev.host import HostError
from tritonllm_dev.manifests import (
    DEFAULT_NODES,
    NodeSpec,
    lws_configuration,
    lws_webhooks,
    node_manifest,
)
from tritonllm_dev.pki import FRONT_PROXY_CN, Pki, ensure_pki
from tritonllm_dev.versions import (
    COMPONENTS,
    CONTROL_PLANE,
    ETCD,
    KUBERNETES,
    KWOK,
    LWS,
    LWS_CRD_FILES,
    cache_root,
)

Progress = Callable[[str], None]

#: Process names in start order (stopped in reverse).
PROCESS_ORDER = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "lws",
)
#: Groups stopped one after the other by ``down``.
STOP_PHASES = (
    ("lws", "kwok", "kube-scheduler", "kube-controller-manager"),
    ("kube-apiserver",),
    ("etcd",),
)
#: Processes ``restart`` may stop and start again (none needs an environment of its own).
RESTARTABLE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
DEFAULT_NAME = "default"
#: kube-controller-manager's HorizontalPodAutoscaler sync period, in seconds.
HPA_SYNC_SECONDS = 2


class ClusterError(RuntimeError):
    """The cluster could not be started or a command against it failed."""


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def default_crd_dirs() -> list[Path]:
    """Our CRDs: ``TRITONLLM_CRDS`` (os.pathsep-separated) or the checkout's ``crds/`` directory."""
    env = os.environ.get("TRITONLLM_CRDS")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    checkout = Path(__file__).resolve().parents[2] / "crds"
    return [checkout] if checkout.is_dir() else []


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Ports:
    """Loopback ports of one cluster; reused across restarts when still free."""

    etcd_client: int = 0
    etcd_peer: int = 0
    apiserver: int = 0
    controller_manager: int = 0
    scheduler: int = 0
    lws_webhook: int = 0
    # The real node (kubelet on the bridge gateway, the rest on loopback).
    kubelet: int = 0
    kubelet_healthz: int = 0
    proxy_healthz: int = 0
    proxy_metrics: int = 0
    coredns_health: int = 0
    coredns_ready: int = 0

    def allocate(self) -> None:
        taken: set[int] = set()
        for name in self.__dataclass_fields__:
            port = getattr(self, name)
            while not port or port in taken or not _port_free(port):
                port = _free_port()
            taken.add(port)
            setattr(self, name, port)


@dataclass
class ProcessState:
    name: str
    pid: int
    argv: list[str]
    log: str


@dataclass
class ClusterStatus:
    """What ``status`` reports."""

    name: str
    state_dir: Path
    running: bool
    server: str
    processes: dict[str, tuple[int, bool]] = field(default_factory=dict)
    listeners: list[procs.Listener] = field(default_factory=list)


class LocalCluster:
    """One local cluster, identified by its state directory."""

    def __init__(
        self,
        name: str = DEFAULT_NAME,
        state_dir: Path | None = None,
        crd_dirs: Sequence[Path] | None = None,
        nodes: Sequence[NodeSpec] = DEFAULT_NODES,
        progress: Progress = _stderr,
        real_node: bool = False,
    ) -> None:
        self.name = name
        #: Start a real node (kubelet, containerd, ...) beside the kwok nodes (see realnode.py).
        self.real_node = real_node
        self._processes: dict[str, ProcessState] = {}
        self._deadline = 0.0
        #: Host changes ``down`` could not undo (empty after a clean teardown).
        self.host_problems: list[str] = []
        #: Image references pushed to the local registry by the last ``up`` (name -> reference).
        self.images: dict[str, str] = {}
        self.state_dir = (state_dir or cache_root() / "cluster" / name).resolve()
        self.crd_dirs = list(default_crd_dirs() if crd_dirs is None else crd_dirs)
        self.nodes = tuple(nodes)
        self.progress = progress
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        #: Errors from installing the project's CRDs during the last ``up`` (see install_crds).
        self.crd_errors: list[str] = []
        self._t0 = time.monotonic()

    # ---- paths -------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def pki(self) -> Pki:
        return Pki(self.state_dir / "pki")

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def _state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def _run_dir(self) -> Path:
        return self.state_dir / "run"

    def _load_state(self) -> tuple[Ports, dict[str, ProcessState]]:
        try:
            data = json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            return Ports(), {}
        ports = Ports(**data.get("ports", {}))
        processes = {k: ProcessState(**v) for k, v in data.get("processes", {}).items()}
        return ports, processes

    def _save_state(self, ports: Ports, processes: dict[str, ProcessState]) -> None:
        data = {"ports": ports.__dict__, "processes": {k: v.__dict__ for k, v in processes.items()}}
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self._state_file)

    # ---- queries -----------------------------------------------------------------------------

    def _ours(self, proc: ProcessState) -> bool:
        """The recorded pid still runs the recorded binary (guards against pid reuse)."""
        argv = procs.cmdline(proc.pid)
        return bool(argv) and argv[0] == proc.argv[0] and procs.alive(proc.pid)

    def pids(self) -> dict[str, int]:
        """Live processes of this cluster, by component."""
        _, processes = self._load_state()
        return {name: p.pid for name, p in processes.items() if self._ours(p)}

    def stray_processes(self) -> dict[int, list[str]]:
        """Live processes running a cached binary with arguments inside this state directory."""
        bin_root = str(cache_root() / "bin") + os.sep
        needle = str(self.state_dir) + os.sep
        return {
            pid: argv
            for pid, argv in procs.processes_matching(needle).items()
            if argv[0].startswith(bin_root)
        }

    def server(self) -> str:
        ports, _ = self._load_state()
        return f"https://127.0.0.1:{ports.apiserver}"

    def is_running(self) -> bool:
        """All processes alive and the API server ready."""
        _, processes = self._load_state()
        expected = set(PROCESS_ORDER) | (set(realnode.PROCESSES) if self.real_node else set())
        if set(processes) != expected or not all(self._ours(p) for p in processes.values()):
            return False
        return self._apiserver_ready()

    def has_real_node(self) -> bool:
        """The running cluster has a real node (whatever this object was created with)."""
        return "kubelet" in self.pids()

    def status(self) -> ClusterStatus:
        _, processes = self._load_state()
        table = {name: (p.pid, self._ours(p)) for name, p in processes.items()}
        live = [pid for pid, ok in table.values() if ok]
        return ClusterStatus(
            name=self.name,
            state_dir=self.state_dir,
            running=self.is_running(),
            server=self.server(),
            processes=table,
            listeners=procs.listeners(procs.descendants(live)),
        )

    # ---- kubectl and client ------------------------------------------------------------------

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run the cached kubectl on this cluster; raise ClusterError on failure if ``check``."""
        cmd = [str(KUBERNETES.path("kubectl")), f"--kubeconfig={self.kubeconfig}", *args]
        proc = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}): "
                f"{proc.stderr.strip() or proc.stdout.strip()}"
            )
        return proc

    def kubectl_json(self, *args: str) -> Any:
        """``kubectl ... -o json`` parsed."""
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(
        self,
        objects: Sequence[dict[str, Any]] | str,
        *,
        namespace: str | None = None,
        server_side: bool = True,
    ) -> str:
        """Apply objects (dicts or YAML text), server-side by default; return kubectl's output."""
        text = objects if isinstance(objects, str) else yaml.safe_dump_all(list(objects))
        args = ["apply", "-f", "-"]
        if namespace:
            args += ["-n", namespace]
        if server_side:
            args += ["--server-side", "--force-conflicts", "--field-manager=tritonllm-cluster"]
        return self.kubectl(*args, input=text).stdout

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this cluster."""
        from kubernetes import config as k8s_config  # imported lazily: heavy and only for callers

        return k8s_config.new_client_from_config(config_file=str(self.kubeconfig))

    # ---- lifecycle ---------------------------------------------------------------------------

    def up(self, *, build: bool = True, timeout: float = 180) -> Path:
        """Start the cluster (building missing binaries first) and return the kubeconfig path.

        A no-op when it already runs; a partly running cluster is stopped and started afresh.
        """
        if build:
            ensure_all(COMPONENTS if self.real_node else CONTROL_PLANE, self.progress)
        else:
            # Only what the cluster runs; helm is built for the chart tests but not needed here.
            missing = {c.key: c.missing() for c in (KUBERNETES, ETCD, KWOK, LWS) if c.missing()}
            if missing:
                raise ClusterError(
                    f"binaries missing (run `tritonllm cluster up` to build): {missing}"
                )
        if self.is_running():
            self.progress(f"cluster {self.name!r} already running: {self.server()}")
            return self.kubeconfig
        if self.pids() or (self.state_dir / "host.json").exists():
            self.down()
        node = None
        if self.real_node:
            node = realnode.RealNode(self, Ports())
            try:
                node.preflight()
            except (realnode.NodeError, HostError) as exc:
                raise ClusterError(str(exc)) from exc
        start = self._t0 = time.monotonic()
        deadline = start + timeout
        for d in (self.state_dir, self.logs_dir, self._run_dir):
            d.mkdir(parents=True, exist_ok=True)
        pki = ensure_pki(self.state_dir / "pki")
        ports, _ = self._load_state()
        ports.allocate()
        processes: dict[str, ProcessState] = {}
        self._processes = processes
        self._save_state(ports, processes)
        self._write_kubeconfig(pki, ports)
        try:
            self._start_etcd(ports, processes)
            self._wait(lambda: self._etcd_healthy(ports), "etcd health", deadline, processes)
            self._start_apiserver(pki, ports, processes)
            self._wait(self._apiserver_ready, "kube-apiserver /readyz", deadline, processes)
            self._apply_files([LWS.path(f) for f in LWS_CRD_FILES])
            for err in self.install_crds():
                self.progress(f"warning: CRD not installed: {err}")
            self.apply([node_manifest(n, i) for i, n in enumerate(self.nodes)])
            self._mark("CRDs and nodes applied")
            self._start_controllers(pki, ports, processes)
            self._wait_crds_established(deadline)
            self._mark("CRDs established")
            self._start_lws(pki, ports, processes)
            self._wait(
                lambda: self._tls_listening(ports.lws_webhook),
                "LWS webhook server",
                deadline,
                processes,
            )
            self.apply(lws_webhooks(ports.lws_webhook, pki.ca_crt.read_bytes()))
            self._mark("LWS webhooks registered")
            self._wait(self._nodes_ready, "nodes Ready (kwok)", deadline, processes)
            self._wait(
                lambda: self._healthz(ports.controller_manager) and self._healthz(ports.scheduler),
                "controller-manager and scheduler /healthz",
                deadline,
                processes,
            )
            self._wait(
                self._default_sa, "default ServiceAccount (controller-manager)", deadline, processes
            )
            if node is not None:
                node.ports = ports
                self._deadline = deadline
                node.start_registry()
                self._push_images()
                self._deadline = max(deadline, time.monotonic() + timeout)
                node.start(SERVICE_CIDR)
                self._mark(f"real node {realnode.NODE_NAME} Ready")
        except BaseException:
            self.progress(f"cluster {self.name!r} failed to start; logs in {self.logs_dir}")
            self.down()
            raise
        self.progress(
            f"cluster {self.name!r} up in {time.monotonic() - start:.1f}s: {self.server()}"
        )
        return self.kubeconfig

    def down(self, *, purge: bool = False) -> list[int]:
        """Stop every process of this cluster; return pids that survived (should be empty)."""
        _, processes = self._load_state()
        ours = [p for p in processes.values() if self._ours(p)]
        left: list[int] = []
        real = (self.state_dir / "host.json").exists() or "kubelet" in processes
        # The real node first: its processes, then its containers (and shims), then containerd
        # and the registry; host changes are undone once nothing uses them.
        if real:
            left += procs.terminate([p.pid for p in ours if p.name in realnode.STOP_FIRST], 10)
            node = realnode.RealNode(self, Ports())
            node.kill_containers()
            left += procs.terminate([p.pid for p in ours if p.name in realnode.STOP_LAST], 10)
            left += procs.terminate(self.stray_processes(), timeout=5)  # containerd shims
            self.host_problems = node.cleanup()
            for problem in self.host_problems:
                self.progress(f"warning: {problem}")
        # In dependency order: the API server's graceful shutdown writes to etcd (it deletes its
        # lease) and hangs when etcd is gone, so clients go first, then the API server, then etcd.
        for phase in STOP_PHASES:
            left += procs.terminate([p.pid for p in ours if p.name in phase], timeout=10)
        for pid in [p.pid for p in ours]:
            child = self._children.pop(pid, None)
            if child is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=1)
        # Anything else still running from this state dir (e.g. a crashed `up` lost its record).
        strays = self.stray_processes()
        left += procs.terminate(strays)
        if self._state_file.exists():
            ports, _ = self._load_state()
            self._save_state(ports, {})
        if purge and not left:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        if ours or strays:
            self.progress(f"cluster {self.name!r} stopped ({len(ours) + len(strays)} processes)")
        return left

    def restart(self, component: str, *, down_for: float = 0.0, timeout: float = 60) -> float:
        """Kill one control-plane process (SIGKILL, as a crash), keep it stopped ``down_for``
        seconds, start it again
        with the same command line and wait until it serves; return the seconds it was gone.

        For fault tests: etcd's data and every other process are kept, so the cluster carries
        on where it was (the API server's watch cache starts afresh, as after a real restart).
        """
        if component not in RESTARTABLE:
            raise ClusterError(f"cannot restart {component!r}; one of {sorted(RESTARTABLE)}")
        ports, processes = self._load_state()
        proc = processes.get(component)
        if proc is None:
            raise ClusterError(f"cluster {self.name!r} has no {component}")
        start = time.monotonic()
        left = procs.terminate([proc.pid], timeout=0) if self._ours(proc) else []
        if left:
            raise ClusterError(f"{component} (pid {proc.pid}) did not stop")
        old = self._children.pop(proc.pid, None)
        if old is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                old.wait(timeout=1)
        time.sleep(down_for)
        # A killed process's listening socket closes a moment after it is gone.
        port = {"kube-apiserver": ports.apiserver}.get(component)
        deadline = time.monotonic() + 15
        while port and not procs.listen_free(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        self._processes = processes
        self._spawn(component, proc.argv, processes)
        ready = {
            "kube-apiserver": self._apiserver_ready,
            "kube-controller-manager": lambda: self._healthz(ports.controller_manager),
            "kube-scheduler": lambda: self._healthz(ports.scheduler),
            "kwok": lambda: True,
        }[component]
        self._t0 = start
        self._wait(ready, f"{component} back", time.monotonic() + timeout, processes)
        return time.monotonic() - start

    # ---- starting processes ------------------------------------------------------------------

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start a process of this cluster (recorded in state.json, stopped by ``down``)."""
        self._spawn(name, argv, self._processes, env)

    def wait_for(self, probe: Callable[[], bool], what: str) -> None:
        """Wait for ``probe`` within the current ``up`` deadline, failing if a process died."""
        self._wait(probe, what, self._deadline, self._processes)

    def _push_images(self) -> None:
        """Images the real node needs (pause, busybox helper, ...) into the local registry."""
        from tritonllm_dev import images  # lazy: image builds are only for real nodes

        try:
            self.images = images.ensure_images(realnode.REGISTRY_ADDR, self.progress)
        except images.ImageError as exc:
            raise ClusterError(str(exc)) from exc

    def _spawn(
        self,
        name: str,
        argv: list[str],
        processes: dict[str, ProcessState],
        env: dict[str, str] | None = None,
    ) -> None:
        log = self.logs_dir / f"{name}.log"
        # a new log per start, the earlier ones kept as <name>.log.1... (procs.rotate)
        header = f"==== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode()
        child = procs.spawn(argv, log, cwd=self._run_dir, env=env, header=header)
        self._children[child.pid] = child
        processes[name] = ProcessState(name, child.pid, argv, str(log))
        ports, _ = self._load_state()
        self._save_state(ports, processes)

    def _start_etcd(self, ports: Ports, processes: dict[str, ProcessState]) -> None:
        data = self.state_dir / "etcd"
        shutil.rmtree(data, ignore_errors=True)  # a fresh cluster on every start
        peer = f"http://127.0.0.1:{ports.etcd_peer}"
        client = f"http://127.0.0.1:{ports.etcd_client}"
        self._spawn(
            "etcd",
            [
                str(ETCD.path("etcd")),
                "--name=tritonllm",
                f"--data-dir={data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=tritonllm={peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
                "--quota-backend-bytes=4294967296",
                "--auto-compaction-retention=1",
                "--log-level=warn",
            ],
            processes,
        )

    def _start_apiserver(self, pki: Pki, ports: Ports, processes: dict[str, ProcessState]) -> None:
        self._spawn(
            "kube-apiserver",
            [
                str(KUBERNETES.path("kube-apiserver")),
                f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports.apiserver}",
                f"--tls-cert-file={pki.apiserver_crt}",
                f"--tls-private-key-file={pki.apiserver_key}",
                f"--client-ca-file={pki.ca_crt}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                f"--cert-dir={self._run_dir / 'apiserver'}",
                "--endpoint-reconciler-type=none",
                # logs/exec/port-forward reach the real node's kubelet by its IP (never by a
                # name looked up in the host's DNS), authenticated with the admin certificate.
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={pki.admin_crt}",
                f"--kubelet-client-key={pki.admin_key}",
                # The aggregation layer (the autoscaling tier's metrics APIs run on the host): the
                # client certificate it proxies with, and whom the aggregated servers trust for
                # the user in the request headers (published in kube-system's
                # extension-apiserver-authentication ConfigMap).
                f"--proxy-client-cert-file={pki.front_proxy_client_crt}",
                f"--proxy-client-key-file={pki.front_proxy_client_key}",
                f"--requestheader-client-ca-file={pki.front_proxy_ca_crt}",
                f"--requestheader-allowed-names={FRONT_PROXY_CN}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--v=1",
            ],
            processes,
        )

    def _component_flags(self, port: int, name: str) -> list[str]:
        kc = str(self.kubeconfig)
        return [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self._run_dir / name}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ]

    def _start_controllers(
        self, pki: Pki, ports: Ports, processes: dict[str, ProcessState]
    ) -> None:
        self._spawn(
            "kube-controller-manager",
            [
                str(KUBERNETES.path("kube-controller-manager")),
                *self._component_flags(ports.controller_manager, "kube-controller-manager"),
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_crt}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--cluster-signing-cert-file={pki.ca_crt}",
                f"--cluster-signing-key-file={pki.ca_key}",
                "--use-service-account-credentials=false",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                # HorizontalPodAutoscalers (the product's and KEDA's) act within seconds
                # (default 15 s), so the autoscaling tests wait little.
                f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_SECONDS}s",
            ],
            processes,
        )
        self._spawn(
            "kube-scheduler",
            [
                str(KUBERNETES.path("kube-scheduler")),
                *self._component_flags(ports.scheduler, "kube-scheduler"),
            ],
            processes,
        )
        stages = resources.files("tritonllm_dev").joinpath("kwok-stages.yaml").read_text()
        kwok_config = self._run_dir / "kwok.yaml"
        kwok_config.write_text(stages)
        self._spawn(
            "kwok",
            [
                str(KWOK.path("kwok")),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={kwok_config}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--cidr={POD_CIDR}",
                "--node-ip=10.1.0.1",
                "--node-lease-duration-seconds=40",
            ],
            processes,
        )

    def _start_lws(self, pki: Pki, ports: Ports, processes: dict[str, ProcessState]) -> None:
        config = self._run_dir / "lws.yaml"
        config.write_text(yaml.safe_dump(lws_configuration(ports.lws_webhook, pki.webhook_dir)))
        self._spawn(
            "lws",
            [
                str(LWS.path("lws")),
                f"--config={config}",
                f"--kubeconfig={self.kubeconfig}",
                "--zap-log-level=info",
            ],
            processes,
            env={"KUBECONFIG": str(self.kubeconfig)},
        )

    def _write_kubeconfig(self, pki: Pki, ports: Ports) -> None:
        context = f"tritonllm-{self.name}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": context,
                    "cluster": {
                        "server": f"https://127.0.0.1:{ports.apiserver}",
                        "certificate-authority": str(pki.ca_crt),
                    },
                }
            ],
            "users": [
                {
                    "name": context,
                    "user": {
                        "client-certificate": str(pki.admin_crt),
                        "client-key": str(pki.admin_key),
                    },
                }
            ],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
        }
        tmp = self.kubeconfig.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(config))
        tmp.chmod(0o600)
        tmp.replace(self.kubeconfig)

    def _apply_files(self, files: Sequence[Path]) -> None:
        args = ["apply", "--server-side", "--force-conflicts", "--field-manager=tritonllm-cluster"]
        for f in files:
            args += ["-f", str(f)]
        self.kubectl(*args)

    def project_crd_files(self) -> list[Path]:
        """Every YAML file in the configured CRD directories (``crds/`` of the checkout)."""
        files: list[Path] = []
        for d in self.crd_dirs:
            files += sorted(p for p in Path(d).glob("*.y*ml") if p.is_file())
        return files

    def install_crds(self) -> list[str]:
        """(Re)apply the project's CRDs; return one error message per file the server refused.

        A refused CRD does not stop ``up``: the cluster is still useful, and the CRD admission
        tests report the refusal precisely. ``up`` prints the errors and keeps them in
        ``crd_errors``.
        """
        errors: list[str] = []
        for f in self.project_crd_files():
            try:
                self._apply_files([f])
            except ClusterError as exc:
                errors.append(f"{f.name}: {exc}")
        self.crd_errors = errors
        return errors

    def wait_established(
        self, *crds: str, timeout: float = 180, interval: float = 0.3
    ) -> None:
        """Wait until each named CRD is Established. (`kubectl wait --for=condition=...` fails at
        once on a CRD whose status has no conditions yet, right after it is created.) Giving up,
        it names each CRD still pending with its conditions (or that it does not exist)."""
        deadline = time.monotonic() + timeout
        pending = list(crds)
        seen: dict[str, dict[str, Any]] = {}
        while True:
            out = self.kubectl(
                "get", "crd", *pending, "-o", "json", "--ignore-not-found", check=False
            )
            if out.returncode == 0:
                seen = crd_objects(out.stdout)
                pending = [name for name in pending if not crd_established(seen.get(name))]
            if not pending:
                return
            if time.monotonic() > deadline:
                states = "; ".join(f"{name}: {describe_crd(seen.get(name))}" for name in pending)
                failed = f" (kubectl: {out.stderr.strip()})" if out.returncode else ""
                raise ClusterError(
                    f"CRDs not Established within {timeout:.0f}s: {states}{failed}"
                )
            time.sleep(interval)

    def _wait_crds_established(self, deadline: float) -> None:
        remaining = max(1, int(deadline - time.monotonic()))
        self.kubectl(
            "wait", "--for=condition=Established", "crd", "--all", f"--timeout={remaining}s"
        )

    # ---- readiness probes --------------------------------------------------------------------

    def _mark(self, what: str) -> None:
        self.progress(f"  [{time.monotonic() - self._t0:5.1f}s] {what}")

    def _wait(
        self,
        probe: Callable[[], bool],
        what: str,
        deadline: float,
        processes: dict[str, ProcessState],
    ) -> None:
        while True:
            for proc in processes.values():
                if not procs.alive(proc.pid):
                    raise ClusterError(
                        f"{proc.name} exited while waiting for {what}:\n{_tail(Path(proc.log))}"
                    )
            try:
                if probe():
                    self._mark(what)
                    return
            except (OSError, ClusterError, ValueError, ssl.SSLError):
                pass
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what} (logs in {self.logs_dir})")
            time.sleep(0.2)

    def _etcd_healthy(self, ports: Ports) -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{ports.etcd_client}/health", timeout=2) as r:
            return bool(json.loads(r.read()).get("health") == "true")

    def _apiserver_ready(self) -> bool:
        ports, _ = self._load_state()
        if not ports.apiserver or not self.pki.complete():
            return False
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_crt))
        ctx.load_cert_chain(str(self.pki.admin_crt), str(self.pki.admin_key))
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{ports.apiserver}/readyz", timeout=2, context=ctx
            ) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    @staticmethod
    def _healthz(port: int) -> bool:
        ctx = ssl._create_unverified_context()  # self-signed serving certs of KCM/scheduler
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/healthz", timeout=2, context=ctx
            ) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    @staticmethod
    def _tls_listening(port: int) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    def _nodes_ready(self) -> bool:
        nodes = self.kubectl_json("get", "nodes")["items"]
        ready = {
            n["metadata"]["name"]
            for n in nodes
            for c in n.get("status", {}).get("conditions", [])
            if c["type"] == "Ready" and c["status"] == "True"
        }
        return {n.name for n in self.nodes} <= ready

    def _default_sa(self) -> bool:
        return (
            self.kubectl(
                "get", "serviceaccount", "default", "-n", "default", check=False
            ).returncode
            == 0
        )


def crd_objects(kubectl_json: str) -> dict[str, dict[str, Any]]:
    """The CRDs in the output of ``kubectl get crd NAME... -o json``, by name. kubectl prints a
    List for several names but the object itself for one, so both are read (reading only a
    List's items once made the wait for the last pending CRD of a set never end)."""
    if not kubectl_json.strip():  # --ignore-not-found, none found
        return {}
    doc = json.loads(kubectl_json)
    items = (doc.get("items") or []) if doc.get("kind") == "List" else [doc]
    return {item["metadata"]["name"]: item for item in items}


def _conditions(crd: dict[str, Any]) -> list[dict[str, Any]]:
    return list((crd.get("status") or {}).get("conditions") or [])


def crd_established(crd: dict[str, Any] | None) -> bool:
    return crd is not None and any(
        c.get("type") == "Established" and c.get("status") == "True" for c in _conditions(crd)
    )


def describe_crd(crd: dict[str, Any] | None) -> str:
    """Why a CRD is not Established, as the API server says: its conditions, its deletion."""
    if crd is None:
        return "not found"
    parts = [
        f"{c.get('type')}={c.get('status')}"
        + (f" ({c.get('reason')}: {c.get('message')})" if c.get("reason") else "")
        for c in _conditions(crd)
    ]
    deleting = crd.get("metadata", {}).get("deletionTimestamp")
    if deleting:
        parts.append(f"being deleted since {deleting}")
    return ", ".join(parts) or "no conditions yet"


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


@contextlib.contextmanager
def running(cluster: LocalCluster, *, stop: bool | None = None) -> Iterator[LocalCluster]:
    """Start ``cluster`` unless it runs; then stop it if this call started it (or ``stop``)."""
    started = not cluster.is_running()
    if started:
        cluster.up()
    try:
        yield cluster
    finally:
        if stop if stop is not None else started:
            cluster.down()
