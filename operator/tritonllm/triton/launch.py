"""The mpirun command line that starts tritonserver with one rank per GPU.

`launch_triton_server.py` returns at once (it does not wait for mpirun), so the serving container
runs mpirun itself, in the foreground, with the per-rank flags the upstream launcher and the
multi-node tutorials use (shared/reference/tensorrt-llm-triton.md, sections 2.2 and 2.3):

- every rank: the model repository, ``--disable-auto-complete-config`` and a distinct Python
  backend shared-memory prefix (ranks that share a pod's /dev/shm would otherwise clash);
- rank 0 serves HTTP, gRPC and metrics and loads every model;
- ranks >= 1 serve nothing, log only errors and load ``tensorrt_llm`` explicitly (their
  executor worker loop blocks until the leader shuts down).

world_size must equal the engine's tp x pp; the caller checks that before it gets here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tritonllm.api import constants as c

TRITONSERVER = "/opt/tritonserver/bin/tritonserver"
MPIRUN = "mpirun"


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
    # Multi-node: "host:slots" entries, leader first; empty for a single pod.
    hosts: tuple[str, ...] = ()
    exit_timeout_seconds: int = 30
    log_verbose: int = 0
    # llmapi: one tritonserver, TensorRT-LLM spawns its own MPI workers.
    single_process: bool = False
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


def mpirun_argv(
    spec: LaunchSpec, *, mpirun: str = MPIRUN, extra_mca: Sequence[str] = ()
) -> list[str]:
    """The full foreground command: ``mpirun ... -n 1 <rank 0> : -n 1 <rank 1> : ...``."""
    if spec.world_size < 1:
        raise ValueError("world_size must be >= 1")
    if spec.single_process:
        return rank_args(dataclasses.replace(spec, world_size=1), 0)
    # --bind-to none: Open MPI binds each rank to ONE core by default (2 ranks or fewer; a
    # socket above), and everything a rank starts inherits it: the HTTP/gRPC front end, the
    # backend's threads and the pre/postprocessing Python stubs of rank 0 would share one core.
    argv = [mpirun, "--allow-run-as-root", "--tag-output", "--bind-to", "none"]
    for mca in extra_mca:
        argv += ["--mca", *mca.split("=", 1)] if "=" in mca else ["--mca", mca]
    if spec.hosts:
        argv += ["--host", ",".join(spec.hosts)]
    for rank in range(spec.world_size):
        if rank:
            argv.append(":")
        argv += ["-n", "1", *rank_args(spec, rank)]
    return argv
