"""What a TensorRT-LLM version's Triton model set looks like, as data.

The `inflight_batcher_llm` templates, the C++ backend that reads them and the parameter and tensor
names clients send all changed between releases (shared/reference/tensorrt-llm-triton.md, §1.9).
A repository rendered for one image must match that image's backend exactly (§5.2 rule 4), so every
version-dependent choice the renderer makes is one field of :class:`Features`, computed by comparing
versions (never by naming "families"): a release between two we studied gets the behaviour of the
nearest older one.

The boundaries below were read off the upstream templates at the tensorrtllm_backend tags
v0.9.0 … v0.19.0; "newest" (TensorRT-LLM's own ``triton_backend`` of 2025-26) is taken to start at
1.0.0, the first release after v0.19 whose container we can name (the reference leaves the exact
release of the renames unconfirmed; 0.20 and 0.21 are rendered with the 0.19 set).
"""

from __future__ import annotations

import dataclasses
from typing import Final

from tritonllm.api.versions import TrtllmVersion

# Version boundaries shared by the features and the tensor catalog (tritonllm.triton.contracts).
EXECUTOR_BACKEND: Final = TrtllmVersion("0.10.0")  # `backend: ${triton_backend}`, executor worker
DECODER_INPUTS: Final = TrtllmVersion("0.11.0")  # DECODER_QUERY, decoder_input_ids
SCALAR_TEXT: Final = TrtllmVersion("0.12.0")  # text_input / max_tokens / END_ID dims [1], was [-1]
BATCH_INDEX: Final = TrtllmVersion("0.12.0")  # tensorrt_llm output batch_index
QUEUE_SIZE: Final = TrtllmVersion("0.12.0")  # tensorrt_llm default_queue_policy.max_queue_size
PROMPT_TABLE_EXTRA_ID: Final = TrtllmVersion("0.13.0")
PARTICIPANT_IDS: Final = TrtllmVersion("0.13.0")
POSTPROC_DYNAMIC_BATCHING: Final = TrtllmVersion("0.13.0")
DIRECT_OUTPUTS: Final = TrtllmVersion("0.14.0")  # log probs/logits wired straight to the ensemble
NUM_RETURN_SEQUENCES: Final = TrtllmVersion("0.14.0")  # + sequence_index, exclude_input_in_output
ENCODER_FEATURES_DTYPE: Final = TrtllmVersion("0.15.0")
ENSEMBLE_LORA: Final = TrtllmVersion("0.15.0")
KV_CACHE_STATS: Final = TrtllmVersion("0.16.0")  # kv_cache_* outputs
ENSEMBLE_EXCLUDE_INPUT: Final = TrtllmVersion("0.16.0")
KV_REUSE_STATS_INPUT_UNTIL: Final = TrtllmVersion("0.19.0")  # return_kv_cache_reuse_stats
LOGITS_DTYPE: Final = TrtllmVersion("0.17.0")
KV_RETENTION: Final = TrtllmVersion("0.17.0")
PERF_METRICS: Final = TrtllmVersion("0.19.0")  # perf/timing outputs, guided decoding
PREPROC_DYNAMIC_BATCHING: Final = TrtllmVersion("0.19.0")
KV_REUSE_DEFAULT_ON: Final = TrtllmVersion("0.19.0")
NUM_NODES: Final = TrtllmVersion("0.19.0")
LLMAPI: Final = TrtllmVersion("0.19.0")
# LLM() takes the PyTorch backend's knobs (enable_iter_perf_stats, ...) as its own arguments
# (TorchLlmArgs); before, LLM() took them off as pytorch_backend_config, a PyTorchConfig that
# only llm_utils.update_llm_args_with_extra_dict builds from a mapping (tests/contract/tables
# llm_args-0.20.0.json: LlmArgs has extra='allow', so a top-level knob was silently dropped).
LLMAPI_TORCH_ARGS: Final = TrtllmVersion("0.21.0")
NEWEST_TEMPLATES: Final = TrtllmVersion("1.0.0")  # min_tokens/seed, num_*_tokens, ptable dtype

BACKEND_DIR: Final = "/opt/tritonserver/backends/tensorrtllm"


