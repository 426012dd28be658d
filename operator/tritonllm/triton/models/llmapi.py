"""Triton Python model `tensorrt_llm` for runtime llmapi: text in, text out, via tensorrt_llm.LLM.

Written for tritonllm (copied verbatim into the model repository); it follows the request
surface of upstream's llmapi model (NVIDIA/TensorRT-LLM
triton_backend/all_models/llmapi/tensorrt_llm, config.pbtxt at c8c6df08, 1/model.py at b35ac1b6)
and the behaviour users of the engine path rely on (the inflight_batcher_llm tensorrt_llm Python
model's stop request, cancellation and metrics). The contract (inputs, outputs, what differs from
upstream and why) is LLMAPI_CONTRACT in tritonllm/triton/contracts.py; docs/model-repository.md
describes it for users.

Loading: ``model.yaml`` next to this file (or the file named by LLM_CONFIG_PATH); every key but
``triton_config`` is passed to ``tensorrt_llm.LLM()``. ``triton_config`` may set
``cancellation_check_period_ms`` (as upstream) and ``stats_check_period_ms`` (as the engine
backend's parameter), both 100 by default. An exception from ``LLM()`` fails the model load, its
message in Triton's log and load error.

In-flight batching in every mode: one asyncio event loop runs on a thread of its own; ``execute``
hands each request to it and returns None at once, so Triton keeps handing over requests while
earlier ones generate, and the LLM batches them in flight. Responses go through each request's
response sender, also when the model is not decoupled (the Python backend lets a
non-decoupled model answer through the sender, as upstream's llmapi model does: exactly one
response, flagged final; seen working on Triton 2.51, where 16 such requests run together);
decoupled and asked to stream, one response per generation step carrying the new text only.
Responses and Triton calls that cross into the server (send, is_cancelled, metric updates) run
on one helper thread, in order, so that the loop never waits on them.

Cancellation: a request Triton cancels (a gRPC client cancelling its call or closing its
stream; Triton 2.51's HTTP frontend does not cancel on disconnect) is noticed within
cancellation_check_period_ms, its LLM request aborted and its response ended with a CANCELLED
error, flagged final. A request with ``stop: true`` aborts every request in flight that carries
the same Triton request id (HTTP: the JSON ``id``; gRPC: the request id); each of those ends with
its text so far and finish_reason ``cancelled``; the stop request itself gets an empty response
(as the engine path's model answers it).

Metrics, through Triton's custom-metrics API, under the names and label values the TensorRT-LLM
backend registered (triton_backend/all_models/inflight_batcher_llm/tensorrt_llm/1/model.py at
89fd9b74: create_metrics and its waiting formula), fed from the LLM's iteration statistics
(``llm.get_stats_async``; the PyTorch backend produces them only with
``enable_iter_perf_stats: true`` in model.yaml, which tritonllm renders from TensorRT-LLM 0.21):

  nv_trt_llm_request_metrics           request_type: active, max, scheduled, context, waiting
  nv_trt_llm_kv_cache_block_metrics    kv_cache_block_type: max, free, used, tokens_per, reused,
                                       fraction
  nv_trt_llm_inflight_batcher_metrics  inflight_batcher_specific_metric: total_context_tokens,
                                       generation_requests, micro_batch_id, paused_requests
  nv_trt_llm_general_metrics           general_type: iteration_counter, timestamp
  nv_trt_llm_runtime_memory_metrics    memory_type: gpu (the statistics' gpuMemUsage)
  nv_llm_input_token_len, nv_llm_output_token_len   histograms, response_metric_type
                                       total_input_tokens / total_output_tokens, one observation
                                       per finished request

waiting = (numActiveRequests - numScheduledRequests), the backend's formula, + numQueuedRequests:
the PyTorch executor keeps requests beyond the batch in its queue, outside numActiveRequests, and
the signal means "held but not scheduled". The LLM reports no iteration while it holds no
request, so once none is in flight and no statistics came for a period the request gauges, the
batch gauges and the used blocks are set to 0 (what the next iteration would report); the
published values then stay until the next iteration.

A broken LLM ends the server. TensorRT-LLM's LLM runs its tp x pp ranks as worker processes; when
one dies, the LLM's executor gets the error in its background-error queue (`_error_queue`: the
proxy's callback on the rank's MPI future, tensorrt_llm/executor/proxy.py at b93e14ca), the next
submit raises it and shuts the executor down (`_handle_background_error`,
tensorrt_llm/executor/executor.py at ed53795b), and from then on `_executor.is_shutdown()` is true
and `generate_async` answers every request with "LLM is shutting down" (tensorrt_llm/llmapi/llm.py
at 4c05a748); newer versions also keep the first fatal error (`_fatal_error`). tritonserver knows
none of this and would stay Ready, taking traffic it can only fail. So the model reads that state
(`llm_failure`) every cancellation period and after every failed request, and once the LLM is
broken: it logs one line naming the cause, ends every request in flight with that error, answers
any later one with it, and sends SIGTERM to tritonserver (the stub's parent): the server stops
taking requests, lets the answers already sent reach their clients and unloads the model. Its
graceful stop exits 0, which would read as a clean stop to mpirun, `tritonllm launch` and the
kubelet, so `finalize` ends the server with SIGKILL (exit 137, as a rank that dies under mpirun
ends the engine path's job), without shutting the LLM down (with a dead rank that can wait
forever); and if the unload has not come within END_GRACE_S, a timer does the same.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
import yaml
from tensorrt_llm import LLM, SamplingParams

DEFAULT_PERIOD_MS = 100
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

# Scalar inputs sampling_param_<name> -> SamplingParams(<name>=...): upstream's set, then the
# fields the engine path's ensemble offers (min_tokens, repetition/length penalty, end/pad id,
# logprobs) under the same naming rule.
SAMPLING_SCALARS = (
    "best_of", "temperature", "top_k", "top_p", "frequency_penalty", "presence_penalty",
    "max_tokens", "seed", "exclude_input_from_output",
    "min_tokens", "repetition_penalty", "length_penalty", "end_id", "pad_id", "logprobs",
    "include_stop_str_in_output",
)
# STRING [-1] inputs sampling_param_<name> -> SamplingParams(<name>=[...]).
SAMPLING_LISTS = ("stop", "bad")
# return_<flag> input -> the outputs it adds.
RETURNS = {
    "return_finish_reason": ("finish_reason",),
    "return_stop_reason": ("stop_reason",),
    "return_cumulative_logprob": ("cumulative_logprob",),
    "return_num_input_tokens": ("num_input_tokens",),
    "return_num_output_tokens": ("num_output_tokens",),
}

# Label values of each family, as the TensorRT-LLM backend registered them.
REQUEST_TYPES = ("active", "max", "scheduled", "context", "waiting")
KV_BLOCK_TYPES = ("max", "free", "used", "tokens_per", "reused", "fraction")
BATCHER_TYPES = ("total_context_tokens", "generation_requests", "micro_batch_id",
                 "paused_requests")
GENERAL_TYPES = ("iteration_counter", "timestamp")
TOKEN_LEN_BUCKETS = [10.0, 50.0, 100.0, 500.0, 1000.0]  # the C++ backend's buckets
END_GRACE_S = 10.0  # SIGTERM to SIGKILL when the graceful stop does not reach the unload
SHUT_DOWN = "its executor shut down"


def _tensor(request: Any, name: str) -> np.ndarray | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _scalar(request: Any, name: str) -> Any:
    value = _tensor(request, name)
    if value is None:
        return None
    if value.size != 1:
        raise ValueError(f"input {name} must hold one value, not {value.size}")
    return _text(value[0]) if value.dtype == object else value[0].item()


def _strings(request: Any, name: str) -> list[str] | None:
    value = _tensor(request, name)
    if value is None:
        return None
    return [s for s in (_text(v) for v in value) if s]


def _period_s(triton_config: Mapping[str, Any], key: str) -> float:
    value = int(triton_config.get(key) or DEFAULT_PERIOD_MS)
    if value < 1:
        raise ValueError(f"triton_config.{key}={value}: want a whole number >= 1")
    return value / 1000


def _strs(values: list[Any]) -> np.ndarray:
    return np.array([("" if v is None else str(v)).encode("utf-8") for v in values], dtype=object)


@dataclasses.dataclass
class Parsed:
    """One request, read: what to generate and what to answer with."""

    prompt: str
    params: Any  # SamplingParams
    streaming: bool
    returns: frozenset[str]  # output names asked for besides text_output
    logprobs: bool


@dataclasses.dataclass(eq=False)
class Flight:
    """A request the LLM is generating for."""

    request: Any
    sender: Any
    user_id: str
    output: Any  # RequestOutput
    ended: str = ""  # "client" (Triton cancelled it) or "stop" (a stop request)
    # Set on the loop before its final response is queued: from then on the request's response
    # factory may be gone, and asking Triton whether it is cancelled would crash the server.
    closed: bool = False


def parse(request: Any, decoupled: bool) -> Parsed:
    prompt = _tensor(request, "text_input")
    if prompt is None or prompt.size != 1:
        raise ValueError("text_input must hold exactly one prompt")
    streaming = bool(_scalar(request, "streaming"))
    if streaming and not decoupled:
        raise ValueError("Streaming is only supported in decoupled mode.")
    kwargs: dict[str, Any] = {}
    for name in SAMPLING_SCALARS:
        if (value := _scalar(request, f"sampling_param_{name}")) is not None:
            kwargs[name] = value
    for name in SAMPLING_LISTS:
        if values := _strings(request, f"sampling_param_{name}"):
            kwargs[name] = values
    returns = frozenset(out for flag, outs in RETURNS.items() if _scalar(request, flag)
                        for out in outs)
    logprobs = bool(kwargs.get("logprobs"))
    return Parsed(_text(prompt[0]), SamplingParams(**kwargs), streaming, returns, logprobs)


def _token_logprobs(output: Any, delta: bool) -> list[float]:
    """The log-probability of each returned token. CompletionOutput.logprobs holds one entry per
    generated token: a float, or a dict token id -> Logprob of the top candidates."""
    tokens = list(output.token_ids or [])
    pairs = list(zip(tokens, list(output.logprobs or [])[:len(tokens)], strict=False))
    if delta:
        pairs = pairs[len(pairs) - len(output.token_ids_diff or []):]
    out = []
    for token, entry in pairs:
        if isinstance(entry, Mapping):
            entry = entry.get(token)
        out.append(float(getattr(entry, "logprob", entry) or 0.0))
    return out


def generated_tokens(result: Any, params: Any) -> int:
    """Tokens the LLM generated for the first sequence (its token_ids start with the prompt's
    when exclude_input_from_output is false)."""
    if not result.outputs:
        return 0
    ids = len(result.outputs[0].token_ids or [])
    if getattr(params, "exclude_input_from_output", True) is False:
        ids -= len(result.prompt_token_ids or [])
    return max(0, ids)


def response(result: Any, parsed: Parsed, delta: bool) -> Any:
    """The response for a RequestOutput: every sequence's text (or new text), and the outputs
    the request asked for."""
    outputs = list(result.outputs)
    texts = [(o.text_diff if delta else o.text) for o in outputs]
    tensors = [pb_utils.Tensor("text_output", _strs(texts))]
    fields: dict[str, Callable[[], np.ndarray]] = {
        "finish_reason": lambda: _strs([o.finish_reason for o in outputs]),
        "stop_reason": lambda: _strs([o.stop_reason for o in outputs]),
        "cumulative_logprob": lambda: np.array(
            [o.cumulative_logprob or 0.0 for o in outputs], np.float32),
        "num_input_tokens": lambda: np.array([len(result.prompt_token_ids or [])], np.int32),
        "num_output_tokens": lambda: np.array([generated_tokens(result, parsed.params)],
                                              np.int32),
    }
    tensors += [pb_utils.Tensor(name, make()) for name, make in fields.items()
                if name in parsed.returns]
    if parsed.logprobs:
        values = _token_logprobs(outputs[0], delta)
        tensors.append(pb_utils.Tensor("output_log_probs", np.array(values, np.float32)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


def _error(message: str, cancelled: bool = False) -> Any:
    code = getattr(pb_utils.TritonError, "CANCELLED", None) if cancelled else None
    error = pb_utils.TritonError(message, code) if code is not None else pb_utils.TritonError(
        message)
    return pb_utils.InferenceResponse(error=error)


def _cancelled(flights: list[Flight]) -> list[bool]:
    """Runs on the helper thread, in order with the sends: a flight not yet closed has not
    sent its final response."""
    return [not f.closed and bool(f.request.is_cancelled()) for f in flights]


def _queued_errors(executor: Any) -> list[BaseException]:
    """The executor's fatal error (newer versions) and the errors waiting in its background-error
    queue (a queue.Queue, read under its own lock, nothing taken out)."""
    found = [getattr(executor, "_fatal_error", None)]
    errors = getattr(executor, "_error_queue", None)
    mutex = getattr(errors, "mutex", None)
    if mutex is not None:
        with mutex:
            found += list(errors.queue)  # type: ignore[union-attr]
    return [error for error in found if isinstance(error, BaseException)]


def llm_failure(llm: Any) -> str | None:
    """Why the LLM can serve no more, read as TensorRT-LLM's LLM reads its own state (its
    executor gone or shut down, a background error waiting); None while it serves, and for an
    LLM without that state to read."""
    if not hasattr(llm, "_executor"):
        return None
    executor = llm._executor
    if executor is None:
        return "the LLM has no executor (it was shut down)"
    for error in _queued_errors(executor):
        return f"{type(error).__name__}: {error}"
    is_shutdown = getattr(executor, "is_shutdown", None)
    return SHUT_DOWN if callable(is_shutdown) and is_shutdown() else None


def failure_cause(reason: str, seen: BaseException | None) -> str:
    """The cause to log: the state read, and what a request saw when the state alone says
    little (the queued error was raised to that request and left the queue)."""
    if seen is None or reason != SHUT_DOWN:
        return reason
    return f"{reason}; a request failed with {type(seen).__name__}: {seen}"


def _kill_server(pid: int, sig: signal.Signals) -> None:
    """Signal tritonserver, our stub's parent (never anything else: an orphaned stub's parent
    is init)."""
    if pid > 1 and os.getppid() == pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _stat_dict(stat: Any) -> dict[str, Any]:
    if isinstance(stat, str | bytes):
        stat = json.loads(stat)
    return dict(stat)


class Metrics:
    """The backend's metric families, set from iteration statistics."""

    def __init__(self, model: str, version: str) -> None:
        common = {"model": model, "version": version}
        gauge, histogram = pb_utils.MetricFamily.GAUGE, pb_utils.MetricFamily.HISTOGRAM
        families = {  # name: (description, kind, category label, its values)
            "nv_trt_llm_request_metrics": ("TRT LLM request metrics", gauge, "request_type",
                                           REQUEST_TYPES),
            "nv_trt_llm_kv_cache_block_metrics": ("TRT LLM KV cache block metrics", gauge,
                                                  "kv_cache_block_type", KV_BLOCK_TYPES),
            "nv_trt_llm_inflight_batcher_metrics": ("TRT LLM inflight_batcher-specific metrics",
                                                    gauge, "inflight_batcher_specific_metric",
                                                    BATCHER_TYPES),
            "nv_trt_llm_general_metrics": ("General TRT LLM metrics", gauge, "general_type",
                                           GENERAL_TYPES),
            "nv_trt_llm_runtime_memory_metrics": ("TRT LLM runtime memory metrics", gauge,
                                                  "memory_type", ("gpu",)),
        }
        # Families must outlive their metrics (the Python backend insists), so they are kept.
        self.families = {name: pb_utils.MetricFamily(name=name, description=d, kind=k)
                         for name, (d, k, _, _) in families.items()}
        self.gauges = {(name, value): self.families[name].Metric(labels={label: value, **common})
                       for name, (_, _, label, values) in families.items() for value in values}
        self.histograms: dict[str, Any] = {}
        for kind in ("input", "output"):
            family = pb_utils.MetricFamily(name=f"nv_llm_{kind}_token_len",
                                           description="TRT LLM response metrics",
                                           kind=histogram)
            self.families[f"nv_llm_{kind}_token_len"] = family
            self.histograms[kind] = family.Metric(
                labels={"response_metric_type": f"total_{kind}_tokens", **common},
                buckets=TOKEN_LEN_BUCKETS)
        self._published: dict[tuple[str, str], float] = {}

    def values(self, stat: Mapping[str, Any]) -> dict[tuple[str, str], float]:
        """Gauge values of one iteration's statistics (IterationStats JSON keys)."""
        kv = stat.get("kvCacheStats") or {}
        ifb = stat.get("inflightBatchingStats") or {}
        active, scheduled = stat.get("numActiveRequests", 0), ifb.get("numScheduledRequests", 0)
        found: dict[tuple[str, Any], Any] = {
            ("nv_trt_llm_request_metrics", "active"): active,
            ("nv_trt_llm_request_metrics", "max"): stat.get("maxNumActiveRequests"),
            ("nv_trt_llm_request_metrics", "scheduled"): scheduled,
            ("nv_trt_llm_request_metrics", "context"): ifb.get("numContextRequests"),
            ("nv_trt_llm_request_metrics", "waiting"):
                max(0, active - scheduled) + stat.get("numQueuedRequests", 0),
            ("nv_trt_llm_inflight_batcher_metrics", "total_context_tokens"): ifb.get(
                "numCtxTokens"),
            ("nv_trt_llm_inflight_batcher_metrics", "generation_requests"): ifb.get(
                "numGenRequests"),
            ("nv_trt_llm_inflight_batcher_metrics", "micro_batch_id"): ifb.get("microBatchId"),
            ("nv_trt_llm_inflight_batcher_metrics", "paused_requests"): ifb.get(
                "numPausedRequests"),
            ("nv_trt_llm_general_metrics", "iteration_counter"): stat.get("iter"),
            ("nv_trt_llm_general_metrics", "timestamp"): _timestamp(stat.get("timestamp")),
            ("nv_trt_llm_runtime_memory_metrics", "gpu"): stat.get("gpuMemUsage"),
        }
        kv_keys = {"max": "maxNumBlocks", "free": "freeNumBlocks", "used": "usedNumBlocks",
                   "tokens_per": "tokensPerBlock", "reused": "reusedBlocks"}
        for label, key in kv_keys.items():
            found[("nv_trt_llm_kv_cache_block_metrics", label)] = kv.get(key)
        if kv.get("maxNumBlocks") and kv.get("usedNumBlocks") is not None:
            found[("nv_trt_llm_kv_cache_block_metrics", "fraction")] = (
                kv["usedNumBlocks"] / kv["maxNumBlocks"])
        return {k: float(v) for k, v in found.items() if v is not None}

    def idle(self) -> dict[tuple[str, str], float]:
        """What the next iteration would report with no request held, from the last values."""
        last = self._published
        out = {("nv_trt_llm_request_metrics", t): 0.0
               for t in ("active", "scheduled", "context", "waiting")}
        out |= {("nv_trt_llm_inflight_batcher_metrics", t): 0.0
                for t in ("total_context_tokens", "generation_requests", "paused_requests")}
        kv = "nv_trt_llm_kv_cache_block_metrics"
        if (kv, "max") in last:
            out |= {(kv, "used"): 0.0, (kv, "free"): last[(kv, "max")], (kv, "fraction"): 0.0}
        return out

    def publish_idle(self) -> None:
        self.publish(self.idle())

    def publish(self, values: Mapping[tuple[str, str], float]) -> None:
        """Set the gauges whose value changed (runs on the helper thread)."""
        for key, value in values.items():
            if key in self.gauges and self._published.get(key) != value:
                self.gauges[key].set(value)
                self._published[key] = value

    def finished(self, input_tokens: int, output_tokens: int) -> None:
        self.histograms["input"].observe(float(input_tokens))
        self.histograms["output"].observe(float(output_tokens))


