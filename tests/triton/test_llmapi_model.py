"""Our llmapi model (tritonllm/triton/models/llmapi.py) in a real tritonserver, as rendered.

What runs for real: tritonserver 2.51 and its Python backend (custom metrics, response senders,
request cancellation), the repository tritonllm renders for a TritonLLMDeployment with runtime
llmapi (config.pbtxt, model.yaml, model.py, unchanged), started with the rendered launch plan's
argv (llmapi_stack.py); clients tritonclient (HTTP, gRPC, gRPC streaming), the generate
endpoints and promtool for the chart's recording rules. What is SIMULATED: the `tensorrt_llm`
package (the CPU stand-in image's LLM API, images/triton-standin/fakes/tensorrt_llm/): its
"model" answers generated token i = prompt token (i mod prompt length), one token per
iteration every TOKEN_DELAY seconds, all requests of the batch together (in-flight batching).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml

from tests.helpers import example, grpc_inputs, grpc_stream, stream_texts
from tritonllm.api.deployment import TritonLLMDeployment

from . import llmapi_stack, metrics
from .llmapi_stack import MODEL, LlmapiServer, checkpoint
from .metrics import Sample
from .stack import ROOT, TritonInstall

pytestmark = pytest.mark.triton

EXAMPLE = "cpu-standin-llmapi"
TOKEN_DELAY = 0.1  # seconds per generation step of the stand-in
ENV_TOKEN_DELAY = "TRITONLLM_STANDIN_TOKEN_DELAY"
MAX_BATCH = 16
PROMPT = "the quick brown fox"  # tokens: <s> the quick brown fox
WORDS = ["<s>", *PROMPT.split()]
RULES = ROOT / "charts" / "tritonllm" / "files" / "recording-rules.yaml"


def deployment(streaming: bool) -> TritonLLMDeployment:
    return example(
        EXAMPLE,
        engine={"parallelism": {"tensor": 1, "pipeline": 1},
                "limits": {"maxBatchSize": MAX_BATCH, "maxInputLen": 64, "maxSeqLen": 256,
                           "maxNumTokens": 1024}},
        serving={"streaming": streaming},
    )


def expected_text(tokens: int) -> str:
    """The stand-in's answer to PROMPT: generated token i = prompt token (i mod length),
    detokenized without special tokens (SamplingParams.skip_special_tokens, default true)."""
    return " ".join(w for w in (WORDS[i % len(WORDS)] for i in range(tokens)) if w != "<s>")


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoint(tokenizer_dir, tmp_path_factory.mktemp("llmapi-model") / "tiny-gpt2")


def _serve(install: TritonInstall, streaming: bool, model_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmapiServer]:
    root = tmp_path_factory.mktemp(f"llmapi-{'stream' if streaming else 'plain'}")
    with llmapi_stack.serve(install, deployment(streaming), root, model_dir, model_dir,
                            env={ENV_TOKEN_DELAY: str(TOKEN_DELAY)}) as server:
        yield server


@pytest.fixture(scope="module")
def plain(triton_install: TritonInstall, model_dir: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmapiServer]:
    """serving.streaming false: not decoupled."""
    yield from _serve(triton_install, False, model_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def streaming(triton_install: TritonInstall, model_dir: Path,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmapiServer]:
    """serving.streaming true: decoupled."""
    yield from _serve(triton_install, True, model_dir, tmp_path_factory)


# --- clients -------------------------------------------------------------------------------------


def generate(server: LlmapiServer, body: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    request = urllib.request.Request(
        server.server.url(f"/v2/models/{MODEL}/generate"), method="POST",
        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return dict(json.load(response))
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, **json.load(exc)}


def ask(tokens: int, **extra: Any) -> dict[str, Any]:
    return {"text_input": PROMPT, "sampling_param_max_tokens": tokens, **extra}


LABELS = {"model": MODEL, "version": "1"}


def scrape(server: LlmapiServer) -> Sample:
    return metrics.scrape(server.server.metrics)


def gauges(sample: Sample, family: str, label: str) -> dict[str, float]:
    """label value -> value of the family's series of our model (model, version, label only)."""
    return metrics.gauges(sample, family, label, LABELS)


def requests_gauge(sample: Sample) -> dict[str, float]:
    return gauges(sample, "nv_trt_llm_request_metrics", "request_type")


def kv_gauge(sample: Sample) -> dict[str, float]:
    return gauges(sample, "nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type")


