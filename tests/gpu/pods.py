"""Two "pods" on one GPU host: the multi-node launch as a LeaderWorkerSet group runs it
(scripts/gpu-check --pods 2, docs/gpu.md).

Each pod is a network namespace on a bridge (like a node's pod network: the bridge holds the
gateway address in the host's namespace, each pod a veth named eth0), a UTS namespace whose
hostname is the pod's name, a mount namespace with its own /dev/shm (and, for the leader, its own
MPI working directory), an /etc/hosts that resolves the group's stable DNS names (what the
headless Service of the group gives the pods) and an /etc/passwd that names the pod user. The
pods' processes run as that user (UID 1000, as `spec.podTemplate.runAsUser` of a multi-node CR)
with every capability dropped and no_new_privs, as the rendered pods run.

The worker runs `tritonllm launch --mode worker` (sshd on 2222 with the deployment's keys), the
leader `tritonllm launch --mode leader` with LWS_LEADER_ADDRESS and LWS_GROUP_SIZE set as
LeaderWorkerSet sets them. Each pod's CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES name its own
GPUs (pod p of a group with g GPUs per pod: GPUs p*g .. p*g+g-1).

The pure helpers (names, addresses, `ip` commands, files, argv, rank map) are unit-tested in
tests/unit/test_gpu_check.py; `pod_network` and `run_pods` need root and run on the GPU host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.helpers import cmdline, proc_status
from tests.triton.stack import (
    STARTUP_SECONDS,
    OnGpus,
    Server,
    TritonInstall,
    is_ready,
    launch_env,
    stack_repository,
)
from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.render import render_all
from tritonllm.triton.launch import LaunchSpec, MpiSsh, mpirun_argv

POD_UID = 1000  # spec.podTemplate.runAsUser of the multi-node example
SUBNET = "10.213.7"  # /24 of the pods' bridge: .1 the host side, .2 the leader, .3 ...
NAMESPACE = "gpu-check"  # the Kubernetes namespace the DNS names pretend


@dataclasses.dataclass(frozen=True)
class Pod:
    name: str  # hostname = pod name (LWS: <lws>-<group>, workers <lws>-<group>-<index>)
    fqdn: str  # its stable DNS name: <pod>.<lws>-<group>.<namespace>
    address: str
    netns: str
    veth: str  # the host end of its veth pair
    devices: tuple[int, ...]  # the GPU indices this pod sees

    @property
    def visible(self) -> str:
        return ",".join(map(str, self.devices))


@dataclasses.dataclass(frozen=True)
class Group:
    bridge: str
    gateway: str
    pods: tuple[Pod, ...]

    @property
    def leader(self) -> Pod:
        return self.pods[0]

    @property
    def workers(self) -> tuple[Pod, ...]:
        return self.pods[1:]


def make_group(lws: str, size: int, gpus_per_pod: int, *, tag: str = "0",
               subnet: str = SUBNET, wrap: int | None = None) -> Group:
    """A group of `size` pods named as LeaderWorkerSet names group 0 of `lws`, pod p seeing GPUs
    p*g .. p*g+g-1 (g = gpus_per_pod). With `wrap` (the host's GPU count, --share-gpus) the
    indices wrap around: pods share GPUs, which only a test of the pods' NCCL traffic wants.
    On a host with fewer GPUs and no wrap, only the `cpu` stack can run (its ranks compute on
    the CPU)."""
    leader = f"{lws}-0"
    pods = []
    for i in range(size):
        name = leader if i == 0 else f"{leader}-{i}"
        pods.append(Pod(name=name, fqdn=f"{name}.{leader}.{NAMESPACE}",
                        address=f"{subnet}.{i + 2}", netns=f"tllm-gc{tag}-{i}",
                        veth=f"tgc{tag}v{i}",
                        devices=tuple(d % (wrap or d + 1) for d in
                                      range(i * gpus_per_pod, (i + 1) * gpus_per_pod))))
    return Group(bridge=f"tgc{tag}br", gateway=f"{subnet}.1", pods=tuple(pods))


def up_commands(group: Group) -> list[list[str]]:
    """`ip` commands that build the pod network: a bridge with the gateway address, one network
    namespace per pod with a veth (eth0 inside, its address, a default route via the bridge)."""
    cmds = [["ip", "link", "add", group.bridge, "type", "bridge"],
            ["ip", "addr", "add", f"{group.gateway}/24", "dev", group.bridge],
            ["ip", "link", "set", group.bridge, "up"]]
    for pod in group.pods:
        peer = f"{pod.veth}p"
        cmds += [["ip", "netns", "add", pod.netns],
                 ["ip", "link", "add", pod.veth, "type", "veth", "peer", "name", peer],
                 ["ip", "link", "set", peer, "netns", pod.netns],
                 ["ip", "-n", pod.netns, "link", "set", peer, "name", "eth0"],
                 ["ip", "-n", pod.netns, "addr", "add", f"{pod.address}/24", "dev", "eth0"],
                 ["ip", "-n", pod.netns, "link", "set", "eth0", "up"],
                 ["ip", "-n", pod.netns, "link", "set", "lo", "up"],
                 ["ip", "-n", pod.netns, "route", "add", "default", "via", group.gateway],
                 ["ip", "link", "set", pod.veth, "master", group.bridge],
                 ["ip", "link", "set", pod.veth, "up"]]
    return cmds


def down_commands(group: Group) -> list[list[str]]:
    """Deleting a namespace deletes its veth pair; then the bridge."""
    return [*(["ip", "netns", "del", pod.netns] for pod in group.pods),
            ["ip", "link", "del", group.bridge]]


def hosts_file(group: Group) -> str:
    """/etc/hosts of every pod: the group's stable names (the headless Service's records)."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{pod.address}\t{pod.fqdn} {pod.name}" for pod in group.pods]
    return "\n".join(lines) + "\n"


