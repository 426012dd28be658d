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

The GPU recipe (tests/gpu/check.py, docs/gpu.md) runs the same stack on real GPUs: run_stack with
OnGpus (the GPU stand-in, an engine directory from `tritonllm build`, GPU metrics on, no stand-ins
for visible GPUs), from the wheel unpacked by carried_install on a machine without network.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.helpers import children, cmdline, descendants, free_ports
from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.render import render_all
from tritonllm.runtime.build import ARTIFACT_SCHEMA
from tritonllm.runtime.engine_files import engine_checksums
from tritonllm.triton.launch import TRITONSERVER, LaunchSpec, mpirun_argv
from tritonllm.triton.repository import render_repository

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tritonllm"
# The interpreter the venv (so the Python models) is made from: the test runner's, or
# $TRITONLLM_TRITON_PYTHON, e.g. a Python 3.12, whose allocator does not survive Triton 2.51's stub
# freeing Python objects without the GIL (as on the GPU machine; docs/gpu.md).
TRITON_PYTHON = os.environ.get("TRITONLLM_TRITON_PYTHON") or sys.executable
# nvidia-pytriton pins numpy<2; transformers 4.x and tokenizers work with it.
REQUIREMENTS = ("nvidia-pytriton==0.7.0", "numpy<2", "transformers>=4.40,<5", "tokenizers>=0.19,<1")
STANDIN = HERE / "standin" / "tensorrt_llm_cpu_standin.py"
# The GPU stand-in (tests/gpu/check.py): its model.py and the modules it imports from beside it.
GPU_STANDIN = {"model.py": HERE / "standin" / "tensorrt_llm_gpu_standin.py",
               STANDIN.name: STANDIN,
               "tensorrt_llm_gpu_toy.py": HERE / "standin" / "tensorrt_llm_gpu_toy.py"}
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


def venv_dir(interpreter: str) -> Path:
    """The cached venv made from `interpreter` (one per interpreter)."""
    if interpreter == sys.executable:
        return CACHE / "pytriton-venv"
    return CACHE / f"pytriton-venv-{hashlib.sha256(interpreter.encode()).hexdigest()[:12]}"


def _ensure_venv(venv: Path, interpreter: str) -> None:
    stamp = venv / "tritonllm-requirements.txt"
    wanted = "\n".join(REQUIREMENTS)
    if stamp.exists() and stamp.read_text() == wanted and (venv / "bin" / "python").exists():
        return
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([interpreter, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
         "--disable-pip-version-check", *REQUIREMENTS],
        check=True,
    )
    stamp.write_text(wanted)


