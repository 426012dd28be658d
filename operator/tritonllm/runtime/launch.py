"""`tritonllm launch --mode single|leader|worker --plan FILE`: the serving container's main process.

It refuses to start what cannot work, with a message that says why, instead of letting tritonserver
fail minutes later deep in an engine load (shared/reference/tensorrt-llm-triton.md, section 7):

- the model repository must exist (the repository Job renames it into place when complete; we
  wait for it, with progress lines, up to TRITONLLM_WAIT_TIMEOUT seconds);
- engine runtime: artifact.json tp x pp must equal the world size, agree with the engine's own
  config.json, its GPU product must be this pod's (nvidia-smi), and its TensorRT-LLM version must
  equal the image's (TRITONLLM_SKIP_VERSION_CHECK=1 skips only the version comparison);
- the pod must see the GPUs it is supposed to have.

Then it runs the plan's command (mpirun, or tritonserver alone for llmapi) as a child in the
foreground rather than exec'ing it, so that SIGTERM from the kubelet is forwarded for a graceful
drain and the exit status is mpirun's, which is non-zero when any rank dies. Leader and worker
modes implement the SSH bootstrap of tritonllm.runtime.ssh for LeaderWorkerSet groups.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from . import ssh
from .common import (
    EXIT_INVALID,
    EXIT_MISMATCH,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_VERSION,
    Failure,
    engine_mapping,
    gpu_product,
    load_plan,
    local_mpi_ranks,
    log,
    product_label,
    read_json,
    require_gpus,
    run_child,
    run_main,
    same_version,
    trtllm_version,
    version_check_skipped,
)

MODES = ("single", "leader", "worker")
ENV_WAIT_TIMEOUT = "TRITONLLM_WAIT_TIMEOUT"
DEFAULT_WAIT_SECONDS = 1800.0
REPORT_EVERY_SECONDS = 10.0
MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun")


def main(mode: str, plan_path: str) -> int:
    return run_main("launch", lambda: execute(mode, load_plan(plan_path)))


def wait_seconds() -> float:
    raw = os.environ.get(ENV_WAIT_TIMEOUT)
    try:
        return float(raw) if raw else DEFAULT_WAIT_SECONDS
    except ValueError as exc:
        raise Failure(EXIT_INVALID, f"{ENV_WAIT_TIMEOUT}={raw!r} is not a number") from exc


def execute(mode: str, plan: dict[str, Any]) -> int:
    multi = int(plan.get("nodes", 1)) > 1
    if mode not in MODES:
        raise Failure(EXIT_INVALID, f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    if multi != (mode != "single"):
        raise Failure(
            EXIT_INVALID,
            f"mode {mode} does not fit a plan for {plan.get('nodes', 1)} node(s): single-node "
            "plans run with --mode single, multi-node plans with --mode leader/worker",
        )
    if multi and not plan.get("ssh"):
        raise Failure(EXIT_INVALID, "a multi-node plan needs an `ssh` section")
    require_gpus(int(plan["gpusPerPod"]), "this serving pod")
    if mode == "worker":
        return run_worker(plan)
    wait_for_repository(Path(plan["modelRepository"]), wait_seconds())
    if plan.get("runtime", "engine") == "engine":
        check_engine(plan)
    argv: list[str] = list(plan["argv"])
    with tempfile.TemporaryDirectory(prefix="tritonllm-launch-") as tmp:
        if mode == "leader":
            argv = leader_command(plan, argv, Path(tmp))
        log("launch", "exec", mode=mode, argv=argv)
        # Under mpirun, SIGTERM goes to the local ranks (see drain_targets).
        mpi = Path(argv[0]).name in MPI_LAUNCHERS
        result = run_child(argv, signal_targets=drain_targets if mpi else None)
    code = result.returncode if result.returncode >= 0 else 128 - result.returncode
    log("launch", "exit", code=code, signal=result.signalled)
    return code


def drain_targets(mpirun_pid: int) -> list[int]:
    """Where a graceful stop goes: the ranks mpirun runs on this host, not mpirun itself.

    Open MPI's mpirun treats SIGTERM as an abort: it sends SIGTERM to the ranks, SIGKILLs them
    one second later (odls_base_sigkill_timeout), cutting tritonserver's drain short, and exits
    1. Signalled directly, each tritonserver drains within --exit-timeout-secs and exits 0, so
    mpirun exits 0. A second SIGTERM goes to mpirun (its abort); so does one that arrives before
    the ranks exist.
    """
    ranks = local_mpi_ranks(mpirun_pid)
    log("launch", "drain", ranks=ranks or None, to=None if ranks else "mpirun")
    return ranks


def wait_for_repository(repo: Path, timeout: float) -> None:
    start = time.monotonic()
    last = start
    while not repo.is_dir():
        now = time.monotonic()
        if now - start >= timeout:
            raise Failure(
                EXIT_TIMEOUT,
                f"model repository {repo} did not appear within {int(timeout)}s: check the "
                "deployment's model-repository Job",
            )
        if now - last >= REPORT_EVERY_SECONDS:
            log("launch", "waiting", what="model repository", path=str(repo),
                seconds=int(now - start))
            last = now
        time.sleep(min(1.0, timeout / 10))
    log("launch", "repository", path=str(repo))


def check_engine(plan: dict[str, Any]) -> None:
    engine_dir = Path(plan["engineDir"])
    artifact = read_json(engine_dir / "artifact.json")
    if artifact is None:
        raise Failure(
            EXIT_NOT_FOUND,
            f"{engine_dir}/artifact.json does not exist: the engine {plan['engineKey']} was "
            "not (completely) built",
        )
    world = int(plan["worldSize"])
    tp, pp = int(artifact["tensorParallel"]), int(artifact["pipelineParallel"])
    if tp * pp != world:
        raise Failure(
            EXIT_MISMATCH,
            f"the engine was built for tp={tp} x pp={pp} = {tp * pp} ranks but this deployment "
            f"runs world size {world} (MPI would abort with 'mpiSize == tp * pp')",
        )
    mapping = engine_mapping(engine_dir)
    if (mapping.tp, mapping.pp) != (tp, pp):
        raise Failure(
            EXIT_MISMATCH,
            f"{engine_dir}/config.json says tp={mapping.tp} pp={mapping.pp} but artifact.json "
            f"says tp={tp} pp={pp}: the engine directory was changed after the build",
        )
    check_gpu_product(artifact)
    if version_check_skipped():
        return
    built = artifact.get("trtllmVersion")
    image = trtllm_version()
    if image is None:
        raise Failure(EXIT_NOT_FOUND, "TensorRT-LLM is not installed in this image")
    if not built or not same_version(str(built), image):
        raise Failure(
            EXIT_VERSION,
            f"the engine was built with TensorRT-LLM {built} but this image has {image}: an "
            "engine only loads under the version that built it (serve with the build's image, "
            "or let the operator rebuild for this one)",
        )
    log("launch", "engine", key=plan["engineKey"], tp=tp, pp=pp, trtllmVersion=image)


def check_gpu_product(artifact: dict[str, Any]) -> None:
    """Refuse an engine built on another GPU product than this pod's (the engine cache is keyed
    by nvidia.com/gpu.product, so this is a foreign engine under our key). Compared as labels
    (spaces as dashes), as GPU feature discovery writes them. Skipped when either is unknown."""
    built = artifact.get("gpuProduct")
    here = gpu_product()
    if not built or not here:
        log("launch", "gpu", product=here, engineProduct=built, checked=False)
        return
    if product_label(str(built)) != product_label(here):
        raise Failure(
            EXIT_MISMATCH,
            f"the engine was built on {built} but this pod runs on {here}: a TensorRT-LLM "
            "engine is built for the GPU that built it (another compute capability cannot load "
            "it; another product of the same one runs tactics tuned for the wrong GPU); serve "
            f"on nodes labelled nvidia.com/gpu.product={product_label(str(built))}, or set "
            f"spec.gpu.product to {product_label(here)} so the operator builds for this GPU",
        )
    log("launch", "gpu", product=here, engineProduct=built, checked=True)


def leader_command(plan: dict[str, Any], argv: list[str], workdir: Path) -> list[str]:
    cfg = plan["ssh"]
    port, key_dir = int(cfg["port"]), Path(cfg["keyDir"])
    hosts = ssh.worker_hosts(os.environ, int(plan["nodes"]))
    agent = ssh.rsh_agent(port, key_dir, workdir)
    log("launch", "waiting", what="workers", hosts=hosts, port=port)
    addresses = ssh.wait_for_workers(hosts, port, wait_seconds())
    return ssh.leader_argv(argv, hosts=addresses, slots=int(plan["gpusPerPod"]), agent=agent)


def run_worker(plan: dict[str, Any]) -> int:
    """Run sshd until the pod is stopped; mpirun on the leader starts this pod's ranks."""
    cfg = plan["ssh"]
    with tempfile.TemporaryDirectory(prefix="tritonllm-sshd-") as tmp:
        argv = ssh.prepare_sshd(int(cfg["port"]), Path(cfg["keyDir"]), Path(tmp))
        log("launch", "sshd", port=cfg["port"], argv=argv)
        result = run_child(argv)
    if result.signalled is not None:
        log("launch", "exit", code=EXIT_OK, signal=result.signalled)
        return EXIT_OK
    log("launch", "exit", code=result.returncode, message="sshd stopped on its own")
    return result.returncode or 1
