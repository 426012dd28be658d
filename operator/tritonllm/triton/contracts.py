"""The tensor contracts of the inflight_batcher_llm model set, per TensorRT-LLM version.

Each model's inputs and outputs are listed once, with the version range in which the upstream
template declares them (reference §1.2-1.6, checked against the tensorrtllm_backend tags v0.9.0 …
v0.19.0 and TensorRT-LLM's newest ``triton_backend``). The ensemble wiring is *derived* from these
lists and a handful of renames, so the ensemble, the BLS model (which runs the same steps) and the
configs cannot disagree about a name, type or shape.

Scope: text generation. The multimodal tensors of preprocessing (images, video, pixel values) are
not declared; tensorrt_llm keeps its full input list (LoRA, encoder-decoder, speculative, KV
retention, guided decoding), since clients may call it directly.

Three data types are placeholders upstream and resolved per deployment (:class:`Dtypes`): the
logits type (``${logits_datatype}``), the encoder-features type and the prompt-table type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from tritonllm.api.versions import TrtllmVersion

from . import features as V
from .features import Features

# Symbolic data types, resolved by Dtypes.
LOGITS = "<logits>"
ENCODER_FEATURES = "<encoder_features>"
PROMPT_TABLE = "<prompt_table>"


@dataclasses.dataclass(frozen=True)
class Dtypes:
    """Resolved data types (Triton names without ``TYPE_``) for the symbolic ones."""

    logits: str = "FP32"
    encoder_features: str = "FP16"
    prompt_table: str = "FP16"

    def resolve(self, dtype: str) -> str:
        return {
            LOGITS: self.logits,
            ENCODER_FEATURES: self.encoder_features,
            PROMPT_TABLE: self.prompt_table,
        }.get(dtype, dtype)


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One declared input or output (dims exclude the batch dimension)."""

    name: str
    dtype: str
    dims: tuple[int, ...]
    optional: bool = False
    ragged: bool = False  # allow_ragged_batch
    reshape: bool = False  # reshape { shape: [] }: [1] becomes a scalar per request
    since: TrtllmVersion | None = None
    until: TrtllmVersion | None = None  # exclusive

    def present(self, f: Features) -> bool:
        return (self.since is None or f.at_least(self.since)) and (
            self.until is None or not f.at_least(self.until)
        )

    def typed(self, dtypes: Dtypes) -> Tensor:
        return dataclasses.replace(self, dtype=dtypes.resolve(self.dtype))


def _t(name: str, dtype: str, *dims: int, **kw: object) -> Tensor:
    return Tensor(name, dtype, tuple(dims), **kw)  # type: ignore[arg-type]


def _opt(name: str, dtype: str, *dims: int, **kw: object) -> Tensor:
    return _t(name, dtype, *dims, optional=True, **kw)


def _scalar(name: str, dtype: str, **kw: object) -> Tensor:
    """An optional per-request scalar: dims [1] reshaped to []."""
    return _opt(name, dtype, 1, reshape=True, **kw)


def _select(catalog: Iterable[Tensor], f: Features, dtypes: Dtypes) -> list[Tensor]:
    return [t.typed(dtypes) for t in catalog if t.present(f)]


_NEW = V.NEWEST_TEMPLATES

