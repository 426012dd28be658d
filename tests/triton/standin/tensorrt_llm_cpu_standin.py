"""CPU stand-in for the `tensorrt_llm` model (TensorRT-LLM itself needs a GPU and its backend).

Test-only. It is deployed with the rendered tensorrt_llm config.pbtxt, only `backend` switched to
python, so it receives and returns exactly the tensors the real backend would. Its "model" is
deterministic: generated token i is prompt token (i mod prompt length), until request_output_len
tokens or end_id. It honours the parts of the contract the pipeline exercises: input_ids,
input_lengths, request_output_len, end_id, streaming, exclude_input_in_output (input, else the
config parameter); every other declared output is returned zero-filled with its declared type.
Decoupled, it sends one response per token as it is generated when asked to stream, else one
response; responses carry only the outputs the request asked for. TRITONLLM_STANDIN_TOKEN_DELAY
(seconds, default 0) slows each token down, so that tests can have requests in flight (a graceful
drain). An engine built from a model whose config.json says
`"tritonllm_standin_fault": "wrong-answer"` or `"crash-at-load"` makes it answer wrongly or
fail to load (SIMULATED faults: the tests of verified rollouts). The GPU stand-in
(tensorrt_llm_gpu_standin.py) imports this module for its request parsing and responses.

Metrics: it exports, through Triton's custom-metrics API for Python models (pb_utils.MetricFamily),
the TensorRT-LLM backend's families under the same names and labels (`model`, `version` and one
category label), as the backend's Triton integration registers them (NVIDIA/TensorRT-LLM,
triton_backend/inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc, and
triton_backend/all_models/inflight_batcher_llm/tensorrt_llm/1/model.py, create_metrics):

  nv_trt_llm_kv_cache_block_metrics  gauge      kv_cache_block_type: max, free, used, tokens_per,
                                                reused, fraction
  nv_trt_llm_request_metrics         gauge      request_type: active, max, scheduled, context,
                                                waiting
  nv_llm_output_token_len            histogram  response_metric_type: total_output_tokens
  nv_llm_input_token_len             histogram  response_metric_type: total_input_tokens

The values are SIMULATED, from what the stand-in really holds (see Occupancy): a fixed pool of KV
blocks (max = pool tokens // tokens per block; pool tokens from the config parameter
max_tokens_in_paged_kv_cache, else TRITONLLM_STANDIN_KV_CACHE_TOKENS, else 2048; tokens per block
from TRITONLLM_STANDIN_TOKENS_PER_BLOCK, default 32, TensorRT-LLM's default); a request holds
ceil((prompt + generated tokens) / tokens per block) blocks from the moment execute receives it to
its last response, so the requests of a batch still waiting their turn count too (the real
backend allocates when it schedules); no block reuse (reused = 0). active = requests received and
not finished; scheduled = the one generating (requests of a batch are generated one after the
other); context = scheduled with no token yet; waiting = active - scheduled (the backend's own
formula); max = max_batch_size. The histograms are observed once per finished request, with its
generated and prompt token counts, as the backend does; their _sum is the only generated-token
counter the backend has (rate(nv_llm_output_token_len_sum[...]) = generated tokens/s). Gauges are
published every stats_check_period_ms (config parameter, default 100, as the backend's metrics
loop), only those that changed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

ENV_KV_CACHE_TOKENS = "TRITONLLM_STANDIN_KV_CACHE_TOKENS"
ENV_TOKENS_PER_BLOCK = "TRITONLLM_STANDIN_TOKENS_PER_BLOCK"
DEFAULT_KV_CACHE_TOKENS = 2048
DEFAULT_TOKENS_PER_BLOCK = 32
DEFAULT_STATS_PERIOD_MS = 100
# Label values of each family, as the backend registers them (custom_metrics_reporter.cc).
KV_BLOCK_TYPES = ("max", "free", "used", "tokens_per", "reused", "fraction")
REQUEST_TYPES = ("active", "max", "scheduled", "context", "waiting")
TOKEN_LEN_BUCKETS = [10.0, 50.0, 100.0, 500.0, 1000.0]  # the C++ backend's histogram buckets


def _scalar(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)[0].item()


def _prompt_tokens(request: Any) -> int:
    """A request's input_lengths; 0 when unreadable (its error response comes later)."""
    try:
        return int(_scalar(request, "input_lengths") or 0)
    except Exception:
        return 0


