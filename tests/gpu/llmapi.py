"""The GPU recipe's llmapi stack (`scripts/gpu-check --on llmapi`; docs/gpu.md): runtime llmapi
on real GPUs, with a SIMULATED LLM API that computes a real transformer. NOT TensorRT-LLM.

1. **Model**: `llmapi_gpu_model.write_model` makes Llama-2-7B's config.json (`--llmapi-layers`
   may lower the layer count) and a word-level tokenizer of its 32000-token vocabulary on the
   machine; the weights are drawn from a seed (random, identical in every process).
2. **References**: transformers' `LlamaForCausalLM`, unsharded on GPU 0, with the same weights:
   greedy tokens, each step's log-probability and top-2 margin, in float32 and in bfloat16.
3. **Direct check** (no Triton): `tensorrt_llm.LLM` of the stand-in (llmapi_gpu_shim) with
   tensor_parallel_size = N and dtype float32, requests submitted in flight (a second wave
   while the first decodes): every token must EQUAL the float32 reference, the cumulative
   log-probability within 1e-3; abort gives finish_reason "cancelled"; an unknown LLM() key
   and an unknown SamplingParams keyword are refused; get_stats has the IterationStats keys;
   shutdown leaves no rank process.
4. **Serving**: the repository rendered by tritonllm for a tp=N llmapi CR (model.py and
   model.yaml as rendered, the checkpoint and tokenizer paths pointing at 1.), the shim and the
   stand-in's modules beside model.py; `tritonllm launch --mode single` of the rendered launch
   plan (only binary, ports, repository adapted) starts the one tritonserver, whose llmapi
   model's LLM() spawns the N ranks. Checks: one rank per GPU, each on its own GPU only;
   answers (HTTP generate, generate_stream) against the bfloat16 reference with the margin rule
   (`agreement`, tolerance `MARGIN`); Triton's GPU metrics moving on every GPU of the
   deployment; the nv_trt_llm_* families the llmapi model exports; `tritonllm bench` at
   --bench levels with no failed request; with --openai, the OpenAI frontend and its clients
   (tests/gpu/openai_check.py); SIGTERM drains, launch exits 0, no rank left.
5. **Scores**: every served token teacher-forced through the bfloat16 reference: within
   `MARGIN` of its top logit given the same prefix (`score_served`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers import descendants, example, free_ports
from tests.triton.stack import (
    Server,
    TritonInstall,
    _stop,
    is_ready,
    launch_env,
)
from tritonllm.render import render_all
from tritonllm.triton.launch import TRITONSERVER
from tritonllm.triton.repository import render_repository

STANDIN = Path(__file__).resolve().parent.parent / "triton" / "standin"
MODULES = ("llmapi_gpu_standin.py", "llmapi_gpu_executor.py", "llmapi_gpu_model.py")
SHIM = STANDIN / "llmapi_gpu_shim"
# The CPU stand-in's SIMULATED tensorrt_llm, whose SamplingParams and CompletionOutput the GPU
# stand-in uses: the parts it imports go beside it as llmapi_gpu_standin.SIMULATED.
SIMULATED = STANDIN.parent.parent.parent / "images" / "triton-standin" / "fakes" / "tensorrt_llm"
SIMULATED_PARTS = ("sampling_params.py", "executor")
TABLES = Path(__file__).resolve().parent.parent / "contract" / "tables"
EXAMPLE = "llmapi-llama3-8b"
# Reference top-2 logit margin below which a bfloat16 path may pick the other token: bfloat16
# keeps 8 bits of mantissa (a step of 1/32 at logits of 4..8), and the sharded sums round at
# each all-reduce; seen on H200: up to 0.125 at tp 1 and 2, 0.219 at tp 4.
MARGIN = 0.25
# The same rule in float32 (sums in another order differ by ~1e-6 relative): every token must
# match unless the reference's margin there is below this.
MARGIN_FLOAT32 = 1e-3
PROMPTS = ("the quick brown fox jumps over the lazy dog", "hello world", "triton says hi",
           "what is machine learning answer in one paragraph")
STARTUP_SECONDS = 900.0


@dataclasses.dataclass
class Refs:
    """Reference answers by dtype name, then prompt: tokens, logprobs, margins."""

    prompt_ids: dict[str, list[int]]
    by_dtype: dict[str, dict[str, dict[str, Any]]]


def agreement(got: list[int], ref: list[int], margins: list[float], tolerance: float,
              end_id: int = 2) -> tuple[int, str | None]:
    """How far `got` follows the reference: (tokens compared, problem or None).

    Token i must equal the reference's wherever the reference's top-2 logit margin at i is at
    least `tolerance` (a low-precision difference cannot flip such a choice). At the first
    position where it is smaller the two may take different, equally valid paths: the
    comparison stops there. `got` may end where the reference chose the end token (the served
    answer does not include it)."""
    for i, (a, b) in enumerate(zip(got, ref, strict=False)):
        if a == b:
            continue
        if margins[i] < tolerance:
            return i, None
        return i, (f"token {i}: {a} != reference {b} (reference margin {margins[i]:.3f} >= "
                   f"{tolerance})")
    if len(got) < len(ref) and ref[len(got)] == end_id:
        return len(got), None
    if len(got) != len(ref):
        return min(len(got), len(ref)), f"{len(got)} tokens, reference {len(ref)}"
    return len(ref), None


def import_standin() -> Any:
    """The shim's `tensorrt_llm` (the stand-in) in this process."""
    if str(SHIM) not in sys.path:
        sys.path.insert(0, str(SHIM))
    import tensorrt_llm

    return tensorrt_llm


