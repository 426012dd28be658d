"""What a real node changes on the host, and how ``down`` puts it back.

The real node's containers run on this machine, so the cluster touches the host in a few places.
Every change is made here, recorded in the node's state file and undone by ``down``:

- **cgroups**: the VM boots with hybrid cgroups (v1 controllers, a cgroup2 tree at
  ``/sys/fs/cgroup/unified`` that holds only ``hugetlb``). Decision: stay hybrid and run kubelet
  with ``failCgroupV1: false`` rather than switching the VM to pure cgroup v2, which would need a
  reboot with other kernel arguments and would change the host for every other program. The OCI
  runtime is runc (built here), which runs on this layout as it is; Debian's crun 1.8.1 would
  need ``hugetlb`` moved off the cgroup2 tree, and it also refuses containerd 2.4's runtime-spec
  1.2 bundles, so the layout is left untouched. Every pod cgroup lives under ``/<CGROUP_ROOT>``
  in each hierarchy; ``down`` kills what is left there and removes the directories.
- **network**: one bridge (``BRIDGE``, gateway ``GATEWAY`` of ``POD_SUBNET``) that the cluster
  creates and deletes; IP forwarding is switched on **for that bridge only**
  (``net.ipv4.conf.<bridge>.forwarding``), never globally; IPv6 is off on it. No masquerade and
  no route towards the outside are added. A ``raw``-table chain drops every packet that enters
  from the bridge unless it is addressed to the pod subnet or the Service range (checked before
  any NAT, so kube-proxy's rules cannot bypass it); ip6tables drops all IPv6 from the bridge.
- **mounts**: volumes, overlay snapshots and network namespaces are mounted under the cluster's
  state directory only; ``down`` unmounts whatever is still mounted there.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

#: The bridge the real node's pods attach to, its gateway address and subnet. Chosen away from
#: kwok's fake pod IPs (10.244.0.0/16) and the Service range (10.96.0.0/16).
BRIDGE = "tllm0"
POD_SUBNET = "10.88.0.0/24"
GATEWAY = "10.88.0.1"
GATEWAY_CIDR = "10.88.0.1/24"
#: Chain names of the confinement rules (``raw`` table of iptables and ip6tables).
CONFINE_CHAIN = "TRITONLLM-CONFINE"
# Filter-table chain that refuses what is still addressed to the Service range after kube-proxy's
# DNAT (a Service address with no rules yet, or none at all), from the host and from pods.
SERVICES_CHAIN = "TRITONLLM-SERVICES"
SERVICES_JUMPS = (("OUTPUT",), ("FORWARD",))
#: Parent cgroup of every pod of the real node (kubelet's ``cgroupRoot``).
CGROUP_ROOT = "tritonllm-node"
CGROUP_FS = Path("/sys/fs/cgroup")
#: The cgroup v1 controllers kubelet needs mounted.
NEEDED_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")
CNI_BIN_DIR = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")


class HostError(RuntimeError):
    """The host cannot run a real node; the message says what to fix, in one line."""


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise HostError(f"`{' '.join(argv)}` failed: {(proc.stderr or proc.stdout).strip()}")
    return proc


def check_host() -> None:
    """Raise HostError naming the first thing missing for a real node (and how to get it)."""
    if os.geteuid() != 0:
        raise HostError("a real node needs root (containers, bridges, iptables, cgroups)")
    apt = "apt-get install containernetworking-plugins iptables (the README commands do)"
    missing = [p for p in CNI_PLUGINS if not (CNI_BIN_DIR / p).is_file()]
    if missing:
        raise HostError(f"CNI plugins {missing} not in {CNI_BIN_DIR}: {apt}")
    for tool in ("iptables", "ip6tables", "ip"):
        if not shutil.which(tool):
            raise HostError(f"`{tool}` not on PATH: {apt} iproute2")
    absent = [c for c in NEEDED_CONTROLLERS if not (CGROUP_FS / c / "cgroup.procs").exists()]
    if absent:
        raise HostError(
            f"cgroup v1 controllers {absent} are not mounted under {CGROUP_FS}; kubelet needs "
            f"{list(NEEDED_CONTROLLERS)} (this VM boots with hybrid cgroups)"
        )


# ---- cgroups ---------------------------------------------------------------------------------


def _hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, named ones, and the unified v2 tree)."""
    out: list[Path] = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2"):
            out.append(Path(fields[1]))
    return out


def prepare_cgroups() -> None:
    """Create the pod cgroup root (kubelet's ``cgroupRoot``) in every hierarchy."""
    for hierarchy in _hierarchies():
        (hierarchy / CGROUP_ROOT).mkdir(exist_ok=True)


