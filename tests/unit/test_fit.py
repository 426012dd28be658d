"""The fit planner's arithmetic (tritonllm.api.fit), its refusals, `tritonllm fit`, and the
pure part of `tritonllm bench` (percentiles, figures, tables).

The expected figures are computed here from the models' published config.json values and the
formulas, independently of the module (each assertion says where a number comes from).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cases import ROOT, cr
from tests.helpers import example_body
from tritonllm.api import fit
from tritonllm.api.deployment import InvalidDeployment, fit_status, parse_deployment
from tritonllm.cli import bench
from tritonllm.cli.main import main

GIB = 2**30
H100 = "NVIDIA-H100-80GB-HBM3"


def test_parameter_counts_match_the_published_sizes() -> None:
    # GPT-2 medium: 354.8 M (Hub) plus the LM head TensorRT-LLM stores apart: 50257 x 1024
    gpt2m = fit.KNOWN_ARCHITECTURES["gpt2-medium"]
    assert gpt2m.params() - 50257 * 1024 == pytest.approx(354.8e6, rel=0.01)
    # Llama-2-7B 6.74 B, Llama-3.1-8B 8.03 B, Llama-3.1-70B 70.6 B (their model cards)
    assert fit.known_architecture("hf://meta-llama/Llama-2-7b-hf").params() == pytest.approx(
        6.74e9, rel=0.005)
    assert fit.known_architecture("hf://meta-llama/Meta-Llama-3.1-8B-Instruct").params() == \
        pytest.approx(8.03e9, rel=0.005)
    assert fit.known_architecture("hf://meta-llama/Meta-Llama-3.1-70B-Instruct").params() == \
        pytest.approx(70.55e9, rel=0.005)


@pytest.mark.parametrize(("source", "kv_bytes"), [
    ("hf://openai-community/gpt2-medium", 2 * 24 * 1024 * 2),  # 96 KiB: no GQA, 24 layers
    ("hf://meta-llama/Llama-2-7b-hf", 2 * 32 * 32 * 128 * 2),  # 512 KiB (~0.5 MB a token)
    ("hf://meta-llama/Meta-Llama-3.1-8B-Instruct", 2 * 32 * 8 * 128 * 2),  # 128 KiB: 8 KV heads
    ("hf://meta-llama/Meta-Llama-3.1-70B-Instruct", 2 * 80 * 8 * 128 * 2),  # 320 KiB
])
def test_kv_per_token_of_every_seed_model(source: str, kv_bytes: int) -> None:
    arch = fit.known_architecture(source)
    assert arch is not None
    one = fit.compute(arch, fit.Request(), 80 * GIB, 1, 1)
    assert one.kv_per_token == kv_bytes
    # tp splits the KV heads, pp the layers
    assert fit.compute(arch, fit.Request(), 80 * GIB, 2, 2).kv_per_token == kv_bytes / 4


def test_weights_per_rank_follow_dtype_quantization_and_layout() -> None:
    llama8b = fit.KNOWN_ARCHITECTURES["meta-llama/llama-3.1-8b-instruct"]
    bf16 = fit.compute(llama8b, fit.Request(dtype="bfloat16"), 80 * GIB, 1, 1)
    assert bf16.weights == pytest.approx(8.03e9 * 2, rel=0.005)  # 16 GB (HF Llama 3.1 blog)
    awq = fit.compute(llama8b, fit.Request(dtype="bfloat16", quantization="int4_awq"),
                      80 * GIB, 1, 1)
    layers = 32 * llama8b.layer_params() * (0.5 + 2 / 128)  # 4 bits + a 16-bit scale per 128
    edges = 2 * 128256 * 4096 * 2  # embedding and LM head stay 16-bit
    assert awq.weights == pytest.approx(layers + edges)
    assert awq.weights / GIB == pytest.approx(5.3, abs=0.05)
    # pp=2: each stage has half the layers and one of the embedding / the LM head
    pp2 = fit.compute(llama8b, fit.Request(dtype="bfloat16"), 80 * GIB, 1, 2)
    assert pp2.weights == pytest.approx(16 * llama8b.layer_params() * 2 + 128256 * 4096 * 2)


def test_kv_tokens_are_the_fraction_of_what_is_left() -> None:
    arch = fit.KNOWN_ARCHITECTURES["meta-llama/llama-2-7b-hf"]
    req = fit.Request(fraction=0.5)
    f = fit.compute(arch, req, 80 * GIB, 1, 1)
    assert f.kv_tokens == int(0.5 * (80 * GIB - f.weights - f.workspace) / (512 * 1024))
    assert f.requested == 64 * 2048 and not f.fits
    assert f.fraction_needed == pytest.approx(64 * 2048 * 512 * 1024 / f.free)


def test_requested_tokens_honour_max_tokens_window_and_beams() -> None:
    assert fit.Request(max_batch=8, max_seq=1024).tokens == 8192
    assert fit.Request(max_batch=8, max_seq=4096, window=1024).tokens == 8192
    assert fit.Request(max_batch=8, max_seq=1024, beams=4).tokens == 32768
    assert fit.Request(max_batch=64, max_seq=1024, max_tokens=2560).tokens == 2560


def test_architecture_from_config_reads_llama_and_gpt2_names() -> None:
    llama = {"num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
             "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256}
    assert fit.architecture_from_config(llama) == fit.KNOWN_ARCHITECTURES[
        "meta-llama/llama-3.1-70b-instruct"]
    gpt2 = {"n_layer": 24, "n_embd": 1024, "n_head": 16, "n_positions": 1024,
            "vocab_size": 50257, "n_inner": None}
    assert fit.architecture_from_config(gpt2) == fit.KNOWN_ARCHITECTURES["gpt2-medium"]


def test_candidates_try_tp_then_pp_then_nodes() -> None:
    arch = fit.KNOWN_ARCHITECTURES["meta-llama/llama-3.1-70b-instruct"]  # 64 heads, 80 layers
    order = fit.candidates(arch, per_node=8)
    assert order[:5] == [(1, 1), (2, 1), (4, 1), (8, 1), (1, 2)]
    single = [c for c in order if c[0] * c[1] <= 8]
    assert order[:len(single)] == single  # every one-node layout before any multi-node one
    multi = order[len(single)]
    assert multi == (8, 2)  # 2 nodes: the smallest pp, so tp fills the node
    assert all(64 % tp == 0 and 80 % pp == 0 for tp, pp in order)


@pytest.mark.parametrize(("name", "chosen", "seed_choice"), [
    ("gpt2-medium", "tp=1 pp=1", "tp=1 pp=1"),
    ("llama2-7b-tp4", "tp=1 pp=1", "tp=4 pp=1"),
    ("llama2-7b-v1", "tp=1 pp=1", "tp=1 pp=1"),
    ("llama3-8b-awq", "tp=1 pp=1", "tp=1 pp=1"),
    ("llama-70b-multinode", "tp=4 pp=1", "tp=8 pp=2"),
])
def test_the_seeds_choices_fit_and_auto_would_choose(name: str, chosen: str,
                                                     seed_choice: str) -> None:
    obj = example_body(name)
    dep = parse_deployment(obj)  # the seed's own choice fits: not refused
    status = fit_status(dep.spec, auto=False)
    assert status is not None and status.chosen == seed_choice
    obj["spec"]["engine"]["parallelism"] = {"auto": True}
    auto = parse_deployment(obj)
    par = auto.spec.engine.parallelism
    assert (f"tp={par.tensor} pp={par.pipeline}", par.auto) == (chosen, False)


def test_auto_on_a_small_gpu_takes_more_of_them() -> None:
    obj = cr({"engine": {"parallelism": {"auto": True}, "limits": {"maxSeqLen": 4096}},
              "gpu": {"product": "NVIDIA-L4"}})
    dep = parse_deployment(obj)
    assert dep.spec.engine.parallelism.tensor == 8  # 128 GiB of KV over 8 x 22.5 GiB
    status = fit_status(dep.spec, auto=True)
    assert status is not None and status.auto and status.chosen == "tp=8 pp=1"
    assert [(r.tensor, r.fits) for r in status.table] == [(1, False), (2, False), (4, False),
                                                          (8, True)]


def test_refusal_shows_the_arithmetic_and_the_ways_out() -> None:
    obj = cr({"engine": {"limits": {"maxSeqLen": 4096}}, "gpu": {"product": "NVIDIA-L4"}})
    with pytest.raises(InvalidDeployment) as info:
        parse_deployment(obj)
    (error,) = info.value.errors
    assert (error.field, error.reason) == ("spec.engine.parallelism", "DoesNotFit")
    assert error.message.startswith(
        "tp=1 pp=1 does not fit: weights 12.6 GiB + workspace 1.8 GiB + KV 128.0 GiB at "
        "64 x 4096 tokens > 0.9 x 8.2 GiB left of NVIDIA-L4's 22.5 GiB")
    assert "tp=8 pp=1 fits" in error.message
    assert "engine.limits.maxBatchSize 3 fits" in error.message


def test_weights_alone_too_big_and_no_layout_at_all() -> None:
    obj = cr({"model": {"source": "hf://meta-llama/Meta-Llama-3.1-70B-Instruct"},
              "engine": {"parallelism": {"tensor": 1}},
              "gpu": {"product": "Tesla-T4", "perNode": 1}})
    with pytest.raises(InvalidDeployment) as info:
        parse_deployment(obj)
    assert "per GPU exceed Tesla-T4's 15.0 GiB" in str(info.value)
    obj["spec"]["engine"]["parallelism"] = {"auto": True}
    obj["spec"]["engine"]["limits"] = {"maxBatchSize": 4096, "maxSeqLen": 131072,
                                       "maxInputLen": 1024}
    with pytest.raises(InvalidDeployment) as info:
        parse_deployment(obj)
    assert "no layout fits up to 64 GPUs of 1 per node" in str(info.value)


def test_unknown_product_or_model_is_not_checked() -> None:
    assert parse_deployment(cr({"gpu": {"product": "NVIDIA-B200"}}))  # no memory figure
    assert parse_deployment(cr({"model": {"source": "pvc://models/llama"},
                                "gpu": {"product": "NVIDIA-L4"}}))


def test_fit_command_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "-f", str(ROOT / "examples" / "llama-70b-multinode.yaml")]) == 0
    out = capsys.readouterr().out
    assert "tp=8 pp=2  2      9.9 GiB" in out and "tp=8 pp=2 fits" in out
    assert "tp=4 pp=1  1      34.3 GiB" in out


def test_fit_command_refuses_with_the_planners_message(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(cr()))  # 64 x 2048 tokens: 64 GiB of KV
    assert main(["fit", "-f", str(path), "--gpu", "NVIDIA-L4", "--gpu", "NVIDIA-H200"]) == 2
    out = capsys.readouterr().out
    assert "refused: tp=1 pp=1 does not fit" in out  # the L4
    assert "tp=1 pp=1 fits: the KV cache holds" in out  # the H200
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"n_layer": 12, "n_embd": 768, "n_head": 12,
                                  "n_positions": 1024, "vocab_size": 50257}))
    assert main(["fit", "-f", str(path), "--gpu", "NVIDIA-L4", "--config", str(config),
                 "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["parameters"] == fit.KNOWN_ARCHITECTURES["gpt2"].params()
    assert report["fits"] is True


def test_render_runs_the_same_check(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(cr({"engine": {"limits": {"maxSeqLen": 4096}},
                                       "gpu": {"product": "NVIDIA-L4"}})))
    assert main(["render", "-f", str(path)]) == 2
    assert "tp=1 pp=1 does not fit" in capsys.readouterr().err


# --- bench: the figures ------------------------------------------------------------------------


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert [bench.percentile(values, p) for p in (50, 90, 99, 100)] == [50, 90, 99, 100]
    assert bench.percentile([], 50) is None
    assert bench.percentile([3.0], 99) == 3.0


def test_summarise_counts_tokens_and_errors() -> None:
    samples = [bench.Sample(0.5, 0.1, [0.1, 0.1, 0.2], 4),
               bench.Sample(0.7, 0.2, [0.2, 0.2, 0.1], 4),
               bench.Sample(0.01, None, [], 0, "boom")]
    out = bench.summarise(2, samples, 2.0, streamed=True)
    assert (out["requests"], out["errors"], out["first_error"]) == (2, 1, "boom")
    assert out["requests_per_s"] == 1.0 and out["output_tokens_per_s"] == 4.0
    assert out["ttft_ms_p50"] == 100.0 and out["ttft_ms_p99"] == 200.0
    assert out["itl_ms_p50"] == 100.0 and out["latency_ms_p99"] == 700.0
    assert "TTFT p50" in bench.table([out])


def test_comparison_shows_ratios() -> None:
    a = [{"concurrency": 4, "output_tokens_per_s": 100.0, "ttft_ms_p50": 50.0,
          "latency_ms_p50": 400.0}]
    b = [{"concurrency": 4, "output_tokens_per_s": 300.0, "ttft_ms_p50": 25.0,
          "latency_ms_p50": 100.0}]
    text = bench.comparison(a, b, ("hf", "trtllm"))
    assert "A = hf, B = trtllm" in text
    assert "3.00x" in text and "0.50x" in text and "0.25x" in text


def test_targets() -> None:
    assert bench.grpc_address("http://10.0.0.7:8000/v2/models/ensemble/generate", 8001) == \
        "10.0.0.7:8001"
    assert bench.grpc_address("grpc://10.0.0.7:9001", 8001) == "10.0.0.7:9001"
    assert bench.is_address("10.0.0.7:8001") and not bench.is_address("llama3-8b")


def test_bench_flags_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "127.0.0.1:1", "--concurrency", "a,b"]) == 2
    assert main(["bench", "127.0.0.1:1", "--concurrency", "0"]) == 2
    assert main(["bench", "127.0.0.1:1", "--configmap"]) == 2
    assert "deployment name" in capsys.readouterr().err
