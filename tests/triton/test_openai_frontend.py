"""The OpenAI frontend (`tritonllm openai`) in front of a real tritonserver, driven by the official
`openai` SDK.

What runs for real: the frontend as its own process with the FrontendConfig the operator renders
for the deployment (openai_stack.py); tritonserver 2.51 serving the rendered repository of both
runtimes: the engine ensemble (preprocessing, postprocessing, Triton's ensemble scheduler) with
the CPU stand-in in place of tensorrt_llm, started by `tritonllm launch` under a real mpirun
(stack.py), and our llmapi model (llmapi_stack.py). What is SIMULATED: TensorRT-LLM (the CPU
stand-in, and the stand-in LLM API), whose "model" repeats the prompt's tokens.

Expected texts are not written here: each answer is compared with what the same request gives
when sent to Triton directly over gRPC (tritonclient), so the test proves that the frontend
passes the model's text through, cut where OpenAI's semantics say.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer

from tests.helpers import example as _example
from tests.helpers import free_ports, grpc_stream, stream_texts
from tritonllm.api.deployment import TritonLLMDeployment

from . import llmapi_stack, metrics
from .conftest import EXAMPLE, example
from .openai_stack import (
    LLAMA2_STYLE_TEMPLATE,
    Frontend,
    config_for,
    run_frontend,
    tokenizer_with_template,
)
from .stack import TritonInstall

pytestmark = pytest.mark.triton

PROMPT = "hello world"
TOKEN_DELAY = 0.05  # seconds per generated token of both stand-ins
ENV_TOKEN_DELAY = "TRITONLLM_STANDIN_TOKEN_DELAY"


def engine_deployment() -> TritonLLMDeployment:
    return example(EXAMPLE, serving={"streaming": True})


def llmapi_deployment() -> TritonLLMDeployment:
    return _example("cpu-standin-llmapi", engine={"parallelism": {"tensor": 1, "pipeline": 1}},
                    serving={"streaming": True})


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_tokenizer(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tokenizer_with_template(tokenizer_dir, tmp_path_factory.mktemp("chat-tok"),
                                   LLAMA2_STYLE_TEMPLATE)


@pytest.fixture(scope="module")
def engine_triton(start_stack: Callable[..., Any]) -> Iterator[tuple[TritonLLMDeployment, str]]:
    dep = engine_deployment()
    with start_stack("openai-engine", dep, token_delay=TOKEN_DELAY) as stack:
        yield dep, stack.server.grpc


@pytest.fixture(scope="module")
def llmapi_triton(triton_install: TritonInstall, tokenizer_dir: Path,
                  tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[TritonLLMDeployment, llmapi_stack.LlmapiServer]]:
    root = tmp_path_factory.mktemp("openai-llmapi")
    model_dir = llmapi_stack.checkpoint(tokenizer_dir, root / "tiny-gpt2")
    dep = llmapi_deployment()
    with llmapi_stack.serve(triton_install, dep, root, model_dir, model_dir,
                            env={ENV_TOKEN_DELAY: str(TOKEN_DELAY)}) as server:
        yield dep, server


@pytest.fixture(scope="module", params=["engine", "llmapi"])
def triton(request: pytest.FixtureRequest) -> tuple[str, TritonLLMDeployment, str]:
    """(runtime, deployment, Triton's gRPC address) of a decoupled model of either runtime."""
    if request.param == "engine":
        dep, grpc = request.getfixturevalue("engine_triton")
        return "engine", dep, grpc
    dep, server = request.getfixturevalue("llmapi_triton")
    return "llmapi", dep, server.server.grpc


@pytest.fixture(scope="module")
def frontend(triton: tuple[str, TritonLLMDeployment, str], chat_tokenizer: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Frontend]:
    runtime, dep, grpc = triton
    config = config_for(dep, grpc, chat_tokenizer)
    with run_frontend(config, tmp_path_factory.mktemp(f"frontend-{runtime}")) as running:
        yield running


def sdk(frontend: Frontend) -> openai.OpenAI:
    # No retries: a 429 or 503 must reach the test as it was answered.
    return openai.OpenAI(base_url=f"{frontend.url}/v1", api_key="unused", max_retries=0,
                         timeout=60)


def direct(frontend: Frontend, prompt: str, max_tokens: int, stream: bool = True) -> str:
    """The model's text for `prompt` asked of Triton directly (gRPC stream; one response per
    step, or with `stream` false one response), as the frontend asks it: the reference every
    answer is compared with."""
    return direct_counted(frontend, prompt, max_tokens, stream)[0]


def direct_counted(frontend: Frontend, prompt: str, max_tokens: int,
                   stream: bool = True) -> tuple[str, int | None]:
    """direct()'s text and the model's own count of the tokens it generated (the summed
    num_output_tokens of its responses; None when the model has no such output)."""
    cfg = frontend.config
    counted = "num_output_tokens" in cfg.outputs
    values: dict[str, object] = {"prompt": prompt, "max_tokens": max_tokens, "stream": stream}
    if counted:
        values["return_num_output_tokens"] = True
    inputs = []
    for name, value in values.items():
        tensor = cfg.inputs[name]
        if tensor.dtype == "BYTES":
            array = np.array([value.encode()], object)  # type: ignore[union-attr]
        else:
            array = np.array([value], {"INT32": np.int32, "BOOL": bool}[tensor.dtype])
        inputs.append((tensor.name, tensor.dtype, array.reshape(1, 1) if cfg.batched else array))
    results = grpc_stream(cfg.triton_grpc, cfg.triton_model, inputs)
    text = "".join(stream_texts(results))
    if not counted:
        return text, None
    counts = [int(v.reshape(-1)[0]) for r in results
              if (v := r.as_numpy(cfg.outputs["num_output_tokens"])) is not None]
    return text, sum(counts)


def expected(frontend: Frontend, prompt: str, max_tokens: int) -> tuple[str, int, str]:
    """(text, completion tokens, finish_reason) of a NON-streamed answer. llmapi: Triton
    streams, one token per step. Engine: the ensemble is asked for one whole response (its
    postprocessing then decodes all tokens together), counted by the model's num_output_tokens
    where its version has that output, else by re-encoding the text (which misses the
    stand-in's generated <s> tokens: they are not in the text)."""
    if frontend.config.runtime == "engine":
        text, counted = direct_counted(frontend, prompt, max_tokens, stream=False)
        tokens = counted if counted is not None else len(
            Tokenizer.from_file(f"{frontend.config.tokenizer_dir}/tokenizer.json")
            .encode(text, add_special_tokens=False).ids)
        return text, tokens, "length" if tokens >= max_tokens else "stop"
    return direct(frontend, prompt, max_tokens), max_tokens, "length"


# --- completions ---------------------------------------------------------------------------------


def test_models_lists_the_served_name(frontend: Frontend) -> None:
    client = sdk(frontend)
    name = frontend.config.served_model_name
    assert [m.id for m in client.models.list()] == [name]
    assert client.models.retrieve(name).id == name
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_completion_counts_tokens_and_ends_at_max_tokens(frontend: Frontend) -> None:
    answer = sdk(frontend).completions.create(model=frontend.config.served_model_name,
                                              prompt=PROMPT, max_tokens=5)
    assert answer.id.startswith("cmpl-") and answer.object == "text_completion"
    assert answer.model == frontend.config.served_model_name
    (choice,) = answer.choices
    text, tokens, finish = expected(frontend, PROMPT, 5)
    assert choice.text == text and choice.finish_reason == finish
    assert answer.usage is not None
    # <s> hello world: the prompt as the model encodes it (with its BOS).
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (3, tokens)
    assert answer.usage.total_tokens == 3 + tokens


def test_streamed_completion_ends_with_usage_and_done(frontend: Frontend) -> None:
    stream = sdk(frontend).completions.create(
        model=frontend.config.served_model_name, prompt=PROMPT, max_tokens=6, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    *texts, usage_chunk = chunks
    assert "".join(c.choices[0].text for c in texts) == direct(frontend, PROMPT, 6)
    assert texts[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in texts[:-1])
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens == 6 and usage_chunk.usage.prompt_tokens == 3
    assert len({c.id for c in chunks}) == 1


def test_sse_framing_on_the_wire(frontend: Frontend) -> None:
    status, headers, body = frontend.post(
        "/v1/completions", {"model": frontend.config.served_model_name, "prompt": PROMPT,
                            "max_tokens": 2, "stream": True},
        headers={"X-Request-Id": "trace-42"})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert headers["X-Request-Id"] == "trace-42"
    events = body.decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    assert all(e.startswith("data: {") for e in events[:-2])


def test_stop_cuts_the_answer_and_cancels(frontend: Frontend) -> None:
    reference, whole = direct(frontend, PROMPT, 12), expected(frontend, PROMPT, 12)[0]
    stop = "world"
    assert stop in reference and stop in whole
    client = sdk(frontend)
    name = frontend.config.served_model_name
    answer = client.completions.create(model=name, prompt=PROMPT, max_tokens=12, stop=[stop])
    assert answer.choices[0].text == whole[:whole.index(stop)]
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None
    if frontend.config.runtime == "llmapi":  # counted per step: it ended before 12 steps
        assert answer.usage.completion_tokens < 12
    streamed = client.completions.create(model=name, prompt=PROMPT, max_tokens=12, stop=stop,
                                         stream=True)
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks) == reference[:reference.index(stop)]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_sampling_fields_are_sent(frontend: Frontend) -> None:
    answer = sdk(frontend).completions.create(
        model=frontend.config.served_model_name, prompt=PROMPT, max_tokens=3, seed=7,
        temperature=0.5, top_p=0.9, frequency_penalty=0.1, presence_penalty=0.1)
    assert answer.choices[0].text == expected(frontend, PROMPT, 3)[0]  # the stand-ins ignore them
    for field in ("seed", "temperature", "top_p", "frequency_penalty", "presence_penalty"):
        assert field in frontend.config.inputs, field  # so they went to Triton, not refused


# --- chat ----------------------------------------------------------------------------------------


def test_chat_renders_the_model_template(frontend: Frontend) -> None:
    client = sdk(frontend)
    messages: list[Any] = [{"role": "system", "content": "hi"},
                           {"role": "user", "content": PROMPT}]
    answer = client.chat.completions.create(model=frontend.config.served_model_name,
                                            messages=messages, max_tokens=4)
    assert answer.id.startswith("chatcmpl-") and answer.object == "chat.completion"
    (choice,) = answer.choices
    assert choice.message.role == "assistant"
    # The template's prompt, its leading BOS text dropped (the model adds its own).
    rendered = "[INST] <<SYS>>\nhi\n<</SYS>>\n\nhello world [/INST]"
    text, tokens, finish = expected(frontend, rendered, 4)
    assert choice.message.content == text and choice.finish_reason == finish
    assert answer.usage is not None and answer.usage.prompt_tokens == 8
    assert answer.usage.completion_tokens == tokens
    stream = client.chat.completions.create(
        model=frontend.config.served_model_name, messages=messages, max_tokens=4,
        max_completion_tokens=3, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == direct(frontend, rendered, 3)  # max_completion_tokens wins


def test_the_template_can_refuse_a_conversation(frontend: Frontend) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        sdk(frontend).chat.completions.create(
            model=frontend.config.served_model_name,
            messages=[{"role": "assistant", "content": "hello"}])
    assert err.value.param == "messages" and "alternate" in err.value.message


# --- errors --------------------------------------------------------------------------------------


def error_of(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


def test_refusals_name_the_field(frontend: Frontend) -> None:
    client, name = sdk(frontend), frontend.config.served_model_name
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=name, prompt=PROMPT, n=2)
    assert err.value.param == "n"
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=name, prompt=PROMPT, extra_body={"bogus": 1})
    assert err.value.param == "bogus"
    assert "Unrecognized request argument supplied: bogus" in err.value.message
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="gpt-4o", prompt=PROMPT)
    assert error_of(missing.value)["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=name, messages=[{"role": "user", "content": "x"}],
                                       tools=[{"type": "function",
                                               "function": {"name": "f"}}])
    assert err.value.param == "tools"


