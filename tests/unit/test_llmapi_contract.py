"""The llmapi model's declared tensors (LLMAPI_CONTRACT) are the ones its model.py reads and
writes, and what differs from upstream's template is listed (for the check against upstream).

model.py imports Triton's and TensorRT-LLM's modules, which exist only inside tritonserver; its
tables of input names are read from its source with ast instead (the real-server tests,
tests/triton/test_llmapi_model.py, exercise it)."""

from __future__ import annotations

import ast
from importlib import resources
from typing import Any

from tritonllm.triton.contracts import LLMAPI_CONTRACT, LLMAPI_OURS_ONLY, LLMAPI_UPSTREAM_INPUTS

SOURCE = resources.files("tritonllm.triton").joinpath("models", "llmapi.py").read_text("utf-8")


def constant(name: str) -> Any:
    for node in ast.parse(SOURCE).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not found in llmapi.py")


def test_declared_inputs_are_the_ones_the_model_reads() -> None:
    sampling = [f"sampling_param_{n}" for n in (*constant("SAMPLING_SCALARS"),
                                                 *constant("SAMPLING_LISTS"))]
    read = {"text_input", "streaming", "stop", *sampling, *constant("RETURNS")}
    declared = [t.name for t in LLMAPI_CONTRACT.inputs]
    assert len(declared) == len(set(declared)) and set(declared) == read
    required = [t.name for t in LLMAPI_CONTRACT.inputs if not t.optional]
    assert required == ["text_input"]


def test_declared_outputs_are_the_ones_the_model_writes() -> None:
    written = {"text_output", "output_log_probs",
               *(o for outs in constant("RETURNS").values() for o in outs)}
    assert {t.name for t in LLMAPI_CONTRACT.outputs} == written


def test_every_difference_from_upstream_is_listed() -> None:
    names = {t.name for t in (*LLMAPI_CONTRACT.inputs, *LLMAPI_CONTRACT.outputs)}
    upstream_outputs = {"text_output", "finish_reason", "stop_reason", "cumulative_logprob"}
    assert set(LLMAPI_UPSTREAM_INPUTS) | upstream_outputs | set(LLMAPI_OURS_ONLY) == names
    assert not set(LLMAPI_UPSTREAM_INPUTS) & set(LLMAPI_OURS_ONLY)
    # Upstream's types and dims for its tensors (config.pbtxt at c8c6df08).
    upstream = {"text_input": ("STRING", (-1,)), "streaming": ("BOOL", (1,)),
                "sampling_param_stop": ("STRING", (-1,)), "sampling_param_seed": ("UINT64", (1,)),
                "sampling_param_max_tokens": ("INT32", (1,)), "stop": ("BOOL", (1,)),
                "cumulative_logprob": ("FP32", (-1,)), "finish_reason": ("STRING", (-1,))}
    ours = {t.name: (t.dtype, t.dims) for t in (*LLMAPI_CONTRACT.inputs, *LLMAPI_CONTRACT.outputs)}
    assert {k: ours[k] for k in upstream} == upstream
