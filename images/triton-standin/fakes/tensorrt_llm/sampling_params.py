"""SIMULATED tensorrt_llm.sampling_params: the real SamplingParams' fields and defaults.

Read from NVIDIA/TensorRT-LLM tensorrt_llm/sampling_params.py (commit 000a01de): a dataclass
with keyword-only fields, so an unknown keyword is a TypeError, as there. The stand-in's model is
deterministic, so the sampling knobs (temperature, top_k, ...) are accepted and have no effect;
max_tokens, end_id, stop, stop_token_ids, include_stop_str_in_output, ignore_eos, logprobs,
exclude_input_from_output, detokenize and min_tokens are honoured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Logprob(NamedTuple):
    """A token's log probability and its rank (tensorrt_llm.executor.result.Logprob)."""

    logprob: float
    rank: int | None = None


@dataclass(slots=True, kw_only=True)
class AdditionalModelOutput:
    name: str
    gather_context: bool


@dataclass(slots=True, kw_only=True)
class SamplingParams:
    end_id: int | None = None
    pad_id: int | None = None
    max_tokens: int = 32
    bad: str | list[str] | None = None
    bad_token_ids: list[int] | None = None
    _bad_word_ids: list[list[int]] | None = field(default=None, init=False, repr=False)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    _stop_word_ids: list[list[int]] | None = field(default=None, init=False, repr=False)
    embedding_bias: Any = None
    logits_processor: Any = None
    apply_batched_logits_processor: bool = False
    n: int = 1
    best_of: int | None = None
    use_beam_search: bool = False
    top_k: int | None = None
    top_p: float | None = None
    top_p_min: float | None = None
    top_p_reset_ids: int | None = None
    top_p_decay: float | None = None
    seed: int | None = None
    temperature: float | None = None
    min_tokens: int | None = None
    beam_search_diversity_rate: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    length_penalty: float | None = None
    early_stopping: int | None = None
    no_repeat_ngram_size: int | None = None
    min_p: float | None = None
    beam_width_array: list[int] | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    return_context_logits: bool = False
    return_generation_logits: bool = False
    exclude_input_from_output: bool = True
    return_encoder_output: bool = False
    return_perf_metrics: bool = False
    additional_model_outputs: list[AdditionalModelOutput] | None = None
    lookahead_config: Any = None
    guided_decoding: Any = None
    ignore_eos: bool = False
    detokenize: bool = True
    add_special_tokens: bool = True
    truncate_prompt_tokens: int | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True

    def __post_init__(self) -> None:
        if self.pad_id is None:
            self.pad_id = self.end_id
        self.best_of = self.best_of or self.n
        if self.best_of < self.n:
            raise ValueError(f"best_of ({self.best_of}) cannot be less than n ({self.n})")
        greedy = not self.use_beam_search and self.top_k in (None, 1) and self.top_p in (None, 0.0)
        if self.best_of > 1 and greedy and not os.environ.get("TLLM_ALLOW_N_GREEDY_DECODING"):
            raise ValueError("Greedy decoding in the LLM API does not allow multiple returns. "
                             f"Please set to best_of=1, got best_of={self.best_of}.")
        if self.truncate_prompt_tokens is not None and self.truncate_prompt_tokens < 1:
            raise ValueError(f"truncate_prompt_tokens must be >= 1, got "
                             f"{self.truncate_prompt_tokens}")
        self.logprobs = self.logprobs and int(self.logprobs)
        self.prompt_logprobs = self.prompt_logprobs and int(self.prompt_logprobs)

    def _setup(self, tokenizer: Any, add_special_tokens: bool = False) -> SamplingParams:
        """end_id/pad_id from the tokenizer when unset; stop and bad strings tokenised."""
        if self.end_id is None:
            self.end_id = tokenizer.eos_token_id
            self.pad_id = tokenizer.pad_token_id
            if self.pad_id is None:
                self.pad_id = self.end_id
        if self.bad is not None:
            words = [self.bad] if isinstance(self.bad, str) else self.bad
            self._bad_word_ids = [tokenizer.encode(w, add_special_tokens=add_special_tokens)
                                  for w in words]
        if self.stop is not None:
            words = [self.stop] if isinstance(self.stop, str) else self.stop
            self._stop_word_ids = [tokenizer.encode(w, add_special_tokens=add_special_tokens)
                                   for w in words]
        return self
