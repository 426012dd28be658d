"""Fixtures of the triton tier: a real tritonserver (nvidia-pytriton wheel) on CPU, started by
`tritonllm launch` through a real Open MPI mpirun with world size 2 (see stack.py).

Each stack serves a repository rendered by tritonllm for an example spec (engine tp=2, so world
size 2), with ONLY the tensorrt_llm model replaced by a CPU stand-in (tests/triton/standin/).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import example as _example
from tritonllm.api.deployment import TritonLLMDeployment

from .stack import (
    Server,
    Stack,
    TritonInstall,
    ensure_install,
    make_tokenizer,
    run_stack,
)

EXAMPLE = "gpt2-medium"  # an engine-runtime example (TensorRT-LLM 1.2.1 templates)
TP2 = {"parallelism": {"tensor": 2, "pipeline": 1}}


def example(name: str, **overrides: Any) -> TritonLLMDeployment:
    """An example CR with spec overrides merged in, its engine tp=2 (world size 2)."""
    engine = overrides.pop("engine", {})
    return _example(name, engine={**TP2, **engine}, **overrides)


@pytest.fixture(scope="session")
def triton_install() -> TritonInstall:
    if shutil.which("mpirun") is None:  # scripts/test installs Debian's openmpi-bin
        pytest.fail("mpirun not found: apt-get install openmpi-bin (scripts/test does)")
    return ensure_install()


@pytest.fixture(scope="session")
def tokenizer_dir(triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokenizer(triton_install, tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def start_stack(
    triton_install: TritonInstall, tokenizer_dir: Path, pyz: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., contextlib.AbstractContextManager[Stack]]:
    """start_stack(name, deployment, **kw): a context manager running one stack."""

    def start(name: str, dep: TritonLLMDeployment,
              **kw: Any) -> contextlib.AbstractContextManager[Stack]:
        root = tmp_path_factory.mktemp(f"stack-{name}")
        return run_stack(triton_install, dep, root, tokenizer_dir, pyz, **kw)

    return start


@pytest.fixture(scope="session")
def stacks(
    start_stack: Callable[..., Any],
) -> Iterator[Callable[[str, TritonLLMDeployment], Stack]]:
    """stacks(name, deployment) -> a running stack for that deployment (one per name, kept)."""
    running: dict[str, Stack] = {}
    with contextlib.ExitStack() as exit_stack:

        def get(name: str, dep: TritonLLMDeployment) -> Stack:
            if name not in running:
                running[name] = exit_stack.enter_context(start_stack(name, dep))
            return running[name]

        yield get


@pytest.fixture(scope="session")
def serve(stacks: Callable[[str, TritonLLMDeployment], Stack]) -> Callable[..., Server]:
    """serve(name, deployment) -> the server of a running stack for that deployment."""
    return lambda name, dep: stacks(name, dep).server
