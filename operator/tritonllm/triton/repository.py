"""The Triton model repository for a TritonLLMDeployment, as files.

``render_repository`` turns a parsed deployment into ``{relative path: content}``; the repository
Job writes the files under ``/repos/<ns>/_shared/<repository key>/repository/`` and tritonserver
serves that directory. Every config.pbtxt is built as data and printed by
:mod:`tritonllm.triton.pbtxt`, with the tensor contracts of :mod:`tritonllm.triton.contracts`
and the version features of :mod:`tritonllm.triton.features`; no template file and no ``${…}``
placeholder is involved. The Python models (preprocessing, postprocessing, tensorrt_llm_bls,
llmapi) are our own, shipped as package data in ``tritonllm/triton/models/`` and copied verbatim.

Runtime ``engine``: preprocessing, tensorrt_llm (C++ backend ``tensorrtllm``), postprocessing,
ensemble and, with ``serving.bls``, tensorrt_llm_bls. Runtime ``llmapi``: one Python model,
tensorrt_llm, configured by ``model.yaml`` (keys = ``tensorrt_llm.LLM()`` arguments).

docs/model-repository.md maps each spec field to the parameter it sets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from tritonllm.api.deployment import FieldError, TritonLLMDeployment
from tritonllm.api.spec import TritonLLMDeploymentSpec
from tritonllm.api.versions import TrtllmVersion

from . import pbtxt
from .contracts import LLMAPI_CONTRACT, Dtypes, ModelContract, ModelSet, Tensor, model_set
from .features import Features, features_for
from .pbtxt import Enum

ENSEMBLE = "ensemble"
PREPROCESSING = "preprocessing"
POSTPROCESSING = "postprocessing"
TENSORRT_LLM = "tensorrt_llm"
BLS = "tensorrt_llm_bls"

# Placeholder file that makes Triton see a version directory with nothing else in it.
KEEP_FILE = ".keep"

_TRITON_DTYPE = {"float16": "FP16", "bfloat16": "BF16", "float32": "FP32"}

# tensorrt_llm parameters per version: (key, first version that reads it, first that does not).
# Used to check serving.extraParameters against what the image's backend knows.
_V = TrtllmVersion
_TRT_PARAMETERS: tuple[tuple[str, TrtllmVersion | None, TrtllmVersion | None], ...] = (
    *(
        (k, None, None)
        for k in (
            "max_beam_width",
            "FORCE_CPU_ONLY_INPUT_TENSORS",
            "gpt_model_type",
            "gpt_model_path",
            "max_tokens_in_paged_kv_cache",
            "max_attention_window_size",
            "batch_scheduler_policy",
            "kv_cache_free_gpu_mem_fraction",
            "exclude_input_in_output",
            "enable_kv_cache_reuse",
            "normalize_log_probs",
            "enable_chunked_context",
            "gpu_device_ids",
            "decoding_mode",
            "medusa_choices",
            "lora_cache_optimal_adapter_size",
            "lora_cache_max_adapter_size",
            "lora_cache_gpu_memory_fraction",
            "lora_cache_host_memory_bytes",
        )
    ),
    ("worker_path", None, _V("0.10.0")),
    ("enable_trt_overlap", None, _V("0.10.0")),
    *(
        (k, _V("0.10.0"), None)
        for k in (
            "executor_worker_path",
            "iter_stats_max_iterations",
            "request_stats_max_iterations",
            "cancellation_check_period_ms",
            "stats_check_period_ms",
            "kv_cache_onboard_blocks",
            "gpu_weights_percent",
            "kv_cache_host_memory_bytes",
            "sink_token_length",
        )
    ),
    ("encoder_model_path", _V("0.11.0"), None),
    ("enable_context_fmha_fp32_acc", _V("0.12.0"), None),
    ("multi_block_mode", _V("0.12.0"), None),
    ("participant_ids", _V("0.13.0"), None),
    ("cross_kv_cache_fraction", _V("0.14.0"), None),
    *(
        (k, _V("0.15.0"), None)
        for k in (
            "cuda_graph_mode",
            "cuda_graph_cache_size",
            "speculative_decoding_fast_logits",
        )
    ),
    ("eagle_choices", _V("0.16.0"), None),
    *(
        (k, _V("0.19.0"), None)
        for k in (
            "guided_decoding_backend",
            "xgrammar_tokenizer_info_path",
            "lora_prefetch_dir",
            "num_nodes",
            "tokenizer_dir",
            "lookahead_window_size",
            "lookahead_ngram_size",
            "lookahead_verification_set_size",
        )
    ),
)


def tensorrt_llm_parameter_keys(f: Features) -> frozenset[str]:
    """Every parameter key the tensorrt_llm backend of `f`'s version reads from config.pbtxt."""
    return frozenset(
        key
        for key, since, until in _TRT_PARAMETERS
        if (since is None or f.at_least(since)) and (until is None or not f.at_least(until))
    )