def ensure_install(interpreter: str = TRITON_PYTHON) -> TritonInstall:
    """The cached pytriton venv made from `interpreter` (created on first use) and how to run
    its tritonserver."""
    CACHE.mkdir(parents=True, exist_ok=True)
    venv = venv_dir(interpreter)
    with open(CACHE / "pytriton-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time across test processes
        _ensure_venv(venv, interpreter)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c",
         "import pytriton, os; print(os.path.dirname(os.path.dirname(pytriton.__file__)))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    return _install(python, Path(site))


# What the Python models import from the machine's own python3 (with their dependencies).
MODEL_PACKAGES = ("torch", "transformers", "tokenizers")
# Run by that python3: the site-packages entries of MODEL_PACKAGES' distributions and of their
# required (not optional) dependencies, NumPy excluded; one path a line.
_CLOSURE = """
import re, sys
from importlib import metadata
todo, seen, entries = list(sys.argv[1:]), set(), set()
while todo:
    name = re.split(r"[ ;<>=!~\\[(]", todo.pop().strip(), maxsplit=1)[0].lower().replace("_", "-")
    if name in seen or name == "numpy":
        continue
    seen.add(name)
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        continue
    todo += [r for r in dist.requires or [] if "extra ==" not in r]
    for f in dist.files or []:
        if f.parts and f.parts[0] != ".." and not f.parts[0].endswith("__pycache__"):
            entries.add(str(dist.locate_file(f.parts[0])))
print("\\n".join(sorted(entries)))
"""


def carried_install(wheel: Path, dest: Path, python: Path,
                    model_wheels: Sequence[Path] = ()) -> TritonInstall:
    """The nvidia-pytriton wheel (or a zip of its files) unpacked into `dest`: no pip, no
    network (the GPU machine); a zip extraction drops the exec bits, so they are set again.

    With `model_wheels`, the Python models run in a virtual environment made from `python`:
    `model_wheels` unpacked into it, then a view of `python`'s own packages limited to
    MODEL_PACKAGES and what they require. Because the backend's stub ignores PYTHONPATH, and its
    pybind11 predates NumPy 2 (BYTES tensors come out garbled under NumPy 2), a machine whose
    python3 has NumPy 2 gets NumPy 1.26 this way; the view keeps out the machine's other
    packages built for NumPy 2, which transformers would import when it finds them."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest)
    server_dir = dest / "pytriton" / "tritonserver"
    for exe in (server_dir / "bin" / "tritonserver",
                *(server_dir / "python_backend_stubs").glob("*/triton_python_backend_stub")):
        exe.chmod(0o755)
    if not model_wheels:
        return _install(python, dest)
    venv = dest / "models-venv"
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(venv)], check=True)
    ours = Path(subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True).stdout.strip())
    for model_wheel in model_wheels:
        with zipfile.ZipFile(model_wheel) as archive:
            archive.extractall(ours)
    view = venv / "machine-packages"
    view.mkdir()
    entries = subprocess.run([str(python), "-c", _CLOSURE, *MODEL_PACKAGES], check=True,
                             capture_output=True, text=True).stdout.split()
    for entry in map(Path, entries):
        if entry.exists() and not (view / entry.name).exists():
            (view / entry.name).symlink_to(entry)
    (ours / "zz-machine-packages.pth").write_text(f"{view}\n")
    return _install(venv / "bin" / "python", dest)


def _install(python: Path, site: Path) -> TritonInstall:
    """How to run the tritonserver under `site` with Python models run by `python`."""
    pyver, libdir = subprocess.run(
        [str(python), "-c",
         "import sys, sysconfig; print(f'{sys.version_info[0]}.{sys.version_info[1]}'); "
         "print(sysconfig.get_config_var('LIBDIR'))"],
        check=True, capture_output=True, text=True,
    ).stdout.split("\n")[:2]
    server_dir = site / "pytriton" / "tritonserver"
    stub = server_dir / "backends" / "python" / "triton_python_backend_stub"
    if not stub.exists():  # the stub must match the interpreter the models run with
        shutil.copy2(server_dir / "python_backend_stubs" / pyver / stub.name, stub)
    libs = [libdir, str(site / "nvidia_pytriton.libs")]
    if os.environ.get("LD_LIBRARY_PATH"):  # where a GPU machine keeps its driver's libcuda
        libs.append(os.environ["LD_LIBRARY_PATH"])
    env = {
        **os.environ,
        # The stub embeds this libpython, which ignores PYTHONPATH but finds its prefix by
        # looking up `python3` on PATH: the venv's, so the venv's site-packages are used.
        "PATH": f"{python.parent}:{os.environ.get('PATH', '')}",
        "LD_LIBRARY_PATH": ":".join(libs),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    return TritonInstall(python, site, server_dir / "bin" / "tritonserver",
                         server_dir / "backends", env)


def python312() -> str | None:
    """A Python 3.12 on this machine ($TRITONLLM_PYTHON312, python3.12 on PATH, or pyenv's)."""
    candidates = [os.environ.get("TRITONLLM_PYTHON312"), shutil.which("python3.12"),
                  *sorted(map(str, (Path.home() / ".pyenv" / "versions").glob("3.12.*/bin/python")),
                          reverse=True)]
    for candidate in filter(None, candidates):
        out = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip() == "(3, 12)":
            return candidate
    return None


def make_tokenizer(install: TritonInstall, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(install.python), str(HERE / "make_tokenizer.py"), str(out)],
                   check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return out


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


def write_repository(dep: TritonLLMDeployment, root: Path, tokenizer: Path, *,
                     standin: Mapping[str, Path] | None = None,
                     engine_dir: str = "/no/engine/on/cpu") -> Path:
    """The rendered repository, tensorrt_llm/1/ holding the stand-in's files (by name)."""
    files = render_repository(dep, engine_dir=engine_dir, tokenizer_dir=str(tokenizer))
    files["tensorrt_llm/config.pbtxt"] = standin_config(files["tensorrt_llm/config.pbtxt"])
    for name, source in (standin or {"model.py": STANDIN}).items():
        files[f"tensorrt_llm/1/{name}"] = source.read_text()
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


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
                 ports: tuple[int, int, int], *, gpus: bool = False) -> LaunchSpec:
    """The production LaunchSpec with only binary, ports, repository and extra args adapted
    (on GPUs, Triton's GPU metrics stay on, as in production)."""
    http, grpc, metrics = ports
    extra = (f"--backend-directory={install.backends}", "--http-address=127.0.0.1",
             "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1")
    return dataclasses.replace(
        production_spec(plan),
        tritonserver=str(install.tritonserver),
        model_repository=str(repo),
        http_port=http, grpc_port=grpc, metrics_port=metrics,
        extra_args=extra if gpus else (*extra, "--allow-gpu-metrics=false"),
    )


def undo_adaptations(spec: LaunchSpec) -> LaunchSpec:
    """`spec` with the test's adaptations undone (for comparisons with the production spec)."""
    return dataclasses.replace(spec, tritonserver=TRITONSERVER, http_port=c.HTTP_PORT,
                               grpc_port=c.GRPC_PORT, metrics_port=c.METRICS_PORT, extra_args=())


def write_fake_engine(plan: dict[str, Any], engine: Path) -> Path:
    """What `tritonllm build` leaves for launch's checks; no engine (the stand-in needs none)."""
    engine.mkdir(parents=True, exist_ok=True)
    tp, pp = int(plan["tensorParallel"]), int(plan["pipelineParallel"])
    config = {"version": plan["trtllmVersion"],
              "pretrained_config": {"mapping": {"tp_size": tp, "pp_size": pp}}}
    (engine / "config.json").write_text(json.dumps(config))
    artifact = {"schema": ARTIFACT_SCHEMA, "engineKey": plan["engineKey"],
                "trtllmVersion": plan["trtllmVersion"], "tensorParallel": tp,
                "pipelineParallel": pp, "worldSize": tp * pp,
                "files": engine_checksums(engine)}  # what launch verifies before serving
    (engine / "artifact.json").write_text(json.dumps(artifact))
    return engine


def launch_env(install: TritonInstall, *, token_delay: float = 0.0,
               gpus: bool = False) -> dict[str, str]:
    env = {
        **install.env,
        "TRITONLLM_WAIT_TIMEOUT": "60",
        "PYTHONUNBUFFERED": "1",
        # NVLink multicast stays off (shared GPU hosts), also for the ranks' NCCL.
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
    }
    if not gpus:
        env |= {
            # The stand-in engine has no TensorRT-LLM version to compare with (none here).
            "TRITONLLM_SKIP_VERSION_CHECK": "1",
            # Two "visible GPUs" for launch's check (gpusPerPod = world size); no CUDA here.
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(WORLD_SIZE)),
            # Not in the production argv: 2 ranks may exceed the cores of a CI runner, and a
            # container may forbid the cross-memory attach of Open MPI's shared-memory transport.
            "OMPI_MCA_rmaps_base_oversubscribe": "1",
            "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
        }
    if token_delay:
        env[ENV_STANDIN_TOKEN_DELAY] = str(token_delay)
    return env