def _timestamp(value: Any) -> float | None:
    """Seconds since the epoch of a statistics timestamp ("MM-DD-YYYY HH:MM:SS[.ffffff]" in
    TensorRT-LLM's IterationStats JSON), or of now when it has none."""
    if value is None:
        return time.time()
    if isinstance(value, int | float):
        return float(value)
    for fmt in ("%m-%d-%Y %H:%M:%S.%f", "%m-%d-%Y %H:%M:%S"):
        try:
            return datetime.datetime.strptime(str(value), fmt).timestamp()
        except ValueError:
            continue
    return None


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        default = Path(args["model_repository"]) / args["model_version"] / "model.yaml"
        path = Path(os.environ.get("LLM_CONFIG_PATH") or default)
        llm_args = yaml.safe_load(path.read_text())
        triton_config = llm_args.pop("triton_config", None) or {}
        self.cancel_period = _period_s(triton_config, "cancellation_check_period_ms")
        self.stats_period = _period_s(triton_config, "stats_check_period_ms")
        self.metrics = Metrics(args["model_name"], args["model_version"])
        self.llm = LLM(**llm_args)  # raises: the load fails with its message
        if llm_args.get("max_batch_size"):  # known before the first iteration reports it
            self.metrics.publish({("nv_trt_llm_request_metrics", "max"):
                                  float(llm_args["max_batch_size"])})
        self.flights: set[Flight] = set()  # touched on the loop only
        self.fatal: str | None = None  # why the LLM can serve no more (then the server ends)
        self.finalizing = False
        # Statistics exist only once a request was submitted (the LLM says so on every ask).
        self.submitted = False
        # One thread for every call into the server, in order: sends, is_cancelled, metrics.
        self.helper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llmapi-io")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="llmapi-loop",
                                       daemon=True)
        self.thread.start()
        self.tasks = [asyncio.run_coroutine_threadsafe(coro, self.loop)
                      for coro in (self._watch_cancellation(), self._watch_stats(),
                                   self._watch_health())]

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            asyncio.run_coroutine_threadsafe(self._serve(request), self.loop)
        return None

    def finalize(self) -> None:
        self.finalizing = True
        for task in self.tasks:
            task.cancel()
        if self.fatal is not None:  # the server drained what it could: end it, non-zero
            _kill_server(os.getppid(), signal.SIGKILL)
            return
        try:  # on the loop, which owns the flights
            asyncio.run_coroutine_threadsafe(self._abort_all(), self.loop).result(timeout=10)
        except Exception as exc:
            pb_utils.Logger.log_warn(f"llmapi: aborting the requests in flight failed: {exc}")
        self.llm.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.helper.shutdown(wait=True)

    # --- on the event loop ---------------------------------------------------------------------

    async def _abort_all(self) -> None:
        for flight in self.flights:
            flight.output.abort()

    async def _io(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self.loop.run_in_executor(self.helper, lambda: call(*args, **kwargs))

    async def _serve(self, request: Any) -> None:
        sender = request.get_response_sender()
        try:
            if self.fatal is not None:
                raise RuntimeError(f"the LLM can serve no more: {self.fatal}; tritonserver is "
                                   "ending")
            if _scalar(request, "stop"):
                await self._stop(request.request_id() or "", sender)
                return
            parsed = parse(request, self.decoupled)
            output = self.llm.generate_async(parsed.prompt, sampling_params=parsed.params,
                                             streaming=parsed.streaming)
        except Exception as exc:  # this request's error, reported to its client
            await self._io(sender.send, _error(self._message(str(exc), exc)), flags=FINAL)
            return
        self.submitted = True
        flight = Flight(request, sender, request.request_id() or "", output)
        self.flights.add(flight)
        try:
            await self._relay(flight, parsed)
        except Exception as exc:
            if self.fatal is None:  # a broken LLM's abort could wait on its dead ranks
                output.abort()
            message = self._message(f"generation failed: {exc}", exc)
            if not flight.closed:
                flight.closed = True
                await self._io(sender.send, _error(message), flags=FINAL)
        finally:
            self.flights.discard(flight)

    def _message(self, message: str, exc: BaseException) -> str:
        """A failed request's error; once the LLM is broken, naming why and what follows."""
        with contextlib.suppress(Exception):  # the request gets its error whatever happens
            self._check(exc)
        if self.fatal is None or self.fatal in message:
            return message
        return f"{message} (the LLM can serve no more: {self.fatal}; tritonserver is ending)"

    def _check(self, seen: BaseException | None = None) -> None:
        """On the loop: is the LLM broken? The first time it is, end the server."""
        if self.fatal is not None or self.finalizing:
            return
        reason = llm_failure(self.llm)
        if reason is None:
            return
        self.fatal = failure_cause(reason, seen)
        self.loop.create_task(self._end())

    async def _end(self) -> None:
        """Log the cause, end what is in flight with it, then stop tritonserver (SIGTERM; the
        unload or the timer turns it into SIGKILL: see the module docstring)."""
        pid = os.getppid()
        pb_utils.Logger.log_error(
            f"llmapi: the LLM can serve no more ({self.fatal}); stopping tritonserver (pid "
            f"{pid}) so that the container exits and is restarted")
        for flight in list(self.flights):
            if not flight.closed:
                flight.closed = True
                await self._io(flight.sender.send, _error(
                    f"generation failed: the LLM can serve no more: {self.fatal}"), flags=FINAL)
        await self._io(lambda: None)  # the helper has sent everything queued before
        _kill_server(pid, signal.SIGTERM)
        timer = threading.Timer(END_GRACE_S, _kill_server, (pid, signal.SIGKILL))
        timer.daemon = True
        timer.start()

    async def _relay(self, flight: Flight, parsed: Parsed) -> None:
        last = flight.output
        async for step in flight.output:
            last = step
            if parsed.streaming and not step.finished and flight.ended != "client" \
                    and not flight.closed:  # closed: its final (error) response went out
                await self._io(flight.sender.send, response(step, parsed, delta=True))
        if flight.closed:  # ended already: the LLM broke
            return
        if flight.ended == "client":
            final = _error("Request cancelled by client", cancelled=True)
        else:
            final = response(last, parsed, delta=parsed.streaming)
        flight.closed = True
        await self._io(flight.sender.send, final, flags=FINAL)
        await self._io(self.metrics.finished, len(last.prompt_token_ids or []),
                       generated_tokens(last, parsed.params))

    async def _stop(self, user_id: str, sender: Any) -> None:
        if not user_id:
            await self._io(sender.send, _error(
                "A request id must be provided for request cancellation"), flags=FINAL)
            return
        for flight in self.flights:
            if flight.user_id == user_id and not flight.ended:
                flight.ended = "stop"
                flight.output.abort()
        await self._io(sender.send, pb_utils.InferenceResponse(output_tensors=[]), flags=FINAL)

    async def _watch_cancellation(self) -> None:
        while True:
            await asyncio.sleep(self.cancel_period)
            open_flights = [f for f in self.flights if not f.ended]
            if not open_flights:
                continue
            flags = await self._io(_cancelled, open_flights)
            for flight, cancelled in zip(open_flights, flags, strict=True):
                if cancelled and not flight.ended:
                    flight.ended = "client"
                    flight.output.abort()

    async def _watch_health(self) -> None:
        warned = False
        while True:
            await asyncio.sleep(self.cancel_period)
            try:
                self._check()
            except Exception as exc:  # reading the LLM's state must never stop serving
                if not warned:
                    pb_utils.Logger.log_warn(f"llmapi: the LLM's state is unreadable: {exc}")
                warned = True

    async def _watch_stats(self) -> None:
        while True:
            await asyncio.sleep(self.stats_period)
            if not self.submitted:
                continue
            try:
                latest = None
                async for stat in self.llm.get_stats_async(timeout=self.stats_period / 2):
                    latest = stat
                if latest is not None:
                    await self._io(self.metrics.publish, self.metrics.values(_stat_dict(latest)))
                elif not self.flights:
                    await self._io(self.metrics.publish_idle)
            except Exception as exc:  # statistics must never stop serving
                pb_utils.Logger.log_warn(f"llmapi: iteration statistics unreadable: {exc}")