def _flag(value: bool) -> str:
    return "true" if value else "false"


def dtypes_for(spec: TritonLLMDeploymentSpec, f: Features) -> Dtypes:
    """The data types behind upstream's dtype placeholders, for this spec and version."""
    model = _TRITON_DTYPE[spec.engine.dtype]
    return Dtypes(
        logits=spec.serving.logitsDatatype.removeprefix("TYPE_") if f.logits_datatype else "FP32",
        encoder_features=model if f.encoder_input_features_data_type else "FP16",
        prompt_table=model if f.prompt_embedding_table_data_type else "FP16",
    )


def _spec_parameters(spec: TritonLLMDeploymentSpec, f: Features, engine_dir: str) -> dict[str, str]:
    serving = spec.serving
    params = {
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        f.worker_path_key: f.worker_path,
        "gpt_model_type": serving.batching,
        "gpt_model_path": engine_dir,
        "max_beam_width": str(spec.engine.limits.maxBeamWidth),
        "batch_scheduler_policy": serving.schedulerPolicy,
        "kv_cache_free_gpu_mem_fraction": str(serving.kvCache.freeGpuMemFraction),
        # Always explicit: the backend's default flipped from false to true in 0.19.
        "enable_kv_cache_reuse": _flag(serving.kvCache.enableReuse),
        "exclude_input_in_output": _flag(serving.excludeInputInOutput),
    }
    if serving.kvCache.maxTokens is not None:
        params["max_tokens_in_paged_kv_cache"] = str(serving.kvCache.maxTokens)
    if serving.kvCache.maxAttentionWindowSize is not None:
        params["max_attention_window_size"] = str(serving.kvCache.maxAttentionWindowSize)
    if "kv_cache_host_memory_bytes" in tensorrt_llm_parameter_keys(f):
        params["kv_cache_host_memory_bytes"] = str(serving.kvCache.hostMemoryBytes)
    if f.trt_overlap_parameter:
        params["enable_trt_overlap"] = "false"
    return params


def tensorrt_llm_parameters(
    spec: TritonLLMDeploymentSpec, f: Features, engine_dir: str
) -> dict[str, str]:
    """The tensorrt_llm model's parameters: the spec's values, then serving.extraParameters."""
    return {**_spec_parameters(spec, f, engine_dir), **spec.serving.extraParameters}


def extra_parameter_problems(dep: TritonLLMDeployment) -> list[FieldError]:
    """Why serving.extraParameters cannot be rendered for this image (empty when it can).

    A key the backend does not read would be ignored silently (and makes upstream's
    fill_template fail since 0.19); a key the spec already sets would hide that field.
    """
    spec = dep.spec
    if spec.runtime != "engine":
        return [
            FieldError(
                f"spec.serving.extraParameters.{k}",
                "runtime llmapi has no tensorrt_llm backend parameters; remove it",
            )
            for k in spec.serving.extraParameters
        ]
    f = features_for(dep.trtllm_version)
    known = tensorrt_llm_parameter_keys(f)
    owned = _spec_parameters(spec, f, "")
    problems: list[FieldError] = []
    for key in spec.serving.extraParameters:
        field = f"spec.serving.extraParameters.{key}"
        if key in owned:
            problems.append(
                FieldError(field, "set by the spec itself; use the corresponding spec field")
            )
        elif key not in known:
            problems.append(
                FieldError(
                    field,
                    f"the tensorrt_llm backend of TensorRT-LLM {f.version} does not read "
                    "this parameter; check its spelling against the image's template",
                )
            )
    return problems


