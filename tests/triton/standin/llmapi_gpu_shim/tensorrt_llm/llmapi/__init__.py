"""SIMULATED `tensorrt_llm.llmapi` (GPU recipe shim): the config classes and LLM, as the real
package exports them there. NOT TensorRT-LLM."""

from tensorrt_llm import (
           LLM,
           CompletionOutput,
           KvCacheConfig,
           RequestOutput,
           SamplingParams,
           SchedulerConfig,
)

__all__ = ["LLM", "CompletionOutput", "KvCacheConfig", "RequestOutput", "SamplingParams",
           "SchedulerConfig"]
