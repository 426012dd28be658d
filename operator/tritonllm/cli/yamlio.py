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


def load_all(text: str) -> list[Any]:
    return [d for d in yaml.safe_load_all(text) if d is not None]
