"""SIMULATED tensorrt_llm.executor: the result types of the LLM API (see result.py)."""

from .executor import GenerationExecutor
from .result import CompletionOutput, GenerationResult, IterationResult
from .utils import RequestError

__all__ = ["CompletionOutput", "GenerationExecutor", "GenerationResult", "IterationResult",
           "RequestError"]