TENSORRT_LLM_INPUTS: tuple[Tensor, ...] = (
    _t("input_ids", "INT32", -1, ragged=True, until=V.ENCODER_FEATURES_DTYPE),
    _opt("input_ids", "INT32", -1, ragged=True, since=V.ENCODER_FEATURES_DTYPE),
    _opt("encoder_input_features", ENCODER_FEATURES, -1, -1, ragged=True,
         since=V.ENCODER_FEATURES_DTYPE),
    _scalar("encoder_output_lengths", "INT32", since=V.ENCODER_FEATURES_DTYPE),
    _t("input_lengths", "INT32", 1, reshape=True),
    _t("request_output_len", "INT32", 1, until=V.SCALAR_TEXT),
    _t("request_output_len", "INT32", 1, reshape=True, since=V.SCALAR_TEXT),
    _scalar("num_return_sequences", "INT32", since=V.NUM_RETURN_SEQUENCES),
    _opt("draft_input_ids", "INT32", -1, ragged=True),
    _opt("decoder_input_ids", "INT32", -1, ragged=True, since=V.DECODER_INPUTS),
    _scalar("decoder_input_lengths", "INT32", since=V.DECODER_INPUTS),
    _opt("draft_logits", LOGITS, -1, -1, ragged=True),
    _scalar("draft_acceptance_threshold", "FP32", since=V.EXECUTOR_BACKEND),
    _scalar("end_id", "INT32"),
    _scalar("pad_id", "INT32"),
    _opt("stop_words_list", "INT32", 2, -1, ragged=True),
    _opt("bad_words_list", "INT32", 2, -1, ragged=True),
    _opt("embedding_bias", "FP32", -1, ragged=True),
    _scalar("beam_width", "INT32"),
    _scalar("temperature", "FP32"),
    _scalar("runtime_top_k", "INT32"),
    _scalar("runtime_top_p", "FP32"),
    _scalar("runtime_top_p_min", "FP32", since=V.EXECUTOR_BACKEND),
    _scalar("runtime_top_p_decay", "FP32", since=V.EXECUTOR_BACKEND),
    _scalar("runtime_top_p_reset_ids", "INT32", since=V.EXECUTOR_BACKEND),
    _scalar("len_penalty", "FP32"),
    _scalar("early_stopping", "BOOL", since=V.EXECUTOR_BACKEND),
    _scalar("repetition_penalty", "FP32"),
    _scalar("min_length", "INT32", until=_NEW),
    _scalar("min_tokens", "INT32", since=_NEW),
    _scalar("beam_search_diversity_rate", "FP32", since=V.EXECUTOR_BACKEND),
    _scalar("presence_penalty", "FP32"),
    _scalar("frequency_penalty", "FP32"),
    _scalar("random_seed", "UINT64", until=_NEW),
    _scalar("seed", "UINT64", since=_NEW),
    _scalar("return_log_probs", "BOOL"),
    _scalar("return_context_logits", "BOOL"),
    _scalar("return_generation_logits", "BOOL"),
    _scalar("return_kv_cache_reuse_stats", "BOOL", since=V.KV_CACHE_STATS,
            until=V.KV_REUSE_STATS_INPUT_UNTIL),
    _scalar("return_perf_metrics", "BOOL", since=V.PERF_METRICS),
    _scalar("return_num_input_tokens", "BOOL", since=_NEW),
    _scalar("return_num_output_tokens", "BOOL", since=_NEW),
    _scalar("exclude_input_in_output", "BOOL", since=V.NUM_RETURN_SEQUENCES),
    _opt("stop", "BOOL", 1, until=V.SCALAR_TEXT),
    _scalar("stop", "BOOL", since=V.SCALAR_TEXT),
    _opt("streaming", "BOOL", 1, until=V.SCALAR_TEXT),
    _scalar("streaming", "BOOL", since=V.SCALAR_TEXT),
    _opt("prompt_embedding_table", PROMPT_TABLE, -1, -1, ragged=True),
    _opt("prompt_table_extra_ids", "UINT64", -1, ragged=True, since=V.PROMPT_TABLE_EXTRA_ID),
    _scalar("prompt_vocab_size", "INT32"),
    _opt("cross_attention_mask", "BOOL", -1, -1, ragged=True, since=V.ENCODER_FEATURES_DTYPE),
    _opt("mrope_rotary_cos_sin", "FP32", -1, since=V.PERF_METRICS),
    _opt("mrope_position_deltas", "INT64", 1, since=V.PERF_METRICS),
    _scalar("lora_task_id", "UINT64"),
    _opt("lora_weights", "FP16", -1, -1, ragged=True),
    _opt("lora_config", "INT32", -1, 3, ragged=True),
    _opt("context_phase_params", "UINT8", -1, ragged=True, since=V.NUM_RETURN_SEQUENCES),
    _opt("skip_cross_attn_blocks", "BOOL", 1, ragged=True, since=V.KV_CACHE_STATS),
    *(
        _opt(f"retention_token_range_{x}", "INT32", -1, ragged=True, since=V.KV_RETENTION)
        for x in ("starts", "ends", "priorities", "durations_ms")
    ),
    _opt("retention_decode_priority", "INT32", 1, ragged=True, since=V.KV_RETENTION),
    _opt("retention_decode_duration_ms", "INT32", 1, ragged=True, since=V.KV_RETENTION),
    _opt("guided_decoding_guide_type", "STRING", 1, ragged=True, since=V.PERF_METRICS),
    _opt("guided_decoding_guide", "STRING", 1, ragged=True, since=V.PERF_METRICS),
    *(
        _opt(f"lookahead_{x}", "INT32", 1, ragged=True, since=V.PERF_METRICS)
        for x in ("window_size", "ngram_size", "verification_set_size")
    ),
)