def _cgroup_dirs(hierarchy: Path) -> list[Path]:
    """Our cgroup directories in one hierarchy, deepest first."""
    root = hierarchy / CGROUP_ROOT
    if not root.is_dir():
        return []
    dirs = [Path(d) for d, _, _ in os.walk(root)]
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def cgroup_pids() -> set[int]:
    """Processes still inside the real node's cgroups (containers, shims' children)."""
    pids: set[int] = set()
    for hierarchy in _hierarchies():
        for d in _cgroup_dirs(hierarchy):
            with contextlib.suppress(OSError):
                pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
    return pids


def leftover_cgroups() -> list[Path]:
    return [h / CGROUP_ROOT for h in _hierarchies() if (h / CGROUP_ROOT).exists()]


def cleanup_cgroups() -> list[str]:
    """Kill what runs in our cgroups and remove them; return what could not be removed."""
    problems: list[str] = []
    for _ in range(50):
        pids = cgroup_pids()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    for hierarchy in _hierarchies():
        for d in _cgroup_dirs(hierarchy):
            for _ in range(20):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                problems.append(f"cgroup {d} could not be removed")
    return problems


# ---- mounts ----------------------------------------------------------------------------------


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first (from /proc/self/mountinfo)."""
    prefix = str(root).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(root) or point.startswith(prefix):
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_under(root: Path) -> list[str]:
    """Unmount everything below ``root`` (lazily if busy); return what is still mounted."""
    for _ in range(3):
        points = mounts_under(root)
        if not points:
            return []
        for point in points:
            if _run("umount", point, check=False).returncode != 0:
                _run("umount", "-l", point, check=False)
    return mounts_under(root)


# ---- network ---------------------------------------------------------------------------------


def _confine_rules(allowed: Iterable[str]) -> list[list[str]]:
    rules = [["-d", cidr, "-j", "RETURN"] for cidr in allowed]
    return [*rules, ["-j", "DROP"]]


def setup_network(service_cidr: str) -> None:
    """Create the bridge and the confinement rules (idempotent)."""
    if _run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
    addrs = _run("ip", "-4", "addr", "show", "dev", BRIDGE).stdout
    if GATEWAY_CIDR not in addrs:
        _run("ip", "addr", "add", GATEWAY_CIDR, "dev", BRIDGE)
    _sysctl(f"net/ipv6/conf/{BRIDGE}/disable_ipv6", "1")
    _sysctl(f"net/ipv4/conf/{BRIDGE}/forwarding", "1")
    _run("ip", "link", "set", BRIDGE, "up")
    install_confinement(service_cidr)


def _sysctl(key: str, value: str) -> None:
    path = Path("/proc/sys") / key
    try:
        path.write_text(value)
    except OSError as exc:
        raise HostError(f"cannot set {key.replace('/', '.')}={value}: {exc}") from exc


def install_confinement(service_cidr: str) -> None:
    """(Re)write the raw-table chains that drop pod traffic leaving the cluster's own ranges."""
    for tool, rules in (
        ("iptables", _confine_rules([POD_SUBNET, service_cidr])),
        ("ip6tables", [["-j", "DROP"]]),
    ):
        if _run(tool, "-t", "raw", "-n", "-L", CONFINE_CHAIN, check=False).returncode != 0:
            _run(tool, "-t", "raw", "-N", CONFINE_CHAIN)
        _run(tool, "-t", "raw", "-F", CONFINE_CHAIN)
        for rule in rules:
            _run(tool, "-t", "raw", "-A", CONFINE_CHAIN, *rule)
        jump = ["PREROUTING", "-i", BRIDGE, "-j", CONFINE_CHAIN]
        if _run(tool, "-t", "raw", "-C", *jump, check=False).returncode != 0:
            _run(tool, "-t", "raw", "-I", *jump)
    install_service_refusal(service_cidr)


def install_service_refusal(service_cidr: str) -> None:
    """Refuse, at once, a connection to a Service address that kube-proxy has not translated.

    Such a packet would otherwise follow the default route; on a machine whose egress goes
    through an intercepting proxy, that proxy accepts any connection and answers 404, so a
    client (or a test waiting for a new Service to be routed) would take the proxy for the
    model. After the nat table, a programmed ClusterIP's packets are addressed to a pod: only
    the untranslated ones still match the range here."""
    if _run("iptables", "-n", "-L", SERVICES_CHAIN, check=False).returncode != 0:
        _run("iptables", "-N", SERVICES_CHAIN)
    _run("iptables", "-F", SERVICES_CHAIN)
    _run("iptables", "-A", SERVICES_CHAIN, "-d", service_cidr, "-p", "tcp",
         "-j", "REJECT", "--reject-with", "tcp-reset")
    _run("iptables", "-A", SERVICES_CHAIN, "-d", service_cidr, "-j", "REJECT")
    for (hook,) in SERVICES_JUMPS:
        if _run("iptables", "-C", hook, "-j", SERVICES_CHAIN, check=False).returncode != 0:
            _run("iptables", "-I", hook, "-j", SERVICES_CHAIN)


