"""The SIMULATED LLM API of the CPU stand-in image (images/triton-standin/fakes/tensorrt_llm),
exercised directly: the package as the image installs it, imported from the checkout.

Each scenario runs in the triton tier's Python (the cached pytriton venv: transformers and
tokenizers, as in the image) with the package on PYTHONPATH and its version set the way the
image's metadata would (TRITONLLM_STANDIN_TRTLLM_VERSION); the LLM's argument table is the
committed contract table of that version. The checkpoint is the tiny word-level tokenizer of the
triton tier plus a GPT-2 config.json, as the real node's seed writes it. What is real here:
processes, sockets, Open MPI's mpirun (the launch test), the tokenizer. What is simulated: the
model (deterministic: generated token i = prompt token i mod prompt length), GPU memory, compute
time (TRITONLLM_STANDIN_TOKEN_DELAY per step).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from .stack import ROOT, TritonInstall

pytestmark = pytest.mark.triton

FAKES = ROOT / "images" / "triton-standin" / "fakes"
VERSION = "1.2.1"  # the stand-in image's TensorRT-LLM (26.07)
WORDS = ["hello", "world", "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog"]
PRELUDE = """
import asyncio, json, os, signal, sys, time
from tensorrt_llm import LLM, SamplingParams
from tensorrt_llm.llmapi import KvCacheConfig

def result(**values):
    print("RESULT " + json.dumps(values), flush=True)
"""


def expected(prompt: str, max_tokens: int, shift: int = 0) -> str:
    """The deterministic model's answer, decoded (the <s> the tokenizer prepends is special)."""
    ids = ["<s>", *prompt.split()]
    tokens = [ids[(i + shift) % len(ids)] for i in range(max_tokens)]
    return " ".join(t for t in tokens if t != "<s>")


@pytest.fixture
def checkpoint(tokenizer_dir: Path, tmp_path: Path) -> Path:
    """A checkpoint directory: the word-level tokenizer and a GPT-2 config.json."""
    path = tmp_path / "tiny-gpt2"
    shutil.copytree(tokenizer_dir, path)
    (path / "config.json").write_text(json.dumps(
        {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 17}))
    return path


def with_fault(checkpoint: Path, fault: str) -> Path:
    config = json.loads((checkpoint / "config.json").read_text())
    config["tritonllm_standin_fault"] = fault
    (checkpoint / "config.json").write_text(json.dumps(config))
    return checkpoint


def standin_env(**extra: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONLLM_STANDIN_")}
    env.update(PYTHONPATH=str(FAKES), TRITONLLM_STANDIN_TRTLLM_VERSION=VERSION,
               TRANSFORMERS_VERBOSITY="error")
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.stdout, self.stderr = proc.stdout, proc.stderr
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, (
            f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        self.result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))

    def __getitem__(self, key: str) -> Any:
        return self.result[key]


def run(install: TritonInstall, code: str, timeout: float = 60, **env: Any) -> Run:
    """Run `code` (after PRELUDE) in the triton tier's Python; its last `result(...)` back."""
    proc = subprocess.run([str(install.python), "-c", PRELUDE + textwrap.dedent(code)],
                          env=standin_env(**env), capture_output=True, text=True,
                          timeout=timeout, check=False)
    return Run(proc)


