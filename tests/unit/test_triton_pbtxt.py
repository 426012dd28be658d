"""The protobuf text-format emitter: values round-trip through Triton's own ModelConfig schema."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonllm.triton import pbtxt
from tritonllm.triton.pbtxt import Enum


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


@pytest.mark.parametrize(
    "value",
    [
        "/plain/path",
        'a "quoted" value',
        "back\\slash and \\, escaped comma",
        "line\nbreak\ttab\rreturn",
        "control \x01\x7f chars",
        "unicode: ÿ ☃ 模型",
        "${not_a_placeholder}",
        "",
    ],
)
def test_strings_round_trip(value: str) -> None:
    text = pbtxt.dumps({"name": "m", "parameters": pbtxt.string_map({"k": value})})
    assert parse(text).parameters["k"].string_value == value


def test_message_shapes() -> None:
    cfg = {
        "name": "tensorrt_llm",
        "backend": "tensorrtllm",
        "max_batch_size": 8,
        "model_transaction_policy": {"decoupled": True},
        "dynamic_batching": {
            "preferred_batch_size": [8],
            "max_queue_delay_microseconds": 600,
            "default_queue_policy": {"max_queue_size": 0},
        },
        "input": [
            {"name": "input_lengths", "data_type": Enum("TYPE_INT32"), "dims": [1],
             "reshape": {"shape": []}},
            {"name": "lora_config", "data_type": Enum("TYPE_INT32"), "dims": [-1, 3],
             "optional": True, "allow_ragged_batch": True},
        ],
        "instance_group": [{"count": 2, "kind": Enum("KIND_CPU")}],
    }
    parsed = parse(pbtxt.dumps(cfg))
    assert parsed.model_transaction_policy.decoupled is True
    assert list(parsed.dynamic_batching.preferred_batch_size) == [8]
    assert parsed.dynamic_batching.max_queue_delay_microseconds == 600
    assert parsed.dynamic_batching.HasField("default_queue_policy")
    first, second = parsed.input
    assert first.HasField("reshape") and list(first.reshape.shape) == []
    assert list(second.dims) == [-1, 3] and second.optional and second.allow_ragged_batch
    assert parsed.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert parsed.instance_group[0].count == 2


def test_empty_message_is_present() -> None:
    assert parse(pbtxt.dumps({"name": "p", "dynamic_batching": {}})).HasField("dynamic_batching")


@pytest.mark.parametrize("bad", ["TYPE INT32", "1TYPE", "TYPE_FP32}", ""])
def test_enum_names_are_identifiers(bad: str) -> None:
    with pytest.raises(ValueError):
        Enum(bad)


def test_rejects_bad_field_names_and_values() -> None:
    with pytest.raises(ValueError):
        pbtxt.dumps({"bad name": 1})
    with pytest.raises(ValueError):
        pbtxt.dumps({"x": float("nan")})
    with pytest.raises(TypeError):
        pbtxt.dumps({"x": [1, {"a": 1}]})
    with pytest.raises(TypeError):
        pbtxt.dumps({"x": None})  # type: ignore[dict-item]


def test_scalars() -> None:
    assert pbtxt.scalar(True) == "true"
    assert pbtxt.scalar(0) == "0"
    assert pbtxt.scalar(0.5) == "0.5"
    assert pbtxt.scalar(Enum("KIND_CPU")) == "KIND_CPU"
    assert pbtxt.quote('a"b') == '"a\\"b"'
