"""The engine build pipeline as data: download, convert or quantize, trtllm-build.

The operator renders this plan (pure) into the build Job's ConfigMap; `tritonllm build` inside the
Triton image executes it step by step. Command lines follow shared/reference/tensorrt-llm-triton.md
section 3, with the flag churn between versions handled here from the facts in
tritonllm.api.toolflags (read off the upstream option tables, docs/contract.md):

- ``--max_seq_len`` replaced ``--max_output_len`` in 0.11 (before it, output = seq - input);
- ``--kv_cache_type paged`` since 0.13, ``--paged_kv_cache enable`` before;
- plugin dtypes: ``auto`` is resolved to the model dtype, which every version accepts;
- ``--multiple_profiles`` exists since 0.9;
- each convert_checkpoint.py has its own flags (gemma spells them with dashes and has only
  ``--world-size``; phi has no parallelism options before 0.11; KV-cache quantization flags
  differ per model), so an explicit architecture gets its converter's argv and ``auto`` gets
  one argv per converter (or why that converter cannot do it), chosen at build time;
- converters moved from ``examples/<model>/`` to ``examples/models/core/<model>/`` in later
  releases (falcon then to ``examples/models/contrib/``), so the plan lists every place and
  the runtime takes the one the image has.
"""

from __future__ import annotations

from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.spec import MODELOPT_FORMATS, TritonLLMDeploymentSpec
from tritonllm.api.toolflags import (
    ARCHITECTURE_DIRS,
    KV_CACHE_TYPE_SINCE,
    MAX_SEQ_LEN_SINCE,
    MULTIPLE_PROFILES_SINCE,
    Converter,
    converter_problems,
)
from tritonllm.api.toolflags import CONVERTERS as CONVERTER_FLAGS
from tritonllm.api.versions import TrtllmVersion

# Hugging Face `architectures[0]` -> TensorRT-LLM example directory holding convert_checkpoint.py.
CONVERTERS: dict[str, str] = {
    "GPT2LMHeadModel": "gpt",
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "MixtralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma",
    "Phi3ForCausalLM": "phi",
    "FalconForCausalLM": "falcon",
}
EXAMPLE_ROOTS = (
    "/app/tensorrt_llm/examples",
    "/opt/tensorrt_llm/examples",
    "/workspace/tensorrt_llm/examples",
)


def _plugin(value: str, dtype: str) -> str:
    return dtype if value == "auto" else value


# Where convert_checkpoint.py for an example directory may live, relative to examples/ (the
# runtime fills {dir} and takes the first that exists under one of EXAMPLE_ROOTS).
CONVERTER_PATHS = (
    "{dir}/convert_checkpoint.py",
    "models/core/{dir}/convert_checkpoint.py",
    # falcon moved on to models/contrib/ (1.2.0rc2 snapshot, docs/contract.md).
    "models/contrib/{dir}/convert_checkpoint.py",
)


def converter_argv(
    spec: TritonLLMDeploymentSpec,
    version: TrtllmVersion,
    conv: Converter,
    *,
    weights_dir: str,
    checkpoint_dir: str,
) -> list[str]:
    """convert_checkpoint.py in the dialect of `conv` at `version` (toolflags says which)."""
    e = spec.engine
    q = e.quantization
    tp, pp = spec.topology.tensor, spec.topology.pipeline
    argv = ["python3", "{converter}", *conv.fixed]
    argv += [conv.model_dir, weights_dir, conv.output_dir, checkpoint_dir, "--dtype", e.dtype]
    # Before parallel_since the script has no such options (admission allows only tp = pp = 1).
    if version >= conv.parallel_since:
        argv += [conv.tp, str(tp)]
        if conv.pp is not None:
            argv += [conv.pp, str(pp)]
    if q.format in ("int8_wo", "int4_wo"):
        argv += [*conv.weight_only, q.format.removesuffix("_wo")]
    if q.kvCacheDtype in ("int8", "fp8"):
        argv.append(f"--{q.kvCacheDtype}_kv_cache")
    return argv


