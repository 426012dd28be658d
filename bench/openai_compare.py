"""The OpenAI API measured by two tools under one load: NVIDIA's aiperf and `tritonllm bench
--api openai`; and what the OpenAI path adds over Triton's gRPC stream on the same deployment.

    .venv/bin/python -m bench.openai_compare [--concurrency 1,4,16] [--requests 64]
        [--input-words 16] [--max-tokens 32] [--token-delay 0.01] [--json FILE]
    .venv/bin/python -m bench.openai_compare --url http://IP:9000/v1 --grpc IP:8001 \\
        --tokenizer /path/to/the/model --model NAME      # a deployment (e.g. on the real node)

Without --url it serves one itself, as a serving pod does: the engine runtime's repository
(tp 2) in a real tritonserver with the CPU stand-in for TensorRT-LLM (SIMULATED: --token-delay
seconds per generated token), the OpenAI frontend (`tritonllm openai`) in front of it, the
stand-in tokenizer with the seed's chat template (examples/cpu-standin/seed.yaml).

The load, identical for both tools at each concurrency level (closed loop: N clients, each
sending its next request when the previous answer is complete, --requests in all): one chat
request (/v1/chat/completions, one user message of --input-words words of the tokenizer's
vocabulary), `stream: true` with `stream_options.include_usage`, `max_tokens` = --max-tokens.
aiperf reads the very same prompt from a single_turn input file, counts output tokens from the
server's `usage` (--use-server-token-count: the stand-in's per-token text has no spaces, so
re-tokenizing the text client-side would undercount) and runs offline (a local tokenizer path;
HF_HUB_OFFLINE is NOT set: aiperf 0.13.0 then looks local paths up in the hub cache and fails).
aiperf runs from its own cached virtualenv (bench/aiperf_env.py), not the project's.

Compared per level: TTFT p50/p99 (request sent -> first chunk with text, both tools), ITL p50
(ours: every gap between two chunks with text; aiperf's inter_chunk_latency is the same
definition; aiperf's own `inter_token_latency` is a per-request mean, (latency - TTFT) /
(tokens - 1), shown beside it), output tokens/s and requests/s (both: over the level's wall
time). Then the added latency: `tritonllm bench` over gRPC against `--api openai --endpoint
completions` (the same prompt text reaches the model either way) at concurrency 1 and 16.

A third witness, for where the two differ: the frontend's own TTFT histogram
(tritonllm_openai_time_to_first_token_seconds, from the request's arrival to the first token
from Triton, server-side), its mean over each tool's run, read from /metrics before and after;
and aiperf's own time between one answer's end and the next request's start at concurrency 1
(its closed loop passes each request through its timing manager and workers; ours sends the
next request from the same thread at once).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import re
import resource
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.aiperf_env import aiperf_executable, offline_env

ROOT = Path(__file__).resolve().parents[1]
# The seed's chat template (examples/cpu-standin/seed.yaml), for the locally served model.
SEED_TEMPLATE = ("{{ bos_token }} {% for m in messages %}"
                 "{% if m['role'] == 'assistant' %}triton says {% endif %}"
                 "{{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}triton says{% endif %}")
WORDS = ("hello", "world", "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog")


def prompt(words: int) -> str:
    """--input-words words of the stand-in tokenizer's vocabulary (one token each)."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(words))


@contextlib.contextmanager
def local_deployment(token_delay: float, work: Path) -> Iterator[dict[str, str]]:
    """tritonserver (stand-in, engine runtime) + the OpenAI frontend, as a serving pod runs
    them; the addresses and the tokenizer."""
    from tests.helpers import pyz_archive
    from tests.triton.conftest import EXAMPLE, example
    from tests.triton.openai_stack import config_for, run_frontend
    from tests.triton.stack import ensure_install, make_tokenizer, run_stack

    install = ensure_install()
    tokenizer = make_tokenizer(install, work / "tokenizer")
    (tokenizer / "chat_template.jinja").write_text(SEED_TEMPLATE)
    dep = example(EXAMPLE, serving={"streaming": True})
    with run_stack(install, dep, work / "stack", tokenizer, pyz_archive(work),
                   token_delay=token_delay) as stack, \
            run_frontend(config_for(dep, stack.server.grpc, tokenizer), work / "fe") as fe:
        yield {"url": f"{fe.url}/v1", "grpc": stack.server.grpc,
               "model": fe.config.served_model_name, "tokenizer": str(tokenizer),
               "where": f"local: tritonserver + CPU stand-in (token delay {token_delay} s), "
                        "engine runtime tp 2, tritonllm openai in front"}


