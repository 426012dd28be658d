"""SIMULATED tensorrt_llm package (tritonllm CPU stand-in image): not TensorRT-LLM.

It exists so that the image reports a TensorRT-LLM version the way NGC images do: the package
metadata (tensorrt_llm-<version>.dist-info, read by `tritonllm build`/`launch` without importing
anything) and `tensorrt_llm.__version__`. There is no LLM API, runtime or builder here: the
engine path's tools are simulated by trtllm-build and convert_checkpoint.py, and serving uses the
CPU stand-in backend at /opt/tritonserver/backends/tensorrtllm/model.py.
"""

from importlib import metadata as _metadata

__version__ = _metadata.version("tensorrt_llm")
STANDIN = True
