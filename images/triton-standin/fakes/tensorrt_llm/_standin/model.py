"""What the SIMULATED LLM reads from a checkpoint: its config.json (size, fault), its tokenizer.

The "weights" are never loaded: their size is estimated from config.json (parameters x bytes of
torch_dtype) to simulate the GPU memory they would take, and the KV cache's bytes per token are
computed as TensorRT-LLM's KV cache manager computes them (K and V x layers x KV heads x head
size x bytes; tensorrt_llm/_torch/pyexecutor/resource_manager.py, get_cache_bytes_per_token).
Keys missing from config.json take the transformers defaults of the architecture family (GPT-2's
where the checkpoint says model_type gpt2 or nothing), as AutoConfig would fill them in.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

# SIMULATED faults, read from config.json (the same key and values as the engine path's
# stand-in): the model loads but answers wrongly (tokens shifted by one prompt position), or does
# not load.
FAULT_KEY = "tritonllm_standin_fault"
FAULT_WRONG_ANSWER = "wrong-answer"
FAULT_CRASH_AT_LOAD = "crash-at-load"
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "fp8": 1,
               "float8_e4m3fn": 1}
GPT2_DEFAULTS = {"n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
                 "vocab_size": 50257}


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint as the stand-in sees it."""

    path: str
    fault: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    max_positions: int
    dtype_bytes: int

    @property
    def parameters(self) -> int:
        attention = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * self.head_dim
        mlp = (3 if self.intermediate != 4 * self.hidden else 2) * self.hidden * self.intermediate
        return self.layers * (attention + mlp) + 2 * self.vocab * self.hidden

    @property
    def head_dim(self) -> int:
        return max(1, self.hidden // max(1, self.heads))

    def weight_bytes(self, tp: int, pp: int) -> int:
        """One rank's share of the weights."""
        return self.parameters * self.dtype_bytes // (tp * pp)

    def kv_bytes_per_token(self, tp: int, pp: int, kv_dtype: str | None = None) -> int:
        """One rank's KV cache bytes per token (its KV heads over tp, its layers over pp)."""
        kv_heads = max(1, self.kv_heads // tp)
        layers = max(1, -(-self.layers // pp))
        dtype = DTYPE_BYTES.get(str(kv_dtype or "").lower(), self.dtype_bytes)
        return 2 * layers * kv_heads * self.head_dim * dtype


def _first(config: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def read_checkpoint(path: str) -> Checkpoint:
    """The checkpoint at `path` (a directory with config.json, as the PyTorch backend loads)."""
    config_file = os.path.join(path, "config.json")
    try:
        with open(config_file) as f:
            config = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"SIMULATED tensorrt_llm: {path} has no config.json; the stand-in, "
                         "like the PyTorch backend, loads a Hugging Face checkpoint "
                         "directory") from None
    gpt2 = config.get("model_type", "gpt2") == "gpt2"
    defaults = GPT2_DEFAULTS if gpt2 else {}
    hidden = int(_first(config, "hidden_size", "n_embd", "d_model") or defaults.get("n_embd", 4096))
    heads = int(_first(config, "num_attention_heads", "n_head")
                or defaults.get("n_head", 32))
    return Checkpoint(
        path=path,
        fault=str(config.get(FAULT_KEY) or ""),
        hidden=hidden,
        layers=int(_first(config, "num_hidden_layers", "n_layer")
                   or defaults.get("n_layer", 32)),
        heads=heads,
        kv_heads=int(_first(config, "num_key_value_heads") or heads),
        intermediate=int(_first(config, "intermediate_size", "n_inner") or 4 * hidden),
        vocab=int(_first(config, "vocab_size") or defaults.get("vocab_size", 32000)),
        max_positions=int(_first(config, "max_position_embeddings", "n_positions")
                          or defaults.get("n_positions", 2048)),
        dtype_bytes=DTYPE_BYTES.get(str(config.get("torch_dtype") or "float16"), 2),
    )


def load_tokenizer(path: str, trust_remote_code: bool) -> Any:
    """The checkpoint's tokenizer, as TensorRT-LLM loads it (transformers AutoTokenizer)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code,
                                         use_fast=True)