# SIMULATED faults, for the tests of verified rollouts: a model whose config.json carries
# FAULT_KEY gets it copied into its checkpoint and engine config.json by the stand-in's fake
# convert_checkpoint.py and trtllm-build, and the engine then loads but answers wrongly (each
# generated token shifted by one prompt position) or fails to load.
FAULT_KEY = "tritonllm_standin_fault"
FAULT_WRONG_ANSWER = "wrong-answer"
FAULT_CRASH_AT_LOAD = "crash-at-load"


def standin_fault(engine_dir: str) -> str:
    """The fault the engine's config.json asks for ("" for none, or with no engine there)."""
    try:
        with open(os.path.join(engine_dir, "config.json")) as f:
            engine = json.load(f)
    except (OSError, ValueError):
        return ""
    return str((engine.get("pretrained_config") or {}).get(FAULT_KEY) or "")


def _parameter(config: dict[str, Any], name: str) -> str:
    return str(config.get("parameters", {}).get(name, {}).get("string_value", "")).strip()


def _positive(text: str, name: str) -> int | None:
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name}={text!r}: want a whole number >= 1")
    return int(text)


@dataclasses.dataclass(eq=False)
class Held:
    """One request the stand-in holds, from execute receiving it to its last response."""

    prompt: int  # tokens
    generated: int = 0  # tokens
    scheduled: bool = False  # being generated now (else waiting its turn)
    failed: bool = False


class Occupancy:
    """The requests held and the KV blocks they would hold, counted as the backend's iteration
    stats count them; execute and the metrics thread both use it, hence the lock."""

    def __init__(self, tokens_per_block: int, max_blocks: int, max_requests: int) -> None:
        self.tokens_per_block = tokens_per_block
        self.max_blocks = max_blocks
        self.max_requests = max_requests
        self._held: list[Held] = []
        self._lock = threading.Lock()

    def admit(self, prompt_tokens: int) -> Held:
        held = Held(prompt_tokens)
        with self._lock:
            self._held.append(held)
        return held

    def schedule(self, held: Held) -> None:
        with self._lock:
            held.scheduled = True

    def token(self, held: Held) -> None:
        with self._lock:
            held.generated += 1

    def release(self, held: Held) -> bool:
        """Forget a request; False when it was not held (already released)."""
        with self._lock:
            if held not in self._held:
                return False
            self._held.remove(held)
            return True

    def gauges(self) -> dict[tuple[str, str], float]:
        """(family, label value) -> value, for the two gauge families."""
        with self._lock:
            blocks = sum(math.ceil((h.prompt + h.generated) / self.tokens_per_block)
                         for h in self._held)
            active = len(self._held)
            scheduled = sum(h.scheduled for h in self._held)
            context = sum(h.scheduled and h.generated == 0 for h in self._held)
        used = min(blocks, self.max_blocks)  # the backend never hands out more than its pool
        kv = {"max": self.max_blocks, "free": self.max_blocks - used, "used": used,
              "tokens_per": self.tokens_per_block, "reused": 0,
              "fraction": used / self.max_blocks}
        requests = {"active": active, "max": self.max_requests, "scheduled": scheduled,
                    "context": context, "waiting": active - scheduled}
        return {**{("kv", k): float(v) for k, v in kv.items()},
                **{("request", k): float(v) for k, v in requests.items()}}


