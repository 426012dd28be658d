"""Multi-node bootstrap for mpirun across the pods of a LeaderWorkerSet group, without `pods/exec`.

The upstream recipes start remote ranks with `kubectl exec` as mpirun's remote shell, which needs a
ServiceAccount allowed to `create pods/exec`: in practice the right to run any command in any pod of
the namespace. Here mpirun uses plain OpenSSH instead, scoped to one deployment:

- The operator creates one Secret per deployment (`<name>-mpi-ssh`, keys in SECRET_KEYS, made by
  tritonllm.render.mpi): a client key pair and a host key pair. Only that deployment's pods
  mount it; no ServiceAccount token or RBAC is involved.
- Workers run sshd as the pod's own user (no root needed, no extra capability), in the foreground,
  on a high port (plan `ssh.port`), with a config written at start into a private temporary
  directory: public-key login only, for that one user, with the deployment's client key (marked
  `restrict`: no forwarding, no pty), no passwords, no forwarding of any kind.
- The leader pins the workers' host key (from the Secret), so it only talks to this deployment's
  workers, waits (bounded) until every worker accepts a real login (`ssh ... true` with
  mpirun's own SSH command, not just a banner), writes the group's
  hostfile (`leader slots=N`, then the workers) and runs the rendered mpirun command, which reads
  that hostfile and uses OpenSSH with these files as `plm_rsh_agent` (tritonllm.triton.launch
  builds it; the paths are fixed). Tree spawn is off, so only the leader ever opens SSH
  connections.
- Open MPI's own daemons (orted) then connect back to the leader over the pod network.

Sessions started by sshd get a clean environment, but ranks need the container's (PATH to orted,
LD_LIBRARY_PATH to CUDA/TensorRT, NCCL_*/OMPI_* settings from the pod spec): the worker passes its
own environment into sessions with sshd's SetEnv, leaving out credentials (anything named like a
token, secret, password or key).

Worker hostnames follow the LeaderWorkerSet naming: the leader is `<lws>-<group>` and the workers
`<lws>-<group>-<index>` (index 1..size-1) under the same headless-service subdomain, so they are
derived from LWS_LEADER_ADDRESS (`<lws>-<group>.<service>.<namespace>`) and LWS_GROUP_SIZE, both
injected by LWS into every pod of the group.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tritonllm.api import constants as c

from .report import EXIT_INVALID, EXIT_MISMATCH, EXIT_NOT_FOUND, EXIT_TIMEOUT, Failure, log

CLIENT_KEY = c.MPI_SSH_CLIENT_KEY
CLIENT_PUB = c.MPI_SSH_CLIENT_PUB
HOST_KEY = c.MPI_SSH_HOST_KEY
HOST_PUB = c.MPI_SSH_HOST_PUB
SECRET_KEYS = c.MPI_SSH_KEYS

ENV_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
ENV_GROUP_SIZE = "LWS_GROUP_SIZE"

# Environment variables never copied into SSH sessions.
SESSION_SPECIFIC = {
    "HOME", "PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME", "TERM", "USER", "LOGNAME", "SHELL", "MAIL",
}
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "KEY")


# --- shared -------------------------------------------------------------------------------------


def current_user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError as exc:
        raise Failure(
            EXIT_INVALID,
            f"UID {os.getuid()} has no /etc/passwd entry in this image, and ssh/sshd need a "
            "named user: set spec.podTemplate.runAsUser to a user of the image (NGC Triton "
            "images: 0 or 1000)",
        ) from exc


def _private_copy(src: Path, dst: Path) -> None:
    """Copy a key out of the Secret volume: OpenSSH wants 0600 files owned by the user."""
    try:
        data = src.read_bytes()
    except FileNotFoundError as exc:
        raise Failure(
            EXIT_NOT_FOUND,
            f"{src} is missing: the MPI SSH Secret must hold {', '.join(SECRET_KEYS)}",
        ) from exc
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _public_key(path: Path) -> str:
    """'<type> <base64>' of an OpenSSH public key file (comment dropped)."""
    try:
        parts = path.read_text().split()
    except FileNotFoundError as exc:
        raise Failure(EXIT_NOT_FOUND, f"{path} is missing from the MPI SSH Secret") from exc
    if len(parts) < 2:
        raise Failure(EXIT_INVALID, f"{path} is not an OpenSSH public key")
    return f"{parts[0]} {parts[1]}"


# --- worker: sshd ---------------------------------------------------------------------------------


def session_env(env: Mapping[str, str]) -> dict[str, str]:
    """The container environment to give SSH sessions (ranks), without session data or secrets."""
    out = {}
    for name, value in sorted(env.items()):
        upper = name.upper()
        if name in SESSION_SPECIFIC or upper.startswith("SSH_"):
            continue
        if any(word in upper for word in SECRET_WORDS):
            continue
        if any(ch in value for ch in '"\\\n'):
            continue  # cannot be quoted for SetEnv
        out[name] = value
    return out


def sshd_config(*, port: int, workdir: Path, user: str, env: Mapping[str, str]) -> str:
    lines = [
        f"Port {port}",
        f"HostKey {workdir / HOST_KEY}",
        f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
        f"PidFile {workdir / 'sshd.pid'}",
        f"AllowUsers {user}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "ChallengeResponseAuthentication no",
        "PermitEmptyPasswords no",
        "PermitRootLogin prohibit-password",
        "UsePAM no",
        # The key files are ours (0600 in a 0700 mkdtemp directory), but /tmp is world-writable,
        # which StrictModes would reject.
        "StrictModes no",
        "AllowTcpForwarding no",
        "AllowStreamLocalForwarding no",
        "AllowAgentForwarding no",
        "X11Forwarding no",
        "PermitTunnel no",
        "PermitTTY no",
        "GatewayPorts no",
        "PermitUserEnvironment no",
        "PrintMotd no",
        "ClientAliveInterval 30",
        "ClientAliveCountMax 4",
        "LogLevel INFO",
    ]
    pairs = " ".join(f'{k}="{v}"' for k, v in session_env(env).items())
    if pairs:
        lines.append(f"SetEnv {pairs}")
    return "\n".join(lines) + "\n"


# Where Debian/Ubuntu put sshd (not on a non-root user's PATH).
SSHD_FALLBACKS = ("/usr/sbin/sshd",)


def find_sshd() -> str:
    # sshd must be started by absolute path (it re-executes itself).
    for candidate in (shutil.which("sshd"), *SSHD_FALLBACKS):
        if candidate and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise Failure(
        EXIT_NOT_FOUND,
        "sshd not found in this image: multi-node serving needs OpenSSH's server in spec.image "
        "(e.g. a derived image with `apt-get install -y openssh-server`; see docs/in-pod.md)",
    )


def prepare_sshd(port: int, key_dir: Path, workdir: Path) -> list[str]:
    """Write sshd's files into `workdir`; returns the sshd command line (foreground, log to
    stderr)."""
    sshd = find_sshd()
    user = current_user()
    _private_copy(key_dir / HOST_KEY, workdir / HOST_KEY)
    auth = workdir / "authorized_keys"
    fd = os.open(auth, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"restrict {_public_key(key_dir / CLIENT_PUB)} tritonllm-mpi\n")
    config = workdir / "sshd_config"
    config.write_text(sshd_config(port=port, workdir=workdir, user=user, env=os.environ))
    if os.geteuid() == 0:
        missing = [name for bit, name in PRIVSEP_CAPABILITIES if not has_capability(bit)]
        if missing:
            raise Failure(
                EXIT_INVALID,
                "sshd cannot start as root in this pod: its privilege separation needs the "
                f"capabilities {', '.join(missing)}, and the rendered pods drop all of them. "
                "Run the multi-node pods as the image's non-root user (spec.podTemplate."
                "runAsUser: 1000, NGC Triton's triton-server): sshd then runs as that user on "
                f"port {port}, with no privilege separation to set up",
            )
        # Root sshd chroots its privilege-separated child into /run/sshd (made by init scripts,
        # which do not run in containers).
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    return [sshd, "-D", "-e", "-f", str(config)]


# What root sshd's privilege separation does: chroot to /run/sshd, then setgid/setuid to the
# `sshd` user (capability bit, name).
PRIVSEP_CAPABILITIES = ((18, "SYS_CHROOT"), (7, "SETUID"), (6, "SETGID"))


def has_capability(bit: int, status: Path = Path("/proc/self/status")) -> bool:
    """Whether this process holds a capability (its effective set)."""
    try:
        for line in status.read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError):
        pass
    return False


# --- leader: hosts and the remote-shell agent --------------------------------------------------


def worker_hosts(env: Mapping[str, str], nodes: int) -> list[str]:
    """DNS names of the group's workers, from the variables LeaderWorkerSet injects."""
    leader = env.get(ENV_LEADER_ADDRESS)
    size = env.get(ENV_GROUP_SIZE)
    if not leader or not size:
        raise Failure(
            EXIT_INVALID,
            f"{ENV_LEADER_ADDRESS} and {ENV_GROUP_SIZE} are not set: leader mode runs in a "
            "LeaderWorkerSet pod",
        )
    if int(size) != nodes:
        raise Failure(
            EXIT_MISMATCH,
            f"the LeaderWorkerSet group has {size} pods but the plan needs {nodes} "
            "(world size / GPUs per node)",
        )
    first, _, rest = leader.partition(".")
    suffix = f".{rest}" if rest else ""
    return [f"{first}-{i}{suffix}" for i in range(1, nodes)]


