"""SIMULATED argument checking of `LLM(**kwargs)` and of its config classes.

The real LLM (TensorRT-LLM, tensorrt_llm/llmapi/llm.py, BaseLLM.__init__) refuses any keyword
that is not a field of its arguments class (TorchLlmArgs for the PyTorch backend) with
``ValueError("LLM got invalid argument: <key>")``, after logging "Failed to parse the arguments
for the LLM constructor: ...". That check is in the stored versions of llm.py of the 1.x line
read here (NVIDIA/TensorRT-LLM main, 2025-2026), reported for 1.0.0rc4
([issue #7752](https://github.com/NVIDIA/TensorRT-LLM/issues/7752)) and came
with mid-2025 changes (PR #4922); an older stored version (commit 00966934, 0.19 era) lacks it,
and there the arguments class itself, a pydantic model with extra='forbid', refuses the key with
a ``ValidationError`` (a ValueError). The stand-in raises the first for versions >= 0.21, the
second before. A bad key inside a config value (``kv_cache_config={...}``; the config classes
forbid extra keys too) is a pydantic ``ValidationError`` of type ``extra_forbidden`` in every
version. All of it is checked against the contract table of the package's version
(tests/contract/tables/llm_args-<version>.json, installed in the image as
tensorrt_llm/_standin_llm_args.json):

    {"classes": {"LLM" | "TorchLlmArgs": [field, ...], "KvCacheConfig": [...], ...},
     "nested": {"kv_cache_config": "KvCacheConfig", "scheduler_config.x": "X", ...},
     "enums": {"EnumName": [value, ...],
               "SchedulerConfig.capacity_scheduler_policy": [value, ...] | "EnumName"}}

A field is a name or an object with a "name"; "LLM" (every field LLM() takes) is preferred to
"TorchLlmArgs". A field without a "Class.field" enum entry takes the enum named like it
(capacity_scheduler_policy -> CapacitySchedulerPolicy). Where the table is looked for: the file
named by TRITONLLM_STANDIN_LLM_ARGS, else the installed copy, else the repository's table (the
package used from images/triton-standin/fakes on a host).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

ENV_TABLE = "TRITONLLM_STANDIN_LLM_ARGS"
PACKAGE = Path(__file__).resolve().parent.parent
INSTALLED_TABLE = PACKAGE / "_standin_llm_args.json"
# images/triton-standin/fakes/tensorrt_llm -> the repository root, for use from a checkout.
REPO_TABLES = PACKAGE.parents[3] / "tests" / "contract" / "tables"
# The arguments class of the PyTorch backend, under the names a table may give it.
LLM_CLASS_NAMES = ("LLM", "TorchLlmArgs", "LlmArgs", "BaseLlmArgs")
# pydantic names the model it validates: the PyTorch backend's arguments class.
ARGS_TITLE = "TorchLlmArgs"
# The first version whose LLM() refuses an unknown keyword before pydantic sees it.
INVALID_ARGUMENT_CHECK_FROM = (0, 21)
# Keys BaseLLM.__init__ accepts besides the fields (it pops or passes them itself).
EXTRA_LLM_KEYS = frozenset({"_mpi_session", "backend"})


class ValidationError(ValueError):
    """SIMULATED pydantic ValidationError (pydantic's is a ValueError too), message in its style."""

    def __init__(self, title: str, errors: list[dict[str, Any]]) -> None:
        self.title = title
        self._errors = errors
        lines = [f"{len(errors)} validation error{'' if len(errors) == 1 else 's'} for {title}"]
        for e in errors:
            value = e["input"]
            lines += [".".join(e["loc"]),
                      f"  {e['msg']} [type={e['type']}, input_value={value!r}, "
                      f"input_type={type(value).__name__}]"]
        super().__init__("\n".join(lines))

    def errors(self) -> list[dict[str, Any]]:
        return list(self._errors)


class Table:
    """The option table of one TensorRT-LLM version (module docstring)."""

    def __init__(self, data: dict[str, Any], source: str) -> None:
        self.source = source
        self.classes = {name: {f if isinstance(f, str) else str(f["name"]) for f in fields}
                        for name, fields in data.get("classes", {}).items()}
        self.nested: dict[str, str] = dict(data.get("nested", {}))
        enums = data.get("enums", {})
        # "Class.field": "EnumName" refers to the values listed under "EnumName".
        self.enums = {key: [str(v) for v in (enums.get(values, []) if isinstance(values, str)
                                             else values)]
                      for key, values in enums.items()}
        names = [n for n in LLM_CLASS_NAMES if n in self.classes]
        if not names:
            raise ValueError(f"{source}: no LLM arguments class (one of {LLM_CLASS_NAMES})")
        self.llm_class = names[0]

    def fields(self, cls: str) -> set[str]:
        if cls not in self.classes:
            raise TypeError(f"SIMULATED tensorrt_llm: {cls} is not in the contract table "
                            f"{self.source}")
        return self.classes[cls]

    def nested_class(self, cls: str, field: str) -> str | None:
        return self.nested.get(f"{cls}.{field}") or self.nested.get(field)


def table_path(version: str) -> Path:
    env = os.environ.get(ENV_TABLE, "").strip()
    candidates = [Path(env)] if env else [INSTALLED_TABLE,
                                          REPO_TABLES / f"llm_args-{version}.json"]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"SIMULATED tensorrt_llm {version}: no contract table of its LLM arguments "
        f"(looked for {', '.join(map(str, candidates))}; set {ENV_TABLE})")