def confinement_rules() -> str:
    """``iptables -S`` (raw and filter tables) of the confinement and Service-refusal chains
    and their jumps (empty when absent)."""
    out = _run("iptables", "-t", "raw", "-S", check=False).stdout
    out += "\n" + _run("iptables", "-S", check=False).stdout
    return "\n".join(line for line in out.splitlines()
                     if CONFINE_CHAIN in line or SERVICES_CHAIN in line)


def teardown_network() -> list[str]:
    """Remove the confinement chains and the bridge; return what could not be removed."""
    problems: list[str] = []
    for (hook,) in SERVICES_JUMPS:
        while _run("iptables", "-C", hook, "-j", SERVICES_CHAIN, check=False).returncode == 0:
            _run("iptables", "-D", hook, "-j", SERVICES_CHAIN, check=False)
    if _run("iptables", "-n", "-L", SERVICES_CHAIN, check=False).returncode == 0:
        _run("iptables", "-F", SERVICES_CHAIN, check=False)
        if _run("iptables", "-X", SERVICES_CHAIN, check=False).returncode != 0:
            problems.append(f"iptables chain {SERVICES_CHAIN} could not be deleted")
    for tool in ("iptables", "ip6tables"):
        jump = ["PREROUTING", "-i", BRIDGE, "-j", CONFINE_CHAIN]
        while _run(tool, "-t", "raw", "-C", *jump, check=False).returncode == 0:
            _run(tool, "-t", "raw", "-D", *jump, check=False)
        if _run(tool, "-t", "raw", "-n", "-L", CONFINE_CHAIN, check=False).returncode == 0:
            _run(tool, "-t", "raw", "-F", CONFINE_CHAIN, check=False)
            if _run(tool, "-t", "raw", "-X", CONFINE_CHAIN, check=False).returncode != 0:
                problems.append(f"{tool} chain {CONFINE_CHAIN} could not be deleted")
    if _run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
        for veth in bridge_ports():
            _run("ip", "link", "delete", veth, check=False)
        if _run("ip", "link", "delete", BRIDGE, check=False).returncode != 0:
            problems.append(f"bridge {BRIDGE} could not be deleted")
    return problems


def bridge_ports() -> list[str]:
    """Interfaces attached to the bridge (the pods' veth ends)."""
    brif = Path("/sys/class/net") / BRIDGE / "brif"
    return sorted(p.name for p in brif.iterdir()) if brif.is_dir() else []


def leftovers(state_dir: Path) -> list[str]:
    """Everything a stopped real node must not leave behind (a test checks it is empty)."""
    out = [f"mount {m}" for m in mounts_under(state_dir)]
    out += [f"cgroup {c}" for c in leftover_cgroups()]
    if Path("/sys/class/net", BRIDGE).exists():
        out.append(f"bridge {BRIDGE}")
    veths = [p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith("veth")]
    out += [f"interface {v}" for v in veths]
    if confinement_rules():
        out.append(f"iptables chains {CONFINE_CHAIN}, {SERVICES_CHAIN}")
    for tool in ("iptables", "ip6tables"):
        chains = _kube_chains(tool)
        out += [f"{tool} -t {table} chain {chain}" for table, chain in chains]
    return out


def _kube_chains(tool: str) -> list[tuple[str, str]]:
    """(table, chain) of every KUBE-* chain (kube-proxy's and kubelet's own)."""
    out: list[tuple[str, str]] = []
    table = ""
    for line in _run(f"{tool}-save", check=False).stdout.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":KUBE-"):
            out.append((table, line[1:].split()[0]))
    return out


def policy_chains_ready() -> bool:
    """Whether kube-router made its first pass (its FORWARD chain exists)."""
    return _run("iptables", "-S", "KUBE-ROUTER-FORWARD", check=False).returncode == 0


def remove_kube_chains() -> None:
    """Delete the KUBE-* chains kubelet, kube-proxy and kube-router created, the jumps to them,
    then kube-router's KUBE-* ipsets.

    Only on the real node's teardown: this machine runs no other Kubernetes node.
    """
    for tool in ("iptables", "ip6tables"):
        chains = _kube_chains(tool)
        table = ""
        for line in _run(f"{tool}-save", check=False).stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith("-A ") and " -j KUBE-" in line:
                rule = shlex.split(line)  # comments are quoted
                if not rule[1].startswith("KUBE-"):
                    _run(tool, "-t", table, "-D", *rule[1:], check=False)
        for table, chain in chains:
            _run(tool, "-t", table, "-F", chain, check=False)
        for table, chain in chains:
            _run(tool, "-t", table, "-X", chain, check=False)
    if shutil.which("ipset"):
        for name in _run("ipset", "list", "-n", check=False).stdout.split():
            if name.startswith("KUBE-"):
                _run("ipset", "destroy", name, check=False)