def probe(host: str, port: int, timeout: float = 3.0) -> str | None:
    """The address of `host` if an SSH server answers on `port` there, else None."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return None
    infos.sort(key=lambda i: i[0] != socket.AF_INET)  # IPv4 first
    for family, kind, proto, _name, addr in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                s.settimeout(timeout)
                s.connect(addr)
                banner = s.recv(256)
        except OSError:
            continue
        if banner.startswith(b"SSH-"):
            # IPv6 literals cannot go into mpirun's host:slots syntax; keep the name then.
            return str(addr[0]) if family == socket.AF_INET else host
    return None


# A login is given this long (ssh's own ConnectTimeout is shorter).
LOGIN_SECONDS = 20.0


def login(agent: Sequence[str], address: str) -> str | None:
    """Log in to `address` with mpirun's own SSH command and run `true`: None when that works,
    else what ssh said. The banner alone does not show that the key, the user and sshd's
    session setup work, which is what mpirun needs."""
    argv = [*agent, "-o", "ConnectTimeout=10", address, "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=LOGIN_SECONDS,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return f"ssh did not finish within {int(LOGIN_SECONDS)}s"
    except OSError as exc:
        return f"ssh could not run: {exc}"
    if done.returncode == 0:
        return None
    said = " ".join((done.stderr or done.stdout).split())[-300:]
    return f"ssh exited {done.returncode}: {said or 'no message'}"


class LoginCheck:
    """`wait_for_workers`' check: the banner (probe), then a real login; keeps each host's last
    problem for the message when the wait runs out."""

    def __init__(self, agent: Sequence[str]) -> None:
        self.agent = list(agent)
        self.problems: dict[str, str] = {}

    def __call__(self, host: str, port: int) -> str | None:
        address = probe(host, port)
        if address is None:
            self.problems[host] = "no SSH banner"
            return None
        problem = login(self.agent, address)
        if problem is not None:
            self.problems[host] = f"login failed: {problem}"
            return None
        return address


def wait_for_workers(
    hosts: list[str],
    port: int,
    timeout: float,
    *,
    check: Callable[[str, int], str | None] | None = None,
    interval: float = 1.0,
) -> list[str]:
    """Wait until `check` passes for every worker (at most `timeout` seconds); returns their
    addresses in `hosts` order.

    `check` defaults to `probe` (looked up at call time); the leader passes a LoginCheck.
    """
    check = check or probe
    problems: Mapping[str, str] = getattr(check, "problems", {})
    found: dict[str, str] = {}
    start = time.monotonic()
    last_report = start
    while True:
        for host in hosts:
            if host not in found:
                addr = check(host, port)
                if addr:
                    found[host] = addr
                    log("launch", "worker-ready", host=host, address=addr)
        pending = [h for h in hosts if h not in found]
        if not pending:
            return [found[h] for h in hosts]
        now = time.monotonic()
        if now - start >= timeout:
            raise Failure(
                EXIT_TIMEOUT,
                f"no SSH login to the workers after {int(timeout)}s: "
                + "; ".join(
                    f"{h}:{port}" + (f" ({problems[h]})" if h in problems else "")
                    for h in pending
                )
                + " (check those pods' logs and any NetworkPolicy between the group's pods)",
            )
        if now - last_report >= 10:
            log("launch", "waiting", what="workers", pending=pending,
                seconds=int(now - start))
            last_report = now
        time.sleep(interval)


def private_dir(path: Path) -> Path:
    """`path` as a directory only this user can enter (0700), created if needed."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise Failure(EXIT_INVALID, f"{path} exists but belongs to UID {st.st_uid}, not to us")
    path.chmod(0o700)
    return path


def prepare_client(key_dir: Path, workdir: Path) -> None:
    """The files the rendered SSH agent names (tritonllm.triton.launch.rsh_agent): a private copy
    of the client key and the workers' pinned host key, in `workdir`."""
    if shutil.which("ssh") is None:
        raise Failure(EXIT_NOT_FOUND, "ssh (OpenSSH client) not found in this image")
    current_user()
    private_dir(workdir)
    _private_copy(key_dir / CLIENT_KEY, workdir / CLIENT_KEY)
    (workdir / c.MPI_KNOWN_HOSTS).write_text(f"* {_public_key(key_dir / HOST_PUB)}\n")


def write_hostfile(workdir: Path, hosts: Sequence[str], slots: int) -> Path:
    """mpirun's hostfile: every host of the group with its slots, the leader first (so that rank
    0, which serves HTTP, runs on the leader)."""
    path = workdir / c.MPI_HOSTFILE
    path.write_text("".join(f"{host} slots={slots}\n" for host in hosts))
    log("launch", "hostfile", path=str(path), hosts=list(hosts), slots=slots)
    return path