def _converter_refusal(
    spec: TritonLLMDeploymentSpec, version: TrtllmVersion, conv: Converter
) -> str | None:
    """Why `conv` of `version` cannot convert this spec (None: it can)."""
    e = spec.engine
    problems = converter_problems(
        conv,
        version,
        tp=spec.topology.tensor,
        pp=spec.topology.pipeline,
        weight_only=e.quantization.format in ("int8_wo", "int4_wo"),
        kv=e.quantization.kvCacheDtype,
    )
    return "; ".join(f"{field}: {why}" for field, why in problems) or None


def convert_step(
    spec: TritonLLMDeploymentSpec,
    version: TrtllmVersion,
    *,
    weights_dir: str,
    checkpoint_dir: str,
) -> dict[str, Any]:
    """convert_checkpoint.py or quantize.py: a TensorRT-LLM checkpoint with tp/pp fixed."""
    e = spec.engine
    q = e.quantization
    if q.format in MODELOPT_FORMATS:
        return quantize_step(spec, weights_dir=weights_dir, checkpoint_dir=checkpoint_dir)
    arch = spec.model.architecture
    dirs = sorted(set(CONVERTERS.values())) if arch == "auto" else [ARCHITECTURE_DIRS[arch]]
    argvs: dict[str, list[str]] = {}
    unsupported: dict[str, str] = {}
    for d in dirs:
        conv = CONVERTER_FLAGS[d]
        refusal = _converter_refusal(spec, version, conv)
        if refusal:
            unsupported[d] = refusal
        else:
            argvs[d] = converter_argv(
                spec, version, conv, weights_dir=weights_dir, checkpoint_dir=checkpoint_dir
            )
    step: dict[str, Any] = {
        "name": "convert",
        # auto: the runtime maps config.json `architectures[0]` through `converters`, then
        # takes that directory's argv (each converter has its own flags) or its refusal.
        "exampleDir": None if arch == "auto" else dirs[0],
        "converters": CONVERTERS,
        "converterPaths": list(CONVERTER_PATHS),
        "argvByDir": argvs,
        "unsupported": unsupported,
    }
    if arch != "auto":
        # Admission refuses an explicit architecture its converter cannot handle (same reason).
        if dirs[0] in unsupported:
            raise ValueError(unsupported[dirs[0]])
        step["argv"] = argvs[dirs[0]]
    return step


def quantize_step(
    spec: TritonLLMDeploymentSpec, *, weights_dir: str, checkpoint_dir: str
) -> dict[str, Any]:
    """ModelOpt's quantize.py (admission checked the format and options against the version)."""
    e = spec.engine
    q = e.quantization
    argv = [
        "python3",
        "{examples}/quantization/quantize.py",
        "--model_dir",
        weights_dir,
        "--output_dir",
        checkpoint_dir,
        "--dtype",
        e.dtype,
        "--qformat",
        q.format,
        "--calib_size",
        str(q.calibrationSize),
        "--tp_size",
        str(spec.topology.tensor),
        "--pp_size",
        str(spec.topology.pipeline),
    ]
    if q.format in ("int4_awq", "w4a8_awq"):
        argv += ["--awq_block_size", str(q.awqBlockSize)]
    if q.kvCacheDtype != "none":
        argv += ["--kv_cache_dtype", q.kvCacheDtype]
    if q.calibrationDataset:
        argv += ["--calib_dataset", q.calibrationDataset]
    return {"name": "quantize", "argv": argv, "script": "quantization/quantize.py"}


