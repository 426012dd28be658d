"""SIMULATED tensorrt_llm.executor.utils: the error a failed request raises."""


class RequestError(RuntimeError):
    """A request failed in the executor (as tensorrt_llm.executor.utils.RequestError)."""
