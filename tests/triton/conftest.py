"""Fixtures of the triton tier: a real tritonserver (from the nvidia-pytriton wheel) on CPU.

The wheel ships Triton 2.51 with the Python backend and its stubs (shared/reference/
triton-on-cpu.md). It pins numpy<2, so it lives in its own virtual environment, created once and
cached under ~/.cache/tritonllm/pytriton-venv together with transformers and tokenizers, which our
preprocessing/postprocessing models import. Nothing is skipped when it is missing: it is installed.

Each server serves a repository rendered by tritonllm for an example spec, with ONLY the
tensorrt_llm model replaced by a CPU stand-in (tests/triton/standin/), whose config.pbtxt is the
rendered one with `backend` switched to python. The server is started with the rank-0 arguments
of tritonllm.triton.launch, bound to 127.0.0.1 on free ports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritonllm.api.deployment import TritonLLMDeployment, parse_deployment
from tritonllm.triton.launch import LaunchSpec, rank_args
from tritonllm.triton.repository import render_repository

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tritonllm"
VENV = CACHE / "pytriton-venv"
# nvidia-pytriton pins numpy<2; transformers 4.x and tokenizers work with it.
REQUIREMENTS = ("nvidia-pytriton==0.7.0", "numpy<2", "transformers>=4.40,<5", "tokenizers>=0.19,<1")
STANDIN = HERE / "standin" / "tensorrt_llm_cpu_standin.py"
STARTUP_SECONDS = 120


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


@pytest.fixture(scope="session")
def triton_install() -> TritonInstall:
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


@pytest.fixture(scope="session")
def tokenizer_dir(triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tokenizer")
    subprocess.run([str(triton_install.python), str(HERE / "make_tokenizer.py"), str(out)],
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


def _free_ports(n: int) -> list[int]:
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


def _ready(server: Server) -> bool:
    try:
        with urllib.request.urlopen(server.url("/v2/health/ready"), timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def run_server(install: TritonInstall, repo: Path, log: Path) -> Iterator[Server]:
    http, grpc, metrics = _free_ports(3)
    spec = LaunchSpec(world_size=1, model_repository=str(repo), http_port=http, grpc_port=grpc,
                      metrics_port=metrics, tritonserver=str(install.tritonserver))
    argv = [*rank_args(spec, 0), f"--backend-directory={install.backends}",
            "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1", "--allow-gpu-metrics=false"]
    server = Server(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"127.0.0.1:{metrics}", log)
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, env=install.env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _ready(server):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tritonserver did not become ready:\n{log.read_text()[-6000:]}")
            time.sleep(0.5)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def serve(
    triton_install: TritonInstall, tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Server]]:
    """serve(name, deployment) -> a running server for that deployment (one per name)."""
    servers: dict[str, Server] = {}
    with contextlib.ExitStack() as stack:

        def start(name: str, dep: TritonLLMDeployment) -> Server:
            if name not in servers:
                root = tmp_path_factory.mktemp(f"repo-{name}")
                repo = write_repository(dep, root / "models", tokenizer_dir)
                servers[name] = stack.enter_context(
                    run_server(triton_install, repo, root / "tritonserver.log"))
            return servers[name]

        yield start
