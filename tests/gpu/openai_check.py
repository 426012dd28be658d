"""The GPU recipe's OpenAI API checks (`scripts/gpu-check --openai`; docs/gpu.md).

For each stack the recipe serves (the engine ensemble with the GPU stand-in, runtime llmapi with
the SIMULATED LLM API computing a Llama; neither is TensorRT-LLM), it starts the product's
frontend, `tritonllm openai --config <openai.json>`, as the `openai` sidecar runs it: the
FrontendConfig the operator renders for that CR (`frontend_config(dep, tokenizer_dir=...)`),
only Triton's address and the port adapted to this machine (tests/triton/openai_stack.py). Then
the clients people run against it:

1. **the `openai` SDK**: models.list; completions and chat, not streamed and streamed (with
   `stream_options.include_usage`); every answer's text must equal what Triton itself answers
   the same prompt over gRPC (tritonclient, asked as the frontend asks it), `usage` must count
   the prompt as the model's tokenizer does and the completion as the frontend documents it
   (one token per streamed step; an engine answer sent whole, its text re-encoded);
   `finish_reason` `length` at max_tokens; chat (the recipe's tokenizer is given a chat
   template, `CHAT_TEMPLATE`, whose only text besides the messages is the BOS the frontend drops)
   must answer as completions does for the same words. Errors: an unknown model is 404
   (`model_not_found`), a prompt over maxInputLen 400 (`context_length_exceeded`), `n` 2 a 400
   naming `n`. The frontend's /metrics count what was sent.
2. **NVIDIA's `aiperf`** (profile, chat, streaming, `--tokenizer` the local tokenizer dir, the
   prompts from a file of in-vocabulary words) at each --openai-levels concurrency: no failed
   request; TTFT, inter-token latency and throughput go to figures.json.
3. **`tritonllm bench --api openai`** (its library) at the same levels, beside aiperf.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# The recipe's tokenizers are word-level over a few English words (tests/triton/
# make_tokenizer.py, llmapi_gpu_model.write_model): a template with role markers would turn
# into <unk> tokens. This one joins the messages after the BOS text and refuses unknown roles,
# so a chat request reaches the model as the same words sent to /v1/completions.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ('system', 'user', 'assistant') %}"
    "{{ raise_exception('unknown role ' + message['role']) }}{% endif %}{% endfor %}"
    "{{ bos_token }}{% for message in messages %}{{ ' ' + message['content'] }}{% endfor %}"
)
PROMPT = "the quick brown fox jumps over the lazy dog"
AIPERF_SECONDS = 240  # one aiperf run, start to end
# aiperf's export: the metrics read into figures.json (tag -> the figure's name).
AIPERF_METRICS = {
    "time_to_first_token": "ttft_ms",
    "inter_token_latency": "itl_ms",
    "request_latency": "latency_ms",
    "output_token_throughput": "tokens_per_s",
    "request_throughput": "requests_per_s",
    "request_count": "requests",
}


def add_chat_template(tokenizer_dir: Path) -> None:
    """Give the recipe's test tokenizer a chat template, as a model's files carry one."""
    (tokenizer_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE)


@dataclasses.dataclass(frozen=True)
class Expected:
    """What Triton itself answers a prompt, asked as the frontend asks it, and so what the
    frontend must return: the text, and the usage and finish_reason that follow from it."""

    text: str
    usage: tuple[int, int, int]
    finish_reason: str


def triton_streams(cfg: Any, client_streams: bool) -> bool:
    """Whether the frontend asks Triton for one response per step (the frontend's rule, as
    documented in tritonllm.openai.server): a decoupled model streams, except the engine
    ensemble for an answer sent whole (its one final response decodes all tokens together)."""
    return bool(cfg.decoupled) and (client_streams or cfg.runtime != "engine")


def direct(cfg: Any, prompt: str, max_tokens: int, stream: bool) -> list[str]:
    """The texts Triton answers `prompt` with over gRPC (tritonclient), with the inputs the
    frontend's config names: one per response that carries the text output (a step whose
    token decodes to nothing carries ""; a decoupled model's final, empty response none)."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    from tests.helpers import grpc_inputs, grpc_stream, stream_texts

    values: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens}
    if cfg.decoupled:
        values["stream"] = stream
    inputs = []
    for name, value in values.items():
        tensor = cfg.inputs[name]
        array = (np.array([value.encode()], object) if tensor.dtype == "BYTES" else
                 np.array([value], {"INT32": np.int32, "INT64": np.int64, "BOOL": bool}[
                     tensor.dtype]))
        inputs.append((tensor.name, tensor.dtype, array.reshape(1, 1) if cfg.batched else array))
    if cfg.decoupled:  # a decoupled model answers on the stream API only
        texts = stream_texts(grpc_stream(cfg.triton_grpc, cfg.triton_model, inputs),
                             cfg.outputs["text"])
    else:
        client = grpcclient.InferenceServerClient(cfg.triton_grpc)
        try:
            out = client.infer(cfg.triton_model, grpc_inputs(inputs))
        finally:
            client.close()
        texts = [out.as_numpy(cfg.outputs["text"]).reshape(-1)[0].decode()]
    if cfg.output_includes_prompt and texts:
        texts[0] = texts[0].removeprefix(prompt)
    return texts


