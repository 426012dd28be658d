"""A fake Triton TensorRT-LLM image for the in-pod entry point tests (`tritonllm build`/`launch`).

Everything TensorRT-LLM-specific here is a FAKE: small stdlib scripts with the real tools' names
(trtllm-build, convert_checkpoint.py, quantize.py, mpirun, sshd, nvidia-smi) that record the exact
argv they were called with into a JSON-lines file and write the outputs the real tools would (a
checkpoint/engine config.json with `.pretrained_config.mapping`, rank files), plus a fake
`huggingface_hub` package and `tensorrt_llm` package metadata on PYTHONPATH. Behaviour switches are
environment variables (FAKE_*), set per test.

The entry points themselves are real: they run from a freshly built tritonllm.pyz under
`python -S` (no site-packages: no pydantic, as in a Triton image). TRITONLLM_POD_PYTHON picks the
interpreter that runs them (default: the test's own), e.g. a python3.10 like Triton 24.x images.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

POD_PYTHON = os.environ.get("TRITONLLM_POD_PYTHON") or sys.executable
FAKE_TRTLLM_VERSION = "0.13.0"
GPU_NAME = "NVIDIA H100 80GB HBM3"

_RECORD = """
import json, os, sys
def record(tool, **extra):
    with open(os.environ["FAKE_CALLS"], "a") as f:
        f.write(json.dumps({"tool": tool, "argv": sys.argv, **extra}) + "\\n")
def options(argv):
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i]] = argv[i + 1]; i += 2
        else:
            out[argv[i]] = True; i += 1
    return out
def maybe_fail(tool):
    if os.environ.get("FAKE_ENOSPC") == tool:
        print("OSError: [Errno 28] No space left on device: 'rank0.safetensors'", flush=True)
        sys.exit(1)
    if os.environ.get("FAKE_FAIL") == tool:
        print(f"{tool}: simulated crash", flush=True)
        sys.exit(3)
"""

_CONVERT = (
    _RECORD
    + """
from pathlib import Path
TOOL = Path(sys.argv[0]).name
record(TOOL)
maybe_fail(TOOL)
o = options(sys.argv[1:])
tp, pp = int(o.get("--tp_size", 1)), int(o.get("--pp_size", 1))
out = Path(o["--output_dir"]); out.mkdir(parents=True, exist_ok=True)
mapping = {"world_size": tp * pp, "tp_size": tp, "pp_size": pp}
(out / "config.json").write_text(json.dumps({"architecture": "Fake", "mapping": mapping}))
for r in range(tp * pp):
    (out / f"rank{r}.safetensors").write_bytes(b"fake weights")
"""
)

# The SIMULATED hf_ptq.py of the CPU stand-in image, without its shebang line.
_HF_PTQ = (
    Path(__file__).resolve().parent.parent / "images" / "triton-standin" / "fakes" / "hf_ptq.py"
).read_text().split("\n", 1)[1]

_TRTLLM_BUILD = (
    _RECORD
    + """
from pathlib import Path
record("trtllm-build")
maybe_fail("trtllm-build")
o = options(sys.argv[1:])
ckpt = json.loads((Path(o["--checkpoint_dir"]) / "config.json").read_text())
mapping = dict(ckpt["mapping"])
if os.environ.get("FAKE_ENGINE_TP"):
    mapping["tp_size"] = int(os.environ["FAKE_ENGINE_TP"])
out = Path(o["--output_dir"]); out.mkdir(parents=True, exist_ok=True)
config = {"version": os.environ.get("FAKE_TRTLLM_VERSION", "0.13.0"),
          "pretrained_config": {"architecture": "Fake", "mapping": mapping},
          "build_config": {"max_batch_size": int(o["--max_batch_size"])}}
(out / "config.json").write_text(json.dumps(config))
for r in range(mapping["tp_size"] * mapping.get("pp_size", 1)):
    (out / f"rank{r}.engine").write_bytes(b"fake engine")
"""
)

_MPIRUN = (
    _RECORD
    + """