def test_unknown_keys_are_refused_as_the_real_llm_refuses_them(
        triton_install: TritonInstall, checkpoint: Path) -> None:
    table = json.loads((ROOT / f"tests/contract/tables/llm_args-{VERSION}.json").read_text())
    kv_field = sorted(table["classes"]["KvCacheConfig"])[0]
    out = run(triton_install, f"""
    errors = {{}}
    def attempt(name, make):
        try:
            make()
            errors[name] = None
        except Exception as exc:
            errors[name] = [type(exc).__name__, isinstance(exc, ValueError), str(exc)]
    attempt("top", lambda: LLM({str(checkpoint)!r}, max_batch_sizes=4))
    attempt("nested", lambda: LLM({str(checkpoint)!r}, kv_cache_config={{"bogus_fraction": 1}}))
    attempt("class", lambda: KvCacheConfig(bogus_fraction=1))
    attempt("sampling", lambda: SamplingParams(max_token=3))
    attempt("enum", lambda: LLM({str(checkpoint)!r},
                                scheduler_config={{"capacity_scheduler_policy": "FASTEST"}}))
    KvCacheConfig(**{{{kv_field!r}: None}})  # a field of the table is accepted
    llm = LLM({str(checkpoint)!r}, max_batch_size=4, kv_cache_config=KvCacheConfig(max_tokens=256),
              scheduler_config={{"capacity_scheduler_policy": "GUARANTEED_NO_EVICT"}})
    llm.shutdown()
    result(errors=errors)
    """)
    errors = out["errors"]
    assert errors["top"] == ["ValueError", True, "LLM got invalid argument: max_batch_sizes"]
    assert "[TRT-LLM] [E] Failed to parse the arguments for the LLM constructor: LLM got " \
           "invalid argument: max_batch_sizes" in out.stderr
    name, is_value_error, message = errors["nested"]
    assert (name, is_value_error) == ("ValidationError", True)
    assert message.splitlines()[:2] == ["1 validation error for TorchLlmArgs",
                                        "kv_cache_config.bogus_fraction"]
    assert "Extra inputs are not permitted [type=extra_forbidden" in message
    assert errors["class"][0] == "ValidationError" and "for KvCacheConfig" in errors["class"][2]
    assert errors["sampling"][0] == "TypeError" and "max_token" in errors["sampling"][2]
    assert errors["enum"][0] == "ValidationError"
    assert "scheduler_config.capacity_scheduler_policy" in errors["enum"][2]


def test_before_0_21_an_unknown_key_is_a_validation_error(
        triton_install: TritonInstall, checkpoint: Path) -> None:
    out = run(triton_install, f"""
    try:
        LLM({str(checkpoint)!r}, max_batch_sizes=4)
    except ValueError as exc:
        result(name=type(exc).__name__, message=str(exc))
    """, TRITONLLM_STANDIN_TRTLLM_VERSION="0.20.0")
    assert out["name"] == "ValidationError"
    assert out["message"].splitlines()[1] == "max_batch_sizes"


def test_concurrent_requests_are_batched_in_flight(
        triton_install: TritonInstall, checkpoint: Path) -> None:
    """16 requests take about the time of one: every step advances all of them."""
    out = run(triton_install, f"""
    llm = LLM({str(checkpoint)!r})
    params = SamplingParams(max_tokens=8)
    t = time.monotonic()
    one = llm.generate("hello world fox", params)
    single = time.monotonic() - t
    t = time.monotonic()
    futures = [llm.generate_async(f"hello world fox {{w}}", params) for w in {WORDS!r}[:16]]
    texts = [f.result().outputs[0].text for f in futures]
    batch = time.monotonic() - t
    result(single=single, batch=batch, one=one.outputs[0].text, texts=texts,
           reasons=[f.outputs[0].finish_reason for f in futures], n=len(futures))
    llm.shutdown()
    """, TRITONLLM_STANDIN_TOKEN_DELAY=0.05)
    assert out["one"] == expected("hello world fox", 8)
    assert out["texts"] == [expected(f"hello world fox {w}", 8) for w in WORDS[:16]]
    assert set(out["reasons"]) == {"length"}
    assert out["single"] >= 8 * 0.05
    assert out["batch"] < 2 * out["single"], out.result  # sequential would be ~10x