def wait_idle(server: LlmapiServer, seconds: float = 10) -> dict[str, float]:
    """The request gauges once nothing is active (fails after `seconds`)."""
    deadline = time.monotonic() + seconds
    while True:
        requests = requests_gauge(scrape(server))
        if requests.get("active") == 0 or time.monotonic() > deadline:
            assert requests.get("active") == 0, requests
            return requests
        time.sleep(0.1)


# --- in-flight batching --------------------------------------------------------------------------


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.monotonic()
    result = call()
    return time.monotonic() - started, result


def test_sixteen_concurrent_requests_finish_in_about_the_time_of_one(plain: LlmapiServer) -> None:
    tokens = 10
    one, answer = timed(lambda: generate(plain, ask(tokens)))
    assert answer["text_output"] == expected_text(tokens), answer
    assert one >= tokens * TOKEN_DELAY  # each step waits TOKEN_DELAY
    with ThreadPoolExecutor(MAX_BATCH) as pool:
        sixteen, answers = timed(lambda: list(pool.map(
            lambda _: generate(plain, ask(tokens)), range(MAX_BATCH))))
    assert [a["text_output"] for a in answers] == [expected_text(tokens)] * MAX_BATCH
    # Serving one at a time would take 16x one; in flight together they take about one.
    assert sixteen < 2.5 * one, (sixteen, one)


# --- the request surface -------------------------------------------------------------------------


def test_generate_answers_with_finish_reason_and_token_counts(plain: LlmapiServer) -> None:
    answer = generate(plain, ask(6, return_finish_reason=True, return_num_input_tokens=True,
                                 return_num_output_tokens=True, return_stop_reason=True))
    assert answer["text_output"] == expected_text(6)
    assert answer["finish_reason"] == "length" and answer["stop_reason"] == ""
    assert answer["num_input_tokens"] == len(WORDS) and answer["num_output_tokens"] == 6


def test_stop_words_end_the_text_with_finish_reason_stop(plain: LlmapiServer) -> None:
    answer = generate(plain, ask(12, sampling_param_stop=["brown"], return_finish_reason=True,
                                 return_stop_reason=True))
    assert answer["text_output"] == "the quick", answer  # the stop string left out
    assert (answer["finish_reason"], answer["stop_reason"]) == ("stop", "brown")
    kept = generate(plain, ask(12, sampling_param_stop=["brown"],
                               sampling_param_include_stop_str_in_output=True))
    assert kept["text_output"] == "the quick brown", kept


def test_end_id_and_min_tokens(plain: LlmapiServer) -> None:
    end_id = 7  # "quick" in the test tokenizer (<pad> <unk> </s> <s> hello world the quick)
    ended = generate(plain, ask(12, sampling_param_end_id=end_id, return_finish_reason=True))
    assert ended["finish_reason"] == "stop" and ended["text_output"] == "the", ended
    # Not before min_tokens: the next "quick" is generated token 8 (its 7 before it returned).
    floor = generate(plain, ask(12, sampling_param_end_id=end_id, sampling_param_min_tokens=4,
                                return_finish_reason=True))
    assert floor["finish_reason"] == "stop" and floor["text_output"] == expected_text(7), floor


def test_logprobs_one_per_generated_token(plain: LlmapiServer) -> None:
    answer = generate(plain, ask(5, sampling_param_logprobs=1, return_cumulative_logprob=True))
    assert len(answer["output_log_probs"]) == 5, answer
    assert all(v <= 0 for v in answer["output_log_probs"])
    assert answer["cumulative_logprob"] == pytest.approx(sum(answer["output_log_probs"]),
                                                         abs=1e-3)


def test_sampling_knobs_are_accepted(plain: LlmapiServer) -> None:
    answer = generate(plain, ask(4, sampling_param_temperature=0.7, sampling_param_top_k=5,
                                 sampling_param_top_p=0.9, sampling_param_seed=7,
                                 sampling_param_repetition_penalty=1.1,
                                 sampling_param_length_penalty=1.0,
                                 sampling_param_presence_penalty=0.1,
                                 sampling_param_frequency_penalty=0.1))
    assert answer["text_output"] == expected_text(4), answer


