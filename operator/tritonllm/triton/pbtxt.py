"""A small emitter of protobuf text format, for Triton's config.pbtxt.

Upstream fills `${name}` placeholders in template files with `string.Template` and inserts values
verbatim, so a quote or backslash in a path breaks the file and an unfilled placeholder survives
(reference §1.1, §2.1). We build each config as data instead and print it here, where every value
is typed: strings are always quoted and escaped, enum values are checked identifiers, numbers and
booleans are printed as such. The output parses with `google.protobuf.text_format` against
Triton's `ModelConfig` (the unit tests check that for every rendered config).

A message is a ``dict`` from field name to value (insertion order is kept); a value is a scalar,
a nested message, a list of scalars (a repeated scalar field, printed as ``[a, b]``) or a list of
messages (a repeated message field, printed as one block per element). Map fields, such as
``parameters``, are repeated ``{key, value}`` messages (see :func:`string_map`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import TypeAlias

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class Enum:
    """An enum value, printed bare (``TYPE_INT32``, ``KIND_CPU``)."""

    name: str

    def __post_init__(self) -> None:
        if not _IDENT.match(self.name):
            raise ValueError(f"not an enum identifier: {self.name!r}")


Scalar: TypeAlias = str | int | float | bool | Enum
Message: TypeAlias = Mapping[str, "Value"]
Value: TypeAlias = Scalar | Message | Sequence[Scalar] | Sequence[Message]


def quote(text: str) -> str:
    """A text-format string literal: UTF-8, with quotes, backslashes and controls escaped."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def scalar(value: Scalar) -> str:
    """One scalar in text format."""
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {value!r}")
        return repr(value)
    if isinstance(value, str):
        return quote(value)
    raise TypeError(f"not a text-format scalar: {value!r}")


def _is_message(value: object) -> bool:
    return isinstance(value, Mapping)


def _field(name: str, value: Value, indent: int) -> list[str]:
    if not _IDENT.match(name):
        raise ValueError(f"not a field name: {name!r}")
    pad = "  " * indent
    if _is_message(value):
        assert isinstance(value, Mapping)
        return [f"{pad}{name} {{", *_body(value, indent + 1), f"{pad}}}"]
    if isinstance(value, Sequence) and not isinstance(value, str):
        items = list(value)
        if items and all(_is_message(i) for i in items):
            lines: list[str] = []
            for item in items:
                assert isinstance(item, Mapping)
                lines += [f"{pad}{name} {{", *_body(item, indent + 1), f"{pad}}}"]
            return lines
        if any(_is_message(i) for i in items):
            raise TypeError(f"{name}: a repeated field mixes messages and scalars")
        return [f"{pad}{name}: [{', '.join(scalar(i) for i in items)}]"]  # type: ignore[arg-type]
    return [f"{pad}{name}: {scalar(value)}"]  # type: ignore[arg-type]


def _body(message: Message, indent: int) -> list[str]:
    lines: list[str] = []
    for name, value in message.items():
        lines += _field(name, value, indent)
    return lines


def dumps(message: Message) -> str:
    """The text format of a top-level message, ending with a newline."""
    return "\n".join(_body(message, 0)) + "\n"


def string_map(values: Mapping[str, str]) -> list[Message]:
    """A ``map<string, ModelParameter>`` such as ``parameters``, keys in the given order."""
    return [{"key": k, "value": {"string_value": v}} for k, v in values.items()]