TENSORRT_LLM_OUTPUTS: tuple[Tensor, ...] = (
    _t("output_ids", "INT32", -1, -1),
    _t("sequence_length", "INT32", -1),
    _t("cum_log_probs", "FP32", -1),
    _t("output_log_probs", "FP32", -1, -1),
    _t("context_logits", LOGITS, -1, -1),
    _t("generation_logits", LOGITS, -1, -1, -1),
    _t("batch_index", "INT32", 1, since=V.BATCH_INDEX),
    _t("sequence_index", "INT32", 1, since=V.NUM_RETURN_SEQUENCES),
    _t("context_phase_params", "UINT8", -1, since=V.NUM_RETURN_SEQUENCES),
    *(
        _t(f"kv_cache_{x}", "INT32", 1, since=V.KV_CACHE_STATS)
        for x in ("alloc_new_blocks", "reused_blocks", "alloc_total_blocks")
    ),
    *(
        _t(f"{x}_time_ns", "INT64", 1, since=V.PERF_METRICS)
        for x in ("arrival", "first_scheduled", "first_token", "last_token")
    ),
    _t("acceptance_rate", "FP32", 1, since=V.PERF_METRICS),
    _t("total_accepted_draft_tokens", "INT32", 1, since=V.PERF_METRICS),
    _t("total_draft_tokens", "INT32", 1, since=V.PERF_METRICS),
    _t("num_input_tokens", "INT32", 1, since=_NEW),
    _t("num_output_tokens", "INT32", 1, since=_NEW),
)

# Per-request text and lengths were [-1] before 0.12.
_TEXT_DIM = {"until": V.SCALAR_TEXT}
_SCALAR_DIM = {"since": V.SCALAR_TEXT}

PREPROCESSING_INPUTS: tuple[Tensor, ...] = (
    _t("QUERY", "STRING", -1, **_TEXT_DIM),
    _t("QUERY", "STRING", 1, **_SCALAR_DIM),
    _opt("DECODER_QUERY", "STRING", -1, since=V.DECODER_INPUTS, until=V.SCALAR_TEXT),
    _opt("DECODER_QUERY", "STRING", 1, **_SCALAR_DIM),
    _t("REQUEST_OUTPUT_LEN", "INT32", -1, **_TEXT_DIM),
    _t("REQUEST_OUTPUT_LEN", "INT32", 1, **_SCALAR_DIM),
    _opt("BAD_WORDS_DICT", "STRING", -1),
    _opt("STOP_WORDS_DICT", "STRING", -1),
    _opt("EMBEDDING_BIAS_WORDS", "STRING", -1),
    _opt("EMBEDDING_BIAS_WEIGHTS", "FP32", -1),
    _opt("END_ID", "INT32", -1, **_TEXT_DIM),
    _opt("END_ID", "INT32", 1, **_SCALAR_DIM),
    _opt("PAD_ID", "INT32", -1, **_TEXT_DIM),
    _opt("PAD_ID", "INT32", 1, **_SCALAR_DIM),
    _opt("PROMPT_TABLE_EXTRA_ID", "UINT64", 1, since=V.PROMPT_TABLE_EXTRA_ID),
)