def test_tritonclient_http_and_grpc_infer(plain: LlmapiServer) -> None:
    inputs = [("text_input", "BYTES", np.array([PROMPT.encode()], object)),
              ("sampling_param_max_tokens", "INT32", np.array([3], np.int32))]
    http = httpclient.InferenceServerClient(plain.server.http)
    tensors = []
    for name, dtype, value in inputs:
        tensor = httpclient.InferInput(name, list(value.shape), dtype)
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    result = http.infer(MODEL, tensors)
    assert result.as_numpy("text_output")[0].decode() == expected_text(3)
    grpc = grpcclient.InferenceServerClient(plain.server.grpc)
    result = grpc.infer(MODEL, grpc_inputs(inputs))
    assert result.as_numpy("text_output")[0].decode() == expected_text(3)


def test_a_bad_request_gets_its_own_error(plain: LlmapiServer) -> None:
    answer = generate(plain, ask(3, streaming=True))
    assert answer["status"] == 400 and "decoupled" in answer["error"], answer
    # The LLM API refuses several returns under greedy decoding (SamplingParams' own check).
    answer = generate(plain, ask(3, sampling_param_best_of=2))
    assert answer["status"] == 400 and "best_of" in answer["error"], answer
    assert generate(plain, ask(2))["text_output"] == expected_text(2)  # still serving


def test_streaming_sends_one_delta_per_step_then_the_final(streaming: LlmapiServer) -> None:
    tokens = 5
    inputs = [("text_input", "BYTES", np.array([PROMPT.encode()], object)),
              ("sampling_param_max_tokens", "INT32", np.array([tokens], np.int32)),
              ("streaming", "BOOL", np.array([True], bool)),
              ("return_finish_reason", "BOOL", np.array([True], bool))]
    results = grpc_stream(streaming.server.grpc, MODEL, inputs)  # up to the final-flagged one
    texts = stream_texts(results)
    assert len(texts) == tokens, texts  # one per token, the last one flagged final
    assert "".join(texts).split() == expected_text(tokens).split()
    reasons = [r.as_numpy("finish_reason")[0].decode() for r in results]
    assert reasons[-1] == "length" and set(reasons[:-1]) <= {""}, reasons


