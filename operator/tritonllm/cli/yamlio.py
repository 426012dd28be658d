"""YAML in and out for the CLI: block style, key order kept, multi-document streams."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # Multi-line strings (scripts, config files) as literal blocks: readable in `render` output.
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


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
    """SafeLoader that refuses duplicate mapping keys, as the API server does."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
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
    """Every non-empty document; duplicate keys and alias bombs raise StrictYamlError."""
    docs = yaml.load_all(text, Loader=_StrictLoader)  # a SafeLoader subclass
    return [_bounded(d) for d in docs if d is not None]