def trtllm_build_argv(
    spec: TritonLLMDeploymentSpec,
    version: TrtllmVersion,
    *,
    checkpoint_dir: str,
    engine_dir: str,
    workers: int,
) -> list[str]:
    """trtllm-build with the limits and plugins of the spec, in the version's flag dialect."""
    e = spec.engine
    lim = e.limits
    argv = [
        "trtllm-build",
        "--checkpoint_dir",
        checkpoint_dir,
        "--output_dir",
        engine_dir,
        "--max_batch_size",
        str(lim.maxBatchSize),
        "--max_input_len",
        str(lim.maxInputLen),
    ]
    if version >= MAX_SEQ_LEN_SINCE:
        argv += ["--max_seq_len", str(lim.maxSeqLen)]
    else:
        argv += ["--max_output_len", str(lim.maxSeqLen - lim.maxInputLen)]
    argv += [
        "--max_num_tokens",
        str(lim.maxNumTokens),
        "--max_beam_width",
        str(lim.maxBeamWidth),
        "--gemm_plugin",
        _plugin(e.plugins.gemm, e.dtype),
        "--gpt_attention_plugin",
        _plugin(e.plugins.gptAttention, e.dtype),
        "--use_paged_context_fmha",
        "enable" if e.plugins.pagedContextFmha else "disable",
    ]
    if version >= KV_CACHE_TYPE_SINCE:
        argv += ["--kv_cache_type", "paged"]
    else:
        argv += ["--paged_kv_cache", "enable"]
    if e.plugins.multipleProfiles and version >= MULTIPLE_PROFILES_SINCE:
        argv += ["--multiple_profiles", "enable"]
    argv += ["--workers", str(workers)]
    return argv


def download_step(
    spec: TritonLLMDeploymentSpec,
    *,
    weights_dir: str,
    source: str | None = None,
    revision: str | None = None,
    name: str = "download",
) -> dict[str, Any]:
    """Fetch a checkpoint (the model's, or another `source` such as a separate tokenizer): from
    the Hub into the store, or check it exists on a PVC."""
    source = source or spec.model.source
    if source.startswith("hf://"):
        return {
            "name": name,
            "kind": "huggingface",
            "repo": source.removeprefix("hf://"),
            "revision": revision or spec.model.revision,
            "localDir": weights_dir,
            # The Secret of spec.model.credentials, mounted as a file into the build pod only.
            "tokenFile": c.HF_TOKEN_FILE if spec.model.credentials else None,
        }
    return {"name": name, "kind": "local", "localDir": weights_dir}


def build_plan(
    spec: TritonLLMDeploymentSpec,
    version: TrtllmVersion,
    *,
    engine_key: str,
    weights_dir: str,
    checkpoint_dir: str,
    engine_dir: str,
) -> dict[str, Any]:
    """Everything `tritonllm build` needs, as JSON-ready data."""
    return {
        "version": 1,
        "engineKey": engine_key,
        "trtllmVersion": str(version),
        "gpuProduct": spec.gpu.product,
        "tensorParallel": spec.topology.tensor,
        "pipelineParallel": spec.topology.pipeline,
        "worldSize": spec.topology.world_size,
        "weightsDir": weights_dir,
        "checkpointDir": checkpoint_dir,
        "engineDir": engine_dir,
        "exampleRoots": list(EXAMPLE_ROOTS),
        "steps": [
            download_step(spec, weights_dir=weights_dir),
            convert_step(spec, version, weights_dir=weights_dir, checkpoint_dir=checkpoint_dir),
            {
                "name": "build",
                "argv": trtllm_build_argv(
                    spec,
                    version,
                    checkpoint_dir=checkpoint_dir,
                    engine_dir=engine_dir,
                    # The build Job has one serving pod's GPUs; ranks build in turn on them.
                    workers=spec.topology.gpus_per_pod,
                ),
            },
        ],
    }


def download_plan(
    spec: TritonLLMDeploymentSpec,
    *,
    model_key: str,
    weights_dir: str,
    state_dir: str,
    version: TrtllmVersion | None = None,
    quantized_dir: str | None = None,
) -> dict[str, Any]:
    """llmapi runtime: fetch the checkpoint onto the store (no engine is built). The step
    markers go to `state_dir` (under the key's own directory), never next to the weights, which
    may be a pvc:// directory the Job only reads.

    With engine.quantization, ModelOpt then writes a pre-quantized checkpoint to `quantized_dir`
    (the key's directory) and the runtime records it in artifact.json with the checksums of its
    files, as an engine: the same cache record, digest report and integrity anchor."""
    plan: dict[str, Any] = {
        "version": 1,
        "engineKey": model_key,
        "weightsDir": weights_dir,
        "stateDir": state_dir,
        "steps": [download_step(spec, weights_dir=weights_dir)],
    }
    if quantized_dir is None:
        return plan
    q = spec.engine.quantization
    return {
        **plan,
        "kind": LLMAPI_CHECKPOINT,
        "trtllmVersion": str(version) if version else None,
        "engineDir": quantized_dir,
        "checkpointDir": quantized_dir,
        # What the exported checkpoint must declare (hf_quant_config.json), checked before
        # artifact.json is written.
        "expectQuantization": {
            "quant_algo": MODELOPT_QUANT_ALGOS[q.format],
            "kv_cache_quant_algo": "FP8" if q.kvCacheDtype == "fp8" else None,
        },
        "steps": [
            *plan["steps"],
            llmapi_quantize_step(spec, weights_dir=weights_dir, export_dir=quantized_dir),
        ],
    }