def test_max_batch_size_caps_the_batch_and_the_rest_wait(
        triton_install: TritonInstall, checkpoint: Path) -> None:
    out = run(triton_install, f"""
    llm = LLM({str(checkpoint)!r}, max_batch_size=2, enable_iter_perf_stats=True)
    futures = [llm.generate_async("hello world", SamplingParams(max_tokens=4)) for _ in range(5)]
    [f.result() for f in futures]
    result(stats=llm.get_stats(2))
    llm.shutdown()
    """, TRITONLLM_STANDIN_TOKEN_DELAY=0.02)
    stats = out["stats"]
    assert max(s["numActiveRequests"] for s in stats) == 2
    assert all(s["inflightBatchingStats"]["numScheduledRequests"] <= 2 for s in stats)
    assert max(s["numQueuedRequests"] for s in stats) >= 2
    assert sum(s["numCompletedRequests"] for s in stats) == 5
    # 5 requests x 4 tokens, one token per scheduled request per step, two at most per step.
    assert sum(s["inflightBatchingStats"]["numScheduledRequests"] for s in stats) == 20
    assert len(stats) >= 10
    assert [s["iter"] for s in stats] == list(range(len(stats)))
    assert {s["maxNumActiveRequests"] for s in stats} == {2}


def test_max_num_tokens_caps_a_step_and_the_stats_queue_is_bounded(
        triton_install: TritonInstall, checkpoint: Path) -> None:
    """Prompts of 3 tokens, 8 tokens a step (a new request's prompt, one per running request):
    of 4 requests sent together at most two start in a step and the others wait; a prompt
    longer than max_num_tokens is refused. Only the newest iter_stats_max_iterations
    statistics are kept."""
    out = run(triton_install, f"""
    llm = LLM({str(checkpoint)!r}, max_num_tokens=8, enable_iter_perf_stats=True)
    futures = [llm.generate_async("hello world", SamplingParams(max_tokens=4)) for _ in range(4)]
    [f.result() for f in futures]
    try:
        llm.generate_async("hello world the quick brown fox jumps over lazy")
        refused = None
    except ValueError as exc:
        refused = str(exc)
    stats = llm.get_stats(1)
    llm.shutdown()
    bounded = LLM({str(checkpoint)!r}, enable_iter_perf_stats=True, iter_stats_max_iterations=3)
    bounded.generate("hello world", SamplingParams(max_tokens=6))
    result(stats=stats, refused=refused, bounded=[s["iter"] for s in bounded.get_stats(1)])
    bounded.shutdown()
    """, TRITONLLM_STANDIN_TOKEN_DELAY=0.05)
    stats = out["stats"]
    batching = [s["inflightBatchingStats"] for s in stats]
    assert all(b["numCtxTokens"] + b["numGenRequests"] <= 8 for b in batching)
    assert max(b["numContextRequests"] for b in batching) == 2
    assert max(s["numQueuedRequests"] for s in stats) >= 1
    assert sum(b["numScheduledRequests"] for b in batching) == 16  # 4 requests x 4 tokens
    assert out["refused"] == ("The sum of prompt length (10.0) and query length (0) should not "
                              "exceed max_num_tokens (8)")
    assert out["bounded"] == [3, 4, 5]


def test_iteration_stats_have_the_real_shape_and_only_when_enabled(
        triton_install: TritonInstall, checkpoint: Path) -> None:
    table = json.loads((ROOT / f"tests/contract/tables/llm_args-{VERSION}.json").read_text())
    out = run(triton_install, f"""
    off = LLM({str(checkpoint)!r})
    before = off.get_stats(0.1)
    off.generate("hello world", SamplingParams(max_tokens=3))
    disabled = off.get_stats(0.2)
    off.shutdown()
    on = LLM({str(checkpoint)!r}, enable_iter_perf_stats=True)
    on.generate("hello world", SamplingParams(max_tokens=3))
    async def collect():
        return [s async for s in on.get_stats_async(0.3)]
    streamed = asyncio.run(collect())
    on.generate("hello world", SamplingParams(max_tokens=2))
    result(before=before, disabled=disabled, streamed=streamed, polled=on.get_stats(1))
    on.shutdown()
    """)
    assert out["before"] == [] and out["disabled"] == []
    assert [s["iter"] for s in out["streamed"]] == [0, 1, 2]
    assert [s["iter"] for s in out["polled"]] == [3, 4]
    keys = table["stats_keys"]
    for stat in out["streamed"] + out["polled"]:
        assert set(keys["top"]) <= set(stat)
        assert set(keys["kvCacheStats"]) == set(stat["kvCacheStats"])
        assert set(keys["inflightBatchingStats"]) == set(stat["inflightBatchingStats"])
    assert out["streamed"][0]["inflightBatchingStats"]["numContextRequests"] == 1
    assert out["streamed"][0]["inflightBatchingStats"]["numCtxTokens"] == 3
    assert out["streamed"][1]["inflightBatchingStats"]["numGenRequests"] == 1


