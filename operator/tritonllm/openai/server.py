"""The frontend's HTTP server (aiohttp): OpenAI's routes over one Triton model.

A generation request goes:
  1. refused at once when the server drains (503) or has max_concurrent_requests in flight
     (429), both with Retry-After;
  2. its body read (at most max_body_bytes, else 413) and validated (protocol: 400 naming the
     field; an unknown model 404);
  3. its prompt built (chat: the model's chat template, a leading BOS dropped when the model
     adds one) and counted with the model's tokenizer, against max_input_len and max_seq_len
     (400 context_length_exceeded);
  4. its sampling fields mapped to the model's inputs (one the model lacks: 400 unless at
     OpenAI's default);
  5. sent to Triton; the text that comes back goes through the stop matcher, to the client as
     server-sent events or as one answer. The Triton request is cancelled when a stop string
     matched, the client left, or request_timeout_seconds passed (504).
Every answer, error or not, is counted in the metrics by endpoint and status (a client that
left mid-stream: 499).

On SIGTERM (`serve`): /health/ready turns 503 and new requests are answered 503, the requests
in flight finish (up to the drain time), then the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tritonllm.triton.openai import FrontendConfig

from . import protocol as p
from .chat import ChatTemplate, RenderError
from .metrics import Metrics
from .stops import StopMatcher
from .tokens import ModelTokenizer, drop_bos
from .triton import Step, TritonClient, build_inputs

log = logging.getLogger("tritonllm.openai")

MAX_REQUEST_ID = 256
CLIENT_GONE = 499  # the status counted for a client that left before its answer ended
RENDER_FACTOR = 4  # a rendered chat prompt may be this many times the body limit


@dataclasses.dataclass
class Job:
    """One validated generation request, ready to send."""

    chat: bool
    id: str
    request_id: str
    started: float  # time.monotonic() at arrival
    prompt_tokens: int
    max_tokens: int
    stops: tuple[str, ...]
    inputs: list[Any]
    logprobs: bool
    stream: bool
    include_usage: bool
    # Triton streams one response per generated step (else: one response with the whole text).
    triton_stream: bool
    completion_tokens: int = 0
    finish_reason: str = "length"
    generated: list[str] = dataclasses.field(default_factory=list)
    # The prompt, when the model's first response repeats it before the completion
    # (FrontendConfig.output_includes_prompt): removed from that response's text.
    echoed_prompt: str = ""
    # num_output_tokens of a whole answer, when the model returns it.
    model_tokens: int | None = None


def strip_echo(text: str, prompt: str) -> str:
    """A first response without the prompt it starts with (a model that returns its input);
    unchanged when it does not start with it (a decoded prompt may differ from the one sent)."""
    return text[len(prompt):] if prompt and text.startswith(prompt) else text


class Frontend:
    def __init__(self, config: FrontendConfig, tokenizer: ModelTokenizer,
                 template: ChatTemplate | None, triton: TritonClient) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.template = template
        self.triton = triton
        self.metrics = Metrics(config.served_model_name)
        self.in_flight = 0
        self.draining = False
        self.created = int(time.time())

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{id:.+}", self.model)  # names may hold "/"
        app.router.add_get("/health/ready", self.ready)
        app.router.add_get("/metrics", self.prometheus)
        return app

    # --- the small routes ----------------------------------------------------------------------

    async def models(self, request: web.Request) -> web.Response:
        self.metrics.request("/v1/models", 200)
        card = p.model_card(self.config.served_model_name, self.created)
        return web.json_response({"object": "list", "data": [card]})

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["id"]
        if name != self.config.served_model_name:
            return self._error("/v1/models", self._not_found(name))
        self.metrics.request("/v1/models", 200)
        return web.json_response(p.model_card(name, self.created))

    async def ready(self, request: web.Request) -> web.Response:
        if self.draining:
            return web.json_response({"status": "draining"}, status=503)
        if await self.triton.ready():
            return web.json_response({"status": "ready"})
        return web.json_response({"status": f"model {self.config.triton_model} is not ready"},
                                 status=503)

    async def prometheus(self, request: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # --- generation ----------------------------------------------------------------------------

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        endpoint, started = request.path, time.monotonic()
        try:
            if self.draining:
                raise p.unavailable("the server is shutting down; retry on another replica")
            if self.in_flight >= self.config.max_concurrent_requests:
                raise p.ApiError(429, f"over {self.config.max_concurrent_requests} requests in "
                                 "flight; retry later", type="rate_limit_exceeded",
                                 code="rate_limit_exceeded", retry_after=1)
            self.in_flight += 1
            self.metrics.in_flight.labels(self.metrics.model).inc()
            try:
                job = await self._prepare(request, chat, started)
                if job.stream:
                    return await self._stream(request, endpoint, job)
                response = await self._answer(request, job)
            finally:
                self.in_flight -= 1
                self.metrics.in_flight.labels(self.metrics.model).dec()
        except p.ApiError as err:
            return self._error(endpoint, err, started)
        self.metrics.request(endpoint, 200)
        self.metrics.duration.labels(self.metrics.model).observe(time.monotonic() - started)
        return response

    def _error(self, endpoint: str, err: p.ApiError,
               started: float | None = None) -> web.Response:
        self.metrics.request(endpoint, err.status)
        if started is not None:
            self.metrics.duration.labels(self.metrics.model).observe(time.monotonic() - started)
        headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else {}
        return web.json_response(err.body(), status=err.status, headers=headers)

    def _not_found(self, name: str) -> p.ApiError:
        return p.ApiError(404, f"The model `{name[:200]}` does not exist; this server serves "
                          f"`{self.config.served_model_name}`", param="model",
                          code="model_not_found")

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise p.ApiError(413, f"the request body is over {self.config.max_body_bytes} bytes",
                             code="request_too_large") from None
        return p.parse_body(raw)

    def _request_id(self, request: web.Request, default: str) -> str:
        value = request.headers.get("X-Request-Id")
        if value is None:
            return default
        if not value or len(value) > MAX_REQUEST_ID or not value.isprintable():
            raise p.bad_request(f"X-Request-Id must be 1 to {MAX_REQUEST_ID} printable "
                                "characters", "X-Request-Id")
        return value

    async def _prepare(self, request: web.Request, chat: bool, started: float) -> Job:
        body = await self._body(request)
        req: p.ChatRequest | p.CompletionRequest = (
            p.validate(p.ChatRequest, body) if chat else p.validate(p.CompletionRequest, body))
        if req.model != self.config.served_model_name:
            raise self._not_found(req.model)
        stops = p.stops(req, self.config.max_stop)
        prompt = await self._prompt(req)
        prompt_tokens = await asyncio.to_thread(self.tokenizer.count, prompt,
                                                self.config.add_special_tokens)
        max_tokens = p.max_tokens(req, self.config.default_max_tokens)
        self._check_length(prompt_tokens, max_tokens, "messages" if chat else "prompt")
        logprobs = p.wants_logprobs(req)
        values = {"prompt": prompt, "max_tokens": max_tokens, **self._sampling(req, logprobs)}
        triton_stream = self._triton_streams(req.stream)
        values["stream"] = triton_stream  # sent where the model has the input (decoupled)
        id = p.new_id(chat)
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return Job(chat, id, self._request_id(request, id), started, prompt_tokens, max_tokens,
                   tuple(stops), build_inputs(self.config, values), logprobs, req.stream,
                   include_usage, triton_stream,
                   echoed_prompt=prompt if self.config.output_includes_prompt else "")

    def _triton_streams(self, client_streams: bool) -> bool:
        """Whether to ask Triton for one response per step. A decoupled model streams, also
        for an answer sent whole, so that its steps are counted as tokens; except the engine
        ensemble's when the answer is sent whole: its postprocessing decodes each step's tokens
        on their own (word spaces of some tokenizers are lost between steps), its one final
        response decodes them together."""
        if not self.config.decoupled:
            return False
        return client_streams or self.config.runtime != "engine"

    async def _prompt(self, req: p.ChatRequest | p.CompletionRequest) -> str:
        if isinstance(req, p.CompletionRequest):
            return p.completion_prompt(req)
        if self.template is None:
            raise p.bad_request(
                f"model {self.config.served_model_name} has no chat template (none in its "
                "tokenizer files); use /v1/completions or set spec.openai.chatTemplate",
                "messages", code="chat_template_missing")
        if len(req.messages) > self.config.max_messages:
            raise p.bad_request(f"at most {self.config.max_messages} messages per request",
                                "messages")
        messages = [{"role": m.role, "content": m.text(),
                     **({"name": m.name} if m.name else {})} for m in req.messages]
        limit = RENDER_FACTOR * self.config.max_body_bytes
        try:
            prompt = await asyncio.to_thread(self.template.render, messages, limit)
        except RenderError as exc:
            raise p.bad_request(str(exc), "messages") from None
        return drop_bos(prompt, self.tokenizer.bos_token, self.config.add_special_tokens)

    def _check_length(self, prompt_tokens: int, max_tokens: int, param: str) -> None:
        cfg = self.config
        if prompt_tokens > cfg.max_input_len:
            raise p.bad_request(
                f"This model's maximum input length is {cfg.max_input_len} tokens; your prompt "
                f"has {prompt_tokens} tokens", param, code="context_length_exceeded")
        if prompt_tokens + max_tokens > cfg.max_seq_len:
            raise p.bad_request(
                f"This model's maximum context length is {cfg.max_seq_len} tokens; you asked "
                f"for {prompt_tokens + max_tokens} ({prompt_tokens} in the prompt, {max_tokens} "
                "for the completion)", "max_tokens", code="context_length_exceeded")

    def _sampling(self, req: p.ChatRequest | p.CompletionRequest,
                  logprobs: bool) -> dict[str, Any]:
        values = p.sampling(req)
        for name, value in list(values.items()):
            if name not in self.config.inputs:
                if name in p.DEFAULTS and value == p.DEFAULTS[name]:
                    del values[name]
                    continue
                raise p.bad_request(f"{name} is not supported by model "
                                    f"{self.config.served_model_name}", name,
                                    code="unsupported_parameter")
        if logprobs:
            if "log_probs" not in self.config.outputs:
                raise p.bad_request(f"logprobs are not returned by model "
                                    f"{self.config.served_model_name}", "logprobs",
                                    code="unsupported_parameter")
            values["return_log_probs"] = True
        if "num_output_tokens" in self.config.outputs and \
                "return_num_output_tokens" in self.config.inputs:
            values["return_num_output_tokens"] = True
        return values

    # --- running one job -----------------------------------------------------------------------

    async def _pieces(self, job: Job, gone: Callable[[], bool]
                      ) -> AsyncGenerator[tuple[str, list[tuple[str, float]]], None]:
        """The text to release, with its tokens' log probabilities, as Triton answers; sets the
        job's completion tokens and finish reason."""
        matcher, last = StopMatcher(job.stops), None
        m = self.metrics
        steps = self.triton.generate(job.inputs, job.request_id, job.logprobs)
        try:
            async for step in steps:
                now = time.monotonic()
                if last is None:
                    m.ttft.labels(m.model).observe(now - job.started)
                else:
                    m.itl.labels(m.model).observe(now - last)
                last = now
                if job.echoed_prompt and not job.generated:
                    step = dataclasses.replace(step, text=strip_echo(step.text, job.echoed_prompt))
                job.generated.append(step.text)
                job.completion_tokens += 1 if job.triton_stream else 0
                if step.tokens is not None and not job.triton_stream:
                    job.model_tokens = step.tokens
                text = matcher.feed(step.text)
                if text or step.logprobs:
                    yield text, self._logprobs(step)
                if matcher.stopped or gone():
                    break
            else:
                if tail := matcher.flush():
                    yield tail, []
        finally:
            await steps.aclose()  # cancels the Triton request if it is still running
        self._finish(job, matcher.stopped)

    def _finish(self, job: Job, stopped: bool) -> None:
        if not job.triton_stream:  # one response: the model's count, else its text re-encoded
            job.completion_tokens = job.model_tokens if job.model_tokens is not None else \
                self.tokenizer.count("".join(job.generated), False)
        if stopped:
            job.finish_reason = "stop"
        else:
            job.finish_reason = "length" if job.completion_tokens >= job.max_tokens else "stop"
        self.metrics.prompt_tokens.labels(self.metrics.model).inc(job.prompt_tokens)
        self.metrics.completion_tokens.labels(self.metrics.model).inc(job.completion_tokens)

    def _logprobs(self, step: Step) -> list[tuple[str, float]]:
        """(token text, log probability) for a step: one value is the step's text; several are
        matched to the text's tokens when the counts agree."""
        if not step.logprobs:
            return []
        if len(step.logprobs) == 1:
            return [(step.text, step.logprobs[0])]
        pieces = self.tokenizer.pieces(step.text)
        if len(pieces) != len(step.logprobs):
            pieces = [step.text] + [""] * (len(step.logprobs) - 1)
        return list(zip(pieces, step.logprobs, strict=True))

    def _logprobs_body(self, job: Job, tokens: list[tuple[str, float]],
                       offset: int = 0) -> dict[str, Any] | None:
        if not job.logprobs:
            return None
        return p.chat_logprobs(tokens) if job.chat else p.completion_logprobs(tokens, offset)

    async def _answer(self, request: web.Request, job: Job) -> web.Response:
        texts: list[str] = []
        tokens: list[tuple[str, float]] = []
        try:
            deadline = job.started + self.config.request_timeout_seconds
            async with asyncio.timeout_at(_loop_time(deadline)):
                async for text, lps in self._pieces(job, lambda: _gone(request)):
                    texts.append(text)
                    tokens += lps
        except TimeoutError:
            raise _timed_out(self.config) from None
        if _gone(request):
            raise p.ApiError(CLIENT_GONE, "the client closed the connection")
        body = p.answer(chat=job.chat, id=job.id, model=self.config.served_model_name,
                        text="".join(texts), finish_reason=job.finish_reason,
                        usage=p.usage(job.prompt_tokens, job.completion_tokens),
                        logprobs=self._logprobs_body(job, tokens))
        return web.json_response(body, headers={"X-Request-Id": job.request_id})

    async def _stream(self, request: web.Request, endpoint: str,
                      job: Job) -> web.StreamResponse:
        """Server-sent events. The first piece is awaited before the answer starts, so that
        a Triton that is unavailable is still answered with a status the client can retry."""
        deadline = job.started + self.config.request_timeout_seconds
        pieces = self._pieces(job, lambda: _gone(request))
        try:
            async with asyncio.timeout_at(_loop_time(deadline)):
                first = await anext(pieces, None)
        except TimeoutError:
            await pieces.aclose()
            raise _timed_out(self.config) from None
        except BaseException:
            await pieces.aclose()
            raise
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
            "X-Request-Id": job.request_id})
        status = CLIENT_GONE
        try:
            await response.prepare(request)
            status = await self._events(response, job, first, pieces, deadline)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            await pieces.aclose()
        self.metrics.request(endpoint, status)
        self.metrics.duration.labels(self.metrics.model).observe(time.monotonic() - job.started)
        return response

    async def _events(self, response: web.StreamResponse, job: Job,
                      first: tuple[str, list[tuple[str, float]]] | None,
                      pieces: AsyncGenerator[tuple[str, list[tuple[str, float]]], None],
                      deadline: float) -> int:
        """Writes the chunks, the usage chunk when asked for, and [DONE]; the status counted."""
        name, created, offset = self.config.served_model_name, int(time.time()), 0

        def chunk(**kw: Any) -> bytes:
            return p.sse(p.chunk(chat=job.chat, id=job.id, created=created, model=name, **kw))

        try:
            async with asyncio.timeout_at(_loop_time(deadline)):
                if job.chat:
                    await response.write(chunk(text="", role=True))
                while first is not None:
                    text, lps = first
                    await response.write(chunk(text=text,
                                               logprobs=self._logprobs_body(job, lps, offset)))
                    offset += len(text)
                    first = await anext(pieces, None)
                await response.write(chunk(text=None if job.chat else "",
                                           finish_reason=job.finish_reason))
                if job.include_usage:
                    await response.write(chunk(usage=p.usage(job.prompt_tokens,
                                                             job.completion_tokens)))
                await response.write(p.DONE)
        except (TimeoutError, p.ApiError) as exc:
            err = exc if isinstance(exc, p.ApiError) else _timed_out(self.config)
            await _write_quietly(response, p.sse(err.body()))
            return err.status
        return 200


def _loop_time(monotonic_deadline: float) -> float:
    """A time.monotonic() deadline on the event loop's clock."""
    return asyncio.get_running_loop().time() + (monotonic_deadline - time.monotonic())


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _timed_out(config: FrontendConfig) -> p.ApiError:
    return p.ApiError(504, f"the request took over {config.request_timeout_seconds} s",
                      type="timeout", code="timeout")


async def _write_quietly(response: web.StreamResponse, data: bytes) -> None:
    with contextlib.suppress(ConnectionError):
        await response.write(data)


async def serve(frontend: Frontend, host: str, drain_seconds: float) -> None:
    """Serve until SIGTERM or SIGINT, then drain: refuse new requests, let those in flight end
    (at most drain_seconds), stop."""
    runner = web.AppRunner(frontend.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, frontend.config.port).start()
    log.info("serving %s on %s:%d (Triton model %s at %s)", frontend.config.served_model_name,
             host, frontend.config.port, frontend.config.triton_model,
             frontend.config.triton_grpc)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    frontend.draining = True
    deadline = time.monotonic() + drain_seconds
    while frontend.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    log.info("stopping (%d requests still in flight)", frontend.in_flight)
    await runner.cleanup()
    await frontend.triton.close()
