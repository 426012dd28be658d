"""`tritonllm launch` (the zipapp) starting tritonserver through a REAL Open MPI mpirun, world
size 2, with a CPU stand-in for TensorRT-LLM.

What runs for real: the launcher's checks (fake engine directory with tp=2 artifact.json and
config.json; CUDA_VISIBLE_DEVICES=0,1 as the visible GPUs), Debian's Open MPI mpirun with the
argv tritonllm.triton.launch.mpirun_argv produces (only binary, ports, repository and extra args
adapted, through a LaunchSpec), two tritonserver ranks with the production rank flags, signal
handling and exit codes. What is a stand-in: the tensorrt_llm model on both ranks (a Python model
with the same inputs and outputs; on GPUs rank 1 would run TensorRT-LLM's worker loop).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import alive, cmdline, cpus_allowed, descendants, listening_ports
from tritonllm.render import render_all
from tritonllm.triton.launch import mpirun_argv, rank_args

from .conftest import EXAMPLE, example
from .stack import (
    Stack,
    production_spec,
    ranks_of,
    undo_adaptations,
)

pytestmark = pytest.mark.triton

PROMPT = "hello world"


def generate(stack: Stack, max_tokens: int, timeout: float = 60) -> dict[str, Any]:
    request = urllib.request.Request(
        stack.server.url("/v2/models/ensemble/generate"), method="POST",
        data=json.dumps({"text_input": PROMPT, "max_tokens": max_tokens}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        assert response.status == 200
        result: dict[str, Any] = json.loads(response.read())
        return result


def expected(max_tokens: int) -> str:
    cycle = ["<s>", *PROMPT.split()]
    return " ".join(w for w in (cycle[i % 3] for i in range(max_tokens)) if w != "<s>")


@pytest.fixture(scope="module")
def plain(stacks: Callable[..., Stack]) -> Stack:
    return stacks("plain", example(EXAMPLE, serving={"bls": True}))


def wait_exit(stack: Stack, seconds: float = 90) -> int:
    return stack.launch.wait(timeout=seconds)


def test_real_mpirun_runs_the_production_argv_with_two_ranks(plain: Stack) -> None:
    rendered = render_all(example(EXAMPLE, serving={"bls": True})).launch_plan
    production = production_spec(rendered)
    assert rendered["worldSize"] == 2 and rendered["tensorParallel"] == 2
    # The test's spec differs from production only in what had to be adapted for this machine.
    assert undo_adaptations(plain.spec) == dataclasses.replace(
        production, model_repository=plain.spec.model_repository)
    ranks = ranks_of(plain)
    assert cmdline(ranks.mpirun) == plain.plan["argv"] == mpirun_argv(plain.spec)
    for rank, pid in enumerate(ranks.tritonserver):
        assert cmdline(pid) == rank_args(plain.spec, rank)
        assert alive(pid)
    assert generate(plain, 5)["text_output"] == expected(5)


def test_real_mpirun_leaves_every_rank_all_the_cpus_of_the_pod(plain: Stack) -> None:
    """Open MPI binds each rank to one core by default (2 ranks or fewer), and what a rank
    starts inherits it: rank 0's front end, backend threads and Python stubs would share a
    core. The production argv says --bind-to none."""
    ranks = ranks_of(plain)
    pod = cpus_allowed(plain.launch.pid)
    for rank in (0, 1):
        pids = [ranks.tritonserver[rank], *descendants(ranks.tritonserver[rank])]
        assert {cpus_allowed(p) for p in pids} == {pod}, (rank, pod)


def test_real_mpirun_only_rank_0_listens(plain: Stack) -> None:
    ranks = ranks_of(plain)
    ports = {int(a.rsplit(":", 1)[1]) for a in
             (plain.server.http, plain.server.grpc, plain.server.metrics)}
    assert listening_ports(ranks.tritonserver[0]) == ports
    for pid in (ranks.tritonserver[1], *descendants(ranks.tritonserver[1])):
        assert listening_ports(pid) == set(), cmdline(pid)


def test_real_mpirun_rank_1_loads_only_tensorrt_llm_with_its_own_shm_prefix(
    plain: Stack,
) -> None:
    ranks = ranks_of(plain)
    models = {r: sorted(Path(s[0]).parent.parent.name for s in ranks.stubs(r)) for r in (0, 1)}
    assert models == {
        0: ["postprocessing", "preprocessing", "tensorrt_llm", "tensorrt_llm_bls"],
        1: ["tensorrt_llm"],
    }
    for rank in (0, 1):
        assert {s[1].split("_", 1)[0] for s in ranks.stubs(rank)} == {f"prefix{rank}"}
        assert all(Path("/dev/shm", s[1]).exists() for s in ranks.stubs(rank))


def test_real_mpirun_sigterm_to_launch_drains_in_flight_requests_and_exits_0(
    start_stack: Callable[..., Any],
) -> None:
    """SIGTERM (the kubelet's) goes to the ranks: an in-flight request completes, mpirun and
    launch exit 0, nothing is left. (mpirun itself would SIGKILL the ranks after 1 s.)"""
    with start_stack("drain", example(EXAMPLE), token_delay=0.25) as stack:
        ranks = ranks_of(stack)
        everything = [ranks.mpirun, *descendants(ranks.mpirun)]
        regions = [Path("/dev/shm", s[1]) for r in (0, 1) for s in ranks.stubs(r)]
        assert len(regions) == 4 and all(r.exists() for r in regions)
        outcome: dict[str, Any] = {}

        def request() -> None:
            started = time.monotonic()
            try:
                outcome["result"] = generate(stack, 12)  # 12 tokens x 0.25 s = 3 s
            except Exception as exc:  # reported below
                outcome["error"] = exc
            outcome["seconds"] = time.monotonic() - started

        thread = threading.Thread(target=request)
        thread.start()
        time.sleep(1.0)  # the request is in the stand-in now
        stack.launch.send_signal(signal.SIGTERM)
        code = wait_exit(stack)
        thread.join(timeout=30)
        log = stack.log.read_text(errors="replace")
        assert code == 0, log[-4000:]
        assert "error" not in outcome, outcome
        assert outcome["result"]["text_output"] == expected(12)
        assert outcome["seconds"] >= 2.5
        assert f'event=drain ranks="{json.dumps(list(ranks.tritonserver))}"' in log
        assert "event=exit code=0 signal=15" in log
        deadline = time.monotonic() + 30
        while [p for p in everything if alive(p)] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [cmdline(p) for p in everything if alive(p)]
        assert not [r for r in regions if r.exists()]  # a clean shutdown removes them


def test_real_mpirun_killing_rank_1_makes_launch_exit_non_zero(
    start_stack: Callable[..., Any],
) -> None:
    with start_stack("rank1-dies", example(EXAMPLE)) as stack:
        ranks = ranks_of(stack)
        everything = [ranks.mpirun, *descendants(ranks.mpirun)]
        regions = [Path("/dev/shm", s[1]) for r in (0, 1) for s in ranks.stubs(r)]
        try:
            os.kill(ranks.tritonserver[1], signal.SIGKILL)
            code = wait_exit(stack)
            log = stack.log.read_text(errors="replace")
            assert code != 0, log[-4000:]
            assert f"event=exit code={code}" in log
            assert not [p for p in ranks.tritonserver if alive(p)]
            deadline = time.monotonic() + 30
            while [p for p in everything if alive(p)] and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not [cmdline(p) for p in everything if alive(p)]
        finally:
            for region in regions:  # SIGKILLed ranks leave their Python-backend regions behind
                region.unlink(missing_ok=True)