def test_kv_cache_blocks_are_accounted_and_prefixes_reused(
        triton_install: TritonInstall, checkpoint: Path) -> None:
    """Pool: 64 tokens in blocks of 4 = 16 blocks. A 9-token prompt + 4 tokens holds 4 blocks
    while it runs; the same prompt again reuses its 2 leading full blocks."""
    code = f"""
    llm = LLM({str(checkpoint)!r}, enable_iter_perf_stats=True,
              kv_cache_config={{"max_tokens": 64, "tokens_per_block": 4,
                               "enable_block_reuse": REUSE}})
    prompt = "hello world the quick brown fox jumps over"
    first = llm.generate_async(prompt, SamplingParams(max_tokens=4), streaming=True)
    running = None
    for step, out in enumerate(first):
        if step == 1:
            running = llm.get_stats(1)[-1]["kvCacheStats"]
    llm.generate(prompt, SamplingParams(max_tokens=4))
    after = llm.get_stats(1)[-1]["kvCacheStats"]
    result(running=running, after=after, text=first.outputs[0].text)
    llm.shutdown()
    """
    reuse = run(triton_install, code.replace("REUSE", "True"), TRITONLLM_STANDIN_TOKEN_DELAY=0.05)
    assert reuse["text"] == expected("hello world the quick brown fox jumps over", 4)
    running = reuse["running"]
    assert (running["maxNumBlocks"], running["tokensPerBlock"]) == (16, 4)
    assert running["usedNumBlocks"] == 3  # 9 prompt tokens + 2 generated
    assert running["freeNumBlocks"] == 13
    after = reuse["after"]
    assert after["usedNumBlocks"] == 0 and after["freeNumBlocks"] == 16
    assert after["reusedBlocks"] == 2  # the second prompt's two leading full blocks
    assert after["missedBlocks"] == 3 + 1  # first prompt: 3 blocks; second: its last one
    assert after["cacheHitRate"] == pytest.approx(2 / 6)
    assert after["allocNewBlocks"] == 4 + 2  # the second allocated 1 for its prompt, 1 to grow
    assert after["allocTotalBlocks"] == 4 + 4
    plain = run(triton_install, code.replace("REUSE", "False"))
    assert plain["after"]["reusedBlocks"] == 0
    assert plain["after"]["cacheHitRate"] == 0.0


def test_streaming_stop_strings_end_id_and_abort(
        triton_install: TritonInstall, checkpoint: Path) -> None:
    out = run(triton_install, f"""
    llm = LLM({str(checkpoint)!r}, enable_iter_perf_stats=True,
              kv_cache_config={{"max_tokens": 512, "tokens_per_block": 4}})
    diffs = [o.outputs[0].text_diff for o in
             llm.generate_async("hello world fox", SamplingParams(max_tokens=5), streaming=True)]
    stop = llm.generate("the quick brown fox", SamplingParams(max_tokens=8, stop=["brown"]))
    keep = llm.generate("the quick brown fox",
                        SamplingParams(max_tokens=8, stop="brown", include_stop_str_in_output=True))
    eos = llm.generate("hello </s> world", SamplingParams(max_tokens=8))
    async def cancel():
        r = llm.generate_async("hello world", SamplingParams(max_tokens=500), streaming=True)
        seen = 0
        async for o in r:
            seen += 1
            if seen == 3:
                r.abort()
        return r
    aborted = asyncio.run(cancel())
    time.sleep(0.2)
    kv = llm.get_stats(1)[-1]["kvCacheStats"]
    c = lambda r: [r.outputs[0].text, r.outputs[0].finish_reason, r.outputs[0].stop_reason]
    result(diffs=diffs, stop=c(stop), keep=c(keep), eos=c(eos), aborted=c(aborted),
           aborted_tokens=len(aborted.outputs[0].token_ids), kv=kv)
    llm.shutdown()
    """, TRITONLLM_STANDIN_TOKEN_DELAY=0.02)
    assert out["diffs"] == ["", "hello", " world", " fox", ""]
    assert out["stop"] == ["the quick", "stop", "brown"]
    assert out["keep"] == ["the quick brown", "stop", "brown"]
    assert out["eos"] == ["hello", "stop", None]  # the prompt's </s> comes back: end_id
    _, reason, _ = out["aborted"]
    assert reason == "cancelled" and 3 <= out["aborted_tokens"] < 500
    assert out["kv"]["usedNumBlocks"] == 0  # the cancelled request's blocks are free again


