"""SIMULATED tensorrt_llm package (tritonllm CPU stand-in image): not TensorRT-LLM.

It reports a TensorRT-LLM version the way NGC images do: the package metadata
(tensorrt_llm-<version>.dist-info, read by `tritonllm build`/`launch` without importing anything)
and `tensorrt_llm.__version__`. The engine path's tools are simulated by trtllm-build and
convert_checkpoint.py, and that path serves with the CPU stand-in backend at
/opt/tritonserver/backends/tensorrtllm/model.py.

The LLM API (`from tensorrt_llm import LLM, SamplingParams`, `tensorrt_llm.llmapi.*`) is a
SIMULATION of the real 1.x PyTorch-backend surface on CPU, with a deterministic "model"
(generated token i = prompt token i mod prompt length): see tensorrt_llm/llmapi/llm.py and
images/README.md. Nothing here needs a GPU, torch or MPI; transformers is imported only when an
LLM loads its tokenizer.

The version comes from the package metadata; outside the image (tests on a host), the
environment variable TRITONLLM_STANDIN_TRTLLM_VERSION sets it instead.
"""

import os as _os
from importlib import metadata as _metadata

ENV_VERSION = "TRITONLLM_STANDIN_TRTLLM_VERSION"


def _version() -> str:
    override = _os.environ.get(ENV_VERSION, "").strip()
    return override or _metadata.version("tensorrt_llm")


__version__ = _version()
STANDIN = True

from .llmapi import LLM, SamplingParams  # noqa: E402  (needs __version__ above)

__all__ = ["LLM", "STANDIN", "SamplingParams", "__version__"]
