"""The SIMULATED executor: in-flight batching over a paged KV cache, one scheduler thread.

Each step (iteration) of the scheduler:
  1. drops cancelled requests (finish_reason "cancelled", blocks freed);
  2. admits waiting requests, oldest first, while the batch has fewer than max_batch_size
     requests, the step's tokens (a new request's whole prompt, one per running request) stay
     within max_num_tokens, and the KV cache can reserve the blocks of the request's whole
     sequence (prompt + max_tokens: the GUARANTEED_NO_EVICT capacity policy, the real
     default); the others wait (numQueuedRequests);
  3. advances every admitted request by one token (a new request's first token comes from its
     context step), sends the step to every other rank and waits for their acknowledgement;
  4. sleeps TRITONLLM_STANDIN_TOKEN_DELAY seconds (the simulated compute of one step), then
     delivers the step's responses and frees the blocks of finished requests;
  5. records the iteration's statistics (when enable_iter_perf_stats) in a bounded queue.

The model is deterministic, as the engine path's stand-in: generated token i is prompt token
(i + shift) mod prompt length, shift 1 for the "wrong-answer" fault, else 0. A request ends at
end_id (unless ignore_eos), at a stop token id or stop sequence (finish_reason "stop",
stop_reason the id or string), or after max_tokens ("length").
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from ..executor.result import GenerationResult, Response
from ..sampling_params import SamplingParams
from .kv_cache import KvCache
from .ranks import RankLost

HEARTBEAT_S = 1.0  # an idle scheduler pings its ranks this often, so a lost rank shows early


@dataclasses.dataclass(eq=False)
class Request:
    id: int
    prompt: list[int]
    params: SamplingParams
    streaming: bool
    result: GenerationResult
    arrival: float = dataclasses.field(default_factory=time.monotonic)
    generated: list[int] = dataclasses.field(default_factory=list)
    blocks: list[int] = dataclasses.field(default_factory=list)
    reserved: int = 0
    aborted: bool = False

    @property
    def total(self) -> int:
        return len(self.prompt) + self.params.max_tokens


@dataclasses.dataclass
class Limits:
    max_batch_size: int
    max_num_tokens: int
    token_delay: float
    shift: int
    stats_enabled: bool
    stats_max: int
    gpu_mem_usage: int


class Engine:
    def __init__(self, kv: KvCache, limits: Limits, hub: Any,
                 on_fatal: Callable[[BaseException], None] | None = None) -> None:
        self.kv = kv
        self.limits = limits
        self._hub = hub
        # Where a lost rank is reported first (the executor's background-error queue).
        self._on_fatal = on_fatal
        self._cond = threading.Condition()
        self._waiting: collections.deque[Request] = collections.deque()
        self._active: list[Request] = []
        self._iter = 0
        self._stats: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=limits.stats_max)
        self.submitted = False
        self.failed: str | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="standin-scheduler")
        self._thread.start()

    # --- callers -------------------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        with self._cond:
            if self.failed:  # a dead world never answers; the executor raises why
                request.result._push(Response([], final=True, error=self.failed))
                return
            if self._stop:
                raise RuntimeError("LLM is shutting down")
            self.submitted = True
            self._waiting.append(request)
            self._cond.notify_all()

    def abort(self, request_id: int) -> None:
        with self._cond:
            for request in [*self._waiting, *self._active]:
                if request.id == request_id:
                    request.aborted = True
            self._cond.notify_all()

    def next_stat(self, timeout: float) -> dict[str, Any] | None:
        with self._cond:
            self._cond.wait_for(lambda: self._stats or self._stop, timeout)
            return self._stats.popleft() if self._stats else None

    def drain_stats(self, timeout: float) -> list[dict[str, Any]]:
        first = self.next_stat(timeout)
        with self._cond:
            rest = list(self._stats)
            self._stats.clear()
        return [first, *rest] if first is not None else []

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=30)
        self._fail_all("LLM is shutting down")

    # --- the scheduler thread ------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    if not (self._waiting or self._active or self._stop):
                        self._cond.wait(HEARTBEAT_S)
                    if self._stop:
                        return
                    work = bool(self._waiting or self._active)
                if work:
                    self._step()
                elif self._hub is not None:
                    self._hub.ping()
        except RankLost as exc:
            self._fail(exc)
        except Exception as exc:  # the executor died: every request learns why
            self._fail(RuntimeError(f"SIMULATED executor error: {exc!r}"))

    def _fail(self, error: BaseException) -> None:
        """The background error first (as the real proxy's MPI future callback queues it), then
        the requests in flight get its message."""
        if self._on_fatal is not None:
            self._on_fatal(error)
        with self._cond:
            self.failed = str(error)
            self._cond.notify_all()
        self._fail_all(str(error))

    def _fail_all(self, message: str) -> None:
        with self._cond:
            requests = [*self._waiting, *self._active]
            self._waiting.clear()
            self._active.clear()
        for request in requests:
            request.result._push(Response([], final=True, error=message))

    def _step(self) -> None:
        started = time.monotonic()
        cancelled = 0
        with self._cond:
            for request, response in self._drop_aborted():
                request.result._push(response)
                cancelled += 1
            new = self._admit()
            scheduled = list(self._active)
            responses = [(r, self._advance(r)) for r in scheduled]
        if not scheduled:  # only cancellations, or nothing fits yet
            with self._cond:
                if cancelled:  # an iteration that only ended requests
                    self._record(started, [], [], cancelled)
                    self._iter += 1
            if not cancelled:
                time.sleep(0.001)  # the blocks a queued request waits for come with a finish
            return
        if self._hub is not None:
            self._hub.step(self._iter, [[r.id, r.generated[-1]] for r in scheduled])
        if self.limits.token_delay > 0:
            time.sleep(self.limits.token_delay)
        with self._cond:
            done = 0
            for request, response in responses:
                if response is not None:
                    request.result._push(response)
                    if response.final:
                        done += 1
                        self._release(request)
            self._record(started, scheduled, new, done + cancelled)
            self._iter += 1

    def _release(self, request: Request) -> None:
        if request in self._active:
            self._active.remove(request)
        self.kv.release(request.blocks, [*request.prompt, *request.generated])
        request.blocks = []

    def _drop_aborted(self) -> list[tuple[Request, Response]]:
        out = []
        for request in [r for r in self._waiting if r.aborted]:
            self._waiting.remove(request)
            out.append((request, self._final(request, "cancelled", None)))
        for request in [r for r in self._active if r.aborted]:
            self._release(request)
            out.append((request, self._final(request, "cancelled", None)))
        return out

    def _final(self, request: Request, reason: str, stop_reason: Any, truncate: int = 0,
               last: int | None = None) -> Response:
        """The last response: a streaming request gets this step's token, the others all."""
        tokens = ([] if last is None else [last]) if request.streaming else list(request.generated)
        return Response(tokens, final=True, finish_reason=reason, stop_reason=stop_reason,
                        truncate=truncate)

    def _admit(self) -> list[Request]:
        admitted: list[Request] = []
        budget = self.limits.max_num_tokens - len(self._active)
        outstanding = sum(r.reserved - len(r.blocks) for r in self._active)
        while self._waiting and len(self._active) < self.limits.max_batch_size:
            request = self._waiting[0]
            if self.kv.blocks_for(request.total) > self.kv.max_blocks:
                self._waiting.popleft()
                request.result._push(Response([], final=True, error=(
                    f"SIMULATED: the request needs {self.kv.blocks_for(request.total)} KV cache "
                    f"blocks (prompt {len(request.prompt)} + max_tokens "
                    f"{request.params.max_tokens}), the pool has {self.kv.max_blocks}")))
                continue
            need = self.kv.needed(request.prompt, request.total)
            if len(request.prompt) > budget or need > self.kv.free_blocks - outstanding:
                break
            self._waiting.popleft()
            request.blocks = self.kv.allocate_prompt(request.prompt)
            request.reserved = self.kv.blocks_for(request.total)
            outstanding += request.reserved - len(request.blocks)
            budget -= len(request.prompt)
            self._active.append(request)
            admitted.append(request)
        return admitted

    def _advance(self, request: Request) -> Response | None:
        """One token for `request`; its response for this step (None: nothing to send yet)."""
        i = len(request.generated)
        token = request.prompt[(i + self.limits.shift) % len(request.prompt)]
        request.generated.append(token)
        if len(request.prompt) + len(request.generated) > len(request.blocks) * \
                self.kv.tokens_per_block:
            request.blocks.append(self.kv.allocate_one())
        finish = self._finish(request, token)
        if finish is not None:
            return self._final(request, *finish, last=token)
        return Response([token]) if request.streaming else None

    def _finish(self, request: Request, token: int) -> tuple[str, Any, int] | None:
        params, n = request.params, len(request.generated)
        if n >= (params.min_tokens or 0):
            keep = params.include_stop_str_in_output
            if not params.ignore_eos and params.end_id is not None and token == params.end_id:
                return "stop", None, 1
            if params.stop_token_ids and token in params.stop_token_ids:
                return "stop", token, 0 if keep else 1
            words = params._stop_word_ids or []
            strings = [params.stop] if isinstance(params.stop, str) else (params.stop or [])
            for ids, text in zip(words, strings, strict=False):
                if ids and request.generated[-len(ids):] == ids:
                    return "stop", text, 0 if keep else len(ids)
        if n >= params.max_tokens:
            return "length", None, 0
        return None

    def _record(self, started: float, scheduled: list[Request], new: list[Request],
                completed: int) -> None:
        if not self.limits.stats_enabled:
            return
        now = time.monotonic()
        queue_ms = [(started - r.arrival) * 1000 for r in new]
        self._stats.append({
            "timestamp": time.strftime("%m-%d-%Y %H:%M:%S"),
            "iter": self._iter,
            "iterLatencyMS": (now - started) * 1000,
            "newActiveRequestsQueueLatencyMS": sum(queue_ms) / len(queue_ms) if new else 0.0,
            "numNewActiveRequests": len(new),
            "numActiveRequests": len(scheduled),
            "numQueuedRequests": len(self._waiting),
            "numCompletedRequests": completed,
            "maxNumActiveRequests": self.limits.max_batch_size,
            "maxBatchSizeStatic": self.limits.max_batch_size,
            "maxBatchSizeTunerRecommended": 0,
            "maxBatchSizeRuntime": self.limits.max_batch_size,
            "maxNumTokensStatic": self.limits.max_num_tokens,
            "maxNumTokensTunerRecommended": 0,
            "maxNumTokensRuntime": self.limits.max_num_tokens,
            "gpuMemUsage": self.limits.gpu_mem_usage,
            "cpuMemUsage": 0,
            "pinnedMemUsage": 0,
            "kvCacheStats": self.kv.stats(),
            "staticBatchingStats": None,
            "inflightBatchingStats": {
                "numScheduledRequests": len(scheduled),
                "numContextRequests": len(new),
                "numGenRequests": len(scheduled) - len(new),
                "numPausedRequests": 0,
                "numCtxTokens": sum(len(r.prompt) for r in new),
                "microBatchId": 0,
                "avgNumDecodedTokensPerIter": 1.0 if scheduled else 0.0,
            },
            "specDecodingStats": None,
        })
        self._cond.notify_all()
