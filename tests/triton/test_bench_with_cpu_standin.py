"""`tritonllm bench` against a real tritonserver serving the rendered repository (CPU stand-in),
over Triton's gRPC stream and (--api openai) through the OpenAI frontend in front of it.

The command runs as a user runs it (a subprocess, gRPC through tritonclient) against the
decoupled stack of the triton tier, whose stand-in waits TOKEN_DELAY seconds per generated token:
so every figure has a floor the test knows (ITL >= the delay, latency >= max_tokens delays,
TTFT below the latency), and the token count is exact (one streamed response per token).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import EXAMPLE, example
from .openai_stack import (
    LLAMA2_STYLE_TEMPLATE,
    Frontend,
    config_for,
    run_frontend,
    tokenizer_with_template,
)
from .stack import Server

pytestmark = pytest.mark.triton

TOKEN_DELAY = 0.02
MAX_TOKENS = 8
LEVELS = (1, 4)
REQUESTS = 8


@pytest.fixture(scope="module")
def slow_streaming(start_stack: Callable[..., Any]) -> Iterator[Server]:
    dep = example(EXAMPLE, serving={"streaming": True, "bls": True})
    with start_stack("bench", dep, token_delay=TOKEN_DELAY) as stack:
        yield stack.server


def bench(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tritonllm.cli.main", "bench", *argv],
                          capture_output=True, text=True, timeout=300, check=False)


def test_bench_measures_a_streaming_deployment(slow_streaming: Server, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = bench(slow_streaming.grpc, "--concurrency", ",".join(map(str, LEVELS)),
                 "--requests", str(REQUESTS), "--max-tokens", str(MAX_TOKENS),
                 "--prompt", "hello world", "--json", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["streaming"] is True and report["model"] == "ensemble"
    assert [lv["concurrency"] for lv in report["levels"]] == list(LEVELS)
    for lv in report["levels"]:
        assert (lv["requests"], lv["errors"]) == (REQUESTS, 0), lv
        assert lv["tokens_counted"] == "responses"
        # one streamed response per token: tokens/s is exactly requests x max_tokens / seconds
        assert lv["output_tokens_per_s"] == pytest.approx(
            REQUESTS * MAX_TOKENS / lv["seconds"], rel=0.01)
        assert lv["itl_ms_p50"] >= TOKEN_DELAY * 1000 * 0.9, lv
        assert lv["latency_ms_p50"] >= (MAX_TOKENS - 1) * TOKEN_DELAY * 1000, lv
        assert 0 < lv["ttft_ms_p50"] < lv["latency_ms_p50"], lv
        assert lv["ttft_ms_p50"] <= lv["ttft_ms_p99"] and lv["latency_ms_p50"] <= \
            lv["latency_ms_p99"]
    # the table names every level; the progress bar went to stderr
    assert "TTFT p50" in done.stdout and "ITL p50" in done.stdout
    assert f"{REQUESTS}/{REQUESTS}" in done.stderr


def test_bench_compares_two_targets_side_by_side(slow_streaming: Server) -> None:
    """The ensemble against tensorrt_llm_bls on the same server, as seed 004 compares two
    backends."""
    done = bench(slow_streaming.grpc, "--compare", f"grpc://{slow_streaming.grpc}",
                 "--compare-model", "tensorrt_llm_bls", "--concurrency", "2", "--requests",
                 "4", "--max-tokens", "4", "--json", "-")
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout[done.stdout.index("\n{") + 1:])["runs"]
    assert [(r["model"], r["levels"][0]["requests"]) for r in runs] == [
        ("ensemble", 4), ("tensorrt_llm_bls", 4)]
    assert f"A = {slow_streaming.grpc}, B = grpc://{slow_streaming.grpc} tensorrt_llm_bls" \
        in done.stdout
    assert "B/A" in done.stdout


def test_bench_reports_errors_and_exits_1(slow_streaming: Server) -> None:
    done = bench(slow_streaming.grpc, "--model", "no_such_model", "--concurrency", "1",
                 "--requests", "1")
    assert done.returncode != 0
    assert "no_such_model" in done.stderr


@pytest.fixture(scope="module")
def openai_frontend(slow_streaming: Server, tokenizer_dir: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Frontend]:
    """The OpenAI frontend (`tritonllm openai`, as the serving pod's sidecar runs it) in front of
    the same stack, the tokenizer given a chat template."""
    dep = example(EXAMPLE, serving={"streaming": True, "bls": True})
    root = tmp_path_factory.mktemp("bench-openai")
    tokenizer = tokenizer_with_template(tokenizer_dir, root / "tokenizer",
                                        LLAMA2_STYLE_TEMPLATE)
    with run_frontend(config_for(dep, slow_streaming.grpc, tokenizer), root) as frontend:
        yield frontend


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_bench_measures_the_openai_api(openai_frontend: Frontend, tmp_path: Path,
                                       endpoint: str) -> None:
    """--api openai: streamed OpenAI requests; the same floors as over gRPC, tokens from usage."""
    out = tmp_path / "bench.json"
    done = bench(f"{openai_frontend.url}/v1", "--api", "openai", "--endpoint", endpoint,
                 "--concurrency", ",".join(map(str, LEVELS)), "--requests", str(REQUESTS),
                 "--max-tokens", str(MAX_TOKENS), "--prompt", "hello world", "--json", str(out))
    assert done.returncode == 0, done.stderr + openai_frontend.output()[-3000:]
    report = json.loads(out.read_text())
    assert (report["api"], report["endpoint"]) == ("openai", endpoint)
    assert report["model"] == openai_frontend.config.served_model_name  # from /v1/models
    for lv in report["levels"]:
        assert (lv["requests"], lv["errors"]) == (REQUESTS, 0), lv
        assert lv["tokens_counted"] == "usage"
        # the stand-in generates max_tokens tokens for this prompt (it never meets end_id)
        assert lv["output_tokens_per_s"] == pytest.approx(
            REQUESTS * MAX_TOKENS / lv["seconds"], rel=0.01)
        assert lv["itl_ms_p50"] >= TOKEN_DELAY * 1000 * 0.9, lv
        assert lv["latency_ms_p50"] >= (MAX_TOKENS - 1) * TOKEN_DELAY * 1000, lv
        assert 0 < lv["ttft_ms_p50"] < lv["latency_ms_p50"], lv
    assert f"{openai_frontend.url}/v1 openai {endpoint}" in done.stdout


def test_bench_compares_the_openai_api_with_direct_grpc(openai_frontend: Frontend,
                                                        slow_streaming: Server) -> None:
    """One deployment, two paths: Triton's gRPC stream, and the OpenAI API in front of it."""
    done = bench(slow_streaming.grpc, "--compare", openai_frontend.url, "--compare-api",
                 "openai", "--endpoint", "completions", "--concurrency", "2", "--requests",
                 "4", "--max-tokens", "4", "--prompt", "hello world", "--json", "-")
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout[done.stdout.index("\n{") + 1:])["runs"]
    assert [(r.get("api", "grpc"), r["levels"][0]["requests"], r["levels"][0]["errors"])
            for r in runs] == [("grpc", 4, 0), ("openai", 4, 0)]
    assert "B/A" in done.stdout
