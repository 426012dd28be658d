"""Version features: pinned for the releases the reference describes (0.9, 0.13, 0.19, 1.2.1)."""

from __future__ import annotations

import pytest

from tritonllm.api.versions import TrtllmVersion
from tritonllm.triton.features import Features, features_for


def f(version: str) -> Features:
    return features_for(TrtllmVersion(version))


def test_0_9() -> None:
    v = f("0.9.0")
    assert not v.backend_placeholder
    assert (v.worker_path_key, v.worker_path) == (
        "worker_path", "/opt/tritonserver/backends/tensorrtllm/triton_tensorrtllm_worker")
    assert v.trt_overlap_parameter
    assert not v.tensorrt_llm_queue_size and not v.preprocessing_dynamic_batching
    assert not v.scalar_text_dims  # text_input / max_tokens dims [-1]
    assert v.postprocessing_passthrough and not v.batch_index_output
    assert not v.logits_datatype and not v.encoder_input_features_data_type
    assert (v.min_tokens_name, v.seed_name) == ("min_length", "random_seed")
    assert not v.kv_cache_reuse_default and not v.add_special_tokens_default
    assert not v.participant_ids and not v.num_nodes and not v.llmapi


def test_0_13() -> None:
    v = f("0.13.0")
    assert v.backend_placeholder and v.worker_path_key == "executor_worker_path"
    assert v.worker_path.endswith("/trtllmExecutorWorker")
    assert not v.trt_overlap_parameter
    assert v.tensorrt_llm_queue_size and not v.preprocessing_dynamic_batching
    assert v.scalar_text_dims and v.decoder_inputs and v.prompt_table_extra_id
    assert v.postprocessing_passthrough and v.batch_index_output  # BATCH_INDEX echoed
    assert not v.num_return_sequences and not v.logits_datatype
    assert not v.kv_cache_stats_outputs and not v.perf_outputs
    assert v.add_special_tokens_default and not v.kv_cache_reuse_default
    assert v.participant_ids and not v.num_nodes


def test_0_19() -> None:
    v = f("0.19.0")
    assert not v.postprocessing_passthrough
    assert v.preprocessing_dynamic_batching and v.postprocessing_dynamic_batching
    assert v.logits_datatype and v.encoder_input_features_data_type
    assert not v.prompt_embedding_table_data_type
    assert v.perf_outputs and v.kv_cache_stats_outputs and not v.kv_cache_reuse_stats_input
    assert not v.num_token_outputs
    assert (v.min_tokens_name, v.seed_name) == ("min_length", "random_seed")
    assert v.kv_cache_reuse_default and v.num_nodes and v.llmapi


@pytest.mark.parametrize("version", ["1.0.0", "1.2.1", "1.0.3.2510"])
def test_newest(version: str) -> None:
    v = f(version)
    assert v.prompt_embedding_table_data_type and v.num_token_outputs
    assert (v.min_tokens_name, v.seed_name) == ("min_tokens", "seed")


@pytest.mark.parametrize(
    ("version", "expected"),
    [("0.15.0", False), ("0.16.0", True), ("0.18.2", True), ("0.19.0", False)],
)
def test_kv_reuse_stats_input_only_in_0_16_to_0_18(version: str, expected: bool) -> None:
    assert f(version).kv_cache_reuse_stats_input is expected


def test_unstudied_release_gets_nearest_older_behaviour() -> None:
    assert f("0.11.0").scalar_text_dims is False and f("0.12.0").scalar_text_dims is True
    assert f("0.21.0").min_tokens_name == "min_length"