# --- config.pbtxt builders -----------------------------------------------------------------


def _io(t: Tensor) -> dict[str, pbtxt.Value]:
    out: dict[str, pbtxt.Value] = {
        "name": t.name,
        "data_type": Enum("TYPE_" + t.dtype),
        "dims": list(t.dims),
    }
    if t.reshape:
        out["reshape"] = {"shape": []}
    if t.ragged:
        out["allow_ragged_batch"] = True
    if t.optional:
        out["optional"] = True
    return out


def _config(
    name: str,
    contract: ModelContract,
    *,
    max_batch_size: int,
    backend: str | None = None,
    platform: str | None = None,
    decoupled: bool | None = None,
    dynamic_batching: Mapping[str, pbtxt.Value] | None = None,
    instances: int | None = None,
    parameters: Mapping[str, str] | None = None,
    extra: Mapping[str, pbtxt.Value] | None = None,
) -> dict[str, pbtxt.Value]:
    cfg: dict[str, pbtxt.Value] = {"name": name}
    if backend:
        cfg["backend"] = backend
    if platform:
        cfg["platform"] = platform
    cfg["max_batch_size"] = max_batch_size
    if decoupled is not None:
        cfg["model_transaction_policy"] = {"decoupled": decoupled}
    if dynamic_batching is not None:
        cfg["dynamic_batching"] = dynamic_batching
    cfg["input"] = [_io(t) for t in contract.inputs]
    cfg["output"] = [_io(t) for t in contract.outputs]
    if instances is not None:
        cfg["instance_group"] = [{"count": instances, "kind": Enum("KIND_CPU")}]
    if parameters:
        cfg["parameters"] = pbtxt.string_map(parameters)
    if extra:
        cfg.update(extra)
    return cfg


def _batcher(spec: TritonLLMDeploymentSpec, *, queue_size: bool) -> dict[str, pbtxt.Value]:
    out: dict[str, pbtxt.Value] = {
        "preferred_batch_size": [spec.engine.limits.maxBatchSize],
        "max_queue_delay_microseconds": spec.serving.maxQueueDelayMicroseconds,
    }
    if queue_size:
        out["default_queue_policy"] = {"max_queue_size": spec.serving.maxQueueSize}
    return out


def _dump(cfg: Mapping[str, pbtxt.Value], f: Features) -> str:
    header = (
        f"# Generated by tritonllm for TensorRT-LLM {f.version} (runtime templates of that "
        "release); do not edit.\n"
    )
    return header + pbtxt.dumps(cfg)


def _model_source(name: str) -> str:
    """One of our Python models (package data in tritonllm/triton/models/)."""
    return resources.files("tritonllm.triton").joinpath("models", f"{name}.py").read_text("utf-8")


def _engine_repository(
    dep: TritonLLMDeployment, f: Features, engine_dir: str, tokenizer_dir: str
) -> dict[str, str]:
    """The engine runtime's models: preprocessing -> tensorrt_llm -> postprocessing, chained by
    the ensemble (and by the BLS model when serving.bls asks for it)."""
    spec = dep.spec
    models: ModelSet = model_set(f, dtypes_for(spec, f))
    files = {
        f"{PREPROCESSING}/config.pbtxt": _dump(_preprocessing(spec, f, models, tokenizer_dir), f),
        f"{PREPROCESSING}/1/model.py": _model_source("preprocessing"),
        f"{TENSORRT_LLM}/config.pbtxt": _dump(_tensorrt_llm(spec, f, models, engine_dir), f),
        f"{TENSORRT_LLM}/1/{KEEP_FILE}": "",
        f"{POSTPROCESSING}/config.pbtxt": _dump(_postprocessing(spec, f, models, tokenizer_dir), f),
        f"{POSTPROCESSING}/1/model.py": _model_source("postprocessing"),
        f"{ENSEMBLE}/config.pbtxt": _dump(_ensemble(spec, models), f),
        f"{ENSEMBLE}/1/{KEEP_FILE}": "",
    }
    if spec.serving.bls:
        files[f"{BLS}/config.pbtxt"] = _dump(_bls(spec, models), f)
        files[f"{BLS}/1/model.py"] = _model_source("tensorrt_llm_bls")
    return files


