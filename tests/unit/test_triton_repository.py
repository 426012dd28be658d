"""The rendered model repository: every config parses with Triton's schema, the ensemble is wired
consistently, version differences are pinned, and our Python models compile."""

from __future__ import annotations

import py_compile
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritonllm.api.deployment import TritonLLMDeployment, parse_deployment
from tritonllm.triton.repository import (
    extra_parameter_problems,
    render_repository,
)

IMAGES = {
    "0.9": "nvcr.io/nvidia/tritonserver:24.04-trtllm-python-py3",
    "0.13": "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
    "0.19": "nvcr.io/nvidia/tritonserver:25.05-trtllm-python-py3",
    "1.2.1": "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3",
}
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "streaming": {"serving": {"streaming": True}},
    "v1": {"serving": {"batching": "V1", "schedulerPolicy": "guaranteed_no_evict"}},
    "bls": {"serving": {"bls": True, "instances": {"bls": 4}}},
    "bls-streaming": {"serving": {"bls": True, "streaming": True}},
    "tuned": {
        "engine": {"dtype": "bfloat16", "limits": {"maxBatchSize": 1, "maxBeamWidth": 2}},
        "serving": {
            "kvCache": {"freeGpuMemFraction": 0.5, "maxTokens": 2560, "enableReuse": True,
                        "maxAttentionWindowSize": 1024},
            "maxQueueDelayMicroseconds": 600, "maxQueueSize": 32,
            "excludeInputInOutput": False, "logitsDatatype": "TYPE_BF16",
        },
        "model": {"source": "hf://org/m", "tokenizer": {"addSpecialTokens": False,
                                                         "skipSpecialTokens": False}},
    },
}
ENGINE, TOKENIZER = "/store/engines/abc", '/store/models/org/m "tok"'


def deployment(image: str, **spec: Any) -> TritonLLMDeployment:
    body: dict[str, Any] = {"image": image, "model": {"source": "hf://org/m"}}
    body.update(spec)
    return parse_deployment({"metadata": {"name": "m"}, "spec": body})


def render(dep: TritonLLMDeployment) -> dict[str, str]:
    return render_repository(dep, engine_dir=ENGINE, tokenizer_dir=TOKENIZER)


def configs(files: dict[str, str]) -> dict[str, mc.ModelConfig]:
    out = {}
    for path, text in files.items():
        if path.endswith("/config.pbtxt"):
            cfg = text_format.Parse(text, mc.ModelConfig())  # strict: unknown fields fail
            assert path == f"{cfg.name}/config.pbtxt"
            out[cfg.name] = cfg
    return out


def params(cfg: mc.ModelConfig) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


def io(tensors: Any) -> dict[str, tuple[int, tuple[int, ...]]]:
    return {t.name: (t.data_type, tuple(t.dims)) for t in tensors}


CASES = [(v, name) for v in IMAGES for name in VARIANTS]


@pytest.fixture(params=CASES, ids=[f"{v}-{n}" for v, n in CASES])
def rendered(request: pytest.FixtureRequest) -> tuple[TritonLLMDeployment, dict[str, str]]:
    version, variant = request.param
    dep = deployment(IMAGES[version], **VARIANTS[variant])
    return dep, render(dep)


def test_every_config_parses_and_nothing_is_left_unfilled(rendered: Any) -> None:
    dep, files = rendered
    cfgs = configs(files)
    expected = {"preprocessing", "tensorrt_llm", "postprocessing", "ensemble"}
    if dep.spec.serving.bls:
        expected.add("tensorrt_llm_bls")
    assert set(cfgs) == expected
    for path, text in files.items():
        assert "${" not in text, path
    for name in expected - {"ensemble"}:
        assert cfgs[name].instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    # every model has a version directory
    assert {p.split("/")[0] for p in files if p.split("/")[1] == "1"} == expected


