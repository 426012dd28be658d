"""OpenAI request validation, refusals and answers (tritonllm.openai.protocol)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tritonllm.openai import protocol as p

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {"model": "m", "prompt": "hi"}


def refused(model: type[p._Common], body: dict[str, Any]) -> p.ApiError:
    with pytest.raises(p.ApiError) as err:
        p.validate(model, body)
    return err.value


@pytest.mark.parametrize(("model", "body", "param", "text"), [
    (p.ChatRequest, {**CHAT, "bogus": 1}, "bogus", "Unrecognized request argument supplied"),
    (p.CompletionRequest, {**COMPLETION, "frobnicate": True}, "frobnicate", "Unrecognized"),
    (p.ChatRequest, {"model": "m"}, "messages", "Missing required parameter"),
    (p.ChatRequest, {**CHAT, "messages": []}, "messages", "Invalid value"),
    (p.ChatRequest, {**CHAT, "messages": [{"role": "wizard", "content": "x"}]},
     "messages[0].role", "Invalid value"),
    (p.ChatRequest, {**CHAT, "messages": [{"role": "user", "content": "x", "extra": 1}]},
     "messages[0].extra", "Unrecognized"),
    (p.ChatRequest, {**CHAT, "temperature": 3}, "temperature", "Invalid value"),
    (p.ChatRequest, {**CHAT, "max_tokens": 0}, "max_tokens", "Invalid value"),
    (p.CompletionRequest, {**COMPLETION, "top_p": 0}, "top_p", "Invalid value"),
    (p.ChatRequest, {**CHAT, "n": 2}, "n", "n > 1 is not supported"),
    (p.CompletionRequest, {**COMPLETION, "best_of": 2}, "best_of", "best_of"),
    (p.CompletionRequest, {**COMPLETION, "echo": True}, "echo", "echo"),
    (p.ChatRequest, {**CHAT, "tools": [{"type": "function"}]}, "tools", "tools"),
    (p.ChatRequest, {**CHAT, "response_format": {"type": "json_object"}}, "response_format",
     "response_format"),
    (p.ChatRequest, {**CHAT, "top_logprobs": 2}, "top_logprobs", "chosen token"),
    (p.ChatRequest, {**CHAT, "logit_bias": {"1": 5}}, "logit_bias", "logit_bias"),
    (p.ChatRequest, {**CHAT, "stream_options": {"include_usage": True}}, "stream_options",
     "only allowed when stream"),
])
def test_bad_requests_name_the_field(model: type[p._Common], body: dict[str, Any], param: str,
                                     text: str) -> None:
    err = refused(model, body)
    assert (err.status, err.param, err.type) == (400, param, "invalid_request_error")
    assert text in err.message
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}


def test_defaults_that_sdks_send_are_accepted() -> None:
    request = p.validate(p.ChatRequest, {
        **CHAT, "n": 1, "tools": [], "tool_choice": "none", "response_format": {"type": "text"},
        "top_logprobs": 0, "store": False, "user": "u1", "metadata": {"k": "v"},
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                   {"type": "text", "text": "b"}]}]})
    assert request.messages[0].text() == "ab"


def test_max_tokens_and_max_completion_tokens() -> None:
    chat = p.validate(p.ChatRequest, {**CHAT, "max_tokens": 5, "max_completion_tokens": 3})
    assert p.max_tokens(chat, 100) == 3  # max_completion_tokens wins
    assert p.max_tokens(p.validate(p.ChatRequest, CHAT), 100) == 100
    assert p.max_tokens(p.validate(p.CompletionRequest, {**COMPLETION, "max_tokens": 7}), 1) == 7


def test_stop_strings_are_bounded() -> None:
    request = p.validate(p.CompletionRequest, {**COMPLETION, "stop": "x"})
    assert p.stops(request, 4) == ["x"]
    many = p.validate(p.CompletionRequest, {**COMPLETION, "stop": ["a", "b", "c"]})
    with pytest.raises(p.ApiError) as err:
        p.stops(many, 2)
    assert err.value.param == "stop" and "at most 2" in err.value.message


def test_prompts() -> None:
    assert p.completion_prompt(p.validate(p.CompletionRequest, {**COMPLETION,
                                                                "prompt": ["one"]})) == "one"
    with pytest.raises(p.ApiError) as err:
        p.completion_prompt(p.validate(p.CompletionRequest, {**COMPLETION,
                                                             "prompt": ["a", "b"]}))
    assert err.value.param == "prompt"


def test_sampling_fields_by_frontend_name() -> None:
    request = p.validate(p.ChatRequest, {**CHAT, "temperature": 0.5, "seed": 3,
                                         "presence_penalty": 0.0})
    assert p.sampling(request) == {"temperature": 0.5, "seed": 3, "presence_penalty": 0.0}
    assert p.wants_logprobs(p.validate(p.ChatRequest, {**CHAT, "logprobs": True}))
    assert not p.wants_logprobs(p.validate(p.ChatRequest, {**CHAT, "logprobs": False}))
    assert p.wants_logprobs(p.validate(p.CompletionRequest, {**COMPLETION, "logprobs": 0}))


def test_the_body_must_be_a_json_object() -> None:
    for raw in (b"{", b"[1]", b"\xff"):
        with pytest.raises(p.ApiError) as err:
            p.parse_body(raw)
        assert err.value.status == 400


def test_answers_and_chunks() -> None:
    body = p.answer(chat=True, id="chatcmpl-1", model="m", text="hi", finish_reason="stop",
                    usage=p.usage(3, 1))
    assert body["object"] == "chat.completion" and body["system_fingerprint"] is None
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    first = p.chunk(chat=True, id="c", created=1, model="m", text="", role=True)
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    last = p.chunk(chat=False, id="c", created=1, model="m", usage=p.usage(1, 2))
    assert last["choices"] == [] and last["usage"]["total_tokens"] == 3
    text = p.completion_logprobs([("a", -0.5), ("bc", -1.0)], start=2)
    assert text == {"tokens": ["a", "bc"], "token_logprobs": [-0.5, -1.0],
                    "top_logprobs": None, "text_offset": [2, 3]}
    assert p.chat_logprobs([("é", -0.1)])["content"][0]["bytes"] == [195, 169]


def test_sse_framing() -> None:
    event = p.sse({"a": 1})
    assert event == b'data: {"a":1}\n\n'
    assert json.loads(event[len(b"data: "):]) == {"a": 1}
    assert p.DONE == b"data: [DONE]\n\n"


def test_ids_and_bounded_messages() -> None:
    assert p.new_id(True).startswith("chatcmpl-") and p.new_id(False).startswith("cmpl-")
    assert p.new_id(True) != p.new_id(True)
    assert len(p.ApiError(500, "x" * 10_000).message) == p.MAX_MESSAGE_BYTES