def passwd_file(host_passwd: str, uid: int, home: str) -> str:
    """The host's /etc/passwd with `uid` named as the Triton image names it (home: `home`)."""
    lines = [ln for ln in host_passwd.splitlines() if ln.split(":")[2:3] != [str(uid)]]
    return "\n".join([*lines, f"triton-server:x:{uid}:{uid}::{home}:/bin/sh"]) + "\n"


# Run as root inside the pod's network namespace (ip netns exec binds /etc/netns/<ns>/* over
# /etc): hostname, private /dev/shm, the leader's private MPI working directory, then the
# command as the pod user with no capabilities.
_ENTER = """set -e
echo "$1" >/proc/sys/kernel/hostname; uid="$2"; workdir="$3"; shift 3
mount -t tmpfs -o size=2g,mode=1777 shm /dev/shm
if [ -n "$workdir" ]; then
  mkdir -p "$workdir"
  mount -t tmpfs -o size=16m,mode=0700,uid="$uid",gid="$uid" mpi "$workdir"
fi
[ "$uid" = 0 ] && exec "$@"  # local trials only (root keeps its capabilities)
exec setpriv --reuid="$uid" --regid="$uid" --clear-groups --inh-caps=-all --bounding-set=-all \
  --no-new-privs -- "$@"
"""


def pod_argv(pod: Pod, argv: Sequence[str], *, uid: int = POD_UID,
             mpi_workdir: str = "") -> list[str]:
    """`argv` as a process of `pod`: its network, UTS and mount namespaces, the pod user."""
    return ["ip", "netns", "exec", pod.netns, "unshare", "--uts", "--mount",
            "--propagation", "private", "--", "sh", "-c", _ENTER, "pod", pod.name, str(uid),
            mpi_workdir, *argv]


# The GPU host's own settings that no pod of a group has: its image sets OMPI_MCA_plm=isolated
# (mpirun starts ranks on this host only), with which the leader's mpirun refuses the hostfile's
# second host ("All nodes which are allocated for this job are already filled").
HOST_ONLY = ("OMPI_MCA_plm",)


def pod_env(base: Mapping[str, str], group: Group, pod: Pod, home: str) -> dict[str, str]:
    """The container environment of `pod`: the pod template's (same in every pod), its own GPUs,
    what LeaderWorkerSet injects."""
    env = {k: v for k, v in base.items()
           if not k.startswith(("LWS_", "SSH_")) and k not in HOST_ONLY}
    return env | {
        "CUDA_VISIBLE_DEVICES": pod.visible, "NVIDIA_VISIBLE_DEVICES": pod.visible,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "HOME": home, "HOSTNAME": pod.name,
        "LWS_LEADER_ADDRESS": group.leader.fqdn, "LWS_GROUP_SIZE": str(len(group.pods)),
        "LWS_WORKER_INDEX": str(group.pods.index(pod)),
    }


