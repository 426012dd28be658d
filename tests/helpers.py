"""Small helpers shared by the test tiers: reading rendered output, free loopback ports."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.cases import ROOT
from tritonllm.api.deployment import TritonLLMDeployment, parse_deployment
from tritonllm.render import Rendered, render_all


def example(name: str, **overrides: Any) -> TritonLLMDeployment:
    """examples/<name>.yaml parsed, with spec overrides merged in (one level deep)."""
    body = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
    for key, value in overrides.items():
        current = body["spec"].get(key)
        body["spec"][key] = {**current, **value} if isinstance(current, dict) else value
    return parse_deployment(body)


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
