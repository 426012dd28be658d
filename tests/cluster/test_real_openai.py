"""The OpenAI API of a deployment on real containers, driven by clients nobody here wrote: the
official `openai` Python SDK and NVIDIA's `aiperf` benchmark, from the host through the
deployment's Service (port 9000, `openai`), for both runtimes.

One deployment per runtime, in turn (a module-scoped fixture: examples/cpu-standin.yaml, the
engine runtime, then examples/cpu-standin-llmapi.yaml), on the real node `real-0` with the store
seeded by examples/cpu-standin/seed.yaml (whose tokenizer carries a chat template): the serving
pod runs tritonserver and, beside it, the `openai` sidecar from the operator image. Asked of each:
/v1/models lists the served name (the deployment's); completions and chat, streamed and not, with
`usage` (and `stream_options.include_usage`), `stop`, `finish_reason`; an unknown model (404), a
bad parameter (400 naming it), a prompt over the deployment's limits (400 with the limit); and
the frontend's metrics at the pod's port 9000. aiperf runs once, against the llmapi deployment,
with a small load (from its own cached virtualenv, bench/aiperf_env.py): its JSON says no
request failed and the TTFT is plausible.

SIMULATED: the GPUs and TensorRT-LLM (the stand-in image's deterministic CPU "model": generated
token i is prompt token i mod the prompt's length). Real: the node, containers, tritonserver, the
frontend, the Service, kube-proxy, the SDK and aiperf.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from bench.aiperf_env import aiperf_executable, offline_env

from tests.cluster.operator_harness import get_cr
from tests.cluster.test_real_flow import _first_answer, _pods, _service_ip, _volume_dir
from tests.cluster.test_real_multinode import Env, group_env
from tests.helpers import example_body
from tritonllm.api import constants as c

pytestmark = pytest.mark.cluster

RUNTIMES = {"engine": "cpu-standin", "llmapi": "cpu-standin-llmapi"}
COLD_TIMEOUT = 420
PROMPT = "hello world the quick"
# The stand-in repeats the prompt's tokens, BOS included (<s> hello world the quick <s> ...);
# <s> is a special token, skipped in the text.
PROMPT_TOKENS = 5  # <s> + 4 words: the model's own encoding adds the BOS


class Served:
    """One deployment and its OpenAI API, through its Service from the host."""

    def __init__(self, env: Env, runtime: str) -> None:
        self.env, self.runtime, self.name = env, runtime, RUNTIMES[runtime]
        self.base = f"http://{_service_ip(env.cluster, env.ns, self.name)}:{c.OPENAI_PORT}/v1"
        self.client = openai.OpenAI(base_url=self.base, api_key="unused", max_retries=0,
                                    timeout=60)

    def words(self, text: str) -> list[str]:
        """The text as the tokenizer's words. The engine runtime's streamed pieces are single
        tokens decoded one at a time, so its streamed text carries no spaces between words (its
        non-streamed text, decoded whole, does)."""
        return re.findall(r"hello|world|the|quick|brown|fox|triton|says", text)


@pytest.fixture(scope="module")
def env(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with group_env(cluster, tmp_path_factory, "oai") as made:
        yield made


@pytest.fixture(scope="module", params=list(RUNTIMES))
def served(env: Env, request: pytest.FixtureRequest) -> Iterator[Served]:
    """One deployment of the runtime, Ready and answering; deleted after its tests (one at a
    time: the real node has two cores)."""
    runtime = request.param
    name = RUNTIMES[runtime]
    env.cluster.kubectl("apply", "-n", env.ns, "-f", "-", input=json.dumps(example_body(name)))
    _first_answer(env.cluster, env.ns, name, env.op, COLD_TIMEOUT, **env.asks(name))
    yield Served(env, runtime)
    env.kubectl("delete", "tllm", name, "--wait=true", check=False)


def test_models_lists_the_served_name(served: Served) -> None:
    models = served.client.models.list()
    assert [m.id for m in models.data] == [served.name]
    assert served.client.models.retrieve(served.name).id == served.name
    status = get_cr(served.env.cluster, served.env.ns, served.name)["status"]
    assert status["openai"]["url"] == f"http://{served.name}.{served.env.ns}.svc:9000/v1", status


def test_completions_streamed_and_not_agree(served: Served) -> None:
    whole = served.client.completions.create(model=served.name, prompt=PROMPT, max_tokens=4)
    assert whole.id.startswith("cmpl-") and whole.model == served.name
    (choice,) = whole.choices
    # <s> hello world the: the BOS is a special token, not text, but a generated token: both
    # runtimes' models return how many tokens they generated (num_output_tokens), so a whole
    # answer counts it too, and max_tokens reached is "length"
    assert served.words(choice.text) == ["hello", "world", "the"], choice.text
    assert choice.finish_reason == "length"
    assert whole.usage is not None
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens,
            whole.usage.total_tokens) == (PROMPT_TOKENS, 4, PROMPT_TOKENS + 4)

    chunks = list(served.client.completions.create(
        model=served.name, prompt=PROMPT, max_tokens=4, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(ch.text for chunk in chunks for ch in chunk.choices)
    assert served.words(text) == served.words(choice.text), (text, choice.text)
    assert [ch.finish_reason for chunk in chunks for ch in chunk.choices
            if ch.finish_reason] == ["length"]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, last
    assert last.usage.completion_tokens == 4 and last.usage.prompt_tokens == PROMPT_TOKENS


def test_chat_renders_the_models_template(served: Served) -> None:
    """The seed's template: '<s> {content} triton says'; the model adds the BOS itself, so the
    prompt is <s> hello world triton says (5 tokens), and the stand-in echoes it."""
    messages: Any = [{"role": "user", "content": "hello world"}]
    answer = served.client.chat.completions.create(model=served.name, messages=messages,
                                                   max_tokens=5)
    assert answer.id.startswith("chatcmpl-") and answer.object == "chat.completion"
    (choice,) = answer.choices
    assert choice.message.role == "assistant"
    assert served.words(choice.message.content or "") == ["hello", "world", "triton", "says"]
    assert answer.usage is not None and answer.usage.prompt_tokens == 5
    assert (answer.usage.completion_tokens, choice.finish_reason) == (5, "length")

    stream = served.client.chat.completions.create(
        model=served.name, messages=messages, max_tokens=5, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(ch.delta.content or "" for chunk in chunks for ch in chunk.choices)
    assert served.words(text) == served.words(choice.message.content or ""), text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert [ch.finish_reason for chunk in chunks for ch in chunk.choices
            if ch.finish_reason] == ["length"]


def test_stop_cuts_the_answer(served: Served) -> None:
    whole = served.client.completions.create(model=served.name, prompt=PROMPT, max_tokens=8,
                                             stop=["the"])
    (choice,) = whole.choices
    assert served.words(choice.text) == ["hello", "world"], choice.text
    assert "the" not in choice.text and choice.finish_reason == "stop"
    streamed = served.client.completions.create(model=served.name, prompt=PROMPT, max_tokens=8,
                                                stop="the", stream=True)
    chunks = list(streamed)
    assert served.words("".join(ch.text for chunk in chunks for ch in chunk.choices)) == \
        ["hello", "world"]
    assert [ch.finish_reason for chunk in chunks for ch in chunk.choices
            if ch.finish_reason] == ["stop"]


def test_errors_are_openai_error_objects(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        served.client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=2)
    assert missing.value.status_code == 404 and missing.value.code == "model_not_found"

    with pytest.raises(openai.BadRequestError) as many:
        served.client.completions.create(model=served.name, prompt=PROMPT, max_tokens=2, n=2)
    assert many.value.status_code == 400 and many.value.param == "n", many.value.body

    with pytest.raises(openai.BadRequestError) as unknown:
        served.client.completions.create(model=served.name, prompt=PROMPT, max_tokens=2,
                                         extra_body={"bogus_field": 1})
    assert unknown.value.param == "bogus_field", unknown.value.body

    # maxInputLen 64 in the example: 70 words (+ the BOS) is over it
    with pytest.raises(openai.BadRequestError) as long:
        served.client.completions.create(model=served.name, prompt=" ".join(["hello"] * 70),
                                         max_tokens=2)
    assert long.value.code == "context_length_exceeded", long.value.body
    assert "64" in long.value.message and "71" in long.value.message, long.value.message


def test_the_pods_port_9000_exports_the_frontends_metrics(served: Served) -> None:
    served.client.completions.create(model=served.name, prompt=PROMPT, max_tokens=2)
    (pod,) = _pods(served.env.cluster, served.env.ns, c.COMPONENT_SERVER)
    names = [ctr["name"] for ctr in pod["spec"]["containers"]]
    assert "openai" in names, names
    url = f"http://{pod['status']['podIP']}:{c.OPENAI_PORT}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        metrics = resp.read().decode()
    ok = re.search(r'^tritonllm_openai_requests_total{[^}]*endpoint="/v1/completions"'
                   r'[^}]*status="200"[^}]*} (\S+)', metrics, re.M)
    assert ok and float(ok.group(1)) >= 1, metrics[-3000:]
    assert f'model="{served.name}"' in metrics
    for family in ("tritonllm_openai_time_to_first_token_seconds_bucket",
                   "tritonllm_openai_completion_tokens_total",
                   "tritonllm_openai_prompt_tokens_total"):
        assert re.search(rf"^{family}{{", metrics, re.M), family


@pytest.mark.parametrize("served", ["llmapi"], indirect=True)  # once, on one runtime
def test_aiperf_measures_the_llmapi_deployment(served: Served, tmp_path: Path) -> None:
    """aiperf, as its users run it (offline: the model's tokenizer from the store's directory
    on this machine, the real node's disk), a small streamed chat load; its summary JSON."""
    store = _volume_dir(served.env.cluster, served.env.ns, "tritonllm-cpu-store")
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text(json.dumps({"text": "hello world the quick brown fox"}) + "\n")
    argv = [str(aiperf_executable()), "profile", "--model", served.name,
            "--url", served.base.removesuffix("/v1"), "--endpoint-type", "chat", "--streaming",
            "--tokenizer", str(store / "models" / "tiny-gpt2"),
            "--custom-dataset-type", "single_turn", "--input-file", str(inputs),
            "--extra-inputs", "max_tokens:8", "--use-server-token-count",
            "--concurrency", "2", "--request-count", "12",
            "--ui-type", "none", "--no-server-metrics", "--artifact-dir", str(tmp_path / "out")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,
                          env=offline_env(), cwd=tmp_path)
    summary = tmp_path / "out" / "profile_export_aiperf.json"
    assert done.returncode == 0 and summary.exists(), done.stdout[-4000:]
    report = json.loads(summary.read_text())
    print(f"\n[measure] aiperf against {served.name} (real node, c=2, 12 requests): TTFT p50 "
          f"{report['time_to_first_token']['p50']:.1f} ms, ITL p50 "
          f"{report['inter_token_latency']['p50']:.1f} ms, "
          f"{report['request_throughput']['avg']:.2f} req/s")
    assert report["error_summary"] == [], report["error_summary"]
    assert report["request_count"]["avg"] == 12
    assert report["output_sequence_length"]["avg"] == 8  # from usage: max_tokens every time
    ttft = report["time_to_first_token"]
    assert 0 < ttft["p50"] <= ttft["p99"] < report["request_latency"]["max"], ttft