# Open MPI's --display-map: a "Data for node: <host>" block per host, a line per rank in it.
_MAP_HOST = re.compile(r"Data for node: (\S+)")
_MAP_PROC = re.compile(r"Process rank: (\d+)")


def display_map(log: str) -> dict[int, str]:
    """Rank -> host from mpirun's --display-map output in the leader's log."""
    out: dict[int, str] = {}
    host = None
    for line in log.splitlines():
        if found := _MAP_HOST.search(line):
            host = found.group(1)
        elif (found := _MAP_PROC.search(line)) and host is not None:
            out[int(found.group(1))] = host
    return out


def rank_hosts(group: Group, per_pod: int) -> dict[int, str]:
    """Where each rank must run, named as the leader's hostfile names the hosts: the leader's
    hostname, then each worker's address (the login check's answer)."""
    hosts = [group.leader.name, *(pod.address for pod in group.workers)]
    return {p * per_pod + r: host for p, host in enumerate(hosts) for r in range(per_pod)}


def pod_placement_problems(lines: Sequence[Mapping[str, str]], group: Group, per_pod: int,
                           uuids: Mapping[int, str] | None, *, shared: bool = False
                           ) -> list[str]:
    """The stand-in's lines against the group: rank r in pod r // per_pod (its hostname), local
    rank r % per_pod; on GPUs (`uuids`: nvidia-smi index -> UUID) on cuda:<local rank>, that
    is the pod's own GPU devices[local rank], one GPU per rank (unless the pods are `shared`)."""
    problems = []
    world = len(group.pods) * per_pod
    ranks = sorted(int(line["rank"]) for line in lines)
    if ranks != list(range(world)):
        problems.append(f"stand-in ranks {ranks}, expected 0..{world - 1}")
    seen: dict[str, int] = {}
    for line in lines:
        rank = int(line["rank"])
        pod, local = group.pods[rank // per_pod], rank % per_pod
        if line.get("host") != pod.name:
            problems.append(f"rank {rank} ran on host {line.get('host')}, expected {pod.name}")
        if line.get("local_rank") != str(local):
            problems.append(f"rank {rank} has local rank {line.get('local_rank')}, "
                            f"expected {local}")
        if uuids is None:
            continue
        if line.get("device") != f"cuda:{local}":
            problems.append(f"rank {rank} on {line.get('device')}, expected cuda:{local}")
        uuid = line.get("uuid", "")
        if uuid in seen and not shared:
            problems.append(f"ranks {seen[uuid]} and {rank} share GPU {uuid}")
        seen[uuid] = rank
        if uuids.get(pod.devices[local]) != uuid:
            problems.append(f"rank {rank} runs on {uuid}, not on GPU {pod.devices[local]} of "
                            f"{pod.name} ({uuids.get(pod.devices[local])})")
    return problems


def launch_events(log: str, event: str) -> list[dict[str, str]]:
    """The fields of `tritonllm launch`'s `event=<event>` lines (logfmt, JSON-quoted values)."""
    out = []
    for line in log.splitlines():
        if "tritonllm launch " in line and f" event={event}" in line:
            with contextlib.suppress(ValueError):
                out.append(dict(f.split("=", 1) for f in shlex.split(line) if "=" in f))
    return out


def group_problems(log: str, group: Group, per_pod: int) -> dict[str, list[str]]:
    """What is wrong in the leader's log with the group's start: each worker's login check
    (its stable DNS name answered by its address), the hostfile (leader's hostname first, then
    the workers' addresses, slots = ranks per pod) and mpirun's rank map."""
    ready = {e.get("host"): e.get("address") for e in launch_events(log, "worker-ready")}
    login = [f"{w.fqdn}: logged in at {ready.get(w.fqdn)}, expected {w.address}"
             for w in group.workers if ready.get(w.fqdn) != w.address]
    hosts = [group.leader.name, *(w.address for w in group.workers)]
    files = launch_events(log, "hostfile")
    hostfile = [] if [(json.loads(e["hosts"]), e.get("slots")) for e in files] == [
        (hosts, str(per_pod))] else [f"hostfile lines {files}, expected {hosts} slots={per_pod}"]
    ranks, expected = display_map(log), rank_hosts(group, per_pod)
    rank_map = [] if ranks == expected else [f"rank map {ranks}, expected {expected}"]
    return {"login": login, "hostfile": hostfile, "rank map": rank_map}


# --- on the host (root) ----------------------------------------------------------------------


def _run(argv: Sequence[str]) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")


def pod_home(root: Path, pod: Pod) -> Path:
    return root / pod.name / "home"


@contextlib.contextmanager
def pod_network(group: Group, root: Path, uid: int = POD_UID) -> Iterator[Group]:
    """The pods' namespaces, bridge and /etc/netns files for as long as the block runs."""
    if os.geteuid() != 0:
        raise RuntimeError("--pods needs root (network namespaces, a bridge, mounts)")
    taken = subprocess.run(["ip", "-4", "route", "show", f"{group.gateway}/24"],
                           capture_output=True, text=True, check=False).stdout.strip()
    if taken:
        raise RuntimeError(f"{group.gateway}/24 is already routed here ({taken}): pick --subnet")
    host_passwd = Path("/etc/passwd").read_text()
    try:
        for argv in up_commands(group):
            _run(argv)
        for pod in group.pods:
            home = pod_home(root, pod)
            home.mkdir(parents=True, exist_ok=True)
            os.chown(home, uid, uid)
            etc = Path("/etc/netns") / pod.netns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file(group))
            (etc / "passwd").write_text(passwd_file(host_passwd, uid, str(home)))
        yield group
    finally:
        for argv in down_commands(group):
            with contextlib.suppress(RuntimeError):
                _run(argv)
        for pod in group.pods:
            shutil.rmtree(Path("/etc/netns") / pod.netns, ignore_errors=True)


