"""Chat templates and the tokenizer as the frontend uses them (tritonllm.openai.chat, .tokens):
templates written here in the shape of real model families' (ChatML as Qwen's models use it,
Llama 2's chat format), rendered with Hugging Face's semantics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from tests.triton.openai_stack import LLAMA2_STYLE_TEMPLATE
from tritonllm.openai.chat import (
    MAX_TEMPLATE_BYTES,
    ChatTemplate,
    RenderError,
    TemplateError,
    find_template,
)
from tritonllm.openai.tokens import ModelTokenizer, TokenizerError, drop_bos

# ChatML, the format of Qwen's chat models: <|im_start|>role\ncontent<|im_end|>\n per message.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
WORDS = ["<pad>", "<unk>", "</s>", "<s>", "hello", "world", "hi"]


def write_tokenizer(directory: Path, **config: object) -> Path:
    """A tiny WordLevel tokenizer that prepends <s> (as make_tokenizer.py's), with
    tokenizer_config.json holding `config`."""
    vocab = {w: i for i, w in enumerate(WORDS)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>", **config}))
    return directory


def test_chatml_renders_every_turn_and_the_generation_prompt() -> None:
    template = ChatTemplate(CHATML, "<s>", "</s>")
    prompt = template.render([{"role": "system", "content": "be brief"},
                              {"role": "user", "content": "hello"}], 10_000)
    assert prompt == ("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello"
                      "<|im_end|>\n<|im_start|>assistant\n")


def test_llama2_style_template_its_bos_dropped_when_the_model_adds_one() -> None:
    template = ChatTemplate(LLAMA2_STYLE_TEMPLATE, "<s>", "</s>")
    prompt = template.render([{"role": "system", "content": "hi"},
                              {"role": "user", "content": "hello world"}], 10_000)
    assert prompt == "<s>[INST] <<SYS>>\nhi\n<</SYS>>\n\nhello world [/INST]"
    assert drop_bos(prompt, "<s>", True) == prompt[len("<s>"):]
    assert drop_bos(prompt, "<s>", False) == prompt  # the model adds none: kept
    assert drop_bos("hello", "<s>", True) == "hello"


def test_raise_exception_refuses_the_conversation() -> None:
    template = ChatTemplate(LLAMA2_STYLE_TEMPLATE, "<s>", "</s>")
    with pytest.raises(RenderError, match="alternate"):
        template.render([{"role": "assistant", "content": "x"}], 10_000)


def test_hf_globals_and_filters() -> None:
    template = ChatTemplate("{{ strftime_now('%Y') | length }} {{ messages | tojson }}",
                            None, None)
    assert template.render([{"role": "user", "content": "héllo"}], 10_000) == \
        '4 [{"role": "user", "content": "héllo"}]'  # tojson keeps non-ASCII, as HF's


def test_the_sandbox_and_the_bounds_hold() -> None:
    with pytest.raises(RenderError):  # no attribute access to Python internals
        ChatTemplate("{{ messages.__class__.__mro__ }}", None, None).render([], 10_000)
    with pytest.raises(RenderError, match="over 100 bytes"):
        ChatTemplate("{% for i in range(1000) %}xx{% endfor %}", None, None).render([], 100)
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate("{% for %}", None, None)


def test_where_the_template_comes_from(tmp_path: Path) -> None:
    config = {"chat_template": "from-config"}
    assert find_template(None, tmp_path, config) == "from-config"
    named = {"chat_template": [{"name": "tool_use", "template": "t"},
                               {"name": "default", "template": "d"}]}
    assert find_template(None, tmp_path, named) == "d"
    (tmp_path / "chat_template.jinja").write_text("from-file")
    assert find_template(None, tmp_path, config) == "from-file"
    assert find_template("from-spec", tmp_path, config) == "from-spec"
    assert find_template(None, tmp_path / "none", {}) is None
    with pytest.raises(TemplateError, match="over"):
        find_template("x" * (MAX_TEMPLATE_BYTES + 1), tmp_path, {})


def test_tokens_are_counted_as_the_model_encodes(tmp_path: Path) -> None:
    tokenizer = ModelTokenizer.load(write_tokenizer(tmp_path, chat_template=CHATML))
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<s>", "</s>")
    assert tokenizer.count("hello world", add_special_tokens=True) == 3  # <s> hello world
    assert tokenizer.count("hello world", add_special_tokens=False) == 2
    assert tokenizer.pieces("hello world") == ["hello", "world"]
    assert tokenizer.config["chat_template"] == CHATML


def test_a_missing_or_broken_tokenizer_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match=r"no tokenizer\.json"):
        ModelTokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=r"tokenizer\.json"):
        ModelTokenizer.load(tmp_path)