# A download plan whose key directory holds a ModelOpt-quantized checkpoint (runtime/build.py).
LLMAPI_CHECKPOINT = "llmapi-checkpoint"
# spec format -> the quant_algo ModelOpt's unified export writes into hf_quant_config.json
# (modelopt/torch/export/quant_utils.py process_layer_quant_config, ModelOpt 0.37.0, commit
# df0882a63c39a001a1be384b680166a41259045c), which TensorRT-LLM's PyTorch backend reads.
MODELOPT_QUANT_ALGOS = {
    "fp8": "FP8",
    "int4_awq": "W4A16_AWQ",
    "w4a8_awq": "W4A8_AWQ",
    "nvfp4": "NVFP4",
}
# Where ModelOpt's examples tree may be in the image (it is not part of the nvidia-modelopt
# wheel): the runtime takes the first that has llm_ptq/hf_ptq.py, after the directory named by
# the TRITONLLM_MODELOPT_EXAMPLES variable of spec.podTemplate.env, if set.
MODELOPT_EXAMPLE_ROOTS = (
    "/app/Model-Optimizer/examples",
    "/opt/Model-Optimizer/examples",
    "/workspace/Model-Optimizer/examples",
    "/app/TensorRT-Model-Optimizer/examples",
)
HF_PTQ = "llm_ptq/hf_ptq.py"


def llmapi_quantize_argv(
    spec: TritonLLMDeploymentSpec, *, weights_dir: str, export_dir: str
) -> list[str]:
    """ModelOpt's hf_ptq.py as TensorRT-LLM documents it for the PyTorch backend (offline
    quantization with ModelOpt, unified Hugging Face export). Options as read from
    examples/llm_ptq/hf_ptq.py of NVIDIA/Model-Optimizer 0.37.0 (the release TensorRT-LLM 1.1 and
    1.2 pin, requirements.txt `nvidia-modelopt[torch]~=0.37.0`); tests/contract/tables/hf_ptq-*.
    --kv_cache_qformat is always passed (its default is fp8, not none) and so is --export_fmt hf
    (older releases default to the TensorRT-LLM checkpoint). No --dtype: unquantized layers keep
    the checkpoint's dtype; no tp/pp: the Hugging Face export is not split, so one quantized
    checkpoint serves every layout."""
    q = spec.engine.quantization
    argv = [
        "python3", "{modelopt}/" + HF_PTQ,
        "--pyt_ckpt_path", weights_dir,
        "--export_path", export_dir,
        "--qformat", q.format,
        "--kv_cache_qformat", q.kvCacheDtype,
        "--calib_size", str(q.calibrationSize),
        "--export_fmt", "hf",
    ]
    if q.format in ("int4_awq", "w4a8_awq"):
        argv += ["--awq_block_size", str(q.awqBlockSize)]
    if q.calibrationDataset:
        argv += ["--dataset", q.calibrationDataset]
    if spec.model.trustRemoteCode:
        argv.append("--trust_remote_code")
    return argv


def llmapi_quantize_step(
    spec: TritonLLMDeploymentSpec, *, weights_dir: str, export_dir: str
) -> dict[str, Any]:
    return {
        "name": "quantize",
        "argv": llmapi_quantize_argv(spec, weights_dir=weights_dir, export_dir=export_dir),
        "script": HF_PTQ,
        "scriptRoots": list(MODELOPT_EXAMPLE_ROOTS),
    }
