"""SIMULATED tensorrt_llm.executor.result: what `LLM.generate_async` returns.

The surface of the real classes (NVIDIA/TensorRT-LLM tensorrt_llm/executor/result.py and
tensorrt_llm/llmapi/llm.py RequestOutput, 1.x): a result is fed responses by the executor and
applies each when it is consumed (`for out in result`, `async for out in result`, `result.result()`,
`await result.aresult()`), so `text_diff` / `token_ids_diff` are what the last consumed response
added. A non-streaming request gets one response, a streaming one a response per step.
`abort()` cancels the request: its last response says finish_reason "cancelled". A failed
request raises RequestError when consumed.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from ..sampling_params import Logprob, SamplingParams
from .utils import RequestError


@dataclasses.dataclass
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list[int] = dataclasses.field(default_factory=list)
    cumulative_logprob: float | None = None
    logprobs: list[dict[int, Logprob]] = dataclasses.field(default_factory=list)
    prompt_logprobs: list[dict[int, Logprob]] = dataclasses.field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    generation_logits: Any = None
    additional_context_outputs: Any = None
    additional_generation_outputs: Any = None
    disaggregated_params: Any = None
    request_perf_metrics: Any = None
    _last_text_len: int = dataclasses.field(default=0, repr=False)
    _last_token_ids_len: int = dataclasses.field(default=0, repr=False)
    _last_logprobs_len: int = dataclasses.field(default=0, repr=False)

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def text_diff(self) -> str:
        return self.text[self._last_text_len:]

    @property
    def token_ids_diff(self) -> list[int]:
        return self.token_ids[self._last_token_ids_len:]

    @property
    def logprobs_diff(self) -> list[dict[int, Logprob]]:
        return self.logprobs[self._last_logprobs_len:]


@dataclasses.dataclass
class Response:
    """One response of the (simulated) executor for one request."""

    tokens: list[int]
    final: bool = False
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    truncate: int = 0  # generated tokens to drop (a stop sequence not to be returned)
    error: str | None = None


class GenerationResult:
    def __init__(self, request_id: int, prompt: str | None, prompt_token_ids: list[int],
                 sampling_params: SamplingParams, streaming: bool, tokenizer: Any,
                 aborter: Callable[[int], None]) -> None:
        self.request_id = request_id
        self._prompt = prompt
        self.prompt_token_ids = list(prompt_token_ids)
        self.sampling_params = sampling_params
        self.streaming = streaming
        self.outputs = [CompletionOutput(index=0)]
        self._tokenizer = tokenizer
        self._aborter = aborter
        self._generated: list[int] = []
        self._done = False
        self._iterated_last = False
        self._aborted = False
        self._error: RequestError | None = None
        self._pending: collections.deque[Response] = collections.deque()
        self._cond = threading.Condition()
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    # --- fed by the scheduler thread -----------------------------------------------------------
    def _push(self, response: Response) -> None:
        with self._cond:
            self._pending.append(response)
            self._cond.notify_all()
            waiters = list(self._async_waiters)
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    # --- consumed by the caller ----------------------------------------------------------------
    @property
    def prompt(self) -> str | None:
        return self._prompt

    @property
    def finished(self) -> bool:
        return self._done

    @property
    def aborted(self) -> bool:
        return self._aborted

    def abort(self) -> None:
        self._aborted = True
        self._aborter(self.request_id)

    def _take(self, timeout: float | None) -> Response:
        with self._cond:
            if not self._cond.wait_for(lambda: self._pending, timeout):
                raise TimeoutError(f"request {self.request_id}: no response in {timeout}s")
            return self._pending.popleft()

    async def _atake(self) -> Response:
        loop = asyncio.get_running_loop()
        while True:
            event = asyncio.Event()
            with self._cond:
                if self._pending:
                    return self._pending.popleft()
                self._async_waiters.append((loop, event))
            try:
                await event.wait()
            finally:
                with self._cond:
                    self._async_waiters.remove((loop, event))

    def _apply(self, response: Response) -> None:
        out = self.outputs[0]
        out._last_text_len = len(out.text)
        out._last_token_ids_len = len(out.token_ids)
        out._last_logprobs_len = len(out.logprobs)
        if response.error is not None:
            self._done = True
            self._error = RequestError(response.error)
            raise self._error
        self._generated += response.tokens
        if response.truncate:
            del self._generated[len(self._generated) - response.truncate:]
        params = self.sampling_params
        ids = self._generated if params.exclude_input_from_output else \
            [*self.prompt_token_ids, *self._generated]
        out.token_ids = list(ids)
        if params.logprobs:
            out.logprobs = [{t: Logprob(0.0, 1)} for t in self._generated]  # deterministic
            out.cumulative_logprob = 0.0
        if params.detokenize and self._tokenizer is not None:
            out.text = self._tokenizer.decode(ids, skip_special_tokens=params.skip_special_tokens)
        if response.final:
            out.finish_reason, out.stop_reason = response.finish_reason, response.stop_reason
            self._done = True

    def result(self, timeout: float | None = None) -> GenerationResult:
        while not self._done:
            self._apply(self._take(timeout))
        if self._error is not None:
            raise self._error
        return self

    async def aresult(self) -> GenerationResult:
        while not self._done:
            self._apply(await self._atake())
        if self._error is not None:
            raise self._error
        return self

    def __iter__(self) -> GenerationResult:
        return self

    def __next__(self) -> GenerationResult:
        if self._iterated_last:
            raise StopIteration
        self._apply(self._take(None))
        self._iterated_last = self._done
        return self

    def __aiter__(self) -> GenerationResult:
        return self

    async def __anext__(self) -> GenerationResult:
        if self._iterated_last:
            raise StopAsyncIteration
        self._apply(await self._atake())
        self._iterated_last = self._done
        return self

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(request_id={self.request_id}, prompt={self._prompt!r}, "
                f"outputs={self.outputs!r}, finished={self._done})")


class RequestOutput(GenerationResult):
    """The output of one request (tensorrt_llm.llmapi.RequestOutput)."""


class IterationResult:
    """An async iterable of iteration statistics (dicts): each `__anext__` waits up to
    `timeout` seconds for the next one and ends the iteration when none comes."""

    def __init__(self, source: Callable[[float], dict[str, Any] | None], timeout: float) -> None:
        self._source = source
        self._timeout = timeout

    def __aiter__(self) -> IterationResult:
        return self

    async def __anext__(self) -> dict[str, Any]:
        stat = await asyncio.to_thread(self._source, self._timeout)
        if stat is None:
            raise StopAsyncIteration
        return stat
