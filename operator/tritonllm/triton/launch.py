"""The mpirun command line that starts tritonserver with one rank per GPU.

`launch_triton_server.py` returns at once (it does not wait for mpirun), so the serving container
runs mpirun itself, in the foreground, with the per-rank flags the upstream launcher and the
multi-node tutorials use (shared/reference/tensorrt-llm-triton.md, sections 2.2 and 2.3):

- every rank: the model repository, ``--disable-auto-complete-config`` and a distinct Python
  backend shared-memory prefix (ranks that share a pod's /dev/shm would otherwise clash);
- rank 0 serves HTTP, gRPC and metrics and loads every model;
- ranks >= 1 serve nothing, log only errors and load ``tensorrt_llm`` explicitly (their
  executor worker loop blocks until the leader shuts down).

Multi node (a LeaderWorkerSet group): the leader's mpirun reads the group's hosts from a hostfile
(the leader writes it once the workers' sshd answer: `<host> slots=<ranks per node>`, leader
first, so rank 0 serves on the leader) and starts the workers' daemons over OpenSSH with the
deployment's key, host key pinned, tree spawn off (docs/in-pod.md). Every path in that command
line is fixed (tritonllm.api.constants.MPI_WORKDIR), so this module renders the whole argv for
every case and the pod only executes it.

world_size must equal the engine's tp x pp; the caller checks that before it gets here.

llmapi runtime (the LLM API's Python model, no engine): on one node a single tritonserver, the
LLM API spawns its own ranks. A group runs every rank as ``trtllm-llmapi-launch <tritonserver
...>`` under the same mpirun, hostfile and SSH agent (``mpirun -n <world> trtllm-llmapi-launch
tritonserver ...``, as TensorRT-LLM documents multi-node LLM API serving and as
``launch_triton_server.py --trtllm_llmapi_launch`` prefixes each rank). The launcher reads its rank
from MPI (``OMPI_COMM_WORLD_RANK``): rank 0 runs the command, tritonserver with the llmapi model
(whose LLM drives the other ranks over MPI), every other rank runs the LLM API's worker loop
(``python3 -m tensorrt_llm.llmapi.mgmn_worker_node``) instead, so only rank 0's command line
matters and one MPMD segment is enough. Read from NVIDIA/TensorRT-LLM
``tensorrt_llm/llmapi/trtllm-llmapi-launch`` (020c89e64e49f24102f1b62be96a1a68283cdf7a) and
``triton_backend/scripts/launch_triton_server.py`` (0b06796b2c7895930fecff48a1e205ab14a19c51).
"""

from __future__ import annotations

import dataclasses

from tritonllm.api import constants as c
from tritonllm.api.topology import Topology

TRITONSERVER = "/opt/tritonserver/bin/tritonserver"
MPIRUN = "mpirun"
# On PATH in TensorRT-LLM images (a script of the wheel), as launch_triton_server.py calls it.
TRTLLM_LLMAPI_LAUNCH = "trtllm-llmapi-launch"


@dataclasses.dataclass(frozen=True)
class MpiSsh:
    """Multi node: where the leader's mpirun finds the group's hosts and its SSH client files."""

    port: int = c.MPI_SSH_PORT
    workdir: str = c.MPI_WORKDIR

    @property
    def hostfile(self) -> str:
        return f"{self.workdir}/{c.MPI_HOSTFILE}"

    @property
    def key(self) -> str:
        return f"{self.workdir}/{c.MPI_SSH_CLIENT_KEY}"

    @property
    def known_hosts(self) -> str:
        return f"{self.workdir}/{c.MPI_KNOWN_HOSTS}"


def rsh_agent(ssh: MpiSsh) -> str:
    """The `ssh ...` command mpirun uses to start its daemons on the workers: only the
    deployment's key, only its workers' host key, never a prompt, a dead connection noticed
    within a minute. One string: Open MPI splits it on spaces, so no path in it may hold one."""
    options = {
        "IdentitiesOnly": "yes",
        "IdentityAgent": "none",
        "UserKnownHostsFile": ssh.known_hosts,
        "GlobalKnownHostsFile": "/dev/null",
        "StrictHostKeyChecking": "yes",
        "BatchMode": "yes",
        "ConnectTimeout": "30",
        "ServerAliveInterval": "30",
        "LogLevel": "ERROR",
    }
    parts = ["ssh", "-p", str(ssh.port), "-i", ssh.key]
    for name, value in options.items():
        parts += ["-o", f"{name}={value}"]
    if any(" " in p for p in parts):
        raise ValueError(f"the MPI working directory {ssh.workdir!r} has a space in its path")
    return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """What the launcher needs to know; rendered into the serving pod's plan."""

    world_size: int
    model_repository: str
    http_port: int = c.HTTP_PORT
    grpc_port: int = c.GRPC_PORT
    metrics_port: int = c.METRICS_PORT
    tritonserver: str = TRITONSERVER
    # Models ranks >= 1 load (the TensorRT-LLM models; the Python ones run on rank 0 only).
    worker_models: tuple[str, ...] = ("tensorrt_llm",)
    # Multi node: the hostfile and the SSH agent (None: every rank in this pod).
    ssh: MpiSsh | None = None
    exit_timeout_seconds: int = 30
    log_verbose: int = 0
    # llmapi on one node: one tritonserver, TensorRT-LLM spawns its own MPI workers.
    single_process: bool = False
    # llmapi group: the LLM API's launcher that every rank runs (None: tritonserver per rank).
    llmapi_launch: str | None = None
    # Further tritonserver arguments, appended as given to every rank's command line (for
    # example --backend-directory=... or --log-format=ISO8601).
    extra_args: tuple[str, ...] = ()


