"""The CPU serving stack of the triton tier, shared by its fixtures and bench/triton_pipeline.py.

A real tritonserver 2.51 (nvidia-pytriton wheel, shared/reference/triton-on-cpu.md) serves a model
repository rendered by tritonllm, with ONLY the tensorrt_llm model replaced by a CPU stand-in
(standin/), and it is started the way a serving pod starts it: `tritonllm launch --mode single`
(the zipapp, under `python -S`) runs the launch plan's mpirun command, a REAL Open MPI mpirun, with
world size 2. Rank 0 serves HTTP/gRPC/metrics and loads every model; rank 1 serves nothing and
loads only tensorrt_llm; each rank has its own Python-backend shm prefix.

The launch plan is the one tritonllm renders for the deployment; its argv is rebuilt from a
LaunchSpec that differs from the production one only in the tritonserver binary, the ports, the
model repository and extra arguments for this machine (backend directory, bind to 127.0.0.1),
and the test checks that the rest is the production argv. The fake engine directory holds an
artifact.json and config.json with the deployment's tp/pp (the stand-in ignores the engine); the
"visible GPUs" are CUDA_VISIBLE_DEVICES=0,1, which the launcher's GPU check reads.

The wheel pins numpy<2, so it lives in its own virtual environment, created once and cached under
~/.cache/tritonllm/pytriton-venv together with transformers and tokenizers, which our
preprocessing/postprocessing models import. Nothing is skipped when it is missing: it is
installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment, parse_deployment
from tritonllm.render import render_all
from tritonllm.runtime.pyz import build_pyz
from tritonllm.triton.launch import TRITONSERVER, LaunchSpec, mpirun_argv
from tritonllm.triton.repository import render_repository

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tritonllm"
VENV = CACHE / "pytriton-venv"
# nvidia-pytriton pins numpy<2; transformers 4.x and tokenizers work with it.
REQUIREMENTS = ("nvidia-pytriton==0.7.0", "numpy<2", "transformers>=4.40,<5", "tokenizers>=0.19,<1")
STANDIN = HERE / "standin" / "tensorrt_llm_cpu_standin.py"
# Read by the stand-in: seconds it waits per generated token (to have requests in flight).
ENV_STANDIN_TOKEN_DELAY = "TRITONLLM_STANDIN_TOKEN_DELAY"
STARTUP_SECONDS = 180
WORLD_SIZE = 2


@dataclasses.dataclass(frozen=True)
class TritonInstall:
    python: Path
    site_packages: Path
    tritonserver: Path
    backends: Path
    env: dict[str, str]


def _venv_python() -> Path:
    return VENV / "bin" / "python"


def _ensure_venv() -> None:
    stamp = VENV / "tritonllm-requirements.txt"
    wanted = "\n".join(REQUIREMENTS)
    if stamp.exists() and stamp.read_text() == wanted and _venv_python().exists():
        return
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(_venv_python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         *REQUIREMENTS],
        check=True,
    )
    stamp.write_text(wanted)


def ensure_install() -> TritonInstall:
    """The cached pytriton venv (created on first use) and how to run its tritonserver."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "pytriton-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time across test processes
        _ensure_venv()
    python = _venv_python()
    info = subprocess.run(
        [str(python), "-c",
         "import pytriton, os, sys, sysconfig; "
         "print(os.path.dirname(os.path.dirname(pytriton.__file__))); "
         "print(f'{sys.version_info[0]}.{sys.version_info[1]}'); "
         "print(sysconfig.get_config_var('LIBDIR'))"],
        check=True, capture_output=True, text=True,
    ).stdout.split("\n")
    site, pyver, libdir = Path(info[0]), info[1], info[2]
    server_dir = site / "pytriton" / "tritonserver"
    stub = server_dir / "backends" / "python" / "triton_python_backend_stub"
    if not stub.exists():  # the stub must match the interpreter the models run with
        shutil.copy2(server_dir / "python_backend_stubs" / pyver / stub.name, stub)
    env = {
        **os.environ,
        # The stub embeds this libpython, which ignores PYTHONPATH but finds its prefix by
        # looking up `python3` on PATH: the venv's, so the venv's site-packages are used.
        "PATH": f"{python.parent}:{os.environ.get('PATH', '')}",
        "LD_LIBRARY_PATH": f"{libdir}:{site / 'nvidia_pytriton.libs'}",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    return TritonInstall(python, site, server_dir / "bin" / "tritonserver",
                         server_dir / "backends", env)


def make_tokenizer(install: TritonInstall, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(install.python), str(HERE / "make_tokenizer.py"), str(out)],
                   check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return out


def example(name: str, **overrides: Any) -> TritonLLMDeployment:
    """An example CR with spec overrides merged in (one level deep)."""
    body = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
    for key, value in overrides.items():
        current = body["spec"].get(key)
        body["spec"][key] = {**current, **value} if isinstance(current, dict) else value
    return parse_deployment(body)


def standin_config(rendered: str) -> str:
    """The rendered tensorrt_llm config with backend python; inputs and outputs unchanged."""
    cfg = text_format.Parse(rendered, mc.ModelConfig())
    assert cfg.backend == "tensorrtllm"
    standin = mc.ModelConfig()
    standin.CopyFrom(cfg)
    standin.backend = "python"
    text = text_format.MessageToString(standin)
    again = text_format.Parse(text, mc.ModelConfig())
    assert list(again.input) == list(cfg.input) and list(again.output) == list(cfg.output)
    return text


def write_repository(dep: TritonLLMDeployment, root: Path, tokenizer: Path) -> Path:
    files = render_repository(dep, engine_dir="/no/engine/on/cpu", tokenizer_dir=str(tokenizer))
    files["tensorrt_llm/config.pbtxt"] = standin_config(files["tensorrt_llm/config.pbtxt"])
    files["tensorrt_llm/1/model.py"] = STANDIN.read_text()
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


def free_ports(n: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


@dataclasses.dataclass(frozen=True)
class Server:
    http: str  # host:port
    grpc: str
    metrics: str
    log: Path

    def url(self, path: str) -> str:
        return f"http://{self.http}{path}"


def is_ready(server: Server) -> bool:
    try:
        with urllib.request.urlopen(server.url("/v2/health/ready"), timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


# --- the launch plan ---------------------------------------------------------------------------


def production_spec(plan: dict[str, Any]) -> LaunchSpec:
    """The LaunchSpec behind a rendered single-node plan; checked to give the plan's argv."""
    spec = LaunchSpec(world_size=int(plan["worldSize"]), model_repository=plan["modelRepository"])
    assert mpirun_argv(spec) == plan["argv"], "the plan's argv is not mpirun_argv(LaunchSpec)"
    return spec


def adapted_spec(plan: dict[str, Any], install: TritonInstall, repo: Path,
              ports: tuple[int, int, int]) -> LaunchSpec:
    """The production LaunchSpec with only binary, ports, repository and extra args adapted."""
    http, grpc, metrics = ports
    return dataclasses.replace(
        production_spec(plan),
        tritonserver=str(install.tritonserver),
        model_repository=str(repo),
        http_port=http, grpc_port=grpc, metrics_port=metrics,
        extra_args=(f"--backend-directory={install.backends}", "--http-address=127.0.0.1",
                    "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
                    "--allow-gpu-metrics=false"),
    )


def undo_adaptations(spec: LaunchSpec) -> LaunchSpec:
    """`spec` with the test's adaptations undone (for comparisons with the production spec)."""
    return dataclasses.replace(spec, tritonserver=TRITONSERVER, http_port=c.HTTP_PORT,
                               grpc_port=c.GRPC_PORT, metrics_port=c.METRICS_PORT, extra_args=())


def write_fake_engine(plan: dict[str, Any], engine: Path) -> Path:
    """What `tritonllm build` leaves for launch's checks; no engine (the stand-in needs none)."""
    engine.mkdir(parents=True, exist_ok=True)
    tp, pp = int(plan["tensorParallel"]), int(plan["pipelineParallel"])
    artifact = {"schema": 1, "engineKey": plan["engineKey"], "trtllmVersion": plan["trtllmVersion"],
                "tensorParallel": tp, "pipelineParallel": pp, "worldSize": tp * pp}
    (engine / "artifact.json").write_text(json.dumps(artifact))
    config = {"version": plan["trtllmVersion"],
              "pretrained_config": {"mapping": {"tp_size": tp, "pp_size": pp}}}
    (engine / "config.json").write_text(json.dumps(config))
    return engine


def launch_env(install: TritonInstall, *, token_delay: float = 0.0) -> dict[str, str]:
    env = {
        **install.env,
        # The stand-in engine has no TensorRT-LLM version to compare with (there is none here).
        "TRITONLLM_SKIP_VERSION_CHECK": "1",
        # Two "visible GPUs" for launch's check (gpusPerPod = world size); no CUDA here at all.
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(WORLD_SIZE)),
        "TRITONLLM_WAIT_TIMEOUT": "60",
        # Not in the production argv: 2 ranks may exceed the cores of a CI runner, and a
        # container may forbid the cross-memory attach of Open MPI's shared-memory transport.
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
        "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
        "PYTHONUNBUFFERED": "1",
    }
    if token_delay:
        env[ENV_STANDIN_TOKEN_DELAY] = str(token_delay)
    return env


@dataclasses.dataclass
class Stack:
    """A running `tritonllm launch` (mpirun, world size 2) and what it was started with."""

    server: Server
    launch: subprocess.Popen[bytes]
    spec: LaunchSpec
    plan: dict[str, Any]
    log: Path


def _stop(proc: subprocess.Popen[bytes], seconds: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # launch, mpirun, ranks, stubs
        proc.wait()


@contextlib.contextmanager
def run_stack(install: TritonInstall, dep: TritonLLMDeployment, root: Path, tokenizer: Path,
              pyz: Path, *, token_delay: float = 0.0) -> Iterator[Stack]:
    """Render, then run `python -S tritonllm.pyz launch --mode single` until ready; stop it
    with SIGTERM on exit (unless the caller already ended it)."""
    repo = write_repository(dep, root / "models", tokenizer)
    plan: dict[str, Any] = render_all(dep).launch_plan
    assert plan["worldSize"] == WORLD_SIZE and plan["runtime"] == "engine", plan
    http, grpc, metrics = free_ports(3)
    spec = adapted_spec(plan, install, repo, (http, grpc, metrics))
    plan = {**plan, "modelRepository": str(repo),
            "engineDir": str(write_fake_engine(plan, root / "engine")),
            "ports": {"http": http, "grpc": grpc, "metrics": metrics},
            "argv": mpirun_argv(spec)}
    plan_path = root / "launch.json"
    plan_path.write_text(json.dumps(plan, indent=2))
    log = root / "launch.log"
    server = Server(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"127.0.0.1:{metrics}", log)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-S", str(pyz), "launch", "--mode", "single", "--plan",
             str(plan_path)],
            env=launch_env(install, token_delay=token_delay), stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not is_ready(server):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tritonllm launch did not become ready:\n"
                                   f"{log.read_text(errors='replace')[-6000:]}")
            time.sleep(0.5)
        yield Stack(server, proc, spec, plan, log)
    finally:
        _stop(proc)


def pyz_archive(out_dir: Path) -> Path:
    return build_pyz(out_dir / "tritonllm.pyz")


# --- processes and sockets (from /proc) ----------------------------------------------------------


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def children(pid: int) -> list[int]:
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return sorted(p for p in pids if _ppid(p) == pid)


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def listening_ports(pid: int) -> set[int]:
    """TCP ports on which the process holds a listening socket (/proc/<pid>/fd + /proc/net)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
