"""A real tritonserver serving the llmapi repository tritonllm renders, with the LLM-API stand-in.

Shared by tests/triton/test_llmapi_model.py and bench/llmapi_concurrency.py.

What runs for real: tritonserver 2.51 and its Python backend (nvidia-pytriton wheel, the cached
venv of stack.py), started with the argv of the deployment's rendered launch plan (runtime
llmapi is one tritonserver, no mpirun) with only the binary, the repository, the ports and this
machine's extra arguments adapted; the model repository exactly as rendered (config.pbtxt,
model.yaml, our model.py). What is SIMULATED: the `tensorrt_llm` package, the CPU stand-in's
LLM API (images/triton-standin/fakes/tensorrt_llm/), installed the way the stand-in image has
it: importable from site-packages, not from the repository.

The Python backend's stub ignores PYTHONPATH and takes its site-packages from the `python3` on
PATH, so the stand-in package is made importable by an overlay virtual environment whose
site-packages holds one .pth file: the pytriton venv's site-packages (numpy, yaml, transformers)
and the stand-in's package directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.helpers import free_ports
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.render import render_all
from tritonllm.triton.launch import TRITONSERVER
from tritonllm.triton.repository import render_repository

from .stack import ROOT, Server, TritonInstall, is_ready

STANDIN_PACKAGES = ROOT / "images" / "triton-standin" / "fakes"  # holds tensorrt_llm/
# Outside the image the stand-in package has no dist-info; this sets its version instead.
ENV_STANDIN_VERSION = "TRITONLLM_STANDIN_TRTLLM_VERSION"
ENV_STANDIN_TABLE = "TRITONLLM_STANDIN_LLM_ARGS"
TABLES = ROOT / "tests" / "contract" / "tables"
MODEL = "tensorrt_llm"
STARTUP_SECONDS = 120


def overlay_venv(install: TritonInstall, root: Path, packages: Path = STANDIN_PACKAGES) -> Path:
    """A venv whose Python sees the pytriton venv's packages and `packages` (the stand-in's
    tensorrt_llm); returns its bin directory, to put first on PATH."""
    venv = root / "standin-venv"
    if not (venv / "bin" / "python3").exists():
        subprocess.run([str(install.python), "-m", "venv", "--without-pip", str(venv)],
                       check=True)
    purelib = Path(subprocess.run(
        [str(venv / "bin" / "python3"), "-c",
         "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True).stdout.strip())
    # An `import` line of a .pth runs: addsitedir also reads the pytriton venv's own .pth files.
    (purelib / "tritonllm-standin.pth").write_text(
        f"import site; site.addsitedir({str(install.site_packages)!r})\n{packages}\n")
    return venv / "bin"


def checkpoint(tokenizer_dir: Path, out: Path, **config: Any) -> Path:
    """A tiny GPT-2 style checkpoint directory for the stand-in: a tokenizer and a config.json
    (`config` overrides its keys, e.g. the stand-in's simulated fault)."""
    shutil.copytree(tokenizer_dir, out)
    body = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 256,
            "vocab_size": 32, "torch_dtype": "float16", **config}
    (out / "config.json").write_text(json.dumps(body))
    return out


def write_repository(dep: TritonLLMDeployment, root: Path, model_dir: Path,
                     tokenizer_dir: Path, source: Mapping[str, str] | None = None) -> Path:
    """The llmapi repository as rendered (or `source`: files rendered elsewhere, e.g. by an
    older checkout), written under root/models."""
    files = source or render_repository(dep, engine_dir=str(model_dir),
                                        tokenizer_dir=str(tokenizer_dir))
    repo = root / "models"
    for path, text in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return repo


def adapted_argv(plan: Mapping[str, Any], install: TritonInstall, repo: Path,
                 ports: tuple[int, int, int]) -> list[str]:
    """The launch plan's tritonserver argv with binary, repository and ports adapted, and this
    machine's arguments appended (backend directory, loopback, no GPU metrics)."""
    argv = list(plan["argv"])
    assert plan["runtime"] == "llmapi" and argv[0] == TRITONSERVER, argv
    http, grpc, metrics = ports
    replaced = {"--model-repository": str(repo), "--http-port": str(http),
                "--grpc-port": str(grpc), "--metrics-port": str(metrics)}
    out = [str(install.tritonserver)]
    for arg in argv[1:]:
        key = arg.split("=", 1)[0]
        out.append(f"{key}={replaced.pop(key)}" if key in replaced else arg)
    assert not replaced, f"the plan's argv lacks {sorted(replaced)}"
    return [*out, f"--backend-directory={install.backends}", "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
            "--allow-gpu-metrics=false"]


