"""SIMULATED `tensorrt_llm` for the GPU recipe: a shim over llmapi_gpu_standin.py
(tests/triton/standin; a Llama in PyTorch behind the LLM API's surface). NOT TensorRT-LLM.

tests/gpu/llmapi.py puts this package beside the llmapi model's model.py (the Python backend's
stub puts the model's version directory on sys.path), with the stand-in's modules next to it.
"""

import sys
from pathlib import Path

_here = Path(__file__).resolve().parent
for _where in (_here.parent, _here.parent.parent):  # deployed: beside it; in the repository: ../..
    if (_where / "llmapi_gpu_standin.py").exists():
        sys.path.insert(0, str(_where))
        break

from llmapi_gpu_standin import (  # noqa: E402
    LLM,
    CompletionOutput,
    KvCacheConfig,
    RequestOutput,
    SamplingParams,
    SchedulerConfig,
    __version__,
)

__all__ = ["LLM", "CompletionOutput", "KvCacheConfig", "RequestOutput", "SamplingParams",
           "SchedulerConfig", "__version__"]
