"""A rendered model repository in a real tritonserver, tensorrt_llm replaced by a CPU stand-in.

What runs for real: tritonserver 2.51 (nvidia-pytriton wheel), our rendered config.pbtxt files,
our preprocessing / postprocessing / tensorrt_llm_bls Python models with a real (tiny) Hugging
Face tokenizer, Triton's ensemble scheduler, the HTTP/gRPC/generate/metrics front ends.
What is a stand-in: the tensorrt_llm model (TensorRT-LLM needs a GPU), replaced by
standin/tensorrt_llm_cpu_standin.py behind the very same inputs and outputs. The stand-in echoes
the prompt's tokens cyclically, so expected texts follow from the tokenizer: the prompt gets <s>
prepended (add_special_tokens) and <s> is dropped on decoding (skip_special_tokens).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.helpers import grpc_stream, prompt_inputs, stream_texts

from .conftest import EXAMPLE, example
from .stack import Server, ensure_install, python312, run_stack

pytestmark = pytest.mark.triton

PROMPT = "hello world"


def expected(max_tokens: int) -> list[str]:
    """Generated words: the prompt's tokens (<s> hello world) repeated, <s> not shown."""
    cycle = ["<s>", *PROMPT.split()]
    return [cycle[i % len(cycle)] for i in range(max_tokens) if cycle[i % len(cycle)] != "<s>"]


def post(server: Server, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        server.url(path), data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, response.read()


@pytest.fixture(scope="module")
def plain(serve: Any) -> Server:
    """Not decoupled (the example as written, plus the BLS model)."""
    return serve("plain", example(EXAMPLE, serving={"bls": True}))


@pytest.fixture(scope="module")
def streaming(serve: Any) -> Server:
    """Decoupled: serving.streaming true, with the BLS model."""
    return serve("streaming", example(EXAMPLE, serving={"streaming": True, "bls": True}))


def test_ready_gates_on_every_model(plain: Server) -> None:
    with urllib.request.urlopen(plain.url("/v2/health/ready"), timeout=5) as r:
        assert r.status == 200
    for model in ("ensemble", "preprocessing", "tensorrt_llm", "postprocessing",
                  "tensorrt_llm_bls"):
        with urllib.request.urlopen(plain.url(f"/v2/models/{model}/ready"), timeout=5) as r:
            assert r.status == 200, model


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_generate_with_cpu_standin(plain: Server, model: str) -> None:
    status, body = post(plain, f"/v2/models/{model}/generate",
                        {"text_input": PROMPT, "max_tokens": 5, "bad_words": "",
                         "stop_words": ""})
    assert status == 200
    out = json.loads(body)
    assert out["text_output"] == " ".join(expected(5))
    assert out["model_name"] == model


def test_generate_honours_request_overrides(plain: Server) -> None:
    _, body = post(plain, "/v2/models/ensemble/generate",
                   {"text_input": PROMPT, "max_tokens": 3, "exclude_input_in_output": False})
    assert json.loads(body)["text_output"] == " ".join([PROMPT, *expected(3)])
    # end_id stops generation at the first "world" (id from the tokenizer's vocabulary)
    world = 5
    _, body = post(plain, "/v2/models/ensemble/generate",
                   {"text_input": PROMPT, "max_tokens": 5, "end_id": world})
    assert json.loads(body)["text_output"] == "hello"


def test_tritonclient_http_infer_with_cpu_standin(plain: Server) -> None:
    client = httpclient.InferenceServerClient(plain.http)
    text = httpclient.InferInput("text_input", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[PROMPT.encode()]], dtype=object))
    max_tokens = httpclient.InferInput("max_tokens", [1, 1], "INT32")
    max_tokens.set_data_from_numpy(np.array([[4]], dtype=np.int32))
    result = client.infer("ensemble", [text, max_tokens],
                          outputs=[httpclient.InferRequestedOutput("text_output")])
    assert result.as_numpy("text_output").reshape(-1)[0].decode() == " ".join(expected(4))


def test_tritonclient_grpc_infer_with_cpu_standin(plain: Server) -> None:
    client = grpcclient.InferenceServerClient(plain.grpc)
    assert client.is_server_ready()
    text = grpcclient.InferInput("text_input", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[PROMPT.encode()]], dtype=object))
    max_tokens = grpcclient.InferInput("max_tokens", [1, 1], "INT32")
    max_tokens.set_data_from_numpy(np.array([[4]], dtype=np.int32))
    result = client.infer("ensemble", [text, max_tokens])
    assert result.as_numpy("text_output").reshape(-1)[0].decode() == " ".join(expected(4))


