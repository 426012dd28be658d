"""The frontend's Triton side without a server: input tensors from the FrontendConfig, Triton's
errors as OpenAI's, and `tritonllm openai` refusing a bad config or tokenizer before listening."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from tritonclient.utils import InferenceServerException

from tritonllm.cli.main import main
from tritonllm.openai.triton import api_error, build_inputs
from tritonllm.triton.openai import FrontendConfig, TritonTensor


def config(batched: bool, **kw: object) -> FrontendConfig:
    return FrontendConfig(
        served_model_name="m", runtime="engine" if batched else "llmapi",
        triton_model="ensemble", batched=batched, decoupled=True,
        inputs={"prompt": TritonTensor(name="text_input", dtype="BYTES"),
                "max_tokens": TritonTensor(name="max_tokens", dtype="INT32"),
                "seed": TritonTensor(name="seed", dtype="UINT64"),
                "return_log_probs": TritonTensor(name="sampling_param_logprobs",
                                                 dtype="INT32")},
        outputs={"text": "text_output"}, tokenizer_dir="/t", max_input_len=8, max_seq_len=16,
        default_max_tokens=8, **kw)


@pytest.mark.parametrize(("batched", "shape"), [(True, [1, 1]), (False, [1])])
def test_inputs_follow_the_config(batched: bool, shape: list[int]) -> None:
    tensors = build_inputs(config(batched), {"prompt": "hi", "max_tokens": 4, "seed": 7,
                                             "return_log_probs": True, "top_p": 0.5})
    got = {t.name(): (t.datatype(), t.shape()) for t in tensors}
    assert got == {"text_input": ("BYTES", shape), "max_tokens": ("INT32", shape),
                   "seed": ("UINT64", shape), "sampling_param_logprobs": ("INT32", shape)}
    # top_p is not among the model's inputs: left out (the server refused it before, if set).


class _Rpc(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(("exc", "status"), [
    (_Rpc(grpc.StatusCode.UNAVAILABLE, "connection refused"), 503),
    (InferenceServerException("Request for unknown model: 'ensemble' is not ready"), 503),
    (InferenceServerException("bad input", status="StatusCode.INVALID_ARGUMENT"), 400),
    (InferenceServerException("x" * 5000, status="StatusCode.INTERNAL"), 500),
])
def test_triton_errors_become_openai_errors(exc: Exception, status: int) -> None:
    err = api_error(exc)
    assert err.status == status
    assert len(err.message) <= 1000
    assert (err.retry_after is not None) == (status == 503)


def test_a_missing_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["openai", "--config", str(tmp_path / "none.json")]) == 2
    assert "cannot read the config" in capsys.readouterr().err


def test_an_invalid_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "openai.json"
    path.write_text('{"served_model_name": "m"}')
    assert main(["openai", "--config", str(path)]) == 2
    assert "triton_model" in capsys.readouterr().err


def test_a_missing_tokenizer_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "openai.json"
    path.write_text(config(True).model_copy(
        update={"tokenizer_dir": str(tmp_path)}).model_dump_json())
    assert main(["openai", "--config", str(path)]) == 2
    assert f"no tokenizer.json in {tmp_path}" in capsys.readouterr().err


def test_a_first_response_that_repeats_the_prompt_loses_it() -> None:
    from tritonllm.openai.server import strip_echo

    assert strip_echo("hello world the quick", "hello world") == " the quick"
    # A decoded prompt that differs from the one sent is left as the model gave it.
    assert strip_echo("Hello world the quick", "hello world") == "Hello world the quick"
    assert strip_echo("hello", "") == "hello"
