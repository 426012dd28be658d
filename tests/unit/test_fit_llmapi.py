"""The fit planner on runtime llmapi (the LLM API's PyTorch backend), beside the engine runtime:
Llama-2-7B and Llama-3.1-8B on an H100 80GB, unquantized and ModelOpt-quantized.

Every expected figure is computed here from the models' config.json values and the formulas of
tritonllm.api.fit's docstring (the PyTorch backend's KV sizing read from
tensorrt_llm/_torch/pyexecutor/_util.py, KvCacheCreator._cal_max_tokens), not read back from the
module; the comments give the resulting figures.
"""

from __future__ import annotations

import pytest

from tests.cases import cr
from tritonllm.api import fit
from tritonllm.api.deployment import InvalidDeployment, fit_status, parse_deployment

GIB = 2**30
H100 = 81559 * 2**20  # what nvidia-smi reports for NVIDIA-H100-80GB-HBM3 (docs/fit.md)
OVERHEAD = 2**30  # fit.RUNTIME_OVERHEAD, an assumption the docs state
LLAMA2_7B = fit.KNOWN_ARCHITECTURES["meta-llama/llama-2-7b-hf"]
LLAMA3_8B = fit.KNOWN_ARCHITECTURES["meta-llama/llama-3.1-8b-instruct"]


def layer_params(hidden: int, heads: int, kv_heads: int, intermediate: int) -> int:
    head = hidden // heads
    return 2 * hidden * heads * head + 2 * hidden * kv_heads * head + 3 * hidden * intermediate


# config.json: Llama-2-7B 32 layers, hidden 4096, 32 heads, 32 KV heads, MLP 11008, vocab 32000;
# Llama-3.1-8B 32 layers, hidden 4096, 32 heads, 8 KV heads, MLP 14336, vocab 128256.
SHAPES = {
    "llama2-7b": (LLAMA2_7B, 32, 4096, 32, 32, 11008, 32000),
    "llama3-8b": (LLAMA3_8B, 32, 4096, 32, 8, 14336, 128256),
}