def test_a_prompt_over_the_limits_is_refused_with_the_limit(frontend: Frontend) -> None:
    client, cfg = sdk(frontend), frontend.config
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=cfg.served_model_name,
                                  prompt="hello " * (cfg.max_input_len + 5))
    body = error_of(err.value)
    assert body["code"] == "context_length_exceeded"
    assert str(cfg.max_input_len) in body["message"]
    assert str(cfg.max_input_len + 6) in body["message"]  # the prompt's own count
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=cfg.served_model_name, prompt=PROMPT,
                                  max_tokens=cfg.max_seq_len)
    body = error_of(err.value)
    assert body["code"] == "context_length_exceeded" and str(cfg.max_seq_len) in body["message"]


def test_a_body_over_the_limit_is_413(frontend: Frontend) -> None:
    big = b'{"prompt": "' + b"x" * frontend.config.max_body_bytes + b'"}'
    status, _, body = frontend.post("/v1/completions", big)
    assert status == 413 and json.loads(body)["error"]["message"]


# --- metrics and health --------------------------------------------------------------------------


def samples(frontend: Frontend) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(frontend.metrics()) for s in f.samples}


def test_metrics_count_what_was_sent(frontend: Frontend) -> None:
    name = frontend.config.served_model_name
    model = ("model", name)
    ok = ("tritonllm_openai_requests_total",
          frozenset({model, ("endpoint", "/v1/completions"), ("status", "200")}))
    bad = ("tritonllm_openai_requests_total",
           frozenset({model, ("endpoint", "/v1/completions"), ("status", "400")}))
    prompt = ("tritonllm_openai_prompt_tokens_total", frozenset({model}))
    completion = ("tritonllm_openai_completion_tokens_total", frozenset({model}))
    ttft = ("tritonllm_openai_time_to_first_token_seconds_count", frozenset({model}))
    itl = ("tritonllm_openai_inter_token_latency_seconds_count", frozenset({model}))
    before = samples(frontend)
    client = sdk(frontend)
    answers = [client.completions.create(model=name, prompt=PROMPT, max_tokens=4,
                                         stream=True, stream_options={"include_usage": True})
               for _ in range(3)]
    usages = [list(a)[-1].usage for a in answers]
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=name, prompt=PROMPT, n=3)
    after = samples(frontend)
    assert after[ok] - before.get(ok, 0) == 3
    assert after[bad] - before.get(bad, 0) == 1
    assert after[prompt] - before[prompt] == 3 * 3
    assert [u.completion_tokens if u else None for u in usages] == [4, 4, 4]
    assert after[completion] - before[completion] == 3 * 4
    assert after[ttft] - before.get(ttft, 0) == 3
    assert after[itl] - before.get(itl, 0) == 3 * 3  # gaps between 4 streamed tokens
    assert after[("tritonllm_openai_requests_in_flight", frozenset({model}))] == 0