@dataclasses.dataclass(frozen=True)
class OnGpus:
    """How a stack on real GPUs (tests/gpu/check.py) differs from the CPU tier's: the GPU
    stand-in, an engine directory that `tritonllm build` made, GPU metrics on, the image's
    TensorRT-LLM version really compared, no stand-ins for visible GPUs, no MPI workarounds."""

    engine_dir: Path
    env: Mapping[str, str]  # e.g. PYTHONPATH to TensorRT-LLM's package metadata, rendezvous
    standin: Mapping[str, Path] = dataclasses.field(default_factory=lambda: GPU_STANDIN)
    extra_args: tuple[str, ...] = ()  # further tritonserver arguments (test-only)
    # Crashes in native code name the Python line: faulthandler on in our Python models.
    faulthandler: bool = True


@dataclasses.dataclass
class Stack:
    """A running `tritonllm launch` (mpirun, world size 2) and what it was started with."""

    server: Server
    launch: subprocess.Popen[bytes]
    spec: LaunchSpec
    plan: dict[str, Any]
    log: Path
    ready_seconds: float  # from starting `tritonllm launch` to /v2/health/ready answering 200


def _stop(proc: subprocess.Popen[bytes], seconds: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # launch, mpirun, ranks, stubs
        proc.wait()


def stack_repository(dep: TritonLLMDeployment, plan: dict[str, Any], root: Path,
                     tokenizer: Path, gpus: OnGpus | None) -> tuple[Path, Path]:
    """The model repository (with the stand-in) and the engine directory of a stack."""
    assert plan["runtime"] == "engine", plan
    if gpus is None:
        repo = write_repository(dep, root / "models", tokenizer)
        return repo, write_fake_engine(plan, root / "engine")
    repo = write_repository(dep, root / "models", tokenizer, standin=gpus.standin,
                            engine_dir=str(gpus.engine_dir))
    if gpus.faulthandler:
        for model in repo.glob("*/1/model.py"):
            model.write_text(model.read_text() + "\n\nimport faulthandler  # noqa: E402\n"
                             "faulthandler.enable(all_threads=True)\n")
    return repo, gpus.engine_dir


@contextlib.contextmanager
def run_stack(install: TritonInstall, dep: TritonLLMDeployment, root: Path, tokenizer: Path,
              pyz: Path, *, token_delay: float = 0.0, gpus: OnGpus | None = None
              ) -> Iterator[Stack]:
    """Render, then run `python -S tritonllm.pyz launch --mode single` until ready; stop it
    with SIGTERM on exit (unless the caller already ended it)."""
    plan: dict[str, Any] = render_all(dep).launch_plan
    assert gpus is not None or plan["worldSize"] == WORLD_SIZE, plan
    repo, engine = stack_repository(dep, plan, root, tokenizer, gpus)
    http, grpc, metrics = free_ports(3)
    spec = adapted_spec(plan, install, repo, (http, grpc, metrics), gpus=gpus is not None)
    if gpus is not None and gpus.extra_args:
        spec = dataclasses.replace(spec, extra_args=(*spec.extra_args, *gpus.extra_args))
    plan = {**plan, "modelRepository": str(repo), "engineDir": str(engine),
            "ports": {"http": http, "grpc": grpc, "metrics": metrics},
            "argv": mpirun_argv(spec)}
    plan_path = root / "launch.json"
    plan_path.write_text(json.dumps(plan, indent=2))
    log = root / "launch.log"
    server = Server(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"127.0.0.1:{metrics}", log)
    env = launch_env(install, token_delay=token_delay, gpus=gpus is not None)
    env |= gpus.env if gpus is not None else {}
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-S", str(pyz), "launch", "--mode", "single", "--plan",
             str(plan_path)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        deadline = started + STARTUP_SECONDS
        while not is_ready(server):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tritonllm launch did not become ready:\n"
                                   f"{log.read_text(errors='replace')[-6000:]}")
            time.sleep(0.2)
        yield Stack(server, proc, spec, plan, log, time.monotonic() - started)
    finally:
        _stop(proc)


@dataclasses.dataclass(frozen=True)
class Ranks:
    mpirun: int
    tritonserver: tuple[int, ...]  # by rank

    def stub_pids(self, rank: int) -> list[int]:
        return [p for p in descendants(self.tritonserver[rank])
                if cmdline(p)[:1] and cmdline(p)[0].endswith("triton_python_backend_stub")]

    def stubs(self, rank: int) -> list[list[str]]:
        """Python-backend stub command lines under a rank: [model.py, shm region, ...]."""
        return [cmdline(p)[1:] for p in self.stub_pids(rank)]


def ranks_of(stack: Stack) -> Ranks:
    """The processes under `tritonllm launch`: exactly one mpirun with a tritonserver per rank."""
    (mpirun,) = children(stack.launch.pid)
    assert cmdline(mpirun)[0] == "mpirun"
    servers = [p for p in children(mpirun) if cmdline(p)[0].endswith("/tritonserver")]
    assert len(servers) == stack.spec.world_size, [cmdline(p) for p in children(mpirun)]
    return Ranks(mpirun, tuple(sorted(servers, key=_rank_of)))


def _rank_of(pid: int) -> int:
    return int(next(a for a in cmdline(pid) if a.startswith("--id=rank"))[len("--id=rank"):])
