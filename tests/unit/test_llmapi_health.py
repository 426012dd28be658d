"""How the llmapi Triton model tells that its LLM can serve no more (`llm_failure`).

The model reads the state TensorRT-LLM's own LLM reads (tensorrt_llm/llmapi/llm.py at 4c05a748:
`_executor` gone or `_executor.is_shutdown()`; tensorrt_llm/executor/executor.py at ed53795b: the
background-error queue `_error_queue`, a `queue.Queue`; newer versions' `_fatal_error`). The
executors below have those attributes with those types; what happens end to end with a real
tritonserver and a killed rank: test_a_dead_rank_ends_the_server in
tests/triton/test_llmapi_model.py.
The model module imports Triton's and TensorRT-LLM's packages, which exist only in the server: the
module is loaded here with empty stand-ins for those two names (the functions tested use neither).
"""

from __future__ import annotations

import importlib.util
import queue
import sys
import types
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest


@pytest.fixture(scope="module")
def model() -> Iterator[Any]:
    pb_utils = types.ModuleType("triton_python_backend_utils")
    pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1  # type: ignore[attr-defined]
    trtllm = types.ModuleType("tensorrt_llm")
    trtllm.LLM = trtllm.SamplingParams = object  # type: ignore[attr-defined]
    name = "llmapi_model_under_test"
    saved = {n: sys.modules.get(n) for n in (pb_utils.__name__, trtllm.__name__, name)}
    sys.modules.update({pb_utils.__name__: pb_utils, trtllm.__name__: trtllm})
    try:
        path = resources.files("tritonllm.triton").joinpath("models", "llmapi.py")
        spec = importlib.util.spec_from_file_location(name, str(path))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        for n, old in saved.items():
            if old is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = old


class Executor:
    """The attributes of TensorRT-LLM 1.x's GenerationExecutor the model reads."""

    def __init__(self) -> None:
        self._error_queue: queue.Queue[Any] = queue.Queue()
        self.doing_shutdown = False

    def is_shutdown(self) -> bool:
        return self.doing_shutdown


def llm(executor: Any) -> Any:
    return types.SimpleNamespace(_executor=executor)


def test_a_serving_llm_is_not_broken(model: Any) -> None:
    assert model.llm_failure(llm(Executor())) is None


def test_an_llm_without_that_state_is_never_called_broken(model: Any) -> None:
    """E.g. a stand-in of another shape: no state, no verdict (the server keeps serving)."""
    assert model.llm_failure(types.SimpleNamespace()) is None


def test_a_queued_background_error_is_the_cause_and_stays_queued(model: Any) -> None:
    """A dead rank's error waits in the queue until the next submit raises it: the model names
    it without taking it (the request that comes next still gets it from the LLM)."""
    executor = Executor()
    executor._error_queue.put(RuntimeError("rank 1 of 2 (pid 7 on node) is gone"))
    assert model.llm_failure(llm(executor)) == "RuntimeError: rank 1 of 2 (pid 7 on node) is gone"
    assert executor._error_queue.qsize() == 1 and not executor.is_shutdown()


def test_a_queued_string_is_a_request_error_not_a_broken_llm(model: Any) -> None:
    executor = Executor()
    executor._error_queue.put("a request's own error")
    assert model.llm_failure(llm(executor)) is None


def test_a_shut_down_executor_or_none_is_broken(model: Any) -> None:
    executor = Executor()
    executor.doing_shutdown = True
    assert model.llm_failure(llm(executor)) == model.SHUT_DOWN
    assert model.llm_failure(llm(None)) == "the LLM has no executor (it was shut down)"


def test_a_newer_executors_fatal_error_comes_first(model: Any) -> None:
    executor = Executor()
    executor._fatal_error = ValueError("Engine has died")
    executor._error_queue.put(RuntimeError("later"))
    assert model.llm_failure(llm(executor)) == "ValueError: Engine has died"


def test_the_cause_adds_what_a_request_saw_only_when_the_state_says_little(model: Any) -> None:
    seen = RuntimeError("rank 1 of 2 is gone")
    assert model.failure_cause(model.SHUT_DOWN, seen) == (
        f"{model.SHUT_DOWN}; a request failed with RuntimeError: rank 1 of 2 is gone")
    assert model.failure_cause("RuntimeError: rank 1 of 2 is gone", seen) == (
        "RuntimeError: rank 1 of 2 is gone")
    assert model.failure_cause(model.SHUT_DOWN, None) == model.SHUT_DOWN
