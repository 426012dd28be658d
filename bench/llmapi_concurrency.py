"""Non-streaming requests in flight together on the llmapi model: figures, not pass/fail.

    .venv/bin/python -m bench.llmapi_concurrency [--requests 16] [--tokens 20] [--delay 0.05]
                                                 [--source DIR ...]

For each source tree given (default: this checkout; e.g. `--source /path/to/worktree-of-HEAD`
to compare with the model before a change), a child process imports that tree's tritonllm and
renders the llmapi model repository of one deployment (runtime llmapi, tensor parallelism 1,
maxBatchSize = --requests, serving.streaming false: not decoupled). This checkout then serves it
in a real tritonserver 2.51 with the CPU stand-in's SIMULATED LLM API (tests/triton/
llmapi_stack.py), whose in-flight batching advances every request of the batch by one token
each --delay seconds, and measures:

- one request of --tokens tokens alone (best of 3),
- --requests such requests sent at once over HTTP generate: the wall time until the last answer,
  and its ratio to one request (1 = all in flight together; --requests = one at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.triton import llmapi_stack
from tests.triton.stack import ensure_install, make_tokenizer

from tritonllm.api.deployment import parse_deployment

ROOT = Path(__file__).resolve().parents[1]

ENV_TOKEN_DELAY = "TRITONLLM_STANDIN_TOKEN_DELAY"


def body(batch: int) -> dict[str, Any]:
    return {
        "apiVersion": "tritonllm.io/v1alpha1", "kind": "TritonLLMDeployment",
        "metadata": {"name": "bench-llmapi", "namespace": "default", "uid": "uid-bench"},
        "spec": {
            "image": "127.0.0.1:5000/tritonllm/triton-standin:26.07-trtllm-python-py3",
            "runtime": "llmapi",
            "model": {"source": "pvc://store/models/tiny-gpt2", "architecture": "gpt2"},
            "engine": {"dtype": "float16", "parallelism": {"tensor": 1, "pipeline": 1},
                       "limits": {"maxBatchSize": batch, "maxInputLen": 64, "maxSeqLen": 256,
                                  "maxNumTokens": 1024}},
            "serving": {"streaming": False},
            "gpu": {"product": "NVIDIA-CPU-STANDIN"},
            "storage": {"claimName": "store"},
        },
    }


# Run by each source tree's Python: its repository files for the deployment, as JSON.
CHILD = r"""
import json, sys
from tritonllm.api.deployment import parse_deployment
from tritonllm.triton.repository import render_repository
dep = parse_deployment(json.loads(sys.argv[1]))
print(json.dumps(render_repository(dep, engine_dir=sys.argv[2], tokenizer_dir=sys.argv[2])))
"""


def rendered(source: Path, spec: dict[str, Any], model_dir: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(source / "operator")}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec), str(model_dir)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out))


def generate(url: str, tokens: int) -> str:
    request = urllib.request.Request(
        url, method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps({"text_input": "the quick brown fox",
                         "sampling_param_max_tokens": tokens}).encode())
    with urllib.request.urlopen(request, timeout=600) as response:
        return str(json.load(response)["text_output"])


def measure(url: str, requests: int, tokens: int) -> dict[str, float]:
    singles = []
    for _ in range(3):
        started = time.monotonic()
        generate(url, tokens)
        singles.append(time.monotonic() - started)
    one = min(singles)
    with ThreadPoolExecutor(requests) as pool:
        started = time.monotonic()
        answers = list(pool.map(lambda _: generate(url, tokens), range(requests)))
        together = time.monotonic() - started
    assert len(set(answers)) == 1, answers  # the stand-in is deterministic
    return {"one_request_s": round(one, 3), f"{requests}_at_once_s": round(together, 3),
            "ratio": round(together / one, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--source", type=Path, action="append")
    args = ap.parse_args()
    install = ensure_install()
    spec = body(args.requests)
    dep = parse_deployment(spec)
    with tempfile.TemporaryDirectory(prefix="llmapi-bench-") as tmp:
        model_dir = llmapi_stack.checkpoint(make_tokenizer(install, Path(tmp) / "tok"),
                                            Path(tmp) / "tiny-gpt2")
        for i, source in enumerate(s.resolve() for s in (args.source or [ROOT])):
            files = rendered(source, spec, model_dir)
            root = Path(tmp) / f"run{i}"
            with llmapi_stack.serve(install, dep, root, model_dir, model_dir, source=files,
                                    env={ENV_TOKEN_DELAY: str(args.delay)}) as server:
                url = server.server.url(f"/v2/models/{llmapi_stack.MODEL}/generate")
                figures = measure(url, args.requests, args.tokens)
            print(json.dumps({"source": str(source), "requests": args.requests,
                              "tokens": args.tokens, "token_delay_s": args.delay, **figures}),
                  flush=True)


if __name__ == "__main__":
    main()