@dataclasses.dataclass(frozen=True)
class Features:
    """Template and behaviour features of one TensorRT-LLM version (see module docstring)."""

    version: TrtllmVersion
    # tensorrt_llm `backend:` is a placeholder (tensorrtllm or python); hard-coded before 0.10.
    backend_placeholder: bool
    # Parameter naming the executor worker binary: `worker_path` (0.9) or `executor_worker_path`.
    worker_path_key: str
    worker_path: str
    # `enable_trt_overlap` is an active parameter (0.9 only; commented out afterwards).
    trt_overlap_parameter: bool
    # tensorrt_llm dynamic_batching has default_queue_policy.max_queue_size.
    tensorrt_llm_queue_size: bool
    # preprocessing has dynamic_batching (with queue delay and size) / postprocessing has one.
    preprocessing_dynamic_batching: bool
    postprocessing_dynamic_batching: bool
    # text_input/max_tokens (and QUERY, REQUEST_OUTPUT_LEN, END_ID, PAD_ID) have dims [1], not [-1].
    scalar_text_dims: bool
    # Encoder-decoder inputs (DECODER_QUERY, decoder_input_ids).
    decoder_inputs: bool
    # PROMPT_TABLE_EXTRA_ID -> prompt_table_extra_ids (p-tuning with KV reuse).
    prompt_table_extra_id: bool
    # postprocessing echoes log probs and logits (and BATCH_INDEX) to OUT_* outputs; later
    # versions wire them from tensorrt_llm straight to the ensemble.
    postprocessing_passthrough: bool
    batch_index_output: bool
    # num_return_sequences input, sequence_index and context_phase_params outputs.
    num_return_sequences: bool
    # `${logits_datatype}` types the logits tensors (FP32 before 0.17).
    logits_datatype: bool
    # `${encoder_input_features_data_type}` exists (encoder_input_features input, 0.15+).
    encoder_input_features_data_type: bool
    # `${prompt_embedding_table_data_type}` (newest); FP16 hard-coded before.
    prompt_embedding_table_data_type: bool
    # Client-visible sampling input names.
    min_tokens_name: str
    seed_name: str
    # kv_cache_alloc_*/reused outputs; return_kv_cache_reuse_stats input (0.16-0.18 only).
    kv_cache_stats_outputs: bool
    kv_cache_reuse_stats_input: bool
    # return_perf_metrics input and timing/draft outputs; guided decoding inputs.
    perf_outputs: bool
    # return_num_input_tokens/return_num_output_tokens inputs and num_*_tokens outputs.
    num_token_outputs: bool
    # What the backend does when enable_kv_cache_reuse is unset (we always set it explicitly).
    kv_cache_reuse_default: bool
    # What our preprocessing does when add_special_tokens is unset (upstream default).
    add_special_tokens_default: bool
    # Orchestrator-mode `participant_ids` and multi-node `num_nodes` parameters exist.
    participant_ids: bool
    num_nodes: bool
    # The llmapi Python model exists.
    llmapi: bool
    # enable_iter_perf_stats is an LLM() argument (LLMAPI_TORCH_ARGS).
    llmapi_torch_args: bool

    def at_least(self, boundary: TrtllmVersion) -> bool:
        """Whether this version is at or after a boundary (used by the tensor catalog)."""
        return self.version >= boundary


def features_for(version: TrtllmVersion) -> Features:
    """The features of `version` (any release; boundaries in the module constants)."""
    v = version
    newest = v >= NEWEST_TEMPLATES
    executor = v >= EXECUTOR_BACKEND
    return Features(
        version=v,
        backend_placeholder=executor,
        worker_path_key="executor_worker_path" if executor else "worker_path",
        worker_path=f"{BACKEND_DIR}/trtllmExecutorWorker"
        if executor
        else f"{BACKEND_DIR}/triton_tensorrtllm_worker",
        trt_overlap_parameter=not executor,
        tensorrt_llm_queue_size=v >= QUEUE_SIZE,
        preprocessing_dynamic_batching=v >= PREPROC_DYNAMIC_BATCHING,
        postprocessing_dynamic_batching=v >= POSTPROC_DYNAMIC_BATCHING,
        scalar_text_dims=v >= SCALAR_TEXT,
        decoder_inputs=v >= DECODER_INPUTS,
        prompt_table_extra_id=v >= PROMPT_TABLE_EXTRA_ID,
        postprocessing_passthrough=v < DIRECT_OUTPUTS,
        batch_index_output=v >= BATCH_INDEX,
        num_return_sequences=v >= NUM_RETURN_SEQUENCES,
        logits_datatype=v >= LOGITS_DTYPE,
        encoder_input_features_data_type=v >= ENCODER_FEATURES_DTYPE,
        prompt_embedding_table_data_type=newest,
        min_tokens_name="min_tokens" if newest else "min_length",
        seed_name="seed" if newest else "random_seed",
        kv_cache_stats_outputs=v >= KV_CACHE_STATS,
        kv_cache_reuse_stats_input=KV_CACHE_STATS <= v < KV_REUSE_STATS_INPUT_UNTIL,
        perf_outputs=v >= PERF_METRICS,
        num_token_outputs=newest,
        kv_cache_reuse_default=v >= KV_REUSE_DEFAULT_ON,
        add_special_tokens_default=executor,
        participant_ids=v >= PARTICIPANT_IDS,
        num_nodes=v >= NUM_NODES,
        llmapi=v >= LLMAPI,
        llmapi_torch_args=v >= LLMAPI_TORCH_ARGS,
    )