def test_ensemble_wiring_is_consistent(rendered: Any) -> None:
    _, files = rendered
    cfgs = configs(files)
    ens = cfgs["ensemble"]
    ens_in, ens_out = io(ens.input), io(ens.output)
    assert len(ens_out) == len(ens.output), "duplicate ensemble output"
    produced: dict[str, tuple[int, tuple[int, ...]]] = {}
    consumed: set[str] = set()
    for step in ens.ensemble_scheduling.step:
        model = cfgs[step.model_name]
        m_in, m_out = io(model.input), io(model.output)
        assert set(step.input_map) <= set(m_in), step.model_name
        assert set(step.output_map) <= set(m_out), step.model_name
        required = {t.name for t in model.input if not t.optional}
        assert required <= set(step.input_map), f"{step.model_name} misses {required}"
        for model_tensor, tensor in step.input_map.items():
            source = ens_in.get(tensor) or produced.get(tensor)
            assert source is not None, f"{step.model_name}.{model_tensor} <- {tensor}: no producer"
            assert source[0] == m_in[model_tensor][0], f"{tensor} -> {model_tensor}: dtype"
            consumed.add(tensor)
        for model_tensor, tensor in step.output_map.items():
            assert tensor not in produced, f"{tensor} produced twice"
            assert tensor not in ens_in
            produced[tensor] = m_out[model_tensor]
    for name, (dtype, dims) in ens_out.items():
        assert name in produced, f"ensemble output {name} is never produced"
        assert produced[name] == (dtype, dims), name
    internal = set(produced) - set(ens_out)
    assert internal <= consumed, f"produced but unused: {internal - consumed}"
    assert all(t.startswith("_") for t in internal)
    assert set(ens_in) <= consumed, f"unused ensemble inputs: {set(ens_in) - consumed}"


@pytest.mark.parametrize("version", list(IMAGES))
@pytest.mark.parametrize("variant", ["bls", "bls-streaming"])
def test_bls_mirrors_the_ensemble(version: str, variant: str) -> None:
    dep = deployment(IMAGES[version], **VARIANTS[variant])
    cfgs = configs(render(dep))
    bls, ens = cfgs["tensorrt_llm_bls"], cfgs["ensemble"]
    assert io(bls.input) == io(ens.input) and io(bls.output) == io(ens.output)
    assert bls.model_transaction_policy.decoupled is dep.spec.serving.streaming
    assert bls.instance_group[0].count == dep.spec.serving.instances.bls
    assert '"model":"tensorrt_llm"' in params(bls)["pipeline"]


def test_spec_values_reach_the_parameters(rendered: Any) -> None:
    dep, files = rendered
    spec = dep.spec
    cfgs = configs(files)
    trt, pre, post = cfgs["tensorrt_llm"], cfgs["preprocessing"], cfgs["postprocessing"]
    p = params(trt)
    assert trt.backend == "tensorrtllm"
    assert trt.max_batch_size == spec.engine.limits.maxBatchSize
    assert trt.model_transaction_policy.decoupled is spec.serving.streaming
    delay = spec.serving.maxQueueDelayMicroseconds
    assert trt.dynamic_batching.max_queue_delay_microseconds == delay
    assert p["gpt_model_type"] == spec.serving.batching
    assert p["gpt_model_path"] == ENGINE
    assert p["batch_scheduler_policy"] == spec.serving.schedulerPolicy
    assert p["max_beam_width"] == str(spec.engine.limits.maxBeamWidth)
    assert float(p["kv_cache_free_gpu_mem_fraction"]) == spec.serving.kvCache.freeGpuMemFraction
    assert p["enable_kv_cache_reuse"] == str(spec.serving.kvCache.enableReuse).lower()
    assert p["exclude_input_in_output"] == str(spec.serving.excludeInputInOutput).lower()
    kv = spec.serving.kvCache
    assert p.get("max_tokens_in_paged_kv_cache") == (str(kv.maxTokens) if kv.maxTokens else None)
    assert p.get("max_attention_window_size") == (
        str(kv.maxAttentionWindowSize) if kv.maxAttentionWindowSize else None)
    assert params(pre) == {
        "tokenizer_dir": TOKENIZER,
        "add_special_tokens": str(spec.model.tokenizer.addSpecialTokens).lower(),
        "trust_remote_code": "false",
    }
    skip = str(spec.model.tokenizer.skipSpecialTokens).lower()
    assert params(post)["skip_special_tokens"] == skip
    assert pre.instance_group[0].count == spec.serving.instances.preprocessing
    assert {c.max_batch_size for c in cfgs.values()} == {spec.engine.limits.maxBatchSize}