import signal, time
from pathlib import Path
marks = Path(os.environ["FAKE_MARKS"])
def on_term(signum, frame):
    (marks / "mpirun.terminated").write_text(str(signum))
    sys.exit(int(os.environ.get("FAKE_TERM_EXIT", "0")))
signal.signal(signal.SIGTERM, on_term)
record("mpirun")
(marks / "mpirun.started").write_text(str(os.getpid()))
time.sleep(float(os.environ.get("FAKE_MPIRUN_SLEEP", "0")))
sys.exit(int(os.environ.get("FAKE_MPIRUN_EXIT", "0")))
"""
)

_SSHD = (
    _RECORD
    + """
import signal, time
from pathlib import Path
config = Path(sys.argv[sys.argv.index("-f") + 1]).read_text()
record("sshd", config=config)
marks = Path(os.environ["FAKE_MARKS"])
def on_term(signum, frame):
    sys.exit(255)
signal.signal(signal.SIGTERM, on_term)
(marks / "sshd.started").write_text(str(os.getpid()))
time.sleep(float(os.environ.get("FAKE_SSHD_SLEEP", "60")))
"""
)

_NVIDIA_SMI = """
import os, sys
n = int(os.environ.get("FAKE_GPUS", "0"))
name = os.environ.get("FAKE_GPU_NAME", "@GPU_NAME@")
if "-L" in sys.argv:
    for i in range(n):
        print(f"GPU {i}: {name} (UUID: GPU-fake-{i})")
else:
    for _ in range(n):
        print(name)