def _preprocessing(
    spec: TritonLLMDeploymentSpec, f: Features, models: ModelSet, tokenizer_dir: str
) -> dict[str, pbtxt.Value]:
    return _config(
        PREPROCESSING,
        models.preprocessing,
        max_batch_size=spec.engine.limits.maxBatchSize,
        backend="python",
        dynamic_batching=_batcher(spec, queue_size=True)
        if f.preprocessing_dynamic_batching
        else None,
        instances=spec.serving.instances.preprocessing,
        parameters={
            "tokenizer_dir": tokenizer_dir,
            "add_special_tokens": _flag(spec.model.tokenizer.addSpecialTokens),
            "trust_remote_code": _flag(spec.model.trustRemoteCode),
        },
    )


def _tensorrt_llm(
    spec: TritonLLMDeploymentSpec, f: Features, models: ModelSet, engine_dir: str
) -> dict[str, pbtxt.Value]:
    return _config(
        TENSORRT_LLM,
        models.tensorrt_llm,
        max_batch_size=spec.engine.limits.maxBatchSize,
        backend="tensorrtllm",
        decoupled=spec.serving.streaming,
        dynamic_batching=_batcher(spec, queue_size=f.tensorrt_llm_queue_size),
        instances=1,
        parameters=tensorrt_llm_parameters(spec, f, engine_dir),
    )


def _postprocessing(
    spec: TritonLLMDeploymentSpec, f: Features, models: ModelSet, tokenizer_dir: str
) -> dict[str, pbtxt.Value]:
    return _config(
        POSTPROCESSING,
        models.postprocessing,
        max_batch_size=spec.engine.limits.maxBatchSize,
        backend="python",
        dynamic_batching={} if f.postprocessing_dynamic_batching else None,
        instances=spec.serving.instances.postprocessing,
        parameters={
            "tokenizer_dir": tokenizer_dir,
            "skip_special_tokens": _flag(spec.model.tokenizer.skipSpecialTokens),
            "trust_remote_code": _flag(spec.model.trustRemoteCode),
        },
    )


def _ensemble(spec: TritonLLMDeploymentSpec, models: ModelSet) -> dict[str, pbtxt.Value]:
    steps: list[pbtxt.Message] = [
        {
            "model_name": s.model,
            "model_version": -1,
            "input_map": [{"key": k, "value": v} for k, v in s.input_map.items()],
            "output_map": [{"key": k, "value": v} for k, v in s.output_map.items()],
        }
        for s in models.steps
    ]
    return _config(
        ENSEMBLE,
        models.ensemble,
        max_batch_size=spec.engine.limits.maxBatchSize,
        platform="ensemble",
        extra={"ensemble_scheduling": {"step": steps}},
    )


def _bls(spec: TritonLLMDeploymentSpec, models: ModelSet) -> dict[str, pbtxt.Value]:
    """The BLS model runs the ensemble's own steps (passed as JSON), so the two cannot drift."""
    pipeline = json.dumps(
        [{"model": s.model, "inputs": s.input_map, "outputs": s.output_map} for s in models.steps],
        separators=(",", ":"),
    )
    return _config(
        BLS,
        models.ensemble,
        max_batch_size=spec.engine.limits.maxBatchSize,
        backend="python",
        decoupled=spec.serving.streaming,
        instances=spec.serving.instances.bls,
        parameters={"pipeline": pipeline},
    )


# --- llmapi ----------------------------------------------------------------------------------


def _yaml_scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid YAML double-quoted scalar
    raise TypeError(f"not a YAML scalar: {value!r}")


def yaml_dump(data: Mapping[str, Any], indent: int = 0) -> str:
    """Block-style YAML for nested mappings of scalars and scalar lists (all model.yaml needs;
    PyYAML is not a dependency of this package)."""
    lines = []
    for key, value in data.items():
        pad = "  " * indent
        if isinstance(value, Mapping):
            lines.append(f"{pad}{key}:\n{yaml_dump(value, indent + 1)}")
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: [{', '.join(_yaml_scalar(v) for v in value)}]\n")
        else:
            lines.append(f"{pad}{key}: {_yaml_scalar(value)}\n")
    return "".join(lines)