# --- version differences -------------------------------------------------------------------


def render_version(version: str, **spec: Any) -> dict[str, mc.ModelConfig]:
    return configs(render(deployment(IMAGES[version], **spec)))


def test_0_9_template_shape() -> None:
    cfgs = render_version("0.9")
    ens, trt = cfgs["ensemble"], cfgs["tensorrt_llm"]
    assert io(ens.input)["text_input"][1] == (-1,) and io(ens.input)["max_tokens"][1] == (-1,)
    assert io(cfgs["preprocessing"].input)["QUERY"][1] == (-1,)
    p = params(trt)
    assert p["worker_path"].endswith("/triton_tensorrtllm_worker")
    assert "executor_worker_path" not in p and p["enable_trt_overlap"] == "false"
    assert not trt.dynamic_batching.HasField("default_queue_policy")
    assert not cfgs["preprocessing"].HasField("dynamic_batching")
    assert {"min_length", "random_seed"} <= set(io(ens.input))
    # log probs and logits pass through postprocessing
    assert "OUT_CUM_LOG_PROBS" in io(cfgs["postprocessing"].output)
    assert "batch_index" not in io(ens.output)
    assert "DECODER_QUERY" not in io(cfgs["preprocessing"].input)


def test_0_13_template_shape() -> None:
    cfgs = render_version("0.13")
    trt, post = cfgs["tensorrt_llm"], cfgs["postprocessing"]
    assert params(trt)["executor_worker_path"].endswith("/trtllmExecutorWorker")
    assert "worker_path" not in params(trt)
    assert trt.dynamic_batching.HasField("default_queue_policy")
    assert "BATCH_INDEX" in io(post.input) and "OUT_BATCH_INDEX" in io(post.output)
    assert io(cfgs["ensemble"].input)["text_input"][1] == (1,)
    assert "prompt_table_extra_ids" in io(trt.input)
    assert "num_return_sequences" not in io(trt.input)


def test_0_19_template_shape() -> None:
    cfgs = render_version("0.19", serving={"logitsDatatype": "TYPE_FP16"})
    trt, post, pre = cfgs["tensorrt_llm"], cfgs["postprocessing"], cfgs["preprocessing"]
    assert set(io(post.input)) == {"TOKENS_BATCH", "SEQUENCE_LENGTH"}
    assert set(io(post.output)) == {"OUTPUT"}
    assert io(trt.output)["context_logits"][0] == mc.TYPE_FP16
    assert io(cfgs["ensemble"].output)["generation_logits"][0] == mc.TYPE_FP16
    assert "arrival_time_ns" in io(cfgs["ensemble"].output)
    assert "num_input_tokens" not in io(trt.output)
    assert {"min_length", "random_seed"} <= set(io(trt.input))
    assert io(trt.input)["prompt_embedding_table"][0] == mc.TYPE_FP16
    assert pre.dynamic_batching.HasField("default_queue_policy")