""".replace("@GPU_NAME@", GPU_NAME)

_HUGGINGFACE_HUB = '''
"""FAKE huggingface_hub: serves a small file list and writes tiny files; records calls."""
import json, os
from pathlib import Path

def _record(**call):
    with open(os.environ["FAKE_CALLS"], "a") as f:
        f.write(json.dumps({"tool": "huggingface_hub", **call}) + "\\n")

FILES = {"config.json": 600, "generation_config.json": 100, "model.safetensors": 4000,
         "pytorch_model.bin": 4000, "tf_model.h5": 4000, "original/consolidated.00.pth": 4000,
         "tokenizer.json": 2000, "tokenizer_config.json": 300, "special_tokens_map.json": 100}

class _Response:
    def __init__(self, status_code):
        self.status_code = status_code

class HfHubHTTPError(OSError):
    def __init__(self, message, status_code):
        super().__init__(message)
        self.response = _Response(status_code)

class GatedRepoError(HfHubHTTPError):
    pass

class _Sibling:
    def __init__(self, name, size):
        self.rfilename, self.size = name, size

class _Info:
    def __init__(self, files):
        self.sha = "0123456789abcdef"
        self.siblings = [_Sibling(n, s) for n, s in files.items()]

class HfApi:
    def model_info(self, repo_id, revision=None, files_metadata=False, token=None):
        _record(call="model_info", repo=repo_id, revision=revision, token=token)
        status = int(os.environ.get("FAKE_HF_STATUS", "0"))
        if status == 403:
            raise GatedRepoError(f"403 Client Error: access to {repo_id} is restricted", 403)
        if status:
            raise HfHubHTTPError(f"{status} Client Error for {repo_id}", status)
        return _Info(json.loads(os.environ.get("FAKE_HF_FILES", "null")) or FILES)

def snapshot_download(repo_id, revision=None, local_dir=None, token=None, allow_patterns=None):
    _record(call="snapshot_download", repo=repo_id, revision=revision, local_dir=local_dir,
            allow_patterns=allow_patterns)
    root = Path(local_dir)
    for name in allow_patterns:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name == "config.json":
            arch = os.environ.get("FAKE_ARCH", "LlamaForCausalLM")
            path.write_text(json.dumps({"architectures": [arch]}))
        else:
            path.write_bytes(b"x" * 16)
    return local_dir
'''


class FakeImage:
    """A temporary directory laid out like the parts of a Triton image the entry points use."""

    def __init__(self, root: Path, pyz: Path) -> None:
        self.root = root
        self.pyz = pyz
        self.bin = root / "bin"
        self.site = root / "site"
        self.examples = root / "app" / "tensorrt_llm" / "examples"
        self.calls_file = root / "calls.jsonl"
        self.marks = root / "marks"
        for d in (self.bin, self.site, self.examples, self.marks):
            d.mkdir(parents=True, exist_ok=True)
        self.calls_file.touch()
        self._tool("trtllm-build", _TRTLLM_BUILD)
        self._tool("mpirun", _MPIRUN)
        self._tool("sshd", _SSHD)
        self._tool("nvidia-smi", _NVIDIA_SMI)
        (self.bin / "python3").symlink_to(sys.executable)
        # Converters: old layout for most, the newer models/core/ layout for llama, and
        # models/contrib/ where falcon went last.
        for rel in ("gpt/convert_checkpoint.py", "models/core/llama/convert_checkpoint.py",
                    "models/contrib/falcon/convert_checkpoint.py", "quantization/quantize.py"):
            self._script(self.examples / rel, _CONVERT)
        # ModelOpt's hf_ptq.py: the stand-in image's fake, one implementation for both.
        self.modelopt_examples = root / "app" / "Model-Optimizer" / "examples"
        self._script(self.modelopt_examples / "llm_ptq" / "hf_ptq.py", _HF_PTQ)
        hub = self.site / "huggingface_hub"
        hub.mkdir()
        (hub / "__init__.py").write_text(_HUGGINGFACE_HUB)
        self.set_trtllm_version(FAKE_TRTLLM_VERSION)

    def _script(self, path: Path, body: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!{sys.executable} -S\n{body}")
        path.chmod(0o755)

    def _tool(self, name: str, body: str) -> None:
        self._script(self.bin / name, body)

    def set_trtllm_version(self, version: str) -> None:
        """The TensorRT-LLM version this fake image 'has' (package metadata, as pip leaves it)."""
        for old in self.site.glob("tensorrt_llm-*.dist-info"):
            for f in old.iterdir():
                f.unlink()
            old.rmdir()
        info = self.site / f"tensorrt_llm-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: {version}\n"
        )

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "PYTHONPATH": str(self.site),
            "HOME": str(self.root),
            "FAKE_CALLS": str(self.calls_file),
            "FAKE_MARKS": str(self.marks),
            "FAKE_GPUS": "8",
            "PYTHONUNBUFFERED": "1",
        }
        env.update(extra)
        return env

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        lines = self.calls_file.read_text().splitlines()
        out = [json.loads(line) for line in lines if line.strip()]
        return [c for c in out if tool is None or c["tool"] == tool]

    def commands(self) -> list[list[str]]:
        """Every tool command line, as the plan's argv spells it (python3 SCRIPT ... for
        scripts run by python3)."""
        out = []
        for c in self.calls():
            if c["tool"] == "huggingface_hub":
                continue
            argv = c["argv"]
            out.append(["python3", *argv] if argv[0].endswith(".py") else
                       [Path(argv[0]).name, *argv[1:]])
        return out

    def tritonllm(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the real entry point from the zipapp, stdlib only (python -S)."""
        return subprocess.run(
            [POD_PYTHON, "-S", str(self.pyz), *args],
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [POD_PYTHON, "-S", str(self.pyz), *args],
            env=env or self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )


def relocate(data: Any, root: Path) -> Any:
    """A rendered plan with every /store, /etc/tritonllm, secret-file and MPI working-directory
    path moved
    under `root`, and the example roots pointed at the fake image (a test-only rewrite;
    production plans are as rendered)."""
    if isinstance(data, dict):
        return {k: relocate(v, root) for k, v in data.items()}
    if isinstance(data, list):
        return [relocate(v, root) for v in data]
    if isinstance(data, str):
        for prefix in ("/store", "/etc/tritonllm", "/tmp/tritonllm-mpi", "/var/run/secrets"):
            data = data.replace(f"{prefix}/", f"{root}{prefix}/")
            if data == prefix:
                data = f"{root}{prefix}"
        return data
    return data


def write_plan(path: Path, plan: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan, indent=2))
    return path


@pytest.fixture
def image(tmp_path: Path, pyz: Path) -> Iterator[FakeImage]:
    yield FakeImage(tmp_path / "image", pyz)