@dataclasses.dataclass
class LlmapiServer:
    server: Server
    proc: subprocess.Popen[bytes]
    repo: Path
    ready_seconds: float

    def log(self) -> str:
        return self.server.log.read_text(errors="replace")


def standin_env(install: TritonInstall, bin_dir: Path, version: str,
                extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: the overlay first on PATH, the stand-in's version, and the
    contract table of that version's LLM arguments (what the image installs with the package;
    the stand-in's LLM() checks its keys against it)."""
    table = TABLES / f"llm_args-{version}.json"
    return {**install.env, "PATH": f"{bin_dir}:{install.env['PATH']}",
            ENV_STANDIN_VERSION: version, ENV_STANDIN_TABLE: str(table),
            "PYTHONUNBUFFERED": "1", **(extra or {})}


def start(install: TritonInstall, dep: TritonLLMDeployment, root: Path, model_dir: Path,
          tokenizer_dir: Path, *, env: Mapping[str, str] | None = None,
          source: Mapping[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Server, Path]:
    """Start tritonserver on the rendered repository; does not wait for it."""
    repo = write_repository(dep, root, model_dir, tokenizer_dir, source)
    ports = free_ports(3)
    argv = adapted_argv(render_all(dep).launch_plan, install, repo, (ports[0], ports[1], ports[2]))
    bin_dir = overlay_venv(install, root)
    log = root / "tritonserver.log"
    server = Server(f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}", log)
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=standin_env(install, bin_dir, str(dep.trtllm_version),
                                                      env),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, server, repo


def stop(proc: subprocess.Popen[bytes], seconds: float = 30) -> None:
    if proc.poll() is None:
        proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=seconds)
    # tritonserver and whatever outlived it in its group: a stub (and the LLM's worker ranks)
    # whose server exited on its own would otherwise be left behind.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 9)
    proc.wait()


@contextlib.contextmanager
def serve(install: TritonInstall, dep: TritonLLMDeployment, root: Path, model_dir: Path,
          tokenizer_dir: Path, *, env: Mapping[str, str] | None = None,
          source: Mapping[str, str] | None = None) -> Iterator[LlmapiServer]:
    """A ready tritonserver serving the llmapi repository (stopped on exit). A port taken
    between choosing it and binding it (other processes on this machine) means a new start."""
    for attempt in range(3):
        started = time.monotonic()
        proc, server, repo = start(install, dep, root, model_dir, tokenizer_dir, env=env,
                                   source=source)
        try:
            while not is_ready(server):
                if proc.poll() is not None or time.monotonic() > started + STARTUP_SECONDS:
                    break
                time.sleep(0.2)
            else:
                yield LlmapiServer(server, proc, repo, time.monotonic() - started)
                return
        finally:
            stop(proc)
        log = server.log.read_text(errors="replace")
        if "already in use" not in log or attempt == 2:
            raise RuntimeError(f"tritonserver (llmapi) did not become ready:\n{log[-6000:]}")
    raise AssertionError("unreachable")


def failed_load(install: TritonInstall, dep: TritonLLMDeployment, root: Path, model_dir: Path,
                tokenizer_dir: Path, *, env: Mapping[str, str] | None = None,
                seconds: float = STARTUP_SECONDS) -> tuple[int, str]:
    """Start a server whose model must fail to load: (tritonserver's exit code, its log)."""
    proc, server, _ = start(install, dep, root, model_dir, tokenizer_dir, env=env)
    try:
        code = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        stop(proc)
        raise RuntimeError("tritonserver kept running although its model should not load:\n"
                           + server.log.read_text(errors="replace")[-4000:]) from None
    return code, server.log.read_text(errors="replace")
