"""YAML in and out for the CLI: block style, key order kept, multi-document streams."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # Multi-line strings (scripts, config files) as literal blocks: readable in `render` output.
    # A string kubectl's YAML (go-yaml v2) would read as a number or a boolean is quoted, even
    # where PyYAML would not: a content hash such as `6004e52833` is a float to go-yaml.
    style = "|" if "\n" in data else None
    if style is None and _go_reads_other_than_str(data):
        style = "'"
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def _go_reads_other_than_str(text: str) -> bool:
    if text in _GO_BOOLS or text in ("~", "null", "Null", "NULL", ""):
        return True
    return bool(re.match(r"^[-+.0-9]", text)) and not isinstance(_go_number(text), str)


_Dumper.add_representer(str, _str_presenter)


def dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def dump_all(objs: Iterable[Any]) -> str:
    return yaml.dump_all(
        list(objs), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100
    )


# Values (mappings, lists, scalars) one document may expand to through aliases: far above any
# real object, far below what an alias bomb ("billion laughs") expands to.
MAX_NODES = 100_000


class StrictYamlError(ValueError):
    """YAML the API server would refuse too (duplicate keys, an alias bomb)."""


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that reads plain scalars as kubectl does, and refuses duplicate keys.

    kubectl (sigs.k8s.io/yaml over go-yaml v2) and PyYAML both speak YAML 1.1, but not the same
    way; a file that applies must render to the same values, so the plain scalars are resolved
    by go-yaml v2's rules instead of PyYAML's: `y`, `Y`, `n` and `N` are booleans too; a number
    is what Go's strconv reads (`0o17` and `1e3` are numbers, `1e3` and `5e-1` floats); there are
    no sexagesimal numbers (`10:30` is a string), no timestamps (`2024-01-01` stays a string, as
    go-yaml keeps it for untyped values) and no `=` value tag.
    """

    yaml_implicit_resolvers: dict[Any, Any] = {}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)  # merge keys (<<) first, as the constructor does
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen and key != "<<":
                raise StrictYamlError(
                    f"duplicate key {key!r} at line {key_node.start_mark.line + 1}: "
                    "each key may appear once in a mapping"
                )
            if isinstance(key, str):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


_GO_BOOLS = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"),
                    True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"),
                    False),
}
_GO_NUMBER_TAG = "tag:tritonllm.io,2026:go-number"
# go-yaml v2's float syntax (yamlStyleFloat); ints are what strconv.ParseInt(s, 0, 64) takes
# once '_' is removed: decimal, 0x hex, 0o or leading-0 octal, 0b binary, with a sign.
_GO_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_GO_INT = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[oO]?[0-7]+|0[bB][01]+|[1-9][0-9]*|0)$")
_GO_SPECIAL = {".inf": math.inf, ".Inf": math.inf, ".INF": math.inf, "+.inf": math.inf,
               "+.Inf": math.inf, "+.INF": math.inf, "-.inf": -math.inf, "-.Inf": -math.inf,
               "-.INF": -math.inf, ".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan}


def _go_number(text: str) -> Any:
    """A plain scalar that starts like a number, as go-yaml v2 resolves it (else the string)."""
    if text in _GO_SPECIAL:
        return _GO_SPECIAL[text]
    plain = text.replace("_", "")
    if _GO_INT.match(plain):
        sign = -1 if plain.startswith("-") else 1
        digits = plain.lstrip("+-")
        base = {"x": 16, "o": 8, "b": 2}.get(digits[1:2].lower(), 8 if digits[:1] == "0" else 10)
        body = digits[2:] if base != 10 and digits[1:2].isalpha() else digits
        value = sign * int(body, base) if body else 0
        if -(2**63) <= value < 2**64:  # int64, then uint64
            return value
    if _GO_FLOAT.match(plain):
        return float(plain)
    return text


def _construct_go_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    return _go_number(loader.construct_scalar(node))


def _construct_go_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    return _GO_BOOLS[loader.construct_scalar(node)]


_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile("^(" + "|".join(_GO_BOOLS) + ")$"),
    list("yYnNtTfFoO"),
)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_StrictLoader.add_implicit_resolver(
    _GO_NUMBER_TAG, re.compile(r"^[-+.0-9][-+._0-9a-zA-Z]*$"), list("-+.0123456789")
)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"]
)
_StrictLoader.add_constructor("tag:yaml.org,2002:bool", _construct_go_bool)
_StrictLoader.add_constructor(_GO_NUMBER_TAG, _construct_go_number)


def as_json(value: Any) -> Any:
    """`value` as kubectl sends it to the API server: YAML keys that are not strings become
    their strings (`7` -> "7", `yes` -> "true"), and a float with an integral value becomes an
    integer (Go's JSON encoder writes 2.0 as 2, which the API server reads as an int64)."""
    if isinstance(value, dict):
        return {_json_key(k): as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_json(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


def _json_key(key: Any) -> Any:
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int | float):
        return str(int(key)) if isinstance(key, float) and key.is_integer() else str(key)
    return key  # a string, or what the API server refuses too (a null key stays unusable)


def _bounded(doc: Any) -> Any:
    """`doc`, if it expands to at most MAX_NODES values (aliases counted every time)."""
    stack, count = [doc], 0
    while stack:
        value = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise StrictYamlError(
                f"a document expands to more than {MAX_NODES} values through YAML aliases "
                "(an alias bomb?); write the object out without anchors"
            )
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return doc


def load_all(text: str) -> list[Any]:
    """Every non-empty document (the items of a v1 List); duplicate keys and alias bombs raise
    StrictYamlError."""
    docs = yaml.load_all(text, Loader=_StrictLoader)  # a SafeLoader subclass
    return [item for d in docs if d is not None for item in _items(as_json(_bounded(d)))]


def _items(doc: Any) -> list[Any]:
    """A `kind: List` (what `kubectl get -o yaml` writes for several objects) as its items, as
    kubectl apply reads it; any other document as itself."""
    if (isinstance(doc, dict) and doc.get("kind") == "List" and doc.get("apiVersion") == "v1"
            and isinstance(doc.get("items"), list)):
        return [item for item in doc["items"] if item is not None]
    return [doc]