PREPROCESSING_OUTPUTS: tuple[Tensor, ...] = (
    _t("INPUT_ID", "INT32", -1),
    _t("REQUEST_INPUT_LEN", "INT32", 1),
    _t("DECODER_INPUT_ID", "INT32", -1, since=V.DECODER_INPUTS),
    _t("REQUEST_DECODER_INPUT_LEN", "INT32", 1, since=V.DECODER_INPUTS),
    _t("BAD_WORDS_IDS", "INT32", 2, -1),
    _t("STOP_WORDS_IDS", "INT32", 2, -1),
    _t("EMBEDDING_BIAS", "FP32", -1),
    _t("REQUEST_OUTPUT_LEN", "INT32", -1),
    _t("OUT_END_ID", "INT32", -1, **_TEXT_DIM),
    _t("OUT_END_ID", "INT32", 1, **_SCALAR_DIM),
    _t("OUT_PAD_ID", "INT32", -1, **_TEXT_DIM),
    _t("OUT_PAD_ID", "INT32", 1, **_SCALAR_DIM),
    _t("OUT_PROMPT_TABLE_EXTRA_IDS", "UINT64", -1, since=V.PROMPT_TABLE_EXTRA_ID),
)

# tensorrt_llm outputs that postprocessing echoes (as OUT_<NAME>) before 0.14.
_PASSTHROUGH = (
    _opt("CUM_LOG_PROBS", "FP32", -1),
    _opt("OUTPUT_LOG_PROBS", "FP32", -1, -1),
    _opt("CONTEXT_LOGITS", "FP32", -1, -1),
    _opt("GENERATION_LOGITS", "FP32", -1, -1, -1),
    _opt("BATCH_INDEX", "INT32", 1, since=V.BATCH_INDEX),
)
POSTPROCESSING_INPUTS: tuple[Tensor, ...] = (
    _t("TOKENS_BATCH", "INT32", -1, -1),
    _t("SEQUENCE_LENGTH", "INT32", -1),
    *(dataclasses.replace(t, until=V.DIRECT_OUTPUTS) for t in _PASSTHROUGH),
)

POSTPROCESSING_OUTPUTS: tuple[Tensor, ...] = (
    _t("OUTPUT", "STRING", -1),
    *(
        dataclasses.replace(t, name="OUT_" + t.name, optional=False, until=V.DIRECT_OUTPUTS)
        for t in _PASSTHROUGH
    ),
)

# The client-facing inputs of `ensemble` (and `tensorrt_llm_bls`).
ENSEMBLE_INPUTS: tuple[Tensor, ...] = (
    _t("text_input", "STRING", -1, **_TEXT_DIM),
    _t("text_input", "STRING", 1, **_SCALAR_DIM),
    _opt("decoder_text_input", "STRING", -1, since=V.DECODER_INPUTS, until=V.SCALAR_TEXT),
    _opt("decoder_text_input", "STRING", 1, **_SCALAR_DIM),
    _t("max_tokens", "INT32", -1, **_TEXT_DIM),
    _t("max_tokens", "INT32", 1, **_SCALAR_DIM),
    _opt("num_return_sequences", "INT32", 1, since=V.NUM_RETURN_SEQUENCES),
    _opt("bad_words", "STRING", -1),
    _opt("stop_words", "STRING", -1),
    _opt("exclude_input_in_output", "BOOL", 1, since=V.ENSEMBLE_EXCLUDE_INPUT),
    _opt("end_id", "INT32", 1),
    _opt("pad_id", "INT32", 1),
    _opt("top_k", "INT32", 1),
    _opt("top_p", "FP32", 1),
    _opt("temperature", "FP32", 1),
    _opt("length_penalty", "FP32", 1),
    _opt("repetition_penalty", "FP32", 1),
    _opt("min_length", "INT32", 1, until=_NEW),
    _opt("min_tokens", "INT32", 1, since=_NEW),
    _opt("presence_penalty", "FP32", 1),
    _opt("frequency_penalty", "FP32", 1),
    _opt("random_seed", "UINT64", 1, until=_NEW),
    _opt("seed", "UINT64", 1, since=_NEW),
    _opt("return_log_probs", "BOOL", 1),
    _opt("return_context_logits", "BOOL", 1),
    _opt("return_generation_logits", "BOOL", 1),
    _opt("return_kv_cache_reuse_stats", "BOOL", 1, since=V.KV_CACHE_STATS,
         until=V.KV_REUSE_STATS_INPUT_UNTIL),
    _opt("return_perf_metrics", "BOOL", 1, since=V.PERF_METRICS),
    _opt("return_num_input_tokens", "BOOL", 1, since=_NEW),
    _opt("return_num_output_tokens", "BOOL", 1, since=_NEW),
    _opt("beam_width", "INT32", 1),
    _opt("stream", "BOOL", 1),
    _opt("prompt_embedding_table", PROMPT_TABLE, -1, -1),
    _opt("prompt_table_extra_id", "UINT64", 1, since=V.PROMPT_TABLE_EXTRA_ID),
    _opt("prompt_vocab_size", "INT32", 1),
    _opt("embedding_bias_words", "STRING", -1),
    _opt("embedding_bias_weights", "FP32", -1),
    _opt("lora_task_id", "UINT64", 1, since=V.ENSEMBLE_LORA),
    _opt("lora_weights", "FP16", -1, -1, ragged=True, since=V.ENSEMBLE_LORA),
    _opt("lora_config", "INT32", -1, 3, ragged=True, since=V.ENSEMBLE_LORA),
    _opt("guided_decoding_guide_type", "STRING", 1, ragged=True, since=V.PERF_METRICS),
    _opt("guided_decoding_guide", "STRING", 1, ragged=True, since=V.PERF_METRICS),
)