def make_model(work: Path, layers: int | None) -> Path:
    sys.path.insert(0, str(STANDIN))
    from llmapi_gpu_model import write_model

    return write_model(work / "llama2-7b-random", layers=layers)


def references(model_dir: Path, n: int, say: Any) -> Refs:
    """transformers' greedy answers (unsharded, GPU 0) in float32 and bfloat16."""
    import torch
    from llmapi_gpu_model import read_config, reference_greedy, reference_model
    from transformers import AutoTokenizer

    config = read_config(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    prompt_ids = {p: list(tokenizer.encode(p)) for p in PROMPTS}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        started = time.monotonic()
        model = reference_model(config, torch.device("cuda", 0), dtype)
        out[name] = {p: reference_greedy(model, ids, n) for p, ids in prompt_ids.items()}
        del model
        gc.collect()
        torch.cuda.empty_cache()
        say(f"reference ({name}, transformers LlamaForCausalLM, unsharded, "
            f"{time.monotonic() - started:.1f}s): "
            + json.dumps({p: r["tokens"][:8] for p, r in out[name].items()}))
    return Refs(prompt_ids, out)


def direct(model_dir: Path, world: int, refs: Refs, n: int, check: Any, say: Any) -> None:
    """The stand-in LLM in this process, float32, tp=world, requests in flight."""
    trtllm = import_standin()
    try:
        trtllm.LLM(model=str(model_dir), no_such_key=1)
        check("[llmapi] LLM() refuses an unknown key", False, "accepted")
    except ValueError as exc:
        check("[llmapi] LLM() refuses an unknown key", str(exc) == "LLM got invalid argument: "
              "no_such_key", str(exc))
    try:
        trtllm.SamplingParams(max_new_tokens=3)
        check("[llmapi] SamplingParams refuses an unknown keyword", False, "accepted")
    except TypeError as exc:
        check("[llmapi] SamplingParams refuses an unknown keyword", True, str(exc))
    started = time.monotonic()
    llm = trtllm.LLM(model=str(model_dir), tokenizer=str(model_dir), backend="pytorch",
                     tensor_parallel_size=world, dtype="float32", max_batch_size=8,
                     max_seq_len=256, kv_cache_config={"free_gpu_memory_fraction": 0.2},
                     enable_iter_perf_stats=True)
    say(f"[llmapi] direct LLM(tp={world}, float32) ready in {time.monotonic() - started:.1f}s: "
        f"{llm.executor_info}")
    check("[llmapi] decode steps replay CUDA graphs (cuda_graph_config's default)",
          llm.executor_info.get("graph_batch", 0) > 0, llm.executor_info)
    ranks = [p.pid for p in llm._procs]
    try:
        greedy = trtllm.SamplingParams(max_tokens=n, ignore_eos=True)
        first = [llm.generate_async(p, greedy) for p in PROMPTS[:2]]
        streamed = llm.generate_async(PROMPTS[2], greedy, streaming=True)
        steps = []
        for out in streamed:  # the second wave joins while the first decodes
            steps.append(list(out.outputs[0].token_ids_diff))
            if len(steps) == 2:
                first.append(llm.generate_async(PROMPTS[3], greedy))
        results = [r.result(timeout=300) for r in first]
        got = {r.prompt: r.outputs[0] for r in [*results, streamed]}
        ref = refs.by_dtype["float32"]
        same = {p[:12]: agreement(got[p].token_ids, ref[p]["tokens"], ref[p]["margins"],
                                  MARGIN_FLOAT32) for p in PROMPTS}
        check("[llmapi] direct float32 tp answers = transformers float32 reference, token for "
              "token (4 requests in flight, one streamed)",
              all(problem is None and upto == n for upto, problem in same.values()),
              {p[:12]: (same[p[:12]], got[p].token_ids[:6], ref[p]["tokens"][:6])
               for p in PROMPTS})
        check("[llmapi] streamed: one token per step", all(len(s) == 1 for s in steps)
              and len(steps) == n, [len(s) for s in steps])
        diffs = {p[:12]: abs(got[p].cumulative_logprob - sum(ref[p]["logprobs"]))
                 for p in PROMPTS}
        check("[llmapi] cumulative_logprob = reference within 1e-3", max(diffs.values()) < 1e-3,
              diffs)
        check("[llmapi] finish_reason length at max_tokens",
              {o.finish_reason for o in got.values()} == {"length"},
              {p[:12]: o.finish_reason for p, o in got.items()})
        long = llm.generate_async(PROMPTS[0], trtllm.SamplingParams(max_tokens=200))
        time.sleep(0.5)
        long.abort()
        out = long.result(timeout=60).outputs[0]
        check("[llmapi] abort: finish_reason cancelled", out.finish_reason == "cancelled",
              (out.finish_reason, len(out.token_ids)))
        stats = llm.get_stats(2)
        keys = {"iter", "iterLatencyMS", "numActiveRequests", "numQueuedRequests",
                "maxNumActiveRequests", "gpuMemUsage", "kvCacheStats", "inflightBatchingStats"}
        check("[llmapi] get_stats: IterationStats keys, KV blocks used under load",
              bool(stats) and all(keys <= set(s) for s in stats)
              and max(s["kvCacheStats"]["usedNumBlocks"] for s in stats) > 0,
              stats[-1] if stats else stats)
    finally:
        llm.shutdown()
    alive = [pid for pid in ranks if Path(f"/proc/{pid}").exists()
             and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]
    check("[llmapi] shutdown ends every rank process", not alive, alive)


# --- serving -----------------------------------------------------------------------------------


def deployment(world: int, gpu_spec: dict[str, Any]) -> Any:
    return example(EXAMPLE, model={"source": "hf://meta-llama/Llama-2-7b-hf"},
                   engine={"dtype": "bfloat16", "parallelism": {"tensor": world, "pipeline": 1},
                           "limits": {"maxBatchSize": 64, "maxInputLen": 1024,
                                      "maxSeqLen": 2048}},
                   gpu={**gpu_spec, "perNode": world})


def write_repository(dep: Any, root: Path, model_dir: Path, model_py: Path | None = None
                     ) -> Path:
    """The rendered llmapi repository; beside model.py, the shim and the stand-in's modules
    (with the CPU stand-in's parts they import).
    `model_py` replaces the rendered model.py (to try a change to it on GPUs)."""
    files = render_repository(dep, engine_dir=str(model_dir), tokenizer_dir=str(model_dir))
    if model_py is not None:
        files["tensorrt_llm/1/model.py"] = model_py.read_text()
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    version = root / "tensorrt_llm" / "1"
    shutil.copytree(SHIM / "tensorrt_llm", version / "tensorrt_llm")
    for name in MODULES:
        shutil.copy(STANDIN / name, version / name)
    copy_simulated(version)
    # LLM() takes the arguments of the CR's TensorRT-LLM version (its contract table).
    shutil.copy(TABLES / f"llm_args-{dep.trtllm_version}.json",
                version / "llmapi_gpu_llm_args.json")
    return root


def copy_simulated(version: Path) -> None:
    """The CPU stand-in's parts the GPU stand-in imports, where it looks for them when deployed
    (llmapi_gpu_standin.SIMULATED beside it)."""
    for part in SIMULATED_PARTS:
        target = version / "llmapi_cpu_standin" / part
        if (SIMULATED / part).is_dir():
            shutil.copytree(SIMULATED / part, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(SIMULATED / part, target)


def adapted_argv(argv: list[str], install: TritonInstall, repo: Path,
                 ports: tuple[int, int, int]) -> list[str]:
    """The rendered argv with only binary, repository and ports adapted, plus the backend
    directory and loopback addresses."""
    http, grpc, metrics = ports
    swap = {"--model-repository=": str(repo), "--http-port=": str(http),
            "--grpc-port=": str(grpc), "--metrics-port=": str(metrics)}
    out = []
    for arg in argv:
        prefix = next((p for p in swap if arg.startswith(p)), None)
        out.append(str(install.tritonserver) if arg == TRITONSERVER
                   else f"{prefix}{swap[prefix]}" if prefix else arg)
    return [*out, f"--backend-directory={install.backends}", "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"]


@contextlib.contextmanager
def launched(install: TritonInstall, dep: Any, root: Path, model_dir: Path, pyz: Path,
             check: Any, model_py: Path | None = None) -> Any:
    plan: dict[str, Any] = render_all(dep).launch_plan
    check("[llmapi] the rendered launch plan runs one tritonserver (the LLM spawns the ranks)",
          plan["runtime"] == "llmapi" and plan["argv"][0] == TRITONSERVER, plan["argv"][:3])
    repo = write_repository(dep, root / "models", model_dir, model_py)
    ports = tuple(free_ports(3))
    plan = {**plan, "modelRepository": str(repo), "engineDir": str(model_dir),
            "argv": adapted_argv(plan["argv"], install, repo, ports)}  # type: ignore[arg-type]
    (root / "launch.json").write_text(json.dumps(plan, indent=2))
    log = root / "launch.log"
    server = Server(*(f"127.0.0.1:{p}" for p in ports), log)  # type: ignore[call-arg]
    env = launch_env(install, gpus=True)
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-S", str(pyz), "launch", "--mode", "single",
                                 "--plan", str(root / "launch.json")], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while not is_ready(server):
            if proc.poll() is not None or time.monotonic() - started > STARTUP_SECONDS:
                raise RuntimeError("tritonllm launch (llmapi) did not become ready:\n"
                                   + log.read_text(errors="replace")[-6000:])
            time.sleep(0.5)
        yield server, proc, plan, time.monotonic() - started
    finally:
        _stop(proc)


def post(server: Server, path: str, body: dict[str, Any]) -> str:
    request = urllib.request.Request(server.url(path), data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return str(response.read().decode())


def ids_of(text: str, vocab: dict[str, int]) -> list[int]:
    """Generated text back to token ids (the word-level tokenizer: one word per token)."""
    return [vocab[w] for w in text.split()]


def served_answers(server: Server, refs: Refs, vocab: dict[str, int], n: int,
                   answers: dict[str, list[int]], check: Any) -> None:
    """HTTP generate of each prompt and generate_stream of the first, into `answers` (as ids),
    each checked with the margin rule against the free-running bf16 reference."""
    ref = refs.by_dtype["bfloat16"]
    compared = {}
    for prompt in PROMPTS:
        r = ref[prompt]
        body = {"text_input": prompt, "sampling_param_max_tokens": n, "streaming": False}
        text = json.loads(post(server, "/v2/models/tensorrt_llm/generate", body))["text_output"]
        got = answers[prompt] = ids_of(text, vocab)
        upto, problem = agreement(got, r["tokens"], r["margins"], MARGIN)
        compared[prompt[:12]] = upto
        check(f"[llmapi] HTTP generate {prompt[:12]!r} = bf16 reference (margin rule)",
              problem is None, {"compared": upto, "problem": problem,
                                               "got": got[:8], "ref": r["tokens"][:8]})
    prompt = PROMPTS[0]
    events = post(server, "/v2/models/tensorrt_llm/generate_stream",
                  {"text_input": prompt, "sampling_param_max_tokens": n, "streaming": True})
    texts = [json.loads(line[6:]).get("text_output", "") for line in events.splitlines()
             if line.startswith("data: ")]
    got = answers["stream: " + prompt] = ids_of("".join(texts), vocab)
    upto, problem = agreement(got, ref[prompt]["tokens"], ref[prompt]["margins"], MARGIN)
    check("[llmapi] HTTP generate_stream = bf16 reference (margin rule), several events",
          problem is None and len([t for t in texts if t]) > 1,
          {"events": len(texts), "compared": upto, "problem": problem})


def score_served(model_dir: Path, refs: Refs, answers: dict[str, list[int]], check: Any,
                 say: Any) -> dict[str, Any]:
    """Every served token, teacher-forced through transformers (bf16, unsharded): each must be
    the reference's greedy choice or within MARGIN of its top logit, given the same prefix."""
    import torch
    from llmapi_gpu_model import read_config, reference_model, teacher_forced_gaps

    model = reference_model(read_config(model_dir), torch.device("cuda", 0), torch.bfloat16)
    gaps = {key: teacher_forced_gaps(model, refs.prompt_ids[key.removeprefix("stream: ")],
                                     tokens) for key, tokens in answers.items()}
    del model
    torch.cuda.empty_cache()
    flat = [g for row in gaps.values() for g in row]
    summary = {"tokens": len(flat), "argmax": sum(g == 0 for g in flat),
               "max_gap": max(flat, default=None)}
    say(f"[llmapi] served tokens teacher-forced through transformers bf16: {summary}")
    check(f"[llmapi] every served token = the bf16 reference's choice or within {MARGIN} of "
          "its top logit (teacher-forced, unsharded)",
          bool(flat) and max(flat) <= MARGIN and len(flat) == sum(map(len, answers.values())),
          summary)
    return {"gaps": gaps, **summary}


def placement(log: str, world: int, check: Any) -> list[dict[str, str]]:
    from tests.gpu.check import (
        compute_apps,
        gpus_listed,
        parse_standin_lines,
        placement_problems,
        smi,
    )

    lines = [line for line in parse_standin_lines(log) if line.get("kind") == "llmapi"]
    gpus = [(index, uuid) for index, _, uuid in gpus_listed()]
    problems = placement_problems(lines, world, gpus)
    check("[llmapi] one rank process per GPU, rank r on cuda:r = nvidia-smi index r",
          not problems, problems or [(line["rank"], line["uuid"]) for line in lines])
    apps = compute_apps("\n".join(smi("--query-compute-apps=pid,used_memory,gpu_uuid",
                                      "--format=csv,noheader,nounits")))
    on = {int(line["pid"]): sorted(u for p, _, u in apps if p == int(line["pid"]))
          for line in lines}
    check("[llmapi] each rank process holds memory on its own GPU only (nvidia-smi)",
          all(on[int(line["pid"])] == [line.get("uuid")] for line in lines), on)
    return lines


def metric_checks(before: list[Any], after: list[Any], util_max: dict[str, float],
                  gpus: list[tuple[int, str, str]], check: Any) -> None:
    from tests.gpu.check import total

    check("[llmapi] nv_gpu_utilization moves on every GPU of the deployment",
          all(util_max.get(uuid, 0) > 0 for _, _, uuid in gpus), util_max)
    success = (total(after, "nv_inference_request_success", model="tensorrt_llm")
               - total(before, "nv_inference_request_success", model="tensorrt_llm"))
    check("[llmapi] nv_inference_request_success of tensorrt_llm moves", success > 0, success)
    names = {s.name for s in after}
    families = ("nv_trt_llm_kv_cache_block_metrics", "nv_trt_llm_request_metrics",
                "nv_trt_llm_inflight_batcher_metrics")
    check("[llmapi] the llmapi model exports the nv_trt_llm_* families",
          all(f in names for f in families), sorted(n for n in names if "trt_llm" in n))


def run_bench(server: Server, args: argparse.Namespace, report: dict[str, Any], check: Any,
              say: Any) -> None:
    from tritonllm.cli import bench

    levels = [int(x) for x in args.bench.split(",")]
    load = bench.Load(model="tensorrt_llm", max_tokens=args.llmapi_max_tokens,
                      prompt="the quick brown fox jumps over the lazy dog")
    result = bench.bench(server.grpc, load, levels, args.bench_requests)
    say(f"[llmapi] tritonllm bench ({'streaming' if result['streaming'] else 'not decoupled'}, "
        f"max_tokens {load.max_tokens}, {args.bench_requests} requests per level; times in ms)")
    for line in bench.table(result["levels"]).splitlines():
        say(f"[llmapi] {line}")
    report.setdefault("bench", {})["llmapi"] = result
    check("[llmapi] tritonllm bench: no request failed",
          not any(level["errors"] for level in result["levels"]),
          [(level["concurrency"], level["errors"]) for level in result["levels"]])


def serve(install: TritonInstall, world: int, pyz: Path, model_dir: Path, refs: Refs,
          gpus: list[tuple[int, str, str]], args: argparse.Namespace, report: dict[str, Any],
          check: Any, say: Any) -> None:
    from tests.gpu.check import by_label, metrics, sampling

    dep = deployment(world, args.gpu_spec)
    root = args.work / "stack-llmapi"
    root.mkdir(parents=True, exist_ok=True)
    vocab = json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    ranks: list[int] = []
    try:
        with launched(install, dep, root, model_dir, pyz, check, args.llmapi_model_py) as (
                server, proc, plan, ready):
            say(f"[llmapi] launch to ready: {ready:.1f}s; argv: {' '.join(plan['argv'])}")
            report["ready_seconds"]["llmapi"] = round(ready, 1)
            log = (root / "launch.log").read_text(errors="replace")
            ranks = [int(line["pid"]) for line in
                     check.guarded("[llmapi] placement", placement, log, world, check) or []]
            check.guarded("[llmapi] answers", served_answers, server, refs, vocab,
                          args.llmapi_tokens, report.setdefault("llmapi_served", {}), check)
            before = metrics(server)
            with sampling(lambda: metrics(server)) as samples:
                if args.bench:
                    check.guarded("[llmapi] tritonllm bench", run_bench, server, args, report,
                                  check, say)
            after = metrics(server)
            util: dict[str, float] = {}
            for snapshot in samples:
                for uuid, value in by_label(snapshot, "nv_gpu_utilization", "gpu_uuid").items():
                    util[uuid] = max(value, util.get(uuid, 0))
            say(f"[llmapi] nv_gpu_utilization max during the bench: {util}")
            say("[llmapi] nv_trt_llm_* after the bench: " + json.dumps(
                [(s.name, s.labels, s.value) for s in after if "trt_llm" in s.name][:40]))
            check.guarded("[llmapi] metrics", metric_checks, before, after, util, gpus[:world],
                          check)
            if args.openai:
                from tests.gpu import openai_check

                check.guarded("[llmapi] openai", openai_check.run, "llmapi", dep, server.grpc,
                              model_dir, args.llmapi_max_tokens, args, report, check, say)
            report["memory"]["llmapi"] = memory(proc.pid)
            for row in report["memory"]["llmapi"]:
                say(f"[llmapi] GPU memory: {row}")
        check("[llmapi] SIGTERM drains and launch exits 0", proc.returncode == 0,
              f"exit {proc.returncode}")
        steps = [json.loads(line.split("tritonllm-standin-steps ", 1)[1]) for line in
                 (root / "launch.log").read_text(errors="replace").splitlines()
                 if "tritonllm-standin-steps " in line]
        report["llmapi_steps"] = steps[-1] if steps else None
        say(f"[llmapi] the executor's own step times (steps, p50 ms, mean ms by batch): "
            f"{report['llmapi_steps']}")
        time.sleep(2)
        left = [pid for pid in ranks if Path(f"/proc/{pid}").exists()]
        check("[llmapi] no rank process left after the stop", not left, left)
    finally:
        for log_file in root.glob("*.log"):
            shutil.copy(log_file, args.out / f"llmapi-{log_file.name}")


def memory(launch_pid: int) -> list[dict[str, Any]]:
    from tests.gpu.check import compute_apps, gpus_listed, smi

    index = {uuid: i for i, _, uuid in gpus_listed()}
    ours = set(descendants(launch_pid))
    return [{"gpu": index.get(uuid), "pid": pid, "ours": pid in ours, "mib": mib}
            for pid, mib, uuid in compute_apps("\n".join(smi(
                "--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits")))]


def run(install: TritonInstall, world: int, pyz: Path, gpus: list[tuple[int, str, str]],
        args: argparse.Namespace, report: dict[str, Any], check: Any, say: Any) -> None:
    """The whole llmapi stack: model files, references, the direct check, serving."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    model_dir = make_model(args.work, args.llmapi_layers)
    if args.openai:  # the model's files carry a chat template, as a chat model's do
        from tests.gpu import openai_check

        openai_check.add_chat_template(model_dir)
    if args.llmapi_model_py:
        say(f"NOTE: serving {args.llmapi_model_py} as the llmapi model.py, NOT the rendered one")
    say(f"\n== llmapi: Llama-2-7B architecture, {args.llmapi_layers or 32} layers, random "
        f"weights, tp={world}: {model_dir}")
    refs = references(model_dir, args.llmapi_tokens, say)
    report["llmapi_reference"] = refs.by_dtype
    check.guarded("[llmapi] direct check", direct, model_dir, world, refs, args.llmapi_tokens,
                  check, say)
    check.guarded("[llmapi] serving", serve, install, world, pyz, model_dir, refs, gpus, args,
                  report, check, say)
    if report.get("llmapi_served"):
        report["llmapi_scores"] = check.guarded("[llmapi] scores", score_served, model_dir,
                                                refs, report["llmapi_served"], check, say)
