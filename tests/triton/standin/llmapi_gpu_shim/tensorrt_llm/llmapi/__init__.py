"""SIMULATED `tensorrt_llm.llmapi` (GPU recipe shim): the config classes and LLM, as the real
package exports them there (the same as the shim's top level, but its version). NOT
TensorRT-LLM."""

from tensorrt_llm import *  # noqa: F403
from tensorrt_llm import __all__ as _top

__all__ = [name for name in _top if name != "__version__"]
