"""The CPU stand-in exports the TensorRT-LLM backend's metrics, scraped from a real tritonserver.

What runs for real: tritonserver 2.51 and its Python backend's custom-metrics API, the metrics
endpoint, Triton's own per-model metrics, the rendered ensemble under `tritonllm launch` (mpirun,
world size 2; rank 1 loads the stand-in with metrics off). What is simulated: the values of the
nv_trt_llm_* families and the token histograms (the stand-in's Occupancy; see its docstring).

The names and labels below are the TensorRT-LLM backend's, written out here rather than imported
from the stand-in so that the test checks the stand-in against upstream (NVIDIA/TensorRT-LLM,
triton_backend/inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc).
Load: more requests than one batch, each slowed by the stand-in's per-token delay, so that the
stand-in holds a batch while the rest wait in Triton's queue.
"""

from __future__ import annotations

import json
import math
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from . import metrics
from .conftest import EXAMPLE, example
from .metrics import Sample
from .stack import Server, Stack

pytestmark = pytest.mark.triton

MODEL = {"model": "tensorrt_llm", "version": "1"}
KV_FAMILY, KV_LABEL = "nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type"
KV_TYPES = {"max", "free", "used", "tokens_per", "reused", "fraction"}
REQUEST_FAMILY, REQUEST_LABEL = "nv_trt_llm_request_metrics", "request_type"
REQUEST_TYPES = {"active", "max", "scheduled", "context", "waiting"}
OUTPUT_LEN, INPUT_LEN = "nv_llm_output_token_len", "nv_llm_input_token_len"

PROMPT = "hello world"
PROMPT_TOKENS = len(PROMPT.split()) + 1  # the tokenizer prepends <s>
MAX_TOKENS = 8
TOKEN_DELAY = 0.1  # seconds per generated token
KV_CACHE_TOKENS = 1280  # serving.kvCache.maxTokens: max_tokens_in_paged_kv_cache
SPEC = example(EXAMPLE, serving={"streaming": True, "kvCache": {"maxTokens": KV_CACHE_TOKENS}})
MAX_BATCH = SPEC.spec.engine.limits.maxBatchSize
REQUESTS = MAX_BATCH + 2  # one batch held by the stand-in, the rest queued in Triton


@pytest.fixture(scope="module")
def stack(start_stack: Callable[..., Any]) -> Iterator[Stack]:
    with start_stack("metrics", SPEC, token_delay=TOKEN_DELAY) as running:
        yield running


def scrape(server: Server) -> Sample:
    return metrics.scrape(server.metrics)


def gauges(sample: Sample, family: str, label: str) -> dict[str, float]:
    """label value -> value of the family's series for the tensorrt_llm model."""
    return metrics.gauges(sample, family, label, MODEL)


def one(sample: Sample, name: str, **labels: str) -> float:
    return sample[(name, frozenset({**MODEL, **labels}.items()))]


def generate(server: Server) -> None:
    request = urllib.request.Request(
        server.url("/v2/models/ensemble/generate"), method="POST",
        data=json.dumps({"text_input": PROMPT, "max_tokens": MAX_TOKENS}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200


def test_standin_exports_the_backend_families_with_its_labels(stack: Stack) -> None:
    sample = scrape(stack.server)
    kv = gauges(sample, KV_FAMILY, KV_LABEL)
    requests = gauges(sample, REQUEST_FAMILY, REQUEST_LABEL)
    assert set(kv) == KV_TYPES and set(requests) == REQUEST_TYPES
    # The pool comes from the rendered max_tokens_in_paged_kv_cache, in whole blocks.
    assert kv["max"] == KV_CACHE_TOKENS // kv["tokens_per"]
    assert math.log2(kv["tokens_per"]).is_integer()
    assert requests["max"] == MAX_BATCH
    for kind in ("output", "input"):
        family = OUTPUT_LEN if kind == "output" else INPUT_LEN
        assert (family + "_count", frozenset({**MODEL, "response_metric_type":
                                              f"total_{kind}_tokens"}.items())) in sample


def stable_samples(server: Server, until: Callable[[], bool]) -> list[Sample]:
    """Scrapes, two at a time, while `until()` is false; only pairs whose stand-in gauges agree
    (the stand-in sets one gauge after the other, so a scrape can fall between two sets)."""
    out = []
    while not until():
        first, second = scrape(server), scrape(server)
        ours = [KV_FAMILY, REQUEST_FAMILY]
        if all(gauges(first, f, lbl) == gauges(second, f, lbl)
               for f, lbl in zip(ours, [KV_LABEL, REQUEST_LABEL], strict=True)):
            out.append(second)
        time.sleep(0.05)
    return out


def test_used_blocks_and_active_requests_rise_under_load_and_fall_after(stack: Stack) -> None:
    before = scrape(stack.server)
    tokens_per = gauges(before, KV_FAMILY, KV_LABEL)["tokens_per"]
    # Every request holds ceil((prompt + generated) / tokens_per) blocks: here exactly one.
    blocks_per_request = math.ceil((PROMPT_TOKENS + MAX_TOKENS) / tokens_per)
    assert blocks_per_request == 1
    with ThreadPoolExecutor(REQUESTS) as pool:
        answers = [pool.submit(generate, stack.server) for _ in range(REQUESTS)]
        loaded = stable_samples(stack.server, lambda: all(a.done() for a in answers))
    for answer in answers:
        answer.result()  # every request answered

    busy = []
    for sample in loaded:
        kv = gauges(sample, KV_FAMILY, KV_LABEL)
        req = gauges(sample, REQUEST_FAMILY, REQUEST_LABEL)
        assert kv["used"] == req["active"] * blocks_per_request, (kv, req)
        assert kv["free"] == kv["max"] - kv["used"] and kv["fraction"] == kv["used"] / kv["max"]
        assert req["waiting"] == req["active"] - req["scheduled"], req
        assert req["scheduled"] <= 1 and req["context"] <= req["scheduled"], req
        assert req["active"] <= MAX_BATCH, req
        if req["active"] >= 2:
            busy.append(sample)
    assert busy, f"no stable sample with 2 or more requests in flight ({len(loaded)} samples)"
    # Beyond one batch, requests wait in Triton's own queue, in front of the stand-in.
    pending = [one(s, "nv_inference_pending_request_count") for s in loaded]
    assert max(pending) >= 1, pending

    deadline = time.monotonic() + 10
    while True:  # published every stats_check_period_ms (100 ms)
        after = scrape(stack.server)
        kv = gauges(after, KV_FAMILY, KV_LABEL)
        req = gauges(after, REQUEST_FAMILY, REQUEST_LABEL)
        if (kv["used"], req["active"]) == (0, 0) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert kv["used"] == 0 and kv["free"] == kv["max"] and req["active"] == 0, (kv, req)
    assert req["waiting"] == req["scheduled"] == 0, req

    def delta(name: str, kind: str) -> float:
        labels = {"response_metric_type": f"total_{kind}_tokens"}
        return one(after, name, **labels) - one(before, name, **labels)

    # One observation per finished request: its generated and its prompt token counts.
    assert delta(OUTPUT_LEN + "_count", "output") == REQUESTS
    assert delta(OUTPUT_LEN + "_sum", "output") == REQUESTS * MAX_TOKENS
    assert delta(INPUT_LEN + "_sum", "input") == REQUESTS * PROMPT_TOKENS