def mount_secret(keys: Path, dest: Path) -> Path:
    """The MPI Secret's files as the kubelet mounts them: root-owned, 0440, group = the pod's
    fsGroup."""
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o755)
    for name in c.MPI_SSH_KEYS:
        shutil.copy(keys / name, dest / name)
        os.chown(dest / name, 0, POD_UID)
        (dest / name).chmod(0o440)
    return dest


def netns_inode(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def named_netns_inode(netns: str) -> int:
    return os.stat(f"/run/netns/{netns}").st_ino


def uid_of(pid: int) -> int:
    return int(proc_status(pid, "Uid").split()[0])  # the real uid


# --- the group's launch ---------------------------------------------------------------------


@dataclasses.dataclass
class PodsStack:
    """A running group: the leader's and the worker's `tritonllm launch` (tests.triton.stack's
    Stack, for two pods)."""

    server: Server  # rank 0, at the leader's address, production ports
    launch: subprocess.Popen[bytes]  # the leader's
    worker: subprocess.Popen[bytes]
    spec: LaunchSpec
    plan: dict[str, Any]
    log: Path  # the leader's (mpirun's output: every rank's, tagged)
    worker_log: Path
    ready_seconds: float
    group: Group
    uid: int

    def servers(self) -> dict[int, tuple[int, str]]:
        """Rank -> (pid, pod) of every rank's tritonserver, found by the pod's network namespace
        (the worker's ranks run under Open MPI's daemon, which leaves sshd's session)."""
        pods = {named_netns_inode(pod.netns): pod.name for pod in self.group.pods}
        out = {}
        for pid, argv in tritonservers():
            with contextlib.suppress(OSError):
                pod = pods.get(netns_inode(pid))
                rank = next((a for a in argv if a.startswith("--id=rank")), None)
                if pod is not None and rank is not None:
                    out[int(rank[len("--id=rank"):])] = (pid, pod)
        return out


def tritonservers() -> list[tuple[int, list[str]]]:
    """(pid, argv) of every tritonserver process on the host."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            argv = cmdline(int(entry.name))
            if argv[:1] and argv[0].endswith("/tritonserver"):
                out.append((int(entry.name), argv))
    return out


def pod_python() -> str:
    """An interpreter the pod user may run (a pyenv's under /root is not one)."""
    return "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def group_spec(plan: dict[str, Any], install: TritonInstall, repo: Path, *,
               gpus: bool) -> LaunchSpec:
    """The production LaunchSpec of a group (checked against the plan's argv) with only the
    binary, the repository and the backend directory adapted: each pod has its own network
    namespace, so rank 0 keeps the production ports and addresses."""
    spec = LaunchSpec(world_size=int(plan["worldSize"]), model_repository=plan["modelRepository"],
                      ssh=MpiSsh())
    assert mpirun_argv(spec) == plan["argv"], "the plan's argv is not mpirun_argv(LaunchSpec)"
    extra = (f"--backend-directory={install.backends}",)
    return dataclasses.replace(spec, tritonserver=str(install.tritonserver),
                               model_repository=str(repo),
                               extra_args=extra if gpus else (*extra, "--allow-gpu-metrics=false"))


def _stop(proc: subprocess.Popen[bytes], seconds: float) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


@contextlib.contextmanager
def run_pods(install: TritonInstall, dep: TritonLLMDeployment, root: Path, tokenizer: Path,
             pyz: Path, group: Group, keys: Path, *, on: OnGpus | None, env: Mapping[str, str],
             homes: Path, uid: int = POD_UID) -> Iterator[PodsStack]:
    """Render the group's plan, start the worker's then the leader's `tritonllm launch` in their
    pods (`homes`: pod_network's root), wait until rank 0 answers; SIGTERM to the leader (then
    the worker) on exit."""
    plan: dict[str, Any] = render_all(dep).launch_plan
    assert plan["podsPerGroup"] == len(group.pods) and plan["ssh"], plan
    repo, engine = stack_repository(dep, plan, root, tokenizer, on)
    spec = group_spec(plan, install, repo, gpus=on is not None)
    plan = {**plan, "modelRepository": str(repo), "engineDir": str(engine),
            "ssh": {**plan["ssh"], "keyDir": str(mount_secret(keys, root / "mpi-ssh"))},
            "argv": mpirun_argv(spec)}
    plan_path = root / "launch.json"
    plan_path.write_text(json.dumps(plan, indent=2))
    base = launch_env(install, gpus=on is not None) | dict(on.env if on else {}) | dict(env) | {
        "TRITONLLM_WORKER_WAIT_TIMEOUT": "60",
        "TRITONLLM_STANDIN_RENDEZVOUS": f"{group.leader.address}:29517"}
    command = [pod_python(), "-S", str(pyz), "launch", "--plan", str(plan_path), "--mode"]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = {pod.name: root / f"{pod.name}.log" for pod in group.pods}
    started = time.monotonic()
    for pod in reversed(group.pods):  # the workers first, as LWS starts them together
        mode = "leader" if pod is group.leader else "worker"
        home = pod_home(homes, pod)
        argv = pod_argv(pod, [*command, mode], uid=uid,
                        mpi_workdir=plan["ssh"]["workDir"] if mode == "leader" else "")
        with open(logs[pod.name], "wb") as out:
            procs[pod.name] = subprocess.Popen(
                argv, env=pod_env(base, group, pod, str(home)), stdout=out, cwd=home,
                stderr=subprocess.STDOUT, start_new_session=True)
    leader, worker = procs[group.leader.name], procs[group.workers[0].name]
    address = group.leader.address
    ports = plan["ports"]
    server = Server(f"{address}:{ports['http']}", f"{address}:{ports['grpc']}",
                    f"{address}:{ports['metrics']}", logs[group.leader.name])
    try:
        while not is_ready(server):
            if any(p.poll() is not None for p in procs.values()) or \
                    time.monotonic() > started + STARTUP_SECONDS:
                tails = {name: log.read_text(errors="replace")[-4000:]
                         for name, log in logs.items()}
                raise RuntimeError(f"the group did not become ready: {tails}")
            time.sleep(0.2)
        yield PodsStack(server, leader, worker, spec, plan, logs[group.leader.name],
                        logs[group.workers[0].name], time.monotonic() - started, group, uid)
    finally:
        _stop(leader, 60)
        for proc in procs.values():
            _stop(proc, 20)