def test_fault_wrong_answer_shifts_tokens(triton_install: TritonInstall,
                                          checkpoint: Path) -> None:
    with_fault(checkpoint, "wrong-answer")
    out = run(triton_install, f"""
    with LLM({str(checkpoint)!r}) as llm:
        result(text=llm.generate("hello world fox", SamplingParams(max_tokens=6)).outputs[0].text)
    """)
    assert out["text"] == expected("hello world fox", 6, shift=1)
    assert out["text"] != expected("hello world fox", 6)


def test_fault_crash_at_load(triton_install: TritonInstall, checkpoint: Path) -> None:
    with_fault(checkpoint, "crash-at-load")
    out = run(triton_install, f"""
    try:
        LLM({str(checkpoint)!r})
    except Exception as exc:
        result(name=type(exc).__name__, message=str(exc))
    """)
    assert out["name"] == "RuntimeError" and "crash-at-load" in out["message"]


def test_no_room_for_the_kv_cache_fails_the_load_as_the_real_one(
        triton_install: TritonInstall, checkpoint: Path) -> None:
    """The checkpoint is GPT-2 small sized (config.json gives only the vocabulary: transformers'
    GPT-2 defaults fill in the rest): ~170 MB of fp16 weights and 36 KiB of KV cache per token.
    On a simulated 180 MiB GPU, 1% of what the weights leave holds 5 tokens, not one block of
    32; a fraction of 1 is refused outright."""
    out = run(triton_install, f"""
    outcomes = []
    for kv in ({{"free_gpu_memory_fraction": 0.01}}, {{"free_gpu_memory_fraction": 1.0}}):
        try:
            LLM({str(checkpoint)!r}, kv_cache_config=kv).shutdown()
            outcomes.append(None)
        except AssertionError as exc:
            outcomes.append(str(exc))
    result(outcomes=outcomes)
    """, TRITONLLM_STANDIN_GPU_MEMORY_BYTES=180 << 20)
    assert out["outcomes"] == [
        "Impossible to fit in any sequence in kvCache",
        "Invalid freeMemFraction, freeMemFraction 1.0 must be smaller than 1.0"]


def test_tp2_spawns_a_worker_rank_and_a_dead_rank_shuts_the_executor_down(
        triton_install: TritonInstall, checkpoint: Path) -> None:
    out = run(triton_install, f"""
    llm = LLM({str(checkpoint)!r}, tensor_parallel_size=2)
    text = llm.generate("hello world", SamplingParams(max_tokens=3)).outputs[0].text
    worker = llm._ranks.procs[0]
    pending = llm.generate_async("hello world", SamplingParams(max_tokens=1000))
    time.sleep(0.1)
    os.kill(worker.pid, signal.SIGKILL)
    try:
        pending.result(timeout=30)
        failed = None
    except Exception as exc:
        failed = [type(exc).__name__, str(exc)]
    refused = []
    for _ in range(2):
        try:
            llm.generate_async("hello")
            refused.append(None)
        except RuntimeError as exc:
            refused.append(str(exc))
    down = llm._executor.is_shutdown()
    llm.shutdown()
    result(text=text, worker=worker.pid, leader=os.getpid(), failed=failed, refused=refused,
           down=down)
    """, TRITONLLM_STANDIN_TOKEN_DELAY=0.01)
    assert out["text"] == expected("hello world", 3)
    assert f"rank=0 world=2 pid={out['leader']} " in out.stdout
    assert f"rank=1 world=2 pid={out['worker']} " in out.stdout and "role=worker" in out.stdout
    name, message = out["failed"]
    assert name == "RequestError"
    assert f"rank 1 of 2 (pid {out['worker']} on" in message
    # As the real executor: the next submit raises the queued background error itself and shuts
    # the executor down; every later request is refused as the real LLM refuses it.
    assert out["refused"] == [message, "LLM is shutting down"]
    assert out["down"] is True


