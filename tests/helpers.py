"""Helpers shared by the test tiers (and the benches), each defined here once: the examples,
reading rendered output, free loopback ports, the in-pod zipapp, a process tree read from /proc,
and a gRPC stream client of Triton."""

from __future__ import annotations

import contextlib
import os
import queue
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.cases import ROOT
from tritonllm.api.deployment import TritonLLMDeployment, parse_deployment
from tritonllm.render import Rendered, render_all
from tritonllm.runtime.pyz import build_pyz

# --- the examples ------------------------------------------------------------------------------


def example_body(name: str, **overrides: Any) -> dict[str, Any]:
    """examples/<name>.yaml as written (a dict), with spec overrides merged in (one level
    deep)."""
    body: dict[str, Any] = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
    for key, value in overrides.items():
        current = body["spec"].get(key)
        body["spec"][key] = {**current, **value} if isinstance(current, dict) else value
    return body


def example(name: str, **overrides: Any) -> TritonLLMDeployment:
    """examples/<name>.yaml parsed, with spec overrides merged in (one level deep)."""
    return parse_deployment(example_body(name, **overrides))


def render_example(name: str) -> Rendered:
    return render_all(example(name))


def pbtxt(text: str) -> model_config_pb2.ModelConfig:
    """Parse a config.pbtxt strictly with Triton's own schema."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def params(cfg: model_config_pb2.ModelConfig) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


def container(
    obj: dict[str, Any], name: str = "triton", template: str = "template"
) -> dict[str, Any]:
    spec = obj["spec"]
    pod = spec[template] if template in spec else spec["leaderWorkerTemplate"][template]
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def ranks(argv: list[str]) -> int:
    """Number of MPI ranks (-n 1 segments) in an mpirun command."""
    return sum(1 for i, a in enumerate(argv[:-1]) if a == "-n" and argv[i + 1] == "1")


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports on 127.0.0.1 that were free a moment ago (all bound at once)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


# --- the in-pod zipapp ---------------------------------------------------------------------------


def pyz_archive(out_dir: Path) -> Path:
    """`tritonllm.pyz` (what the operator image carries for the pods) built into `out_dir`."""
    return build_pyz(out_dir / "tritonllm.pyz")


@pytest.fixture(scope="session")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zipapp, built once per session (tests/conftest.py registers this module's
    fixtures)."""
    return pyz_archive(tmp_path_factory.mktemp("pyz"))


# --- processes, from /proc ---------------------------------------------------------------------


def pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def cmdline(pid: int) -> list[str]:
    """A process's argv; empty once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name: state, ppid, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def ppid(pid: int) -> int | None:
    try:
        return int(_stat_fields(pid)[1])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return _stat_fields(pid)[0] != "Z"
    except (OSError, IndexError):
        return False


def children(pid: int) -> list[int]:
    return sorted(p for p in pids() if ppid(p) == pid)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from one pass over /proc), parents before their children."""
    parents = {p: parent for p in pids() if (parent := ppid(p)) is not None}
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        kids = sorted(p for p, parent in parents.items() if parent == current)
        out += kids
        todo += kids
    return out


def proc_status(pid: int, field: str) -> str:
    """One field of /proc/<pid>/status ("Uid", "VmRSS", "Cpus_allowed_list"), as written."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise ValueError(f"no {field} in /proc/{pid}/status")


def cpus_allowed(pid: int) -> str:
    """The CPUs a process may run on (e.g. '0-31')."""
    return proc_status(pid, "Cpus_allowed_list")


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of a process in MiB (VmHWM: its peak); NaN when the field is missing."""
    try:
        return int(proc_status(pid, field).split()[0]) / 1024
    except ValueError:
        return float("nan")


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


# --- Triton's gRPC stream ------------------------------------------------------------------------


def prompt_inputs(prompt: str, max_tokens: int) -> list[tuple[str, str, Any]]:
    """The inputs of a streamed text request to the ensemble or the BLS model."""
    return [("text_input", "BYTES", np.array([[prompt.encode()]], object)),
            ("max_tokens", "INT32", np.array([[max_tokens]], np.int32)),
            ("stream", "BOOL", np.array([[True]], bool))]


def grpc_inputs(inputs: Sequence[tuple[str, str, Any]]) -> list[Any]:
    """tritonclient gRPC input tensors from (name, Triton datatype, numpy array)."""
    tensors = []
    for name, dtype, value in inputs:
        tensor = grpcclient.InferInput(name, list(value.shape), dtype)
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    return tensors


def grpc_stream(address: str, model: str, inputs: Sequence[tuple[str, str, Any]], *,
                outputs: Sequence[str] | None = None, timeout: float = 60) -> list[Any]:
    """Every response (tritonclient InferResult) of one decoupled gRPC stream request, up to
    the final one. `inputs` are (name, Triton datatype, numpy array); with `outputs`, the
    request asks for those alone (as gRPC clients do). An error in the stream raises."""
    responses: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(address)
    try:
        client.start_stream(callback=lambda result, error: responses.put((result, error)))
        requested = [grpcclient.InferRequestedOutput(o) for o in outputs] if outputs else None
        client.async_stream_infer(model, grpc_inputs(inputs), outputs=requested,
                                  enable_empty_final_response=True)
        results = []
        while True:
            result, error = responses.get(timeout=timeout)
            if error is not None:
                raise RuntimeError(str(error))
            results.append(result)
            if result.get_response().parameters["triton_final_response"].bool_param:
                return results
    finally:
        client.stop_stream()
        client.close()


def stream_texts(results: Sequence[Any], output: str = "text_output") -> list[str]:
    """The text each streamed response carries (the final, empty one carries none)."""
    return [value.reshape(-1)[0].decode() for result in results
            if (value := result.as_numpy(output)) is not None]