def rank_args(spec: LaunchSpec, rank: int) -> list[str]:
    """tritonserver arguments for one MPI rank."""
    args = [
        spec.tritonserver,
        f"--model-repository={spec.model_repository}",
        "--disable-auto-complete-config",
        f"--backend-config=python,shm-region-prefix-name=prefix{rank}_",
        f"--exit-timeout-secs={spec.exit_timeout_seconds}",
        f"--id=rank{rank}",
    ]
    if rank == 0:
        args += [
            f"--http-port={spec.http_port}",
            f"--grpc-port={spec.grpc_port}",
            f"--metrics-port={spec.metrics_port}",
            "--allow-metrics=true",
            "--allow-cpu-metrics=true",
            "--metrics-interval-ms=1000",
        ]
        if spec.log_verbose:
            args.append(f"--log-verbose={spec.log_verbose}")
    else:
        args += [
            "--allow-http=false",
            "--allow-grpc=false",
            "--allow-metrics=false",
            "--log-info=false",
            "--log-warning=false",
            "--model-control-mode=explicit",
            *(f"--load-model={m}" for m in spec.worker_models),
        ]
    return [*args, *spec.extra_args]


def mpirun_argv(spec: LaunchSpec, *, mpirun: str = MPIRUN) -> list[str]:
    """The full foreground command: ``mpirun ... -n 1 <rank 0> : -n 1 <rank 1> : ...``, or for
    an llmapi group ``mpirun ... -n <world> trtllm-llmapi-launch <rank 0>``."""
    if spec.world_size < 1:
        raise ValueError("world_size must be >= 1")
    if spec.single_process:
        return rank_args(dataclasses.replace(spec, world_size=1), 0)
    argv = _mpirun_options(spec, mpirun)
    if spec.llmapi_launch:
        # One segment: the launcher runs rank 0's command there and a worker on every other rank.
        return [*argv, "-n", str(spec.world_size), spec.llmapi_launch, *rank_args(spec, 0)]
    for rank in range(spec.world_size):
        if rank:
            argv.append(":")
        argv += ["-n", "1", *rank_args(spec, rank)]
    return argv


def _mpirun_options(spec: LaunchSpec, mpirun: str) -> list[str]:
    """mpirun and its options, before the ranks' command lines."""
    # --bind-to none: Open MPI binds each rank to ONE core by default (2 ranks or fewer; a
    # socket above), and everything a rank starts inherits it: the HTTP/gRPC front end, the
    # backend's threads and the pre/postprocessing Python stubs of rank 0 would share one core.
    argv = [mpirun, "--allow-run-as-root", "--tag-output", "--bind-to", "none"]
    if spec.ssh is not None:
        # `--mca plm rsh`: the SSH launcher, whatever the image says. NGC's GPU images set
        # OMPI_MCA_plm=isolated (single node), with which mpirun refuses every other host of
        # the hostfile ("All nodes which are allocated for this job are already filled"); a
        # command-line setting takes precedence over the environment.
        argv += ["--hostfile", spec.ssh.hostfile, "--mca", "plm", "rsh",
                 "--mca", "plm_rsh_agent", rsh_agent(spec.ssh)]
        argv += ["--mca", "plm_rsh_no_tree_spawn", "1"]
        # The map of ranks to hosts (pods) in the leader's log before the ranks start: which
        # pod runs which rank is the first question when a group misbehaves.
        argv.append("--display-map")
    return argv


def launch_spec(topology: Topology, *, runtime: str, model_repository: str) -> LaunchSpec:
    """The serving command of a deployment: every rank in one pod, a group over SSH, or (llmapi)
    one tritonserver on one node and trtllm-llmapi-launch on every rank of a group."""
    llmapi = runtime == "llmapi"
    return LaunchSpec(
        world_size=topology.world_size,
        model_repository=model_repository,
        single_process=llmapi and not topology.multi_node,
        llmapi_launch=TRTLLM_LLMAPI_LAUNCH if llmapi and topology.multi_node else None,
        ssh=MpiSsh() if topology.multi_node else None,
    )
