"""SIMULATED tensorrt_llm.executor.executor: how the LLM learns that its executor died.

The real `GenerationExecutor` (NVIDIA/TensorRT-LLM tensorrt_llm/executor/executor.py, read at
ed53795b; the proxy that runs the worker ranks, tensorrt_llm/executor/proxy.py at b93e14ca)
keeps a queue of background errors, `_error_queue`: a worker rank's MPI future that ends with an
exception puts it there (the proxy's `mpi_done_callback`), as does a failing dispatch thread.
`_handle_background_error()` runs on the next submit (and on the next response a request
consumes): it takes the first queued error, shuts the executor down and raises that very error.
From then on `is_shutdown()` (its `doing_shutdown` flag) is true, and `LLM.generate_async`
refuses every request with `RuntimeError("LLM is shutting down")` (tensorrt_llm/llmapi/llm.py
at 4c05a748). A per-request error (a string) is raised as `RequestError` and shuts nothing down.

The stand-in keeps those names and that order. Its scheduler thread stands in for the MPI
future: when a rank is lost it queues the `RankLost` error here, then fails the requests in
flight with its message.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

from .utils import RequestError


class GenerationExecutor:
    """SIMULATED executor of one LLM: the background-error queue and the shutdown flag."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self._error_queue: queue.Queue[Any] = queue.Queue()
        self.doing_shutdown = False
        self._stop = stop

    def background_error(self, error: BaseException) -> None:
        """A rank or the scheduler died (the real proxy's mpi_done_callback)."""
        self._error_queue.put_nowait(error)

    def _handle_background_error(self, error: BaseException | str | None = None) -> None:
        if isinstance(error, str):
            raise RequestError(error)
        if error is not None:
            self.shutdown()
            raise error
        if not self._error_queue.empty():
            queued = self._error_queue.get()
            self._error_queue.task_done()
            self.shutdown()
            raise queued

    def is_shutdown(self) -> bool:
        return self.doing_shutdown

    def shutdown(self) -> None:
        if self.doing_shutdown:
            return
        self.doing_shutdown = True
        self._stop()