def test_health_follows_triton(frontend: Frontend,
                               tmp_path_factory: pytest.TempPathFactory) -> None:
    assert frontend.get("/health/ready")[0] == 200
    # The same config, Triton's address on a port where nothing listens: not ready, and a
    # request is answered 503 with Retry-After (the client may retry elsewhere).
    dead = frontend.config.model_copy(update={"triton_grpc": f"127.0.0.1:{free_ports(1)[0]}",
                                              "port": free_ports(1)[0]})
    with run_frontend(dead, tmp_path_factory.mktemp("frontend-dead")) as lost:
        assert lost.get("/health/ready")[0] == 503
        status, headers, body = lost.post("/v1/completions",
                                          {"model": dead.served_model_name, "prompt": PROMPT})
        assert status == 503 and headers["Retry-After"] == "1", body
        assert json.loads(body)["error"]["code"] == "service_unavailable"


# --- concurrency, cancellation, no template ---------------------------------------------------


@contextlib.contextmanager
def held_stream(frontend: Frontend, max_tokens: int) -> Iterator[Any]:
    """A streamed completion in flight (its first chunk read), closed on exit."""
    request = urllib.request.Request(
        f"{frontend.url}/v1/completions", method="POST",
        data=json.dumps({"model": frontend.config.served_model_name, "prompt": PROMPT,
                         "max_tokens": max_tokens, "stream": True}).encode(),
        headers={"Content-Type": "application/json"})
    response = urllib.request.urlopen(request, timeout=60)
    try:
        assert response.readline().startswith(b"data: {")
        yield response
    finally:
        response.close()


