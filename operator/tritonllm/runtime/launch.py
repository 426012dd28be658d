"""`tritonllm launch --mode single|leader|worker --plan FILE`: the serving container's main process.

It refuses to start what cannot work, with a message that says why, instead of letting tritonserver
fail minutes later deep in an engine load (shared/reference/tensorrt-llm-triton.md, section 7):

- the model repository must exist (the repository Job renames it into place when complete; we
  wait for it, with progress lines, up to TRITONLLM_WAIT_TIMEOUT seconds: a deployment's first
  pods start while the Job still writes);
- engine runtime: the engine must pass the one engine check (engine_files.check_engine:
  artifact.json tp and pp are the plan's topology, the engine's own config.json agrees) and its
  TensorRT-LLM version must equal the image's (TRITONLLM_SKIP_VERSION_CHECK=1 skips only the
  version); the serving pod also refuses an engine built on another GPU product than its own
  (nvidia-smi) and one whose files are not those artifact.json records (hashed in full unless the
  build's marker for this artifact digest shows they have not changed: tritonllm.runtime.verified);
  and, when the plan carries the engine digest the build reported to the operator, an
  artifact.json that is not the reported one (exit 18, "engine digest mismatch"); the log says
  which, and how long it took;
- the pod must see the GPUs it is supposed to have.

Then it runs the plan's command (mpirun, or tritonserver alone for llmapi on one node) exactly as
rendered, as a child in the foreground rather than exec'ing it, so that SIGTERM from the kubelet is
forwarded for a graceful drain and the exit status is mpirun's, which is non-zero when any rank
dies. The topology (GPUs per pod, pods per group, ranks per node) comes from the plan too. Leader
and worker modes implement the SSH bootstrap of tritonllm.runtime.ssh for LeaderWorkerSet groups
(either runtime): the leader writes the files the rendered command names (hostfile, SSH client key,
pinned host key), the worker runs sshd.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tritonllm.api.topology import Topology

from . import ssh
from .children import local_mpi_ranks, on_stop_signals, run_child, running, serving_processes
from .engine_files import check_engine, read_artifact
from .files import load_plan, plan_topology
from .probes import gpu_product, product_label, require_gpus, trtllm_version, version_check_skipped
from .report import (
    EXIT_INVALID,
    EXIT_MISMATCH,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TIMEOUT,
    Failure,
    log,
    report_failure,
    run_main,
)
from .verified import check_reported, verify_anchored, verify_engine

MODES = ("single", "leader", "worker")
ENV_WAIT_TIMEOUT = "TRITONLLM_WAIT_TIMEOUT"
DEFAULT_WAIT_SECONDS = 1800.0
# How long the leader waits for every worker's sshd to accept mpirun's login. The group's pods
# are created together and pull the same image, and the leader gets here only after its own
# pull, the repository and the engine check, so a worker still missing after this long is not
# slow: it is unreachable (a NetworkPolicy, a broken sshd). The leader then exits with a message
# naming each worker and the port; the LeaderWorkerSet recreates the group (a retry), and the
# operator reports the message in the deployment's conditions (ServingPodFailed).
ENV_WORKER_WAIT_TIMEOUT = "TRITONLLM_WORKER_WAIT_TIMEOUT"
DEFAULT_WORKER_WAIT_SECONDS = 600.0
REPORT_EVERY_SECONDS = 10.0
# A deployment's first serving pods start while the repository Job writes (tritonllm.plan.serving):
# they look for the directory it renames into place this often (a stat, nothing more).
REPOSITORY_POLL_SECONDS = 0.2
MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun")


def main(mode: str, plan_path: str) -> int:
    return run_main("launch", lambda: execute(mode, load_plan(plan_path)))


def wait_seconds(name: str = ENV_WAIT_TIMEOUT, default: float = DEFAULT_WAIT_SECONDS) -> float:
    raw = os.environ.get(name)
    try:
        return float(raw) if raw else default
    except ValueError as exc:
        raise Failure(EXIT_INVALID, f"{name}={raw!r} is not a number") from exc


class Stopped(Exception):
    """SIGTERM or SIGINT arrived before the serving command started."""


@contextlib.contextmanager
def stop_on_signal() -> Iterator[None]:
    """Let SIGTERM end the waits before the serving command starts. As the container's PID 1
    this process gets no default action for SIGTERM: without a handler the kubelet's stop would
    wait out the whole grace period, and a group being recreated would wait on its old pods."""

    def stop(signum: int, _frame: object) -> None:
        raise Stopped(signal.Signals(signum).name)

    with on_stop_signals(stop):
        yield


def execute(mode: str, plan: dict[str, Any]) -> int:
    topology = plan_topology(plan)
    if mode not in MODES:
        raise Failure(EXIT_INVALID, f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    if topology.multi_node != (mode != "single"):
        raise Failure(
            EXIT_INVALID,
            f"mode {mode} does not fit a plan for {topology.pods_per_group} pod(s) per group: "
            "single-node plans run with --mode single, multi-node plans with --mode leader/worker",
        )
    if topology.multi_node and not plan.get("ssh"):
        raise Failure(EXIT_INVALID, "a multi-node plan needs an `ssh` section")
    require_gpus(topology.gpus_per_pod, "this serving pod")
    if mode == "worker":
        return run_worker(plan)
    try:
        with stop_on_signal():
            prepare(mode, plan, topology)
    except Stopped as exc:
        log("launch", "exit", code=EXIT_OK, signal=str(exc), message="stopped before serving")
        return EXIT_OK
    argv: list[str] = list(plan["argv"])
    log("launch", "exec", mode=mode, argv=argv)
    # Under mpirun, SIGTERM goes to the local ranks (see drain_targets); its output passes
    # through line by line, the tail kept to say which rank stopped the group.
    mpi = Path(argv[0]).name in MPI_LAUNCHERS
    group = GroupDrain() if mode == "leader" else None
    targets = (group or drain_targets) if mpi else None
    result = run_child(argv, capture=mpi, signal_targets=targets)
    code = result.returncode if result.returncode >= 0 else 128 - result.returncode
    if group is not None and group.ended:
        code = EXIT_OK  # we ended the group after its leader drained: a clean stop
    log("launch", "exit", code=code, signal=result.signalled)
    if code != 0 and result.signalled is None:
        report_failure("launch", Failure(code, serving_stopped(argv, code, result.tail)))
    return code


# What mpirun (Open MPI) says when a rank ends the job, most specific first.
MPI_VERDICTS = ("mpirun noticed that process rank", "exited on signal", "returned a non-zero")


def serving_stopped(argv: list[str], code: int, tail: list[str]) -> str:
    """The termination message of a serving command that stopped on its own: mpirun's own
    verdict on which rank ended the group (and where), else the last lines of its output."""
    for verdict in MPI_VERDICTS:
        lines = [line.strip() for line in tail if verdict in line]
        if lines:
            return f"{Path(argv[0]).name} exited {code}: {lines[-1]}"
    last = " | ".join(line.strip() for line in tail[-3:] if line.strip())
    return f"{Path(argv[0]).name} exited {code}" + (f": {last}" if last else "")


def prepare(mode: str, plan: dict[str, Any], topology: Topology) -> None:
    """Everything before the serving command: the repository, the engine, the group."""
    wait_for_repository(Path(plan["modelRepository"]), wait_seconds())
    if plan.get("runtime", "engine") == "engine":
        verify_engine_for_image(plan, topology)
    elif plan.get("verifyCheckpoint"):
        verify_checkpoint(plan)
    if mode == "leader":
        prepare_leader(plan, topology)


def drain_targets(mpirun_pid: int) -> list[int]:
    """Where a graceful stop goes: the tritonservers of the ranks mpirun runs on this host, not
    mpirun itself.

    Open MPI's mpirun treats SIGTERM as an abort: it sends SIGTERM to the ranks, SIGKILLs them
    one second later (odls_base_sigkill_timeout), cutting tritonserver's drain short, and exits
    1. Signalled directly, each tritonserver drains within --exit-timeout-secs and exits 0, so
    mpirun exits 0. A second SIGTERM goes to mpirun (its abort); so does one that arrives before
    the ranks exist.
    """
    # An llmapi group's ranks are trtllm-llmapi-launch scripts: the signal goes to the
    # tritonserver rank 0's script started (the shell would die on it and orphan the server),
    # not to the LLM API workers (one ending alone would abort the group mid-drain).
    ranks = serving_processes(local_mpi_ranks(mpirun_pid))
    log("launch", "drain", ranks=ranks or None, to=None if ranks else "mpirun")
    return ranks


class GroupDrain:
    """The leader's graceful stop of a group: drain the leader's ranks, then end the others.

    The kubelet stops the leader's container; the workers' ranks get no signal (their pods may
    not be stopping at all, or are stopped separately), and mpirun waits for every rank, so the
    leader would hold its pod for the whole grace period and be killed. Rank 0 serves every
    request, so once the leader's ranks have drained nothing is in flight: then SIGTERM to mpirun
    ends the remote ranks through their daemons (Open MPI's abort), and launch exits 0.
    """

    POLL_SECONDS = 0.2

    def __init__(self, timeout: float = 40.0) -> None:  # tritonserver drains within 30 s
        self.timeout = timeout
        self.ended = False

    def __call__(self, mpirun_pid: int) -> list[int]:
        ranks = drain_targets(mpirun_pid)
        if ranks:
            threading.Thread(target=self._end_after, args=(mpirun_pid, ranks),
                             daemon=True).start()
        return ranks

    def _end_after(self, mpirun_pid: int, ranks: list[int]) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and any(map(running, ranks)):
            time.sleep(self.POLL_SECONDS)
        if running(mpirun_pid):
            log("launch", "drain", ended="group", to="mpirun")
            self.ended = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(mpirun_pid, signal.SIGTERM)


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
        time.sleep(min(REPOSITORY_POLL_SECONDS, timeout / 10))
    log("launch", "repository", path=str(repo))


def verify_engine_for_image(plan: dict[str, Any], topology: Topology) -> None:
    """The engine on the store fits the plan's topology and this image's TensorRT-LLM."""
    image: str | None = None
    if not version_check_skipped():
        image = trtllm_version()
        if image is None:
            raise Failure(EXIT_NOT_FOUND, "TensorRT-LLM is not installed in this image")
    engine_dir = Path(plan["engineDir"])
    artifact, artifact_digest = read_artifact(engine_dir)
    # The digest the build reported to the operator (None: an engine built before it was).
    expected = plan.get("engineDigest")
    if expected:
        check_reported(engine_dir, artifact, expected)
    check_engine(
        engine_dir,
        topology,
        version=image,
        subject="deployment",
        against="this image has",
        artifact=artifact,
    )
    check_gpu_product(artifact)
    verified = (verify_anchored(engine_dir, artifact, artifact_digest, expected) if expected
                else verify_engine(engine_dir, artifact, artifact_digest))
    log("launch", "verified", key=plan["engineKey"], files=verified.files,
        gib=round(verified.bytes / 2**30, 2), seconds=round(verified.seconds, 2),
        hashed=verified.hashed, digest=verified.digest, message=verified.message)
    log("launch", "engine", key=plan["engineKey"], tp=topology.tensor, pp=topology.pipeline,
        trtllmVersion=image)


def verify_checkpoint(plan: dict[str, Any]) -> None:
    """llmapi's ModelOpt-quantized checkpoint (the key's directory): its files are the ones
    its quantization Job recorded in artifact.json, and reported when the launch plan anchors a
    digest. No tp/pp or GPU check: a Hugging Face checkpoint is not split and not built for a
    GPU."""
    directory = Path(plan["engineDir"])
    artifact, artifact_digest = read_artifact(directory)
    expected = plan.get("engineDigest")
    verified = (verify_anchored(directory, artifact, artifact_digest, expected) if expected
                else verify_engine(directory, artifact, artifact_digest))
    log("launch", "verified", key=plan["engineKey"], files=verified.files,
        gib=round(verified.bytes / 2**30, 2), seconds=round(verified.seconds, 2),
        hashed=verified.hashed, digest=verified.digest, message=verified.message)


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


def prepare_leader(plan: dict[str, Any], topology: Topology) -> None:
    """What the rendered mpirun command refers to: the SSH client files and the hostfile of the
    group (written once every worker's sshd answers)."""
    cfg = plan["ssh"]
    port, workdir = int(cfg["port"]), Path(cfg["workDir"])
    hosts = ssh.worker_hosts(os.environ, topology.pods_per_group)
    ssh.prepare_client(Path(cfg["keyDir"]), workdir)
    log("launch", "waiting", what="workers", hosts=hosts, port=port)
    # Every worker must accept a real login with mpirun's own SSH command before mpirun runs.
    check = ssh.LoginCheck(str(cfg["agent"]).split())
    timeout = wait_seconds(ENV_WORKER_WAIT_TIMEOUT, DEFAULT_WORKER_WAIT_SECONDS)
    addresses = ssh.wait_for_workers(hosts, port, timeout, check=check)
    ssh.write_hostfile(workdir, [socket.gethostname(), *addresses], topology.ranks_per_node)


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