def test_newest_template_shape() -> None:
    cfgs = render_version("1.2.1", engine={"dtype": "bfloat16"})
    trt, ens = cfgs["tensorrt_llm"], cfgs["ensemble"]
    assert {"min_tokens", "seed", "return_num_input_tokens"} <= set(io(trt.input))
    assert not {"min_length", "random_seed"} & set(io(trt.input))
    assert {"min_tokens", "seed"} <= set(io(ens.input))
    assert {"num_input_tokens", "num_output_tokens"} <= set(io(ens.output))
    # prompt_embedding_table_data_type follows the model dtype, in both places
    assert io(trt.input)["prompt_embedding_table"][0] == mc.TYPE_BF16
    assert io(ens.input)["prompt_embedding_table"][0] == mc.TYPE_BF16


@pytest.mark.parametrize("version", list(IMAGES))
def test_kv_cache_reuse_is_always_explicit(version: str) -> None:
    # the backend default flipped to true in 0.19: we never rely on it
    assert params(render_version(version)["tensorrt_llm"])["enable_kv_cache_reuse"] == "false"


# --- extra parameters, llmapi, keys, model sources ----------------------------------------


def test_extra_parameters() -> None:
    dep = deployment(IMAGES["0.19"], serving={"extraParameters": {
        "enable_chunked_context": "true", "gpu_device_ids": "0,1"}})
    p = params(configs(render(dep))["tensorrt_llm"])
    assert p["enable_chunked_context"] == "true" and p["gpu_device_ids"] == "0,1"

    for version, key, fragment in [
        ("0.19", "gpt_model_path", "set by the spec"),
        ("0.19", "enable_chunked_contxt", "does not read"),
        ("0.9", "participant_ids", "does not read"),
        ("0.13", "num_nodes", "does not read"),
    ]:
        bad = deployment(IMAGES[version], serving={"extraParameters": {key: "1"}})
        (problem,) = extra_parameter_problems(bad)
        assert str(problem).startswith(f"spec.serving.extraParameters.{key}:")
        assert fragment in str(problem)
        with pytest.raises(ValueError, match=key):
            render(bad)


def test_llmapi_repository() -> None:
    yaml = pytest.importorskip("yaml")
    dep = deployment(
        IMAGES["1.2.1"], runtime="llmapi",
        engine={"parallelism": {"tensor": 2, "pipeline": 2}},
        serving={"streaming": True, "kvCache": {"freeGpuMemFraction": 0.8, "maxTokens": 4096,
                                                "maxAttentionWindowSize": 2048},
                 "schedulerPolicy": "max_utilization"},
        gpu={"perNode": 4},
    )
    files = render(dep)
    assert set(files) == {"tensorrt_llm/config.pbtxt", "tensorrt_llm/1/model.yaml",
                          "tensorrt_llm/1/model.py"}
    cfg = configs(files)["tensorrt_llm"]
    assert cfg.backend == "python" and cfg.max_batch_size == 0
    assert cfg.model_transaction_policy.decoupled is True
    assert {"text_input", "sampling_param_max_tokens", "streaming"} <= set(io(cfg.input))
    model = yaml.safe_load(files["tensorrt_llm/1/model.yaml"])
    assert model == {
        "model": ENGINE, "tokenizer": TOKENIZER, "backend": "pytorch",
        "trust_remote_code": False,
        "tensor_parallel_size": 2, "pipeline_parallel_size": 2,
        "max_batch_size": 64, "max_num_tokens": 8192, "max_seq_len": 2048, "max_beam_width": 1,
        "kv_cache_config": {"free_gpu_memory_fraction": 0.8, "enable_block_reuse": False,
                            "max_tokens": 4096, "max_attention_window": [2048]},
        "scheduler_config": {"capacity_scheduler_policy": "MAX_UTILIZATION"},
        "enable_iter_perf_stats": True,
        "triton_config": {"max_batch_size": 0, "decoupled": True},
    }


def test_python_models_compile(tmp_path: Path) -> None:
    for variant in ({"serving": {"bls": True}}, {"runtime": "llmapi"}):
        for path, text in render(deployment(IMAGES["1.2.1"], **variant)).items():
            if path.endswith(".py"):
                target = tmp_path / path.replace("/", "_")
                target.write_text(text)
                py_compile.compile(str(target), doraise=True)