# Ensemble input -> preprocessing input.
_PRE_FROM_ENSEMBLE = {
    "QUERY": "text_input",
    "DECODER_QUERY": "decoder_text_input",
    "REQUEST_OUTPUT_LEN": "max_tokens",
    "BAD_WORDS_DICT": "bad_words",
    "STOP_WORDS_DICT": "stop_words",
    "EMBEDDING_BIAS_WORDS": "embedding_bias_words",
    "EMBEDDING_BIAS_WEIGHTS": "embedding_bias_weights",
    "END_ID": "end_id",
    "PAD_ID": "pad_id",
    "PROMPT_TABLE_EXTRA_ID": "prompt_table_extra_id",
}
# tensorrt_llm input <- preprocessing output.
_TRT_FROM_PRE = {
    "input_ids": "INPUT_ID",
    "decoder_input_ids": "DECODER_INPUT_ID",
    "input_lengths": "REQUEST_INPUT_LEN",
    "decoder_input_lengths": "REQUEST_DECODER_INPUT_LEN",
    "request_output_len": "REQUEST_OUTPUT_LEN",
    "end_id": "OUT_END_ID",
    "pad_id": "OUT_PAD_ID",
    "embedding_bias": "EMBEDDING_BIAS",
    "stop_words_list": "STOP_WORDS_IDS",
    "bad_words_list": "BAD_WORDS_IDS",
    "prompt_table_extra_ids": "OUT_PROMPT_TABLE_EXTRA_IDS",
}
# tensorrt_llm input <- ensemble input, where the client-facing name differs.
_TRT_RENAMED = {
    "runtime_top_k": "top_k",
    "runtime_top_p": "top_p",
    "len_penalty": "length_penalty",
    "streaming": "stream",
}
# Internal tensor names that are not simply "_" + the producing output's name.
_INTERNAL = {
    "OUT_END_ID": "_PREPROCESSOR_END_ID",
    "OUT_PAD_ID": "_PREPROCESSOR_PAD_ID",
    "output_ids": "_TOKENS_BATCH",
    "sequence_length": "_SEQUENCE_LENGTH",
}
# tensorrt_llm outputs the ensemble does not expose.
_NOT_EXPOSED = ("output_ids", "sequence_length", "context_phase_params")


def _internal(name: str) -> str:
    return _INTERNAL.get(name, "_" + name.upper())


