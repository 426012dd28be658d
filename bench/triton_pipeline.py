"""Benchmark of the CPU serving pipeline: figures, not pass/fail.

    .venv/bin/python -m bench.triton_pipeline [--seconds S] [--concurrency 1,4,16] [--max-tokens N]

Starts the triton tier's stack (tests/triton/stack.py: `tritonllm launch` -> real mpirun, world
size 2 -> tritonserver 2.51 on CPU serving the repository rendered for gpt2-medium at tp=2, the
tensorrt_llm model replaced by the deterministic CPU stand-in) and drives the ensemble over HTTP
with keep-alive connections, `concurrency` clients in closed loop for S seconds per level:

- `generate` (not decoupled): requests/s, p50/p95 latency;
- `generate_stream` (decoupled, serving.streaming): requests/s, p50/p95 time to first token
  (first SSE event) and p50/p95 time to the last event.

The stand-in generates instantly (unless --token-delay), so the figures measure the pipeline
around the engine: HTTP front end, ensemble scheduling, tokenizer pre/postprocessing in the
Python backend (one instance each, as rendered), not TensorRT-LLM.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import example, pyz_archive
from tests.triton.stack import (
    Server,
    TritonInstall,
    ensure_install,
    make_tokenizer,
    run_stack,
)

EXAMPLE = "gpt2-medium"
TP2 = {"parallelism": {"tensor": 2, "pipeline": 1}}
PROMPT = "the quick brown fox jumps over the lazy dog"


@dataclass
class Samples:
    latency: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)  # time to first token (streaming)
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def one_request(conn: http.client.HTTPConnection, path: str, body: bytes,
                stream: bool) -> tuple[float, float | None]:
    """(seconds to the last byte, seconds to the first SSE event or None)."""
    start = time.perf_counter()
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    first = None
    if stream:
        while line := response.readline():
            if first is None and line.startswith(b"data: "):
                first = time.perf_counter() - start
            if b'"error"' in line:
                raise RuntimeError(line.decode(errors="replace"))
    else:
        data = response.read()
        if response.status != 200:
            raise RuntimeError(data.decode(errors="replace"))
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}")
    return time.perf_counter() - start, first


def drive(server: Server, *, stream: bool, concurrency: int, seconds: float,
          max_tokens: int) -> tuple[Samples, float]:
    path = "/v2/models/ensemble/" + ("generate_stream" if stream else "generate")
    request = {"text_input": PROMPT, "max_tokens": max_tokens}
    if stream:
        request["stream"] = True
    body = json.dumps(request).encode()
    host, port = server.http.rsplit(":", 1)
    samples = Samples()
    deadline = time.perf_counter() + seconds

    def client() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            while time.perf_counter() < deadline:
                try:
                    latency, first = one_request(conn, path, body, stream)
                except (OSError, RuntimeError, http.client.HTTPException):
                    with samples.lock:
                        samples.errors += 1
                    conn.close()
                    conn = http.client.HTTPConnection(host, int(port), timeout=120)
                    continue
                with samples.lock:
                    samples.latency.append(latency)
                    if first is not None:
                        samples.first.append(first)
        finally:
            conn.close()

    # One warm-up request per connection level so that first-request costs are not counted.
    warm = http.client.HTTPConnection(host, int(port), timeout=120)
    with contextlib.closing(warm):
        one_request(warm, path, body, stream)
    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples, time.perf_counter() - started


def ms(value: float) -> str:
    return f"{value * 1000:8.1f}"


def report(name: str, stream: bool, levels: list[int], seconds: float, max_tokens: int,
           server: Server, out: Callable[[str], None]) -> None:
    if stream:
        out(f"\n{name}: POST /v2/models/ensemble/generate_stream, max_tokens={max_tokens}")
        out(f"{'conc':>4} {'req/s':>8} {'ttft p50':>9} {'ttft p95':>9} {'last p50':>9} "
            f"{'last p95':>9} {'n':>6} {'err':>4}   (ms)")
    else:
        out(f"\n{name}: POST /v2/models/ensemble/generate, max_tokens={max_tokens}")
        out(f"{'conc':>4} {'req/s':>8} {'p50':>9} {'p95':>9} {'n':>6} {'err':>4}   (ms)")
    for level in levels:
        s, elapsed = drive(server, stream=stream, concurrency=level, seconds=seconds,
                           max_tokens=max_tokens)
        rate = len(s.latency) / elapsed
        if stream:
            out(f"{level:>4} {rate:8.1f} {ms(pct(s.first, 50)):>9} {ms(pct(s.first, 95)):>9} "
                f"{ms(pct(s.latency, 50)):>9} {ms(pct(s.latency, 95)):>9} {len(s.latency):>6} "
                f"{s.errors:>4}")
        else:
            out(f"{level:>4} {rate:8.1f} {ms(pct(s.latency, 50)):>9} {ms(pct(s.latency, 95)):>9} "
                f"{len(s.latency):>6} {s.errors:>4}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="duration per concurrency")
    ap.add_argument("--concurrency", default="1,4,16", help="comma-separated levels")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--token-delay", type=float, default=0.0,
                    help="stand-in seconds per generated token (0: instant)")
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]

    def out(line: str) -> None:
        print(line, flush=True)

    install: TritonInstall = ensure_install()
    with tempfile.TemporaryDirectory(prefix="tritonllm-bench-") as tmp:
        root = Path(tmp)
        tokenizer = make_tokenizer(install, root / "tokenizer")
        pyz = pyz_archive(root)
        out(f"stack: tritonllm launch -> mpirun (world size 2) -> tritonserver; {EXAMPLE} tp=2 "
            f"with the CPU stand-in (token delay {args.token_delay}s); {args.seconds:g}s per "
            f"level; python {sys.version.split()[0]}")
        for name, serving, stream in (("plain", {}, False),
                                      ("streaming", {"streaming": True}, True)):
            dep = example(EXAMPLE, engine=TP2, serving=serving)
            t0 = time.perf_counter()
            with run_stack(install, dep, root / name, tokenizer, pyz,
                           token_delay=args.token_delay) as stack:
                startup = time.perf_counter() - t0
                out(f"\n[{name}] launch to ready: {startup:.1f}s")
                report(name, stream, levels, args.seconds, args.max_tokens, stack.server, out)


if __name__ == "__main__":
    main()
