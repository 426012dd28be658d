"""Chat prompts from the model's own chat template (Jinja, Hugging Face semantics).

Where the template comes from, first found wins: spec.openai.chatTemplate (FrontendConfig
.chat_template), a `chat_template.jinja` file beside the tokenizer, the `chat_template` key of
tokenizer_config.json (a string, or a list of {name, template}: the one named "default").
It renders as transformers' apply_chat_template does (src/transformers/utils/
chat_template_utils.py, read 2026-11): an immutable sandbox with trim_blocks and
lstrip_blocks, the loopcontrols extension, a `tojson` filter that keeps non-ASCII,
the globals `raise_exception(message)` and `strftime_now(format)`, and the variables messages,
add_generation_prompt, bos_token and eos_token.

Templates come from model files and messages from clients: the template is bounded in size
(MAX_TEMPLATE_BYTES), the rendering in output (the caller's limit) and time (RENDER_SECONDS).
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_TEMPLATE_BYTES = 64 << 10
RENDER_SECONDS = 2.0
TEMPLATE_FILE = "chat_template.jinja"


class TemplateError(Exception):
    """The template cannot be loaded or compiled (a configuration error: the model's files)."""


class RenderError(Exception):
    """The template refused the conversation (raise_exception) or broke a bound: a 400."""


def _bounded(text: str, where: str) -> str:
    if len(text.encode()) > MAX_TEMPLATE_BYTES:
        raise TemplateError(f"the chat template from {where} is over {MAX_TEMPLATE_BYTES} bytes")
    return text


def find_template(override: str | None, tokenizer_dir: Path,
                  tokenizer_config: dict[str, Any]) -> str | None:
    """The chat template's source, or None when the model has none."""
    if override:
        return _bounded(override, "spec.openai.chatTemplate")
    path = tokenizer_dir / TEMPLATE_FILE
    if path.is_file():
        if path.stat().st_size > MAX_TEMPLATE_BYTES:
            raise TemplateError(f"{path} is over {MAX_TEMPLATE_BYTES} bytes")
        return path.read_text()
    value = tokenizer_config.get("chat_template")
    if isinstance(value, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get("default")
    return _bounded(value, "tokenizer_config.json") if isinstance(value, str) else None


def _raise_exception(message: str) -> None:
    raise RenderError(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | str | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


class ChatTemplate:
    def __init__(self, source: str, bos_token: str | None, eos_token: str | None) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self.template = env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"the chat template does not compile: {exc}") from None
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""

    def render(self, messages: list[dict[str, Any]], max_bytes: int) -> str:
        """The prompt for `messages`, ending where the assistant's answer begins."""
        out: list[str] = []
        size, started = 0, time.monotonic()
        try:
            for piece in self.template.generate(
                    messages=messages, add_generation_prompt=True,
                    bos_token=self.bos_token, eos_token=self.eos_token):
                size += len(piece.encode())
                if size > max_bytes:
                    raise RenderError(f"the rendered chat prompt is over {max_bytes} bytes")
                if time.monotonic() - started > RENDER_SECONDS:
                    raise RenderError(f"the chat template took over {RENDER_SECONDS} s")
                out.append(piece)
        except RenderError:
            raise
        except (jinja2.TemplateError, TypeError, ValueError, OverflowError) as exc:
            raise RenderError(f"the chat template failed on these messages: {exc}") from None
        return "".join(out)