@dataclasses.dataclass(frozen=True)
class ModelContract:
    """Declared inputs and outputs of one model."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]

    def input(self, name: str) -> Tensor | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> Tensor | None:
        return next((t for t in self.outputs if t.name == name), None)


@dataclasses.dataclass(frozen=True)
class Step:
    """One ensemble step: model tensor -> ensemble tensor maps (as Triton's input/output_map)."""

    model: str
    input_map: dict[str, str]
    output_map: dict[str, str]


@dataclasses.dataclass(frozen=True)
class ModelSet:
    """Every contract of the engine-runtime model set for one version, and the ensemble wiring."""

    preprocessing: ModelContract
    tensorrt_llm: ModelContract
    postprocessing: ModelContract
    ensemble: ModelContract
    steps: tuple[Step, ...]


def model_set(f: Features, dtypes: Dtypes) -> ModelSet:
    """The contracts and wiring of `f`'s version, with the placeholder types resolved."""
    pre = ModelContract(
        tuple(_select(PREPROCESSING_INPUTS, f, dtypes)),
        tuple(_select(PREPROCESSING_OUTPUTS, f, dtypes)),
    )
    trt = ModelContract(
        tuple(_select(TENSORRT_LLM_INPUTS, f, dtypes)),
        tuple(_select(TENSORRT_LLM_OUTPUTS, f, dtypes)),
    )
    post = ModelContract(
        tuple(_select(POSTPROCESSING_INPUTS, f, dtypes)),
        tuple(_select(POSTPROCESSING_OUTPUTS, f, dtypes)),
    )
    ens_in = tuple(_select(ENSEMBLE_INPUTS, f, dtypes))
    ens_in_names = {t.name for t in ens_in}

    pre_step = Step(
        "preprocessing",
        {t.name: _PRE_FROM_ENSEMBLE[t.name] for t in pre.inputs},
        {t.name: _internal(t.name) for t in pre.outputs},
    )
    consumed_by_pre = set(pre_step.input_map.values())

    trt_in: dict[str, str] = {}
    for t in trt.inputs:
        if t.name in _TRT_FROM_PRE and pre.output(_TRT_FROM_PRE[t.name]):
            trt_in[t.name] = _internal(_TRT_FROM_PRE[t.name])
        elif _TRT_RENAMED.get(t.name) in ens_in_names:
            trt_in[t.name] = _TRT_RENAMED[t.name]
        elif t.name in ens_in_names and t.name not in consumed_by_pre:
            trt_in[t.name] = t.name

    post_in_names = {t.name for t in post.inputs}
    trt_out: dict[str, str] = {}
    ens_out = [_t("text_output", "STRING", -1)]
    for t in trt.outputs:
        if t.name in ("output_ids", "sequence_length") or t.name.upper() in post_in_names:
            trt_out[t.name] = _internal(t.name)
        elif t.name not in _NOT_EXPOSED:
            trt_out[t.name] = t.name
            ens_out.append(t)
    trt_step = Step("tensorrt_llm", trt_in, trt_out)

    post_step = Step(
        "postprocessing",
        {t.name: "_" + t.name for t in post.inputs},
        {t.name: "text_output" if t.name == "OUTPUT" else t.name[4:].lower()
         for t in post.outputs},
    )
    for t in post.outputs:
        if t.name != "OUTPUT":
            ens_out.append(dataclasses.replace(t, name=t.name[4:].lower()))

    ensemble = ModelContract(ens_in, tuple(ens_out))
    return ModelSet(pre, trt, post, ensemble, (pre_step, trt_step, post_step))


# Our llmapi model (tritonllm/triton/models/llmapi.py); max_batch_size 0, so dims are full shapes.
#
# Upstream's llmapi template (NVIDIA/TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/
# config.pbtxt at c8c6df08, read with its 1/model.py at b35ac1b6 and 1/helpers.py) declares the
# inputs up to `stop` and the four outputs up to cumulative_logprob under the same names, types
# and dims. What differs, for the check against upstream's template per version:
LLMAPI_UPSTREAM_INPUTS = (
    "text_input", "streaming", "sampling_param_best_of", "sampling_param_temperature",
    "sampling_param_top_k", "sampling_param_top_p", "sampling_param_frequency_penalty",
    "sampling_param_presence_penalty", "sampling_param_max_tokens", "sampling_param_stop",
    "sampling_param_seed", "sampling_param_exclude_input_from_output", "return_finish_reason",
    "return_stop_reason", "return_cumulative_logprob", "stop",
)
# Ours only: the sampling and output controls the engine path's ensemble offers and users rely
# on, each named sampling_param_<SamplingParams field> as upstream names its sampling inputs
# (tensorrt_llm/sampling_params.py), or as the ensemble names it (return_num_*_tokens,
# num_*_tokens, output_log_probs).
LLMAPI_OURS_ONLY = (
    "sampling_param_min_tokens", "sampling_param_repetition_penalty",
    "sampling_param_length_penalty", "sampling_param_end_id", "sampling_param_pad_id",
    "sampling_param_logprobs", "sampling_param_include_stop_str_in_output", "sampling_param_bad",
    "return_num_input_tokens", "return_num_output_tokens",
    "num_input_tokens", "num_output_tokens", "output_log_probs",
)
# Upstream's only: per-request perf metrics (input sampling_param_return_perf_metrics; outputs
# kv_cache_reused_block, kv_cache_missed_block, kv_cache_alloc_new_blocks,
# kv_cache_alloc_total_blocks, kv_cache_hit_rate, arrival_time_ns, first_scheduled_time_ns,
# first_token_time_ns, last_token_time_ns, acceptance_rate, total_accepted_draft_tokens,
# total_draft_tokens): not offered (the deployment-wide figures are the exported metrics);
# newer upstream versions' LoRA inputs (lora_id, lora_name, lora_path, lora_ckpt_source) and
# image_url: tritonllm deploys neither LoRA adapters nor multimodal models.
# Also different: upstream leaves max_batch_size and model_transaction_policy to model.yaml
# through auto_complete_config, which the launcher's --disable-auto-complete-config turns off;
# our config.pbtxt states both.
LLMAPI_CONTRACT = ModelContract(
    inputs=(
        _t("text_input", "STRING", -1),
        _opt("streaming", "BOOL", 1),
        _opt("sampling_param_best_of", "INT32", 1),
        _opt("sampling_param_temperature", "FP32", 1),
        _opt("sampling_param_top_k", "INT32", 1),
        _opt("sampling_param_top_p", "FP32", 1),
        _opt("sampling_param_frequency_penalty", "FP32", 1),
        _opt("sampling_param_presence_penalty", "FP32", 1),
        _opt("sampling_param_max_tokens", "INT32", 1),
        _opt("sampling_param_stop", "STRING", -1),
        _opt("sampling_param_seed", "UINT64", 1),
        _opt("sampling_param_exclude_input_from_output", "BOOL", 1),
        _opt("return_finish_reason", "BOOL", 1),
        _opt("return_stop_reason", "BOOL", 1),
        _opt("return_cumulative_logprob", "BOOL", 1),
        _opt("stop", "BOOL", 1),
        _opt("sampling_param_min_tokens", "INT32", 1),
        _opt("sampling_param_repetition_penalty", "FP32", 1),
        _opt("sampling_param_length_penalty", "FP32", 1),
        _opt("sampling_param_end_id", "INT32", 1),
        _opt("sampling_param_pad_id", "INT32", 1),
        _opt("sampling_param_logprobs", "INT32", 1),
        _opt("sampling_param_include_stop_str_in_output", "BOOL", 1),
        _opt("sampling_param_bad", "STRING", -1),
        _opt("return_num_input_tokens", "BOOL", 1),
        _opt("return_num_output_tokens", "BOOL", 1),
    ),
    outputs=(
        _t("text_output", "STRING", -1),
        _t("finish_reason", "STRING", -1),
        _t("stop_reason", "STRING", -1),
        _t("cumulative_logprob", "FP32", -1),
        _t("num_input_tokens", "INT32", 1),
        _t("num_output_tokens", "INT32", 1),
        _t("output_log_probs", "FP32", -1),
    ),
)