def occupancy_of(config: dict[str, Any], env: dict[str, str]) -> Occupancy:
    """The simulated pool, from the model config and the environment (module docstring)."""
    per_block = _positive(env.get(ENV_TOKENS_PER_BLOCK, "").strip(), ENV_TOKENS_PER_BLOCK)
    per_block = per_block or DEFAULT_TOKENS_PER_BLOCK
    if per_block & (per_block - 1):
        raise ValueError(f"{ENV_TOKENS_PER_BLOCK}={per_block}: tokens per block is a power of "
                         "two in TensorRT-LLM")
    tokens = (_positive(_parameter(config, "max_tokens_in_paged_kv_cache"),
                        "max_tokens_in_paged_kv_cache")
              or _positive(env.get(ENV_KV_CACHE_TOKENS, "").strip(), ENV_KV_CACHE_TOKENS)
              or DEFAULT_KV_CACHE_TOKENS)
    if tokens < per_block:
        raise ValueError(f"a KV cache of {tokens} tokens holds no block of {per_block} tokens")
    return Occupancy(per_block, tokens // per_block, int(config.get("max_batch_size") or 1))


class BackendMetrics:
    """The backend's metric families, fed from an Occupancy by a thread (as the backend's
    metrics loop does) and, for the token histograms, once per finished request."""

    def __init__(self, model: str, version: str, occupancy: Occupancy, period_s: float) -> None:
        common = {"model": model, "version": version}
        gauge, histogram = pb_utils.MetricFamily.GAUGE, pb_utils.MetricFamily.HISTOGRAM
        # Families outlive their metrics (the Python backend insists), so they are kept here.
        self.families = {
            "kv": pb_utils.MetricFamily(name="nv_trt_llm_kv_cache_block_metrics",
                                        description="TRT LLM KV cache block metrics", kind=gauge),
            "request": pb_utils.MetricFamily(name="nv_trt_llm_request_metrics",
                                             description="TRT LLM request metrics", kind=gauge),
            "output": pb_utils.MetricFamily(name="nv_llm_output_token_len",
                                            description="TRT LLM response metrics",
                                            kind=histogram),
            "input": pb_utils.MetricFamily(name="nv_llm_input_token_len",
                                           description="TRT LLM response metrics",
                                           kind=histogram),
        }
        labels = {"kv": ("kv_cache_block_type", KV_BLOCK_TYPES),
                  "request": ("request_type", REQUEST_TYPES)}
        self.gauges = {(family, value): self.families[family].Metric(labels={key: value, **common})
                       for family, (key, values) in labels.items() for value in values}
        self.histograms = {
            family: self.families[family].Metric(
                labels={"response_metric_type": f"total_{family}_tokens", **common},
                buckets=TOKEN_LEN_BUCKETS)
            for family in ("output", "input")}
        self.occupancy = occupancy
        self._published: dict[tuple[str, str], float] = {}
        self._stop = threading.Event()
        self.publish()
        self._thread = threading.Thread(target=self._loop, args=(period_s,), daemon=True,
                                        name="standin-metrics")
        self._thread.start()

    def publish(self) -> None:
        """Set the gauges whose value changed since the last call."""
        for key, value in self.occupancy.gauges().items():
            if self._published.get(key) != value:
                self.gauges[key].set(value)
                self._published[key] = value

    def finished(self, held: Held) -> None:
        self.histograms["output"].observe(float(held.generated))
        self.histograms["input"].observe(float(held.prompt))

    def _loop(self, period_s: float) -> None:
        while not self._stop.wait(period_s):
            self.publish()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.outputs = {
            o["name"]: (
                pb_utils.triton_string_to_numpy(o["data_type"]), [int(d) for d in o["dims"]]
            )
            for o in config["output"]
        }
        exclude = config["parameters"]["exclude_input_in_output"]["string_value"]
        self.exclude_input = exclude.lower() == "true"
        self.token_delay = float(os.environ.get("TRITONLLM_STANDIN_TOKEN_DELAY") or 0)
        instances = sum(int(g.get("count", 1)) for g in config.get("instance_group", []))
        if instances > 1:  # each instance is its own process: their gauges would overwrite
            raise ValueError(f"instance_group asks for {instances} instances; the stand-in, like "
                             "the TensorRT-LLM backend, serves with one")
        self.occupancy = occupancy_of(config, dict(os.environ))
        fault = standin_fault(_parameter(config, "gpt_model_path"))
        if fault == FAULT_CRASH_AT_LOAD:
            raise RuntimeError(f"SIMULATED fault {fault!r} (the engine's config.json asks for "
                               "it): this engine does not load")
        self.shift = 1 if fault == FAULT_WRONG_ANSWER else 0
        period = _positive(_parameter(config, "stats_check_period_ms"), "stats_check_period_ms")
        self.metrics = BackendMetrics(args["model_name"], args["model_version"], self.occupancy,
                                      (period or DEFAULT_STATS_PERIOD_MS) / 1000)

    def finalize(self) -> None:
        self.metrics.stop()

    def execute(self, requests: list[Any]) -> list[Any] | None:
        # One instance (the rendered config's instance_group), so one execute at a time: the
        # requests of a batch are held together and generated one after the other.
        held = [self.occupancy.admit(_prompt_tokens(request)) for request in requests]
        try:
            if not self.decoupled:
                responses = []
                for request, one in zip(requests, held, strict=True):
                    responses.append(next(self._respond(request, one)))
                    self._release(one)
                return responses
            for request, one in zip(requests, held, strict=True):
                sender = request.get_response_sender()
                for response in self._respond(request, one):
                    sender.send(response)
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                self._release(one)
            return None
        finally:
            for one in held:  # an exception above leaves no request counted as in flight
                self.occupancy.release(one)

    def _release(self, held: Held) -> None:
        if self.occupancy.release(held) and not held.failed:
            self.metrics.finished(held)

    def _parse(self, request: Any) -> tuple[np.ndarray, bool, bool]:
        """(prompt token ids, streaming, exclude_input_in_output) of one request."""
        streaming = bool(_scalar(request, "streaming"))
        if streaming and not self.decoupled:
            raise ValueError("Streaming is only supported in decoupled mode.")
        prompt = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()[0]
        prompt = prompt[: int(_scalar(request, "input_lengths"))]
        exclude = _scalar(request, "exclude_input_in_output")
        exclude = self.exclude_input if exclude is None else bool(exclude)
        return prompt, streaming, exclude

    def _respond(self, request: Any, held: Held) -> Iterator[Any]:
        self.occupancy.schedule(held)
        try:
            prompt, streaming, exclude = self._parse(request)
            if streaming:
                for token in self._generate(prompt, request, held):
                    yield self._response([token], request, generated=1)
                return
            tokens = list(self._generate(prompt, request, held))
            yield self._response(tokens if exclude else [*prompt.tolist(), *tokens], request,
                                 generated=len(tokens))
        except Exception as exc:
            held.failed = True
            yield pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))

    def _generate(self, prompt: np.ndarray, request: Any, held: Held) -> Iterator[int]:
        end_id = _scalar(request, "end_id")
        for i in range(int(_scalar(request, "request_output_len"))):
            token = int(prompt[(i + self.shift) % len(prompt)])
            if token == end_id:
                return
            if self.token_delay:
                time.sleep(self.token_delay)
            self.occupancy.token(held)
            yield token

    def _response(self, tokens: list[int], request: Any, *, generated: int) -> Any:
        """Only the outputs the request asked for (all when it names none): the Python backend
        prunes the others of a decoupled response, and that pruning crashed its 3.12 stub.
        num_output_tokens is the count of tokens this response generated (TensorRT-LLM 1.0's
        output, asked for with return_num_output_tokens)."""
        wanted = set(request.requested_output_names()) or set(self.outputs)
        tensors = []
        for name, (dtype, dims) in self.outputs.items():
            if name not in wanted:
                continue
            if name == "output_ids":
                value = np.array([[tokens]], dtype)
            elif name == "sequence_length":
                value = np.array([[len(tokens)]], dtype)
            elif name == "num_output_tokens":
                value = np.array([[generated]], dtype)
            else:
                value = np.zeros([1, *(1 if d < 0 else d for d in dims)], dtype)
            tensors.append(pb_utils.Tensor(name, value))
        return pb_utils.InferenceResponse(output_tensors=tensors)
