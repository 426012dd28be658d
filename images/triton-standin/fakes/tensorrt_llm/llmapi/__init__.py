"""SIMULATED tensorrt_llm.llmapi: the LLM API of the tritonllm CPU stand-in (see llm.py).

Exports what model.yaml files and the Triton llmapi model use: LLM, SamplingParams,
RequestOutput, CompletionOutput and the config classes (KvCacheConfig, SchedulerConfig, ...;
any other config class of the contract table is importable by name too).
"""

from typing import Any

from ..executor.result import CompletionOutput, RequestOutput
from ..sampling_params import SamplingParams
from . import llm_args as _llm_args
from .llm import LLM
from .llm_args import (
    CacheTransceiverConfig,
    CudaGraphConfig,
    DynamicBatchConfig,
    KvCacheConfig,
    MoeConfig,
    QuantConfig,
    SchedulerConfig,
)

__all__ = [
    "LLM",
    "CacheTransceiverConfig",
    "CompletionOutput",
    "CudaGraphConfig",
    "DynamicBatchConfig",
    "KvCacheConfig",
    "MoeConfig",
    "QuantConfig",
    "RequestOutput",
    "SamplingParams",
    "SchedulerConfig",
]


def __getattr__(name: str) -> Any:
    return getattr(_llm_args, name)
