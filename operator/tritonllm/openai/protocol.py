"""OpenAI's request bodies, answers and error objects, as the frontend speaks them (pure).

Requests are validated by pydantic models that forbid unknown fields: OpenAI answers an
unknown field with 400 "Unrecognized request argument supplied: <field>", and so do we, with
`param` naming it. Fields OpenAI has but this server cannot honour are accepted at their
default value (so SDKs that send defaults work) and refused otherwise, by name (REFUSED).
`sampling(...)` turns a validated request into the frontend's parameter names
(tritonllm.triton.openai.PARAMETERS); which of them the model takes is the caller's business.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

R = TypeVar("R", bound="_Common")
MAX_MESSAGE_BYTES = 1000  # error messages that quote untrusted text are cut to this


class ApiError(Exception):
    """An answer in OpenAI's error object: {"error": {message, type, param, code}}."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message[:MAX_MESSAGE_BYTES]
        self.type = type
        self.param = param
        self.code = code
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def unavailable(message: str, retry_after: int = 1) -> ApiError:
    return ApiError(503, message, type="service_unavailable", code="service_unavailable",
                    retry_after=retry_after)


# --- requests ----------------------------------------------------------------------------------

_STRICT = ConfigDict(extra="forbid", frozen=True)


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_usage: bool | None = None


class TextPart(BaseModel):
    model_config = _STRICT
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = _STRICT
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class _Common(BaseModel):
    """Fields both endpoints share."""

    model_config = _STRICT
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, lt=1 << 63)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    n: int | None = Field(default=None, ge=1)
    user: str | None = None  # accepted and ignored, as an end-user id for abuse tracking
    # Refused unless at their default (REFUSED says why).
    logit_bias: dict[str, float] | None = None


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None  # accepted and ignored (a store-only field)
    modalities: list[str] | None = None
    audio: Any = None
    reasoning_effort: str | None = None
    service_tier: str | None = None
    prediction: Any = None


class CompletionRequest(_Common):
    prompt: str | list[str]
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool | None = None
    best_of: int | None = Field(default=None, ge=1)
    suffix: str | None = None


# field -> (its value that is fine, why any other is refused)
REFUSED: dict[str, tuple[Any, str]] = {
    "n": (1, "n > 1 is not supported: ask once per completion"),
    "best_of": (1, "best_of > 1 is not supported"),
    "echo": (False, "echo is not supported"),
    "suffix": (None, "suffix (insertion) is not supported"),
    "logit_bias": (None, "logit_bias is not supported"),
    "top_logprobs": (0, "top_logprobs is not supported: the model returns the chosen token's "
                        "log probability only (use logprobs)"),
    "tools": (None, "tools are not supported by this server"),
    "tool_choice": ("none", "tool_choice is not supported by this server"),
    "functions": (None, "functions are not supported by this server"),
    "function_call": ("none", "function_call is not supported by this server"),
    "parallel_tool_calls": (None, "parallel_tool_calls is not supported by this server"),
    "response_format": ({"type": "text"}, "response_format other than text is not supported"),
    "store": (False, "store is not supported by this server"),
    "modalities": (["text"], "modalities other than text are not supported"),
    "audio": (None, "audio output is not supported"),
    "reasoning_effort": (None, "reasoning_effort is not supported by this server"),
    "service_tier": ("auto", "service_tier is not supported by this server"),
    "prediction": (None, "prediction (predicted outputs) is not supported"),
}