def cpu_seconds() -> float:
    """CPU time of this process's finished children and their own waited-for children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ours(target: str, api: str, endpoint: str, model: str | None, text: str, level: int,
         requests: int, max_tokens: int) -> dict[str, Any]:
    """One level of `tritonllm bench` (the command, as a user runs it); its level figures and
    the CPU seconds the client used (`cpu_s`)."""
    argv = [sys.executable, "-m", "tritonllm.cli.main", "bench", target, "--api", api,
            "--concurrency", str(level), "--requests", str(requests), "--max-tokens",
            str(max_tokens), "--prompt", text, "--json", "-"]
    if api == "openai":
        argv += ["--endpoint", endpoint] + (["--model", model] if model else [])
    cpu = cpu_seconds()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"tritonllm bench failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout[done.stdout.index("\n{") + 1:])
    return {**report["levels"][0], "cpu_s": round(cpu_seconds() - cpu, 1)}


def aiperf(url: str, model: str, tokenizer: str, text: str, level: int, requests: int,
           max_tokens: int, work: Path) -> dict[str, Any]:
    """One level of aiperf with the same load; its summary JSON (profile_export_aiperf.json),
    with the CPU seconds the client used (`cpu_s`: aiperf and every process it started)."""
    inputs = work / "prompts.jsonl"
    inputs.write_text(json.dumps({"text": text}) + "\n")
    out = work / f"aiperf-c{level}"
    argv = [str(aiperf_executable()), "profile", "--model", model, "--url", url.removesuffix("/v1"),
            "--endpoint-type", "chat", "--streaming", "--tokenizer", tokenizer,
            "--custom-dataset-type", "single_turn", "--input-file", str(inputs),
            "--extra-inputs", f"max_tokens:{max_tokens}", "--use-server-token-count",
            "--concurrency", str(level), "--request-count", str(requests),
            "--ui-type", "none", "--no-server-metrics", "--artifact-dir", str(out)]
    cpu = cpu_seconds()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False,
                          env=offline_env(), cwd=work)
    summary = out / "profile_export_aiperf.json"
    if done.returncode != 0 or not summary.exists():
        raise RuntimeError(f"aiperf failed ({done.returncode}):\n{done.stdout[-3000:]}")
    return {**json.loads(summary.read_text()), "cpu_s": round(cpu_seconds() - cpu, 1)}


def ttft_totals(metrics: str) -> tuple[float, float]:
    """(sum of seconds, count) of the frontend's TTFT histogram in a /metrics text, all label
    sets."""
    family = "tritonllm_openai_time_to_first_token_seconds"

    def total(suffix: str) -> float:
        return sum(float(v) for v in re.findall(rf"^{family}_{suffix}(?:{{[^}}]*}})? (\S+)$",
                                                metrics, re.M))
    return total("sum"), total("count")


def frontend_ttft(url: str) -> tuple[float, float]:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=10) as resp:
        return ttft_totals(resp.read().decode())


def witnessed(url: str, run: Any) -> tuple[Any, float | None]:
    """run()'s result and the frontend's mean TTFT (ms) over it."""
    s0, n0 = frontend_ttft(url)
    result = run()
    s1, n1 = frontend_ttft(url)
    return result, (round((s1 - s0) / (n1 - n0) * 1000, 2) if n1 > n0 else None)


def aiperf_gap_ms(out: Path) -> float | None:
    """aiperf at concurrency 1: mean time from an answer's end to the next request's start."""
    records = [json.loads(line)["metadata"] for line in
               (out / "profile_export.jsonl").read_text().splitlines() if line.strip()]
    spans = sorted((r["request_start_ns"], r["request_end_ns"]) for r in records)
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(spans)]
    return round(sum(gaps) / len(gaps) / 1e6, 2) if gaps else None


def _stat(report: dict[str, Any], name: str, stat: str) -> float | None:
    value = (report.get(name) or {}).get(stat)
    return None if value is None else float(value)


def side_by_side(mine: dict[str, Any], theirs: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(figure, tritonllm bench, aiperf) for one level."""
    errors = len(theirs.get("error_summary") or [])
    return [
        ("TTFT p50 ms", mine["ttft_ms_p50"], _stat(theirs, "time_to_first_token", "p50")),
        ("TTFT p99 ms", mine["ttft_ms_p99"], _stat(theirs, "time_to_first_token", "p99")),
        ("ITL p50 ms (gaps)", mine["itl_ms_p50"], _stat(theirs, "inter_chunk_latency", "p50")),
        ("ITL p50 ms (aiperf: per-request mean)", mine["itl_ms_p50"],
         _stat(theirs, "inter_token_latency", "p50")),
        ("output tokens/s", mine["output_tokens_per_s"],
         _stat(theirs, "output_token_throughput", "avg")),
        ("requests/s", mine["requests_per_s"], _stat(theirs, "request_throughput", "avg")),
        ("failed requests", mine["errors"], errors),
        ("client CPU seconds", mine["cpu_s"], theirs["cpu_s"]),
    ]