@functools.lru_cache(maxsize=8)
def _load(path: str) -> Table:
    with open(path) as f:
        return Table(json.load(f), path)


def table() -> Table:
    from .. import __version__

    return _load(str(table_path(__version__)))


def _enum_ok(value: Any, allowed: list[str]) -> bool:
    names = {str(value), str(getattr(value, "value", value)), str(getattr(value, "name", value))}
    return bool(names & set(allowed))


def check_class(t: Table, cls: str, values: dict[str, Any], loc: tuple[str, ...] = ()
                ) -> list[dict[str, Any]]:
    """The pydantic-style errors of `values` for config class `cls` (recursing into nested)."""
    errors: list[dict[str, Any]] = []
    fields = t.fields(cls)
    for key, value in values.items():
        where = (*loc, key)
        if key not in fields:
            errors.append({"loc": where, "msg": "Extra inputs are not permitted",
                           "type": "extra_forbidden", "input": value})
            continue
        # An enum field: "Class.field" in the table, else the enum named like the field
        # (capacity_scheduler_policy: CapacitySchedulerPolicy, as TensorRT-LLM names them).
        allowed = t.enums.get(f"{cls}.{key}") or t.enums.get(key.title().replace("_", ""))
        if allowed is not None and value is not None and not _enum_ok(value, allowed):
            errors.append({"loc": where, "type": "enum", "input": value,
                           "msg": "Input should be " + ", ".join(repr(a) for a in allowed)})
        sub = t.nested_class(cls, key)
        if sub and isinstance(value, (dict, Config)):
            errors += check_class(t, sub, as_dict(value), where)
    return errors


def as_dict(value: Any) -> dict[str, Any]:
    return value.model_dump() if isinstance(value, Config) else dict(value)


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(itertools.takewhile(str.isdigit, part))
        parts.append(int(digits or 0))
    return tuple(parts)


def check_llm_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Check LLM(**kwargs) as BaseLLM.__init__ does; returns the arguments with every config
    object turned into a plain dict."""
    from .. import __version__

    t = table()
    try:
        if _release(__version__) >= INVALID_ARGUMENT_CHECK_FROM:
            valid = t.fields(t.llm_class) | EXTRA_LLM_KEYS
            for key in kwargs:
                if key not in valid:
                    raise ValueError(f"LLM got invalid argument: {key}")
        errors = check_class(t, t.llm_class, {k: v for k, v in kwargs.items()
                                              if k not in EXTRA_LLM_KEYS})
        backend = t.enums.get(f"{t.llm_class}.backend") or t.enums.get("LLM.backend")
        if backend and kwargs.get("backend") is not None and \
                not _enum_ok(kwargs["backend"], backend):
            errors.append({"loc": ("backend",), "type": "enum", "input": kwargs["backend"],
                           "msg": "Input should be " + ", ".join(map(repr, backend))})
        if errors:
            raise ValidationError(ARGS_TITLE, errors)
    except Exception as exc:
        print(f"[TRT-LLM] [E] Failed to parse the arguments for the LLM constructor: {exc}",
              file=sys.stderr, flush=True)
        raise
    return {k: as_dict(v) if isinstance(v, Config) else v for k, v in kwargs.items()}


class Config:
    """A SIMULATED config class (KvCacheConfig, SchedulerConfig, ...): keyword fields only, the
    allowed names from the contract table, unknown ones refused as pydantic's extra='forbid'.
    Unset fields read as None (the stand-in applies the real defaults where it uses a field)."""

    def __init__(self, **kwargs: Any) -> None:
        errors = check_class(table(), type(self).__name__, kwargs)
        if errors:
            raise ValidationError(type(self).__name__, errors)
        self._values = {k: as_dict(v) if isinstance(v, Config) else v for k, v in kwargs.items()}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in table().fields(type(self).__name__):
            return self._values.get(name)
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    def model_dump(self) -> dict[str, Any]:
        return dict(self._values)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.model_dump() == self._values  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]


def config_class(name: str) -> type[Config]:
    return _classes.setdefault(name, type(name, (Config,), {"__module__": __name__}))


_classes: dict[str, type[Config]] = {}
# The config classes model.yaml files use, importable whatever the table holds (their fields
# come from the table when one is constructed).
KvCacheConfig = config_class("KvCacheConfig")
SchedulerConfig = config_class("SchedulerConfig")
DynamicBatchConfig = config_class("DynamicBatchConfig")
CudaGraphConfig = config_class("CudaGraphConfig")
MoeConfig = config_class("MoeConfig")
CacheTransceiverConfig = config_class("CacheTransceiverConfig")
QuantConfig = config_class("QuantConfig")


def __getattr__(name: str) -> type[Config]:
    """Any other config class of the table: `from tensorrt_llm.llmapi.llm_args import X`."""
    try:
        t = table()
    except FileNotFoundError:
        raise AttributeError(name) from None
    if name in t.classes and name not in LLM_CLASS_NAMES:
        return config_class(name)
    raise AttributeError(name)