def test_generate_stream_over_http(streaming: LlmapiServer) -> None:
    request = urllib.request.Request(
        streaming.server.url(f"/v2/models/{MODEL}/generate_stream"), method="POST",
        data=json.dumps(ask(4, streaming=True)).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        events = [json.loads(line[len(b"data: "):]) for line in response
                  if line.startswith(b"data: ")]
    assert len(events) == 4 and all("error" not in e for e in events), events
    assert "".join(e["text_output"] for e in events).split() == expected_text(4).split()


def test_a_decoupled_model_answers_a_non_streaming_request_once(streaming: LlmapiServer) -> None:
    answer = generate(streaming, ask(4))
    assert answer["text_output"] == expected_text(4), answer


# --- cancellation --------------------------------------------------------------------------------


def test_a_cancelled_grpc_request_is_aborted_and_released(plain: LlmapiServer) -> None:
    wait_idle(plain)
    before = scrape(plain)
    client = grpcclient.InferenceServerClient(plain.server.grpc)
    inputs = [("text_input", "BYTES", np.array([PROMPT.encode()], object)),
              ("sampling_param_max_tokens", "INT32", np.array([200], np.int32))]
    answers: list[Any] = []
    call = client.async_infer(MODEL, grpc_inputs(inputs),
                              callback=lambda result, error: answers.append((result, error)))
    time.sleep(1)
    assert requests_gauge(scrape(plain))["active"] == 1  # generating
    call.cancel()
    started = time.monotonic()
    wait_idle(plain, seconds=5)  # 200 tokens would take 20 s: aborted, not finished
    assert time.monotonic() - started < 3
    # Released: nothing runs on, and the next request is served alone.
    time.sleep(1)
    assert requests_gauge(scrape(plain))["active"] == 0
    after = scrape(plain)
    count = ("nv_llm_output_token_len_count",
             frozenset({**LABELS, "response_metric_type": "total_output_tokens"}.items()))
    assert after[count] - before[count] == 1  # one request ended, its tokens observed
    ((result, error),) = answers  # the client's own view: its call ended cancelled
    assert result is None and "cancel" in str(error).lower(), error


def test_closing_a_grpc_stream_aborts_its_request(streaming: LlmapiServer) -> None:
    wait_idle(streaming)
    client = grpcclient.InferenceServerClient(streaming.server.grpc)
    got: list[Any] = []
    client.start_stream(callback=lambda result, error: got.append((result, error)))
    inputs = [("text_input", "BYTES", np.array([PROMPT.encode()], object)),
              ("sampling_param_max_tokens", "INT32", np.array([200], np.int32)),
              ("streaming", "BOOL", np.array([True], bool))]
    client.async_stream_infer(MODEL, grpc_inputs(inputs))
    time.sleep(1)
    assert 5 <= len(got) < 20, len(got)  # about one delta per step so far
    client.stop_stream(cancel_requests=True)
    wait_idle(streaming, seconds=5)
    time.sleep(1)
    assert requests_gauge(scrape(streaming))["active"] == 0


def test_a_stop_request_ends_the_request_with_its_id(plain: LlmapiServer) -> None:
    wait_idle(plain)
    answers: list[dict[str, Any]] = []
    long = threading.Thread(target=lambda: answers.append(generate(
        plain, ask(200, id="req-stop-1", return_finish_reason=True))))
    started = time.monotonic()
    long.start()
    time.sleep(1)
    stopped = generate(plain, {"id": "req-stop-1", "text_input": "", "stop": True})
    assert "error" not in stopped, stopped  # the stop request itself is answered
    long.join(timeout=10)
    assert not long.is_alive() and time.monotonic() - started < 5
    (answer,) = answers
    assert answer["finish_reason"] == "cancelled", answer
    words = answer["text_output"].split()  # the text so far: a start of the whole answer
    assert 5 <= len(words) < 150 and expected_text(200).startswith(answer["text_output"])
    wait_idle(plain, seconds=5)


def test_a_stop_request_needs_an_id(plain: LlmapiServer) -> None:
    answer = generate(plain, {"text_input": "", "stop": True})
    assert answer["status"] == 400 and "request id" in answer["error"], answer


# --- metrics -------------------------------------------------------------------------------------


FAMILIES = {
    "nv_trt_llm_request_metrics": ("request_type",
                                   {"active", "max", "scheduled", "context", "waiting"}),
    "nv_trt_llm_kv_cache_block_metrics": ("kv_cache_block_type",
                                          {"max", "free", "used", "tokens_per", "reused",
                                           "fraction"}),
    "nv_trt_llm_inflight_batcher_metrics": ("inflight_batcher_specific_metric",
                                            {"total_context_tokens", "generation_requests",
                                             "micro_batch_id", "paused_requests"}),
}


def loaded_samples(server: LlmapiServer, requests: int, tokens: int) -> tuple[Sample, list[Sample],
                                                                               Sample]:
    """(before, scrapes while `requests` concurrent requests of `tokens` tokens run, after)."""
    wait_idle(server)
    before = scrape(server)
    with ThreadPoolExecutor(requests) as pool:
        answers = [pool.submit(generate, server, ask(tokens)) for _ in range(requests)]
        during = []
        while not all(a.done() for a in answers):
            during.append(scrape(server))
            time.sleep(0.1)
    assert all(a.result()["text_output"] == expected_text(tokens) for a in answers)
    wait_idle(server)
    return before, during, scrape(server)


def test_metric_families_carry_the_backend_labels_and_move(plain: LlmapiServer) -> None:
    requests, tokens = 6, 20
    before, during, after = loaded_samples(plain, requests, tokens)
    for family, (label, values) in FAMILIES.items():
        assert set(gauges(after, family, label)) == values, family
    assert requests_gauge(before)["max"] == MAX_BATCH  # max_batch_size of model.yaml
    busy = [s for s in during if requests_gauge(s)["active"] >= 2]
    assert busy, "no scrape with two or more requests in flight"
    for sample in busy:
        kv, req = kv_gauge(sample), requests_gauge(sample)
        assert kv["used"] > 0 and kv["free"] == kv["max"] - kv["used"], kv
        assert kv["fraction"] == pytest.approx(kv["used"] / kv["max"]), kv
        assert req["active"] <= MAX_BATCH and req["context"] <= req["scheduled"], req
    kv = kv_gauge(after)
    assert kv["used"] == 0 and kv["free"] == kv["max"] and kv["fraction"] == 0, kv

    def delta(name: str, kind: str) -> float:
        key = (name, frozenset({**LABELS, "response_metric_type": f"total_{kind}_tokens"}.items()))
        return after[key] - before[key]

    # One observation per finished request: its generated and its prompt token counts.
    assert delta("nv_llm_output_token_len_count", "output") == requests
    assert delta("nv_llm_output_token_len_sum", "output") == requests * tokens
    assert delta("nv_llm_input_token_len_sum", "input") == requests * len(WORDS)
    iterations = gauges(after, "nv_trt_llm_general_metrics", "general_type")
    assert iterations["iteration_counter"] > gauges(before, "nv_trt_llm_general_metrics",
                                                    "general_type").get("iteration_counter", 0)


def test_requests_beyond_the_batch_count_as_waiting(triton_install: TritonInstall,
                                                    model_dir: Path,
                                                    tmp_path: Path) -> None:
    """maxBatchSize 2 and 5 requests: the LLM holds 3 it does not schedule: `waiting`, which
    the autoscaling signal backendWaitingRequests reads."""
    dep = example(EXAMPLE, engine={"parallelism": {"tensor": 1, "pipeline": 1},
                                   "limits": {"maxBatchSize": 2, "maxInputLen": 64,
                                              "maxSeqLen": 256, "maxNumTokens": 512}},
                  serving={"streaming": False})
    with llmapi_stack.serve(triton_install, dep, tmp_path, model_dir, model_dir,
                            env={ENV_TOKEN_DELAY: str(TOKEN_DELAY)}) as server:
        _, during, _ = loaded_samples(server, 5, 15)
    seen = [(requests_gauge(s)["active"], requests_gauge(s)["waiting"]) for s in during]
    assert (2, 3) in seen, seen  # a full batch, the other three held
    assert all(active <= 2 and active + waiting <= 5 for active, waiting in seen), seen


# --- the autoscaling rules on this runtime's series ----------------------------------------------


def test_exported_series_satisfy_the_autoscaling_rules(plain: LlmapiServer,
                                                      tmp_path: Path) -> None:
    """The chart's recording rules, EVALUATED by promtool over the series this model exports
    under load (with the labels a Kubernetes pod scrape adds): kvCacheUtilization,
    backendWaitingRequests and pendingRequests come out as the exported gauges say."""
    _, during, _ = loaded_samples(plain, 8, 20)
    sample = next(s for s in during if kv_gauge(s).get("used", 0) > 0)
    target = {"namespace": "llm", "pod": "chat-0", "app_kubernetes_io_instance": "chat",
              "job": "tritonllm-serving", "instance": "chat-0:8002"}
    input_series = []
    for (name, labels), value in sample.items():
        if dict(labels).get("model") in (None, "") or name.endswith(("_bucket", "_created")):
            continue
        text = ",".join(f'{k}="{v}"' for k, v in sorted({**dict(labels), **target}.items()))
        input_series.append({"series": f"{name}{{{text}}}", "values": f"{value}x3"})
    kv, requests = kv_gauge(sample), requests_gauge(sample)
    pending = sum(v for (n, _), v in sample.items() if n == "nv_inference_pending_request_count")
    kept = 'namespace="llm",pod="chat-0",app_kubernetes_io_instance="chat"'
    expect = {"tritonllm:kv_cache_utilization": kv["used"] / kv["max"],
              "tritonllm:backend_waiting_requests": requests["waiting"],
              "tritonllm:pending_requests": pending}
    spec = {"rule_files": [str(RULES)], "evaluation_interval": "2s", "tests": [{
        "interval": "2s", "input_series": input_series,
        "promql_expr_test": [
            {"expr": f"{name}{{{kept}}}", "eval_time": "4s",
             "exp_samples": [{"labels": f"{name}{{{kept}}}", "value": value}]}
            for name, value in expect.items()]}]}
    path = tmp_path / "rules.test.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: apt-get install prometheus (scripts/test does)"
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr
    assert expect["tritonllm:kv_cache_utilization"] > 0


# --- a model that does not load ------------------------------------------------------------------


def test_an_llm_that_fails_to_load_fails_the_model_load(triton_install: TritonInstall,
                                                        tokenizer_dir: Path,
                                                        tmp_path: Path) -> None:
    broken = checkpoint(tokenizer_dir, tmp_path / "broken",
                        tritonllm_standin_fault="crash-at-load")
    code, log = llmapi_stack.failed_load(triton_install, deployment(False), tmp_path / "run",
                                         broken, broken)
    assert code != 0, log
    assert "SIMULATED" in log and "crash-at-load" in log, log[-3000:]
    assert "failed to load 'tensorrt_llm'" in log or "failed to load" in log, log[-3000:]


# --- the example as written: tensor parallelism 2 -------------------------------------------------


def test_the_example_at_tp2_answers_in_flight(triton_install: TritonInstall, model_dir: Path,
                                              tmp_path: Path) -> None:
    """examples/cpu-standin-llmapi.yaml unchanged (tp 2: the LLM starts its second rank itself,
    in the pod) serves concurrent requests together."""
    dep = example(EXAMPLE)
    assert dep.spec.topology.tensor == 2
    batch = dep.spec.engine.limits.maxBatchSize
    with llmapi_stack.serve(triton_install, dep, tmp_path, model_dir, model_dir,
                            env={ENV_TOKEN_DELAY: str(TOKEN_DELAY)}) as server:
        one, answer = timed(lambda: generate(server, ask(8)))
        assert answer["text_output"] == expected_text(8), answer
        with ThreadPoolExecutor(batch) as pool:
            together, answers = timed(lambda: list(pool.map(
                lambda _: generate(server, ask(8)), range(batch))))
    assert [a["text_output"] for a in answers] == [expected_text(8)] * batch
    assert together < 2 * one, (together, one)


# --- a dead rank ends the server ------------------------------------------------------------------


WORKER_LINE = re.compile(r"tensorrt_llm SIMULATED rank=1 world=2 pid=(\d+) .*role=worker")


@contextlib.contextmanager
def tp2_server(install: TritonInstall, model_dir: Path, root: Path,
               streaming: bool) -> Iterator[tuple[LlmapiServer, int]]:
    """The example at tp 2 (the stand-in LLM spawns its worker rank as the real one spawns its
    MPI workers), serving; with the worker's pid. Its process group is killed at the end: the
    Python stub outlives a server that was killed."""
    dep = example(EXAMPLE, serving={"streaming": streaming})
    with llmapi_stack.serve(install, dep, root, model_dir, model_dir,
                            env={ENV_TOKEN_DELAY: str(TOKEN_DELAY)}) as server:
        try:
            assert generate(server, ask(2))["text_output"] == expected_text(2)
            found = WORKER_LINE.search(server.log())
            assert found, server.log()[-3000:]
            yield server, int(found.group(1))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.proc.pid, signal.SIGKILL)