def test_over_max_concurrent_requests_is_429(triton: tuple[str, TritonLLMDeployment, str],
                                             chat_tokenizer: Path,
                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    runtime, dep, grpc = triton
    config = config_for(dep, grpc, chat_tokenizer, max_concurrent_requests=1)
    with run_frontend(config, tmp_path_factory.mktemp(f"frontend-one-{runtime}")) as one:
        client = sdk(one)
        with held_stream(one, 100):
            with pytest.raises(openai.RateLimitError) as err:
                client.completions.create(model=config.served_model_name, prompt=PROMPT)
            assert err.value.response.headers["Retry-After"] == "1"
        deadline = time.monotonic() + 10  # the held request ends (cancelled) and frees its slot
        while True:
            try:
                client.completions.create(model=config.served_model_name, prompt=PROMPT,
                                          max_tokens=2)
                break
            except openai.RateLimitError:
                assert time.monotonic() < deadline
                time.sleep(0.2)


def test_chat_without_template_is_refused_but_completions_work(
        triton: tuple[str, TritonLLMDeployment, str], tokenizer_dir: Path,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    runtime, dep, grpc = triton
    bare = tokenizer_with_template(tokenizer_dir, tmp_path_factory.mktemp("bare-tok"), None)
    config = config_for(dep, grpc, bare)
    with run_frontend(config, tmp_path_factory.mktemp(f"frontend-bare-{runtime}")) as plain:
        client = sdk(plain)
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model=config.served_model_name,
                                           messages=[{"role": "user", "content": PROMPT}])
        body = error_of(err.value)
        assert body["code"] == "chat_template_missing"
        assert config.served_model_name in body["message"]
        assert "/v1/completions" in body["message"]
        answer = client.completions.create(model=config.served_model_name, prompt=PROMPT,
                                           max_tokens=3)
        assert answer.choices[0].text and answer.usage is not None


def test_a_client_that_leaves_cancels_the_triton_request(
        llmapi_triton: tuple[TritonLLMDeployment, llmapi_stack.LlmapiServer],
        chat_tokenizer: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """llmapi's model observes each finished request's output tokens (nv_llm_output_token_len,
    once per request, cancelled ones too): a stream the client closes after a few tokens must
    end in Triton at once, with few tokens, not run on for its 100 tokens (5 s)."""
    dep, server = llmapi_triton
    config = config_for(dep, server.server.grpc, chat_tokenizer)
    labels = frozenset({"model": llmapi_stack.MODEL, "version": "1",
                        "response_metric_type": "total_output_tokens"}.items())
    count, total = ("nv_llm_output_token_len_count", labels), ("nv_llm_output_token_len_sum",
                                                               labels)
    with run_frontend(config, tmp_path_factory.mktemp("frontend-leave")) as running:
        before = metrics.scrape(server.server.metrics)
        with held_stream(running, 100) as response:
            for _ in range(5):
                response.readline()
        left = time.monotonic()
        while (after := metrics.scrape(server.server.metrics))[count] == before[count]:
            assert time.monotonic() - left < 2, "the request ran on after the client left"
            time.sleep(0.05)
        assert after[count] - before[count] == 1
        assert after[total] - before[total] < 50, "it generated on after the client left"
        status = ("tritonllm_openai_requests_total",
                  frozenset({("model", config.served_model_name),
                             ("endpoint", "/v1/completions"), ("status", "499")}))
        deadline = time.monotonic() + 5
        while samples(running).get(status) != 1:
            assert time.monotonic() < deadline, running.metrics()
            time.sleep(0.1)


def test_many_concurrent_streams_all_finish(frontend: Frontend) -> None:
    client, name = sdk(frontend), frontend.config.served_model_name
    reference = direct(frontend, PROMPT, 8)
    texts: list[str] = []

    def one() -> None:
        stream = client.completions.create(model=name, prompt=PROMPT, max_tokens=8, stream=True)
        texts.append("".join(c.choices[0].text for c in stream))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert texts == [reference] * 8


def test_logprobs_one_per_generated_token(frontend: Frontend) -> None:
    client, name = sdk(frontend), frontend.config.served_model_name
    answer = client.chat.completions.create(model=name, max_tokens=4, logprobs=True,
                                            messages=[{"role": "user", "content": PROMPT}])
    (choice,) = answer.choices
    assert choice.logprobs is not None and choice.logprobs.content is not None
    if frontend.config.runtime == "llmapi":  # one response per step (engine: one in all)
        assert len(choice.logprobs.content) == 4
    assert all(t.logprob <= 0 for t in choice.logprobs.content)
    assert "".join(t.token for t in choice.logprobs.content) == choice.message.content
    stream = list(client.chat.completions.create(
        model=name, max_tokens=4, logprobs=True, stream=True,
        messages=[{"role": "user", "content": PROMPT}]))
    steps = [c.choices[0].logprobs.content for c in stream[1:-1]
             if c.choices[0].logprobs and c.choices[0].logprobs.content]
    assert sum(len(s) for s in steps) == 4  # one per generated token, streamed
    text = client.completions.create(model=name, prompt=PROMPT, max_tokens=3, logprobs=0)
    logprobs = text.choices[0].logprobs
    assert logprobs is not None and logprobs.token_logprobs is not None
    assert logprobs.tokens is not None and "".join(logprobs.tokens) == text.choices[0].text
    if frontend.config.runtime == "llmapi":
        assert len(logprobs.token_logprobs) == 3


# --- a model that is not decoupled ----------------------------------------------------------------


@pytest.fixture(scope="module")
def llmapi_plain(triton_install: TritonInstall, tokenizer_dir: Path, chat_tokenizer: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Frontend]:
    """serving.streaming false: Triton answers each request once."""
    root = tmp_path_factory.mktemp("openai-llmapi-plain")
    model_dir = llmapi_stack.checkpoint(tokenizer_dir, root / "tiny-gpt2")
    dep = _example("cpu-standin-llmapi", engine={"parallelism": {"tensor": 1, "pipeline": 1}},
                   serving={"streaming": False})
    with llmapi_stack.serve(triton_install, dep, root, model_dir, model_dir) as server:
        config = config_for(dep, server.server.grpc, chat_tokenizer)
        assert not config.decoupled and "stream" not in config.inputs
        with run_frontend(config, root / "frontend") as running:
            yield running


def test_a_model_that_is_not_decoupled(llmapi_plain: Frontend) -> None:
    """Its completion tokens are the model's own count (num_output_tokens of its one response:
    no per-step responses to count, and re-encoding the text would miss generated tokens that
    leave no text), and a streamed answer is its one text in one chunk."""
    import tritonclient.grpc as grpcclient

    cfg = llmapi_plain.config
    client, name = sdk(llmapi_plain), cfg.served_model_name
    answer = client.completions.create(model=name, prompt="the quick brown fox", max_tokens=8)
    text = answer.choices[0].text
    assert text.split() and set(text.split()) <= {"the", "quick", "brown", "fox"}
    # The same request asked of Triton directly, with the count the model returns.
    triton = grpcclient.InferenceServerClient(cfg.triton_grpc)
    inputs = []
    for key, value, np_type in (("prompt", b"the quick brown fox", object),
                                ("max_tokens", 8, np.int32),
                                ("return_num_output_tokens", True, bool)):
        tensor = cfg.inputs[key]
        inputs.append(grpcclient.InferInput(tensor.name, [1], tensor.dtype))
        inputs[-1].set_data_from_numpy(np.array([value], dtype=np_type))
    result = triton.infer(cfg.triton_model, inputs)
    generated = int(result.as_numpy(cfg.outputs["num_output_tokens"]).reshape(-1)[0])
    triton.close()
    assert answer.usage is not None and answer.usage.completion_tokens == generated
    assert generated >= len(text.split())
    assert answer.choices[0].finish_reason == ("length" if generated >= 8 else "stop")
    assert answer.usage.prompt_tokens == 5
    stream = list(client.completions.create(model=name, prompt="the quick brown fox",
                                            max_tokens=8, stream=True))
    assert "".join(c.choices[0].text for c in stream) == text
    stopped = client.completions.create(model=name, prompt="the quick brown fox",
                                        max_tokens=8, stop="brown")
    assert stopped.choices[0].text == text[:text.index("brown")]
    assert stopped.choices[0].finish_reason == "stop"


# --- shutdown -----------------------------------------------------------------------------------


def test_sigterm_drains(triton: tuple[str, TritonLLMDeployment, str], chat_tokenizer: Path,
                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """On SIGTERM the frontend reports not ready and refuses new requests (503), while the
    request in flight still ends with its whole answer; then it exits 0."""
    runtime, dep, grpc = triton
    config = config_for(dep, grpc, chat_tokenizer)
    with run_frontend(config, tmp_path_factory.mktemp(f"frontend-term-{runtime}")) as running:
        with held_stream(running, 40) as response:
            running.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 5
            while running.get("/health/ready")[0] != 503:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            status, headers, _ = running.post(
                "/v1/completions", {"model": config.served_model_name, "prompt": PROMPT})
            assert status == 503 and "Retry-After" in headers
            rest = response.read().decode()
        assert rest.endswith("data: [DONE]\n\n") and '"finish_reason":"length"' in rest
        assert running.proc.wait(timeout=10) == 0


def test_a_request_over_the_timeout_is_504_and_cancelled(
        triton: tuple[str, TritonLLMDeployment, str], chat_tokenizer: Path,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    runtime, dep, grpc = triton
    config = config_for(dep, grpc, chat_tokenizer, request_timeout_seconds=0.5)
    with run_frontend(config, tmp_path_factory.mktemp(f"frontend-slow-{runtime}")) as slow:
        client = sdk(slow)
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as err:
            client.completions.create(model=config.served_model_name, prompt=PROMPT,
                                      max_tokens=40)  # 2 s of tokens
        assert err.value.status_code == 504 and time.monotonic() - started < 1.5
        assert error_of(err.value)["code"] == "timeout"
        # Streamed: the answer has begun, so the timeout arrives as an error event.
        with pytest.raises(openai.APIError, match=r"took over 0\.5 s"):
            list(client.completions.create(model=config.served_model_name, prompt=PROMPT,
                                           max_tokens=40, stream=True))