def test_tp2_needs_two_simulated_gpus(triton_install: TritonInstall, checkpoint: Path) -> None:
    out = run(triton_install, f"""
    try:
        LLM({str(checkpoint)!r}, tensor_parallel_size=2)
    except RuntimeError as exc:
        result(message=str(exc))
    """, TRITONLLM_STANDIN_GPUS=1)
    assert out["message"] == "Only 1 GPUs are available, but 2 are required."


def test_trtllm_llmapi_launch_runs_the_ranks_under_mpirun(
        triton_install: TritonInstall, checkpoint: Path, tmp_path: Path) -> None:
    """mpirun -np 2 trtllm-llmapi-launch <python script>: rank 0 runs the script (which sees no
    MPI environment) and the leader node, rank 1 a worker, which finds rank 0 through mpirun's
    address (no LeaderWorkerSet here); the script's LLM (tp 2) attaches to the leader node."""
    script = tmp_path / "serve.py"
    script.write_text(PRELUDE + textwrap.dedent(f"""
    mpi = sorted(k for k in os.environ if k.startswith(("OMPI_", "PMIX_")))
    with LLM({str(checkpoint)!r}, tensor_parallel_size=2) as llm:
        text = llm.generate("hello world fox", SamplingParams(max_tokens=4)).outputs[0].text
    result(text=text, mpi=mpi, pid=os.getpid(), spawn=os.environ["TLLM_SPAWN_PROXY_PROCESS"])
    """))
    argv = ["mpirun", "--oversubscribe", "-np", "2"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    with socket.socket() as s:  # a free port for the leader node (not the default 29531)
        s.bind(("", 0))
        port = s.getsockname()[1]
    env = standin_env(TRITONLLM_STANDIN_LEADER_PORT=port)
    for name in ("PYTHONPATH", "TRITONLLM_STANDIN_TRTLLM_VERSION", "TRANSFORMERS_VERBOSITY",
                 "TRITONLLM_STANDIN_LEADER_PORT"):
        argv += ["-x", name]
    argv += [str(FAKES / "trtllm-llmapi-launch"), str(triton_install.python), str(script)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    out = Run(proc)
    assert out["text"] == expected("hello world fox", 4)
    assert out["mpi"] == [] and out["spawn"] == "1"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("tensorrt_llm SIMULATED")]
    roles = sorted(ln.split("role=")[1] for ln in lines)
    assert roles == ["hub", "leader", "worker"], proc.stdout
    assert f"rank=0 world=2 pid={out['pid']} " in proc.stdout
    assert any("rank=1 world=2" in ln and "role=worker" in ln for ln in lines)
    assert "rank 0 command exited with 0" in proc.stderr


def test_the_package_only_needs_the_standard_library_to_import() -> None:
    """`import tensorrt_llm` (the image's build check, `tritonllm launch`'s version probe) and
    the worker ranks need nothing but the standard library."""
    proc = subprocess.run(
        [sys.executable, "-S", "-c",
         "import sys; import tensorrt_llm, tensorrt_llm.llmapi.mgmn_worker_node; "
         "print(tensorrt_llm.__version__, sorted(m for m in ('transformers', 'numpy') "
         "if m in sys.modules))"],
        env=standin_env(), capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [VERSION, "[]"]