def test_streaming_rejected_when_not_decoupled(plain: Server) -> None:
    with pytest.raises(urllib.error.HTTPError):
        post(plain, "/v2/models/ensemble/generate",
             {"text_input": PROMPT, "max_tokens": 2, "stream": True})


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_generate_stream_with_cpu_standin(streaming: Server, model: str) -> None:
    status, body = post(streaming, f"/v2/models/{model}/generate_stream",
                        {"text_input": PROMPT, "max_tokens": 5, "stream": True})
    assert status == 200
    events = [json.loads(line[len(b"data: "):]) for line in body.splitlines()
              if line.startswith(b"data: ")]
    assert not [e for e in events if "error" in e]
    # one event per token; <s> decodes to "" (special tokens skipped)
    assert [e["text_output"] for e in events] == [
        "" if w == "<s>" else w for w in (["<s>", "hello", "world"] * 2)[:5]
    ]


def test_grpc_stream_with_cpu_standin(streaming: Server) -> None:
    results = grpc_stream(streaming.grpc, "ensemble", prompt_inputs(PROMPT, 3), timeout=30)
    texts = stream_texts(results)
    assert texts == ["", "hello", "world"]


@pytest.fixture(scope="module")
def streaming_py312(tokenizer_dir: Any, pyz: Any,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`streaming` with the Python models run by a Python 3.12, as on the GPU machine and in NGC
    images after 24.x: Triton 2.51's stub frees Python objects without the GIL, which 3.12 does
    not survive and 3.11 lets through (docs/gpu.md)."""
    interpreter = python312()
    # Never a skip: the build machines and CI carry pyenv's 3.12 (~/.pyenv/versions is part of
    # the machine image); a machine without one fails here with the way to provide it.
    assert interpreter is not None, (
        "no Python 3.12 found: set TRITONLLM_PYTHON312, or put python3.12 on PATH, or install "
        "pyenv's 3.12"
    )
    dep = example(EXAMPLE, serving={"streaming": True, "bls": True})
    with run_stack(ensure_install(interpreter), dep, tmp_path_factory.mktemp("stack-py312"),
                   tokenizer_dir, pyz) as stack:
        yield stack.server


@pytest.mark.parametrize("python", ["default", "3.12"])
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_grpc_stream_asking_for_text_output_only(request: pytest.FixtureRequest, python: str,
                                                 model: str) -> None:
    """A gRPC client streaming and naming only `text_output` (as tritonclient users do).

    Under Python 3.12 this killed the BLS model's stub ("Stub process 'tensorrt_llm_bls_0_0' is
    not healthy"), as on the GPU machine, until the model sent only the requested outputs and
    kept its response iterators of `tensorrt_llm` for the GIL's sake."""
    server: Server = request.getfixturevalue(
        "streaming" if python == "default" else "streaming_py312")
    results = grpc_stream(server.grpc, model, prompt_inputs(PROMPT, 5),
                          outputs=["text_output"], timeout=30)
    texts = stream_texts(results)
    names = {out.name for result in results for out in result.get_response().outputs}
    assert texts == ["", "hello", "world", "", "hello"]
    assert names == {"text_output"}


def test_metrics_port_serves_prometheus_text(plain: Server) -> None:
    post(plain, "/v2/models/ensemble/generate", {"text_input": PROMPT, "max_tokens": 1})
    with urllib.request.urlopen(f"http://{plain.metrics}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert "# TYPE nv_inference_request_success counter" in text
    assert 'nv_inference_request_success{model="ensemble",version="1"}' in text


@pytest.mark.parametrize(("version", "tag"), [("0.9.0", "24.05"), ("0.13.0", "24.09"),
                                              ("0.19.0", "25.05")])
def test_older_templates_with_cpu_standin(serve: Any, version: str, tag: str) -> None:
    """Older contracts (dims [-1], log probs through postprocessing) load and answer too (the
    NGC image of that TensorRT-LLM version: the operator refuses a tag that contradicts it)."""
    image = f"nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3"
    server = serve(f"v{version}", example(EXAMPLE, image=image, trtllmVersion=version))
    _, body = post(server, "/v2/models/ensemble/generate",
                   {"text_input": PROMPT, "max_tokens": 4, "bad_words": "", "stop_words": ""})
    out = json.loads(body)
    assert out["text_output"] == " ".join(expected(4))
    assert out["cum_log_probs"] == 0.0 or out["cum_log_probs"] == [0.0]