def llmapi_config(
    spec: TritonLLMDeploymentSpec,
    model_dir: str,
    tokenizer_dir: str,
    features: Features | None = None,
) -> dict[str, Any]:
    """model.yaml as data: every key but triton_config is a ``tensorrt_llm.LLM()`` argument of
    the image's version (`features`; None: the newest), checked against the upstream sources by
    tests/contract/llmapi_check.py (docs/contract.md)."""
    limits = spec.engine.limits
    kv = spec.serving.kvCache
    kv_cache: dict[str, Any] = {
        "free_gpu_memory_fraction": kv.freeGpuMemFraction,
        "enable_block_reuse": kv.enableReuse,
    }
    if kv.maxTokens is not None:
        kv_cache["max_tokens"] = kv.maxTokens
    if kv.maxAttentionWindowSize is not None:
        kv_cache["max_attention_window"] = [kv.maxAttentionWindowSize]
    if kv.hostMemoryBytes:
        kv_cache["host_cache_size"] = kv.hostMemoryBytes
    # Iteration statistics feed the model's nv_trt_llm_* metrics (the PyTorch backend produces
    # them only when asked). Before 0.21 the knob is no LLM() argument (a top-level key is
    # dropped): it belongs in pytorch_backend_config, a mapping our model.py does not yet turn
    # into the PyTorchConfig LLM() needs there, so it is left out (no iteration statistics).
    torch_args = features is None or features.llmapi_torch_args
    stats = {"enable_iter_perf_stats": True} if torch_args else {}
    return {
        "model": model_dir,
        "tokenizer": tokenizer_dir,
        "backend": "pytorch",
        "trust_remote_code": spec.model.trustRemoteCode,
        "tensor_parallel_size": spec.topology.tensor,
        "pipeline_parallel_size": spec.topology.pipeline,
        "max_batch_size": limits.maxBatchSize,
        "max_num_tokens": limits.maxNumTokens,
        "max_seq_len": limits.maxSeqLen,
        "max_beam_width": limits.maxBeamWidth,
        "kv_cache_config": kv_cache,
        "scheduler_config": {"capacity_scheduler_policy": spec.serving.schedulerPolicy.upper()},
        **stats,
        # Requests are not batched by Triton (the LLM batches in flight itself).
        "triton_config": {"max_batch_size": 0, "decoupled": spec.serving.streaming},
    }


def _llmapi_repository(
    dep: TritonLLMDeployment, f: Features, model_dir: str, tokenizer_dir: str
) -> dict[str, str]:
    spec = dep.spec
    # max_batch_size and decoupled are written here too, not only in model.yaml: the launcher
    # passes --disable-auto-complete-config, which would ignore model.yaml's triton_config.
    cfg = _config(
        TENSORRT_LLM,
        LLMAPI_CONTRACT,
        max_batch_size=0,
        backend="python",
        decoupled=spec.serving.streaming,
        instances=1,
    )
    return {
        f"{TENSORRT_LLM}/config.pbtxt": _dump(cfg, f),
        f"{TENSORRT_LLM}/1/model.yaml": "# Generated by tritonllm; keys are tensorrt_llm.LLM() "
        "arguments, except triton_config.\n"
        + yaml_dump(llmapi_config(spec, model_dir, tokenizer_dir, f)),
        f"{TENSORRT_LLM}/1/model.py": _model_source("llmapi"),
    }


# --- public ----------------------------------------------------------------------------------


def render_repository(
    dep: TritonLLMDeployment, *, engine_dir: str, tokenizer_dir: str
) -> dict[str, str]:
    """Every file of the model repository, by path relative to the repository root.

    `engine_dir` is the engine directory (runtime engine) or the checkpoint directory the LLM
    loads (runtime llmapi); `tokenizer_dir` holds the tokenizer files. Both are paths as the
    serving pod sees them. Raises ValueError when serving.extraParameters cannot be rendered.
    """
    problems = extra_parameter_problems(dep)
    if problems:
        raise ValueError("; ".join(str(p) for p in problems))
    f = features_for(dep.trtllm_version)
    if dep.spec.runtime == "llmapi":
        return _llmapi_repository(dep, f, engine_dir, tokenizer_dir)
    return _engine_repository(dep, f, engine_dir, tokenizer_dir)