def _param(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not out:
            out = str(part)
        elif isinstance(part, str) and not part.startswith(("str", "list", "function-")):
            out += f".{part}"
    return out


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def validate(model: type[R], body: dict[str, Any]) -> R:
    """The request, or 400 naming the first offending field."""
    try:
        request = model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = _param(tuple(first["loc"]))
        if first["type"] == "extra_forbidden":
            raise bad_request(f"Unrecognized request argument supplied: {param}", param) from None
        if first["type"] == "missing":
            raise bad_request(f"Missing required parameter: '{param}'", param) from None
        raise bad_request(f"Invalid value for '{param}': {first['msg']}", param) from None
    for field, (fine, why) in REFUSED.items():
        value = getattr(request, field, None)
        if value is not None and value != fine and not (field == "tools" and value == []):
            raise bad_request(why, field, code="unsupported_parameter")
    if request.stream_options is not None and not request.stream:
        raise bad_request("stream_options is only allowed when stream is true", "stream_options")
    return request


def stops(request: _Common, max_stop: int) -> list[str]:
    stop = request.stop
    values = [stop] if isinstance(stop, str) else list(stop or [])
    if len(values) > max_stop:
        raise bad_request(f"stop may hold at most {max_stop} strings, not {len(values)}", "stop")
    if any(not s for s in values):
        raise bad_request("stop strings must not be empty", "stop")
    return values


def completion_prompt(request: CompletionRequest) -> str:
    prompt = request.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise bad_request("prompt must be one string (batches of prompts are not supported)",
                              "prompt")
        prompt = prompt[0]
    return prompt


def max_tokens(request: _Common, default: int) -> int:
    if isinstance(request, ChatRequest) and request.max_completion_tokens is not None:
        return request.max_completion_tokens
    return request.max_tokens or default


def wants_logprobs(request: _Common) -> bool:
    value = getattr(request, "logprobs", None)
    return value is not None and value is not False


def sampling(request: _Common) -> dict[str, Any]:
    """The request's sampling fields by the frontend's parameter names (only those set)."""
    values: dict[str, Any] = {
        "temperature": request.temperature, "top_p": request.top_p, "seed": request.seed,
        "frequency_penalty": request.frequency_penalty,
        "presence_penalty": request.presence_penalty,
    }
    return {k: v for k, v in values.items() if v is not None}


# OpenAI's defaults: a field the model cannot take is still fine at this value.
DEFAULTS: dict[str, Any] = {"temperature": 1.0, "top_p": 1.0, "frequency_penalty": 0.0,
                            "presence_penalty": 0.0}


# --- answers -----------------------------------------------------------------------------------


def new_id(chat: bool) -> str:
    return f"{'chatcmpl' if chat else 'cmpl'}-{secrets.token_hex(12)}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chat_logprobs(tokens: list[tuple[str, float]]) -> dict[str, Any]:
    return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()),
                         "top_logprobs": []} for t, lp in tokens]}


def completion_logprobs(tokens: list[tuple[str, float]], start: int = 0) -> dict[str, Any]:
    offsets, at = [], start
    for t, _ in tokens:
        offsets.append(at)
        at += len(t)
    return {"tokens": [t for t, _ in tokens], "token_logprobs": [lp for _, lp in tokens],
            "top_logprobs": None, "text_offset": offsets}


def answer(*, chat: bool, id: str, model: str, text: str, finish_reason: str,
           usage: dict[str, int], logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A non-streamed answer (chat.completion or text_completion)."""
    if chat:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish_reason,
                                  "message": {"role": "assistant", "content": text},
                                  "logprobs": logprobs}
    else:
        choice = {"index": 0, "finish_reason": finish_reason, "text": text,
                  "logprobs": logprobs}
    return {"id": id, "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": model, "system_fingerprint": None,
            "choices": [choice], "usage": usage}


def chunk(*, chat: bool, id: str, created: int, model: str, text: str | None = None,
          role: bool = False, finish_reason: str | None = None,
          logprobs: dict[str, Any] | None = None,
          usage: dict[str, int] | None = None) -> dict[str, Any]:
    """One streamed chunk; with `usage`, the final usage-only chunk (empty choices)."""
    body: dict[str, Any] = {
        "id": id, "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created, "model": model, "system_fingerprint": None}
    if usage is not None:
        return {**body, "choices": [], "usage": usage}
    if chat:
        delta: dict[str, Any] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason,
                                  "logprobs": logprobs}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish_reason,
                  "logprobs": logprobs}
    return {**body, "choices": [choice]}


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event: `data: <json>` and a blank line (`[DONE]` as is)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


DONE = sse("[DONE]")


def model_card(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "tritonllm"}