def expected(cfg: Any, tokenizer: Any, max_tokens: int, client_streams: bool) -> Expected:
    """PROMPT's answer as Triton gives it; completion tokens as the frontend must count them:
    one per streamed step, else the text re-encoded without special tokens."""
    streams = triton_streams(cfg, client_streams)
    texts = direct(cfg, PROMPT, max_tokens, streams)
    text = "".join(texts)
    n = len(texts) if streams else len(tokenizer.encode(text, add_special_tokens=False).ids)
    prompt = len(tokenizer.encode(PROMPT, add_special_tokens=cfg.add_special_tokens).ids)
    return Expected(text, (prompt, n, prompt + n), "length" if n >= max_tokens else "stop")


def sdk_checks(fe: Any, max_tokens: int, tag: str, check: Any, say: Any) -> dict[str, Any]:
    """The openai SDK against the frontend; returns what it saw (for figures.json)."""
    import openai
    from tokenizers import Tokenizer

    cfg = fe.config
    name = cfg.served_model_name
    tokenizer = Tokenizer.from_file(str(Path(cfg.tokenizer_dir) / "tokenizer.json"))
    whole = expected(cfg, tokenizer, max_tokens, client_streams=False)
    steps = expected(cfg, tokenizer, max_tokens, client_streams=True)
    for what, e in (("whole", whole), ("streamed", steps)):
        say(f"[{tag}] Triton over gRPC, asked as for an answer {what}: {e.text[:100]!r}, usage "
            f"{e.usage}, {e.finish_reason}")
    client = openai.OpenAI(base_url=f"{fe.url}/v1", api_key="unused", max_retries=0,
                           timeout=120)
    seen: dict[str, Any] = {"triton": {"whole": dataclasses.asdict(whole),
                                       "streamed": dataclasses.asdict(steps)}}

    models = [m.id for m in client.models.list()]
    check(f"[{tag}] openai SDK: models.list = the served name", models == [name], models)

    c = client.completions.create(model=name, prompt=PROMPT, max_tokens=max_tokens)
    got = (c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens) \
        if c.usage else None
    seen["completions"] = c.choices[0].text
    check(f"[{tag}] openai SDK: completions = Triton's text, usage, finish_reason",
          c.choices[0].text == whole.text and got == whole.usage
          and c.choices[0].finish_reason == whole.finish_reason
          and c.id.startswith("cmpl-") and c.model == name,
          {"text": c.choices[0].text[:80], "usage": got, "expected": whole.usage,
           "finish_reason": c.choices[0].finish_reason, "id": c.id[:12]})

    chunks = list(client.completions.create(model=name, prompt=PROMPT, max_tokens=max_tokens,
                                            stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    last = chunks[-1] if chunks else None
    got = (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) \
        if last is not None and last.usage else None
    check(f"[{tag}] openai SDK: completions streamed = Triton's text in several chunks, usage "
          "chunk last",
          text == steps.text and got == steps.usage and last is not None and not last.choices
          and len([ch for ch in chunks if ch.choices and ch.choices[0].text]) > 1,
          {"chunks": len(chunks), "text": text[:80], "usage": got})

    messages: Any = [{"role": "user", "content": PROMPT}]
    r = client.chat.completions.create(model=name, messages=messages, max_tokens=max_tokens)
    got = (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) \
        if r.usage else None
    seen["chat"] = r.choices[0].message.content
    check(f"[{tag}] openai SDK: chat (the tokenizer's chat template) = completions of the same "
          "words",
          r.choices[0].message.content == whole.text and r.choices[0].message.role == "assistant"
          and got == whole.usage and r.choices[0].finish_reason == whole.finish_reason
          and r.id.startswith("chatcmpl-"),
          {"content": (r.choices[0].message.content or "")[:80], "usage": got,
           "finish_reason": r.choices[0].finish_reason})

    stream = list(client.chat.completions.create(
        model=name, messages=messages, max_completion_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    final = stream[-1] if stream else None
    got = (final.usage.prompt_tokens, final.usage.completion_tokens, final.usage.total_tokens) \
        if final is not None and final.usage else None
    finishes = [ch.choices[0].finish_reason for ch in stream
                if ch.choices and ch.choices[0].finish_reason]
    check(f"[{tag}] openai SDK: chat streamed = the same text, usage chunk last",
          text == steps.text and got == steps.usage and finishes == [steps.finish_reason],
          {"chunks": len(stream), "text": text[:80], "usage": got, "finish": finishes})

    errors: dict[str, Any] = {}
    try:
        client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=4)
        errors["unknown model"] = "answered"
    except openai.NotFoundError as exc:
        errors["unknown model"] = (exc.status_code, exc.code)
    try:
        client.completions.create(model=name, prompt="hello " * (cfg.max_input_len + 1),
                                  max_tokens=4)
        errors["prompt over maxInputLen"] = "answered"
    except openai.BadRequestError as exc:
        errors["prompt over maxInputLen"] = (exc.status_code, exc.code,
                                             str(cfg.max_input_len) in exc.message)
    try:
        client.completions.create(model=name, prompt=PROMPT, max_tokens=4, n=2)
        errors["n=2"] = "answered"
    except openai.BadRequestError as exc:
        errors["n=2"] = (exc.status_code, exc.param)
    check(f"[{tag}] openai SDK: errors (404 unknown model, 400 context length with the limit, "
          "400 naming n)",
          errors == {"unknown model": (404, "model_not_found"),
                     "prompt over maxInputLen": (400, "context_length_exceeded", True),
                     "n=2": (400, "n")}, errors)
    seen["errors"] = errors
    return seen


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of a family's samples whose labels include `labels` (Prometheus text)."""
    from tests.gpu.check import parse_metrics

    return sum(s.value for s in parse_metrics(text) if s.name == name
               and all(s.labels.get(k) == v for k, v in labels.items()))


def metric_checks(fe: Any, tag: str, check: Any) -> dict[str, float]:
    text = fe.metrics()
    model = fe.config.served_model_name
    seen = {
        "ok": metric_value(text, "tritonllm_openai_requests_total", model=model, status="200"),
        "404": metric_value(text, "tritonllm_openai_requests_total", model=model, status="404"),
        "400": metric_value(text, "tritonllm_openai_requests_total", model=model, status="400"),
        "completion_tokens": metric_value(text, "tritonllm_openai_completion_tokens_total",
                                          model=model),
        "ttft_count": metric_value(text, "tritonllm_openai_time_to_first_token_seconds_count",
                                   model=model),
        "itl_count": metric_value(text, "tritonllm_openai_inter_token_latency_seconds_count",
                                  model=model),
    }
    check(f"[{tag}] the frontend's /metrics count requests by status, tokens, TTFT and ITL",
          seen["ok"] > 0 and seen["404"] >= 1 and seen["400"] >= 2
          and seen["completion_tokens"] > 0 and seen["ttft_count"] > 0
          and seen["itl_count"] > 0, seen)
    return seen


# --- aiperf --------------------------------------------------------------------------------------


def aiperf_summary(export: dict[str, Any]) -> dict[str, Any]:
    """The figures of aiperf's profile_export_aiperf.json: per metric its avg/p50/p99 (ms for
    times, per second for throughputs), and the error count."""
    out: dict[str, Any] = {}
    records = export.get("records", export)
    for tag, key in AIPERF_METRICS.items():
        metric = records.get(tag) if isinstance(records, dict) else None
        if isinstance(metric, dict):
            out[key] = {s: metric[s] for s in ("avg", "p50", "p90", "p99") if s in metric}
            out[key]["unit"] = metric.get("unit")
    errors = export.get("error_summary") or []
    out["errors"] = sum(int(e.get("count", 0)) for e in errors) if isinstance(errors, list) \
        else errors
    return out


def run_aiperf(fe: Any, tokenizer_dir: Path, level: int, requests: int, max_tokens: int,
               work: Path, say: Any) -> dict[str, Any]:
    """One `aiperf profile` (chat, streaming) at `level` concurrent requests."""
    work.mkdir(parents=True, exist_ok=True)
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": PROMPT}) + "\n" for _ in range(requests)))
    artifacts = work / "artifacts"
    argv = [sys.executable, "-m", "aiperf", "profile",
            "--model", fe.config.served_model_name, "--url", fe.url,
            "--endpoint-type", "chat", "--streaming", "--tokenizer", str(tokenizer_dir),
            "--input-file", str(prompts), "--custom-dataset-type", "single-turn",
            "--concurrency", str(level), "--request-count", str(requests),
            # Tokens as the server counts them (usage): the stand-ins' streamed text has no
            # spaces between words, which aiperf's own count would see as one word.
            "--use-server-token-count",
            "--warmup-request-count", str(min(level, 4)),
            "--extra-inputs", f"max_tokens:{max_tokens}",
            "--artifact-dir", str(artifacts), "--ui-type", "none", "--no-server-metrics",
            "--no-gpu-telemetry", "--no-auto-plot"]
    # Not HF_HUB_OFFLINE: with it aiperf 0.13 looks a local tokenizer dir up in the hub's cache.
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    started = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=AIPERF_SECONDS,
                         check=False, cwd=work)
    (work / "aiperf.log").write_text(out.stdout + out.stderr)
    exports = sorted(artifacts.rglob("profile_export_aiperf.json"))
    if out.returncode != 0 or not exports:
        raise RuntimeError(f"aiperf exit {out.returncode}, exports {exports}:\n"
                           + (out.stdout + out.stderr)[-3000:])
    summary = aiperf_summary(json.loads(exports[-1].read_text()))
    summary.update(concurrency=level, wall_s=round(time.monotonic() - started, 1))
    return summary


def aiperf_row(s: dict[str, Any]) -> str:
    def get(key: str, stat: str) -> str:
        value = s.get(key, {}).get(stat)
        return f"{value:9.1f}" if isinstance(value, (int, float)) else f"{'-':>9}"

    return (f"{s['concurrency']:>4} {get('requests', 'avg')} {get('requests_per_s', 'avg')} "
            f"{get('tokens_per_s', 'avg')} {get('ttft_ms', 'p50')} {get('ttft_ms', 'p99')} "
            f"{get('itl_ms', 'p50')} {get('itl_ms', 'p99')} {get('latency_ms', 'p50')} "
            f"{get('latency_ms', 'p99')} {s.get('errors')!s:>6}")


AIPERF_HEADER = (f"{'conc':>4} {'requests':>9} {'req/s':>9} {'tok/s':>9} {'ttft p50':>9} "
                 f"{'ttft p99':>9} {'itl p50':>9} {'itl p99':>9} {'lat p50':>9} {'lat p99':>9} "
                 f"{'errors':>6}")


def aiperf_runs(fe: Any, tokenizer_dir: Path, levels: list[int], requests: int, max_tokens: int,
                work: Path, tag: str, check: Any, say: Any) -> list[dict[str, Any]]:
    if importlib.util.find_spec("aiperf") is None:
        check(f"[{tag}] aiperf importable", False, "carry it: scripts/gpu-check prepare-openai")
        return []
    results = []
    for level in levels:
        results.append(run_aiperf(fe, tokenizer_dir, level, max(requests, level), max_tokens,
                                  work / f"aiperf-c{level}", say))
    say(f"[{tag}] aiperf profile (chat, streaming, max_tokens {max_tokens}; times in ms)")
    for line in [AIPERF_HEADER, *map(aiperf_row, results)]:
        say(f"[{tag}] {line}")
    check(f"[{tag}] aiperf: every request answered, none failed",
          all(r.get("errors") == 0 and r.get("requests", {}).get("avg") == max(requests, level)
              for r, level in zip(results, levels, strict=True)),
          [(r["concurrency"], r.get("requests", {}).get("avg"), r.get("errors"))
           for r in results])
    return results


def bench_runs(fe: Any, levels: list[int], requests: int, max_tokens: int, tag: str,
               check: Any, say: Any) -> dict[str, Any] | None:
    """`tritonllm bench --api openai` (its library) with the load aiperf ran."""
    from tritonllm.cli import bench

    if not hasattr(bench, "bench_openai"):
        say(f"[{tag}] tritonllm bench has no --api openai here: skipped")
        return None
    load = bench.Load(model=fe.config.served_model_name, prompt=PROMPT, max_tokens=max_tokens,
                      endpoint="chat")
    result: dict[str, Any] = bench.bench_openai(f"{fe.url}/v1", load, levels, requests)
    say(f"[{tag}] tritonllm bench --api openai (chat, streaming, max_tokens {max_tokens}, "
        f"{requests} requests per level; times in ms)")
    for line in bench.table(result["levels"]).splitlines():
        say(f"[{tag}] {line}")
    check(f"[{tag}] tritonllm bench --api openai: no request failed",
          not any(level["errors"] for level in result["levels"]),
          [(level["concurrency"], level["errors"]) for level in result["levels"]])
    return result


# --- one stack -----------------------------------------------------------------------------------


def run(tag: str, dep: Any, grpc: str, tokenizer_dir: Path, max_tokens: int,
        args: argparse.Namespace, report: dict[str, Any], check: Any, say: Any) -> None:
    """The frontend beside this stack's tritonserver, and the clients against it."""
    from tests.triton.openai_stack import config_for, run_frontend

    levels = [int(x) for x in args.openai_levels.split(",")]
    root = args.work / f"openai-{tag.replace('+', '-')}"
    config = config_for(dep, grpc, tokenizer_dir)
    say(f"\n== [{tag}] OpenAI frontend: tritonllm openai, model {config.triton_model} "
        f"({config.runtime}, decoupled {config.decoupled}), served as {config.served_model_name}")
    seen: dict[str, Any] = report.setdefault("openai", {}).setdefault(tag, {})
    started = time.monotonic()
    try:
        with run_frontend(config, root) as fe:
            seen["frontend_ready_s"] = round(time.monotonic() - started, 2)
            seen["sdk"] = check.guarded(f"[{tag}] openai SDK", sdk_checks, fe, max_tokens, tag,
                                        check, say)
            seen["aiperf"] = check.guarded(f"[{tag}] aiperf", aiperf_runs, fe, tokenizer_dir,
                                           levels, args.openai_requests, max_tokens,
                                           root / "aiperf", tag, check, say)
            seen["bench"] = check.guarded(f"[{tag}] tritonllm bench --api openai", bench_runs,
                                          fe, levels, args.openai_requests, max_tokens, tag,
                                          check, say)
            seen["metrics"] = check.guarded(f"[{tag}] frontend metrics", metric_checks, fe, tag,
                                            check)
        check(f"[{tag}] the frontend exits 0 on SIGTERM", fe.proc.returncode == 0,
              f"exit {fe.proc.returncode}")
    finally:
        keep(root, tag, args.out, say)


def keep(root: Path, tag: str, out: Path, say: Any) -> None:
    """The frontend's log, each aiperf log and export to --out, in one archive (the device
    brings back at most 8 files); their error lines to stdout."""
    import tarfile

    files = sorted([*root.rglob("*.log"), *root.rglob("profile_export_aiperf.json")])
    for path in files:
        if path.suffix != ".log":
            continue
        for line in path.read_text(errors="replace").splitlines():
            if re.search(r"Traceback|ERROR|error:|CRITICAL", line):
                say(f"[{tag}] {path.relative_to(root)}: {line[:300]}")
    if files:
        archive = out / f"openai-{tag.replace('+', '-')}-logs.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            for path in files:
                tar.add(path, arcname=str(path.relative_to(root)))
        say(f"[{tag}] frontend and aiperf logs: {archive.name}")
