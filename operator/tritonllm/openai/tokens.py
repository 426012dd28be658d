"""The model's tokenizer, as the frontend counts with it (the `tokenizers` package).

Prompt tokens are the prompt encoded as the model encodes it (with special tokens, e.g. a BOS,
when the model adds them); completion tokens of a non-decoupled model are its text re-encoded
without special tokens. The files are the model's own: tokenizer.json and, beside it,
tokenizer_config.json (bos_token, eos_token, chat_template).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

MAX_CONFIG_BYTES = 4 << 20  # tokenizer_config.json; some embed long chat templates


class TokenizerError(Exception):
    """The model's tokenizer files are missing or unreadable."""


def _token_text(value: Any) -> str | None:
    """bos_token / eos_token: a string, or an AddedToken dict with `content`."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def read_config(directory: Path) -> dict[str, Any]:
    path = directory / "tokenizer_config.json"
    if not path.exists():
        return {}
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise TokenizerError(f"{path} is over {MAX_CONFIG_BYTES} bytes")
    try:
        config = json.loads(path.read_text())
    except ValueError as exc:
        raise TokenizerError(f"{path}: {exc}") from None
    return config if isinstance(config, dict) else {}


@dataclasses.dataclass(frozen=True)
class ModelTokenizer:
    tokenizer: Tokenizer
    bos_token: str | None
    eos_token: str | None
    config: dict[str, Any]  # tokenizer_config.json

    @classmethod
    def load(cls, directory: str | Path) -> ModelTokenizer:
        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise TokenizerError(f"no tokenizer.json in {directory}")
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # the tokenizers package raises a bare Exception
            raise TokenizerError(f"{path}: {exc}") from None
        config = read_config(directory)
        return cls(tokenizer, _token_text(config.get("bos_token")),
                   _token_text(config.get("eos_token")), config)

    def count(self, text: str, add_special_tokens: bool) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def pieces(self, text: str) -> list[str]:
        """`text` split into the tokens' texts (for log probabilities)."""
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        return [text[a:b] for a, b in encoding.offsets]


def drop_bos(prompt: str, bos_token: str | None, add_special_tokens: bool) -> str:
    """A rendered chat prompt without its leading BOS text when the model adds a BOS itself:
    otherwise the prompt would begin with two."""
    if add_special_tokens and bos_token and prompt.startswith(bos_token):
        return prompt[len(bos_token):]
    return prompt