def assert_ended(server: LlmapiServer, worker: int, killed: float) -> None:
    """tritonserver exits non-zero within seconds of the kill, and its log names the rank once."""
    code = server.proc.wait(timeout=20)
    ended = time.monotonic() - killed
    log = server.log()
    assert code != 0, log[-3000:]
    assert ended < 10, ended
    lines = [line for line in log.splitlines() if "the LLM can serve no more (" in line]
    assert len(lines) == 1 and f"rank 1 of 2 (pid {worker} on" in lines[0], log[-3000:]
    print(f"[dead rank] tritonserver exited {code} {ended:.2f} s after the kill: {lines[0]}")


def test_a_dead_rank_ends_the_server(triton_install: TritonInstall, model_dir: Path,
                                     tmp_path: Path) -> None:
    """The LLM's worker rank is killed: the next request fails naming the rank, then
    tritonserver exits non-zero (so the container restarts), its log naming the rank."""
    with tp2_server(triton_install, model_dir, tmp_path, streaming=False) as (server, worker):
        os.kill(worker, signal.SIGKILL)
        killed = time.monotonic()
        answer = generate(server, ask(4))
        assert answer["status"] >= 400, answer
        assert f"rank 1 of 2 (pid {worker} on" in answer["error"], answer
        assert_ended(server, worker, killed)


def test_a_dead_rank_ends_the_streams_in_flight_first(triton_install: TritonInstall,
                                                      model_dir: Path, tmp_path: Path) -> None:
    """A gRPC stream is generating (decoupled, one response per step) when the rank dies: it
    ends with an error naming the rank, and only then does the server go."""
    with tp2_server(triton_install, model_dir, tmp_path, streaming=True) as (server, worker):
        inputs = [("text_input", "BYTES", np.array([PROMPT.encode()], object)),
                  ("sampling_param_max_tokens", "INT32", np.array([200], np.int32)),
                  ("streaming", "BOOL", np.array([True], bool))]
        with ThreadPoolExecutor(1) as pool:
            stream = pool.submit(grpc_stream, server.server.grpc, MODEL, inputs)
            time.sleep(10 * TOKEN_DELAY)  # a few deltas out
            os.kill(worker, signal.SIGKILL)
            killed = time.monotonic()
            with pytest.raises(RuntimeError, match=rf"rank 1 of 2 \(pid {worker} on"):
                stream.result(timeout=30)
        assert_ended(server, worker, killed)