def expected(name: str, runtime: str, tp: int, *, weight_bytes: float = 2.0,
             kv_bytes: int = 2, fraction: float = 0.9) -> dict[str, float]:
    """Per-rank figures at the Request defaults (batch 64, seq 2048, 8192 tokens a pass)."""
    _, layers, hidden, heads, kv_heads, inter, vocab = SHAPES[name]
    edge = vocab * hidden * 2  # embedding, LM head: 16-bit, never quantized
    embed = edge / tp if runtime == "llmapi" else edge  # column-parallel in the PyTorch models
    weights = layers * layer_params(hidden, heads, kv_heads, inter) * weight_bytes / tp
    weights += embed + edge / tp
    logits = 64 * vocab * 4 / (1 if runtime == "llmapi" else tp)  # gathered: the whole vocab
    work = 8192 * (4 * hidden + 3 * inter / tp) * 2 + logits + OVERHEAD
    kv = 2 * layers * -(-kv_heads // tp) * (hidden // heads) * kv_bytes
    return {"weights": weights, "work": work, "kv": kv,
            "tokens": int(fraction * (H100 - weights - work) / kv)}


def figures(name: str, tp: int = 1, **req: object) -> fit.Fit:
    arch = SHAPES[name][0]
    return fit.compute(arch, fit.Request(**req), H100, tp, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("runtime", ["engine", "llmapi"])
def test_both_runtimes_size_the_seed_models_on_an_h100(name: str, tp: int, runtime: str) -> None:
    got = figures(name, tp, runtime=runtime)
    want = expected(name, runtime, tp)
    assert got.weights == pytest.approx(want["weights"])
    assert got.workspace == pytest.approx(want["work"])
    assert got.kv_per_token == want["kv"]
    assert got.kv_tokens == want["tokens"]


def test_the_figures_on_an_h100_as_docs_fit_quotes_them() -> None:
    """Llama-3.1-8B bf16 at tp 1: 14.96 GiB of weights, 1.94 GiB of activations, 128 KiB a
    token, about 462k KV tokens at 0.9, the same on both runtimes at tp 1; at tp 2 llmapi
    holds the embedding split (0.49 GiB less a rank) and gathers the logits (more)."""
    one = figures("llama3-8b", 1, runtime="llmapi", dtype="bfloat16")
    assert one.weights / GIB == pytest.approx(14.96, abs=0.01)
    assert one.workspace / GIB == pytest.approx(1.94, abs=0.01)
    assert one.kv_tokens == pytest.approx(462_000, rel=0.01)
    assert figures("llama3-8b", 1, runtime="engine", dtype="bfloat16") == fit.Fit(
        **{**one.__dict__, "runtime": "engine"})
    engine2 = figures("llama3-8b", 2, runtime="engine")
    llmapi2 = figures("llama3-8b", 2, runtime="llmapi")
    assert (engine2.weights - llmapi2.weights) / GIB == pytest.approx(
        128256 * 4096 * 2 / 2 / GIB)
    assert llmapi2.workspace > engine2.workspace
    # Llama-2-7B fp16 at tp 1: 12.55 GiB of weights, 512 KiB a token (no GQA).
    seven = figures("llama2-7b", 1, runtime="llmapi")
    assert seven.weights / GIB == pytest.approx(12.55, abs=0.01)
    assert seven.kv_per_token == 512 * 1024


@pytest.mark.parametrize(("fmt", "per_weight"), [
    ("fp8", 1.0),
    ("int4_awq", 0.5 + 2 / 128),  # 4 bits and a 16-bit scale per group of 128
    ("nvfp4", 0.5 + 1 / 16),  # 4 bits and an FP8 scale per 16
])
def test_a_modelopt_checkpoint_holds_quantized_layers_and_a_16_bit_lm_head(
    fmt: str, per_weight: float,
) -> None:
    got = figures("llama3-8b", 1, runtime="llmapi", quantization=fmt, kv_dtype="fp8")
    want = expected("llama3-8b", "llmapi", 1, weight_bytes=per_weight, kv_bytes=1)
    assert got.weights == pytest.approx(want["weights"])
    assert got.kv_per_token == 64 * 1024  # fp8 KV cache: half of 128 KiB
    assert got.kv_tokens == want["tokens"]


def test_the_spec_reaches_the_planner_with_its_runtime() -> None:
    spec = parse_deployment(cr({
        "runtime": "llmapi", "image": "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3",
        "model": {"source": "hf://meta-llama/Meta-Llama-3.1-8B-Instruct"},
        "engine": {"dtype": "bfloat16", "quantization": {"format": "fp8"}},
        "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
    })).spec
    req = fit.request_from_spec(spec)
    assert (req.runtime, req.quantization) == ("llmapi", "fp8")
    status = fit_status(spec, auto=False)
    assert status is not None and status.chosen == "tp=1 pp=1"
    want = expected("llama3-8b", "llmapi", 1, weight_bytes=1.0)
    served = next(row for row in status.table if (row.tensor, row.pipeline) == (1, 1))
    assert served.weightsGiB == pytest.approx(want["weights"] / GIB, abs=0.01)  # 8.46 GiB
    assert served.workspaceGiB == pytest.approx(want["work"] / GIB, abs=0.01)


def test_an_llmapi_layout_that_does_not_fit_is_refused_with_its_activations() -> None:
    """Llama-3.1-70B bf16 on one H100: about 131 GiB of weights per GPU at tp 1."""
    with pytest.raises(InvalidDeployment) as err:
        parse_deployment(cr({
            "runtime": "llmapi", "image": "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3",
            "model": {"source": "hf://meta-llama/Meta-Llama-3.1-70B-Instruct"},
            "engine": {"dtype": "bfloat16"},
            "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "perNode": 8},
        }))
    text = str(err.value)
    assert "tp=1 pp=1 does not fit" in text and "+ activations" in text