def diff(a: Any, b: Any) -> str:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or not b:
        return "-"
    return f"{(a - b) / b * 100:+.1f} %"


def markdown(rows: list[list[Any]], header: list[str]) -> str:
    def cell(v: Any) -> str:
        return "-" if v is None else (f"{v:,.1f}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def compare(target: dict[str, str], levels: list[int], requests: int, text: str,
            max_tokens: int, work: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"where": target.get("where", target["url"]), "levels": levels,
                              "requests": requests, "max_tokens": max_tokens, "prompt": text,
                              "tools": [], "added_latency": []}
    url = target["url"]
    for level in levels:
        mine, mine_server = witnessed(url, functools.partial(
            ours, url, "openai", "chat", target["model"], text, level, requests, max_tokens))
        theirs, their_server = witnessed(url, functools.partial(
            aiperf, url, target["model"], target["tokenizer"], text, level, requests,
            max_tokens, work))
        figures = [*side_by_side(mine, theirs),
                   ("frontend-side TTFT mean ms (server)", mine_server, their_server)]
        if level == 1:
            figures.append(("client gap between requests ms", 0.0,
                            aiperf_gap_ms(work / f"aiperf-c{level}")))
        result["tools"].append({"concurrency": level, "figures": [
            {"figure": f, "tritonllm_bench": a, "aiperf": b, "diff": diff(a, b)}
            for f, a, b in figures]})
    for level in (1, 16):
        grpc = ours(target["grpc"], "grpc", "", None, text, level, max(requests, level),
                    max_tokens)
        api = ours(target["url"], "openai", "completions", target["model"], text, level,
                   max(requests, level), max_tokens)
        result["added_latency"].append({"concurrency": level, "grpc": grpc, "openai": api})
    return result


def report(result: dict[str, Any]) -> str:
    out = [f"where: {result['where']}",
           f"load: {result['requests']} requests per level, prompt {result['prompt']!r}, "
           f"max_tokens {result['max_tokens']}, streamed, closed loop", "",
           "aiperf vs tritonllm bench --api openai (chat):"]
    rows = [[lv["concurrency"], f["figure"], f["tritonllm_bench"], f["aiperf"], f["diff"]]
            for lv in result["tools"] for f in lv["figures"]]
    out.append(markdown(rows, ["conc", "figure", "tritonllm bench", "aiperf", "difference"]))
    out += ["", "added latency, OpenAI API (/v1/completions) over direct gRPC, same deployment:"]
    rows = []
    for lv in result["added_latency"]:
        g, o = lv["grpc"], lv["openai"]
        for name in ("ttft_ms", "latency_ms"):
            for p in ("p50", "p99"):
                a, b = g[f"{name}_{p}"], o[f"{name}_{p}"]
                rows.append([lv["concurrency"], f"{name.removesuffix('_ms')} {p} ms", a, b,
                             None if a is None or b is None else round(b - a, 2)])
        rows.append([lv["concurrency"], "failed requests", g["errors"], o["errors"], None])
    out.append(markdown(rows, ["conc", "figure", "gRPC", "OpenAI", "added ms"]))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="an OpenAI API base (http://host:9000/v1); default: serve one")
    p.add_argument("--grpc", help="the same deployment's Triton gRPC host:port (with --url)")
    p.add_argument("--model", help="the served model name (with --url)")
    p.add_argument("--tokenizer", help="the model's tokenizer directory, for aiperf (with --url)")
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--input-words", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--token-delay", type=float, default=0.01,
                   help="the local stand-in's seconds per generated token")
    p.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = p.parse_args(argv)
    if args.url and not (args.grpc and args.model and args.tokenizer):
        p.error("--url needs --grpc, --model and --tokenizer")
    levels = [int(x) for x in args.concurrency.split(",")]
    text = prompt(args.input_words)
    with tempfile.TemporaryDirectory(prefix="openai-compare-") as tmp:
        work = Path(tmp)
        with contextlib.ExitStack() as stack:
            target = {"url": args.url, "grpc": args.grpc, "model": args.model,
                      "tokenizer": args.tokenizer, "where": args.url} if args.url else \
                stack.enter_context(local_deployment(args.token_delay, work))
            result = compare(target, levels, args.requests, text, args.max_tokens, work)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
