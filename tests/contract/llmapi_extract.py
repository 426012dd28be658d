"""Build the LLM-API tables under tests/contract/tables/ (docs/contract.md, "The LLM-API tables").

Runtime ``llmapi`` renders ``tensorrt_llm/1/model.yaml``: every key but ``triton_config`` is an
argument of ``tensorrt_llm.LLM()``, whose PyTorch backend validates it as ``TorchLlmArgs`` (a
pydantic model in ``tensorrt_llm/llmapi/llm_args.py``; nested mappings become config classes such
as ``KvCacheConfig``). Two kinds of table, one per TensorRT-LLM version an NGC tag ships:

- ``llm_args-<version>.json`` (tool ``LLM``): the fields of ``TorchLlmArgs`` with those it
  inherits, the fields of each config class a field's annotation names (``nested``: dotted field
  path -> class), the members of the enums and ``Literal`` choices those fields take, and what
  ``LLM()`` does with an unknown key (pydantic ``extra``: ``forbid`` raises).
- ``llmapi_template-<version>.json`` (tool ``llmapi_template``): the llmapi Triton model upstream
  ships (``all_models/llmapi/tensorrt_llm``): config.pbtxt tensors (data type, dims, optional),
  the keys of its sample ``model.yaml``, the ``triton_config`` keys and environment variables its
  model.py reads, the request inputs its helpers read; and ``trtllm-llmapi-launch`` (the
  variables it reads and exports, what rank 0 and the other ranks run).

Sources: a git mirror where one is reachable (tensorrtllm_backend's ``v0.19.0`` tag, exact), else
files stored in a code search index, transcribed under ``--stored DIR`` as
``DIR/<commit>[/<side>]/<path>`` (class skeletons with the field names read, <side> for a file
left with merge-conflict markers; nothing of them is committed).
Every table names its repository, path(s) and commit, and says how the version was identified.

    python -m tests.contract.llmapi_extract --mirrors /work/.mirror --stored <dir>
"""

from __future__ import annotations

import argparse
import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.contract.extract import (
    _COMMENT,
    BACKEND,
    TRTLLM,
    Git,
    _tensors,
    _write,
)

LLM_ARGS = "tensorrt_llm/llmapi/llm_args.py"
LAUNCHER = "tensorrt_llm/llmapi/trtllm-llmapi-launch"
ROOT_CLASS = "TorchLlmArgs"  # what LLM() validates its kwargs as on the PyTorch backend

# --- pydantic classes ------------------------------------------------------------------------


@dataclass
class PyClass:
    name: str
    bases: list[str]
    fields: dict[str, ast.expr] = field(default_factory=dict)  # name -> annotation
    extra: str | None = None  # model_config's "extra", where the class sets one
    members: list[str] = field(default_factory=list)  # enum members
    dataclass: bool = False  # a @dataclass: an unknown keyword is a TypeError
    aliases: dict[str, str] = field(default_factory=dict)  # Field(alias=...) -> field


def _extra(value: ast.expr) -> str | None:
    """`extra` of a `model_config = {...}` or `ConfigDict(...)` value."""
    if isinstance(value, ast.Dict):
        for k, v in zip(value.keys, value.values, strict=True):
            if isinstance(k, ast.Constant) and k.value == "extra" and isinstance(v, ast.Constant):
                return str(v.value)
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg == "extra" and isinstance(kw.value, ast.Constant):
                return str(kw.value.value)
    return None


def _alias(value: ast.expr | None) -> str | None:
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg == "alias" and isinstance(kw.value, ast.Constant):
                return str(kw.value.value)
    return None


def extra_dict_converts(source: str) -> list[str] | None:
    """The fields llm_utils' update_llm_args_with_extra_dict turns from a mapping into their
    config class (its `field_mapping`; it lives in llm_args.py)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "update_llm_args_with_extra_dict":
            for stmt in ast.walk(node):
                if (
                    isinstance(stmt, ast.Assign)
                    and ast.unparse(stmt.targets[0]) == "field_mapping"
                    and isinstance(stmt.value, ast.Dict)
                ):
                    return sorted(
                        str(k.value) for k in stmt.value.keys if isinstance(k, ast.Constant)
                    )
    return None  # not in what was read


def python_classes(source: str) -> dict[str, PyClass]:
    """Every top-level class: bases, annotated public fields (ClassVar excluded), model_config's
    extra, and (for enums) the members assigned in the body."""
    out: dict[str, PyClass] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        c = PyClass(node.name, [ast.unparse(b) for b in node.bases])
        c.dataclass = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                name = stmt.target.id
                if name == "model_config" and stmt.value is not None:
                    c.extra = _extra(stmt.value)
                elif "ClassVar" in ast.unparse(stmt.annotation):
                    continue
                elif not name.startswith("_") or c.dataclass:  # a dataclass takes _x too
                    c.fields[name] = stmt.annotation
                    alias = _alias(stmt.value)
                    if alias:
                        c.aliases[alias] = name
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                if isinstance(target, ast.Name) and target.id == "model_config":
                    c.extra = _extra(stmt.value)
                elif isinstance(target, ast.Name) and not target.id.startswith("_"):
                    c.members.append(target.id)
        out[c.name] = c
    return out


def _mro(classes: dict[str, PyClass], name: str) -> list[PyClass]:
    """`name` and its bases defined in the same file, nearest first."""
    out: list[PyClass] = []
    todo = [name]
    while todo:
        c = classes.get(todo.pop(0))
        if c is not None and c not in out:
            out.append(c)
            todo += c.bases
    return out


def fields_of(classes: dict[str, PyClass], name: str) -> dict[str, ast.expr]:
    out: dict[str, ast.expr] = {}
    for c in reversed(_mro(classes, name)):
        out.update(c.fields)
    return out


def extra_of(classes: dict[str, PyClass], name: str) -> str:
    """What an unknown keyword does: pydantic's `extra` (inherited; its default is "ignore"), or
    "forbid" for a dataclass (TypeError)."""
    mro = _mro(classes, name)
    if mro and mro[0].dataclass:
        return "forbid"
    return next((c.extra for c in mro if c.extra), "ignore")


def is_enum(c: PyClass) -> bool:
    return any(b.endswith("Enum") for b in c.bases)


def _names_in(annotation: ast.expr) -> list[str]:
    return [n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)]


def _literal_choices(annotation: ast.expr) -> list[Any] | None:
    for node in ast.walk(annotation):
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
            inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return [e.value for e in inner if isinstance(e, ast.Constant)]
    return None


@dataclass
class Walk:
    classes: dict[str, list[str]] = field(default_factory=dict)
    nested: dict[str, str] = field(default_factory=dict)
    enum_fields: dict[str, str] = field(default_factory=dict)
    literal_fields: dict[str, list[Any]] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)


def walk(classes: dict[str, PyClass], name: str, path: str, out: Walk) -> None:
    """Record class `name` reached at dotted field `path` ("" for the root) and, through the
    annotations of its fields, every config class, enum and Literal below it."""
    fields = fields_of(classes, name)
    out.classes[name] = sorted(fields)
    out.extra[name] = extra_of(classes, name)
    for fname, annotation in fields.items():
        where = f"{path}.{fname}" if path else fname
        here = f"{name}.{fname}"
        for ref in _names_in(annotation):
            target = classes.get(ref)
            if target is None:
                continue
            if is_enum(target):
                out.enum_fields[here] = ref
            elif ref not in out.classes and ref != name:
                out.nested[where] = ref
                walk(classes, ref, where, out)
            elif ref in out.classes:
                out.nested[where] = ref
        choices = _literal_choices(annotation)
        if choices is not None:
            out.literal_fields[here] = choices


UNKNOWN = {"forbid": "error", "allow": "ignored", "ignore": "ignored"}


def llm_args_table(
    source: str,
    version: str,
    src: dict[str, Any],
    root: str = ROOT_CLASS,
    pops: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`root`: the class LLM() validates its keywords as; `pops`: keywords LLM() takes off
    before that (not validated there), with the class each is made into."""
    classes = python_classes(source)
    w = Walk()
    walk(classes, root, "", w)
    for name, cls in (pops or {}).items():
        w.nested[name] = cls
        walk(classes, cls, name, w)
    w.classes["LLM"] = sorted({*w.classes.pop(root), *(pops or {})})
    aliases = {a: f for c in _mro(classes, root) for a, f in c.aliases.items()}
    used = set(w.enum_fields.values())
    return {
        "tool": "LLM",
        "version": version,
        "exact": src.pop("exact", False),
        "source": src,
        "root_class": root,
        "unknown_keys": UNKNOWN[w.extra.pop(root)],
        "popped_by_llm": dict(sorted((pops or {}).items())),
        "aliases": dict(sorted(aliases.items())),
        "extra_dict_converts": extra_dict_converts(source),
        "unknown_nested_keys": {k: UNKNOWN[v] for k, v in sorted(w.extra.items())},
        "classes": dict(sorted(w.classes.items())),
        "nested": dict(sorted(w.nested.items())),
        # Enum members by enum name, and by "Class.field" the enum's name or the Literal's values
        # (the shape the stand-in's argument check reads).
        "enums": {
            **{n: classes[n].members for n in sorted(used)},
            **dict(sorted(w.enum_fields.items())),
            **dict(sorted(w.literal_fields.items())),
        },
        "enum_fields": dict(sorted(w.enum_fields.items())),
        "literal_fields": dict(sorted(w.literal_fields.items())),
        # Where iteration statistics are switched on: an LLM() argument, or inside a popped one.
        "enable_iter_perf_stats": next(
            (
                p
                for p, c in [("LLM", "LLM"), *w.nested.items()]
                if "enable_iter_perf_stats" in w.classes.get(c, [])
            ),
            None,
        ),
    }


# --- the llmapi Triton model -----------------------------------------------------------------


def tensors(pbtxt: str, kind: str) -> dict[str, dict[str, Any]]:
    """Each `{ name, data_type, dims, optional }` of the top-level `input`/`output` list."""
    return _tensors(_COMMENT.sub("", pbtxt), kind, dims=True)


_ENV = re.compile(r"""os\.(?:environ\.get|getenv|environ\[)\(?\s*['"](\w+)['"]""")
_TRITON_KEY = re.compile(r"""triton_config\[\s*['"](\w+)['"]|['"](\w+)['"]\s+in\s+triton_config""")
_PARAM = re.compile(
    r"""get_parameter\(\s*[\w.]+\s*,\s*['"](\w+)['"]|params\[\s*['"](\w+)['"]"""
    r"""|params\.get\(\s*['"](\w+)['"]"""
)
_REQUEST_INPUT = re.compile(r"""get_input_\w+_by_name\(\s*request\s*,\s*['"](\w+)['"]""")


def _found(pattern: re.Pattern[str], text: str) -> list[str]:
    return sorted({g for m in pattern.finditer(text) for g in m.groups() if g})


def model_facts(model_py: str, helpers_py: str | None) -> dict[str, Any]:
    both = model_py + (helpers_py or "")
    return {
        "env": _found(_ENV, model_py),
        "triton_config_read": _found(_TRITON_KEY, model_py),
        "parameters_read": _found(_PARAM, model_py),
        "request_inputs_read": _found(_REQUEST_INPUT, both),
        "llm_built_with": sorted(set(re.findall(r"\b(\w*LLM)\(\*\*", model_py))),
    }


def yaml_facts(model_yaml: str) -> dict[str, Any]:
    data = yaml.safe_load(model_yaml) or {}
    return {
        "model_yaml_keys": sorted(k for k in data if k != "triton_config"),
        "triton_config_keys": sorted(data.get("triton_config") or {}),
    }


_VAR_USE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_VAR_SET = re.compile(r"^\s*(?:export\s+|local\s+)?([A-Za-z_][A-Za-z0-9_]*)=", re.M)
_EXPORT = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=", re.M)
_MODULE = re.compile(r"python3?\s+-m\s+([\w.]+)")


def launcher_facts(script: str) -> dict[str, Any]:
    """What trtllm-llmapi-launch reads from the environment, exports, and runs."""
    assigned = set(_VAR_SET.findall(script)) | set(re.findall(r"\bfor\s+(\w+)\s+in\b", script))
    return {
        "env_read": sorted(set(_VAR_USE.findall(script)) - assigned - {"HOSTNAME"}),
        "env_exported": sorted(set(_EXPORT.findall(script))),
        "modules_run": sorted(set(_MODULE.findall(script))),
        "runs_its_arguments": '"${@:1}"' in script or '"$@"' in script,
    }


def template_table(
    version: str, src: dict[str, Any], files: dict[str, str | None]
) -> dict[str, Any]:
    """`files`: config.pbtxt, model.yaml, model.py, helpers.py, launcher (None where unread)."""
    table: dict[str, Any] = {
        "tool": "llmapi_template",
        "version": version,
        "exact": src.pop("exact", False),
        "source": src,
    }
    if files.get("config.pbtxt"):
        pbtxt = files["config.pbtxt"] or ""
        table["inputs"] = tensors(pbtxt, "input")
        table["outputs"] = tensors(pbtxt, "output")
    if files.get("model.yaml"):
        table.update(yaml_facts(files["model.yaml"] or ""))
    if files.get("model.py"):
        table.update(model_facts(files["model.py"] or "", files.get("helpers.py")))
    if files.get("launcher"):
        table["launcher"] = launcher_facts(files["launcher"] or "")
    return table


# --- sources ---------------------------------------------------------------------------------

BACKEND_LLMAPI = "all_models/llmapi/tensorrt_llm"
TRITON_LLMAPI = "triton_backend/all_models/llmapi/tensorrt_llm"


def backend_template(mirrors: Path, tag: str) -> dict[str, Any]:
    """The llmapi model of a tensorrtllm_backend release tag (0.19.0, the only one with it)."""
    mirror = "triton-inference-server+tensorrtllm_backend"
    git = Git(mirrors, mirror)
    commit = git.commit(tag)
    parts = {
        "config.pbtxt": f"{BACKEND_LLMAPI}/config.pbtxt",
        "model.yaml": f"{BACKEND_LLMAPI}/1/model.yaml",
        "model.py": f"{BACKEND_LLMAPI}/1/model.py",
        "helpers.py": f"{BACKEND_LLMAPI}/1/helpers.py",
    }
    files = {k: git.show(commit, p) for k, p in parts.items()}
    src = {
        "repository": BACKEND,
        "commit": commit,
        "tag": tag,
        "paths": [p for k, p in parts.items() if files[k] is not None],
        "read_from": f"github:{mirror.replace('+', '/')}",
        "identified": f"release tag {tag}",
        "exact": True,
    }
    return template_table(tag.removeprefix("v"), src, files)


@dataclass(frozen=True)
class Stored:
    """One file stored in the search index, at the commit that changed it."""

    path: str
    commit: str
    read_from: str  # the repository the index stores it under (a fork holds upstream's ids)
    identified: str  # how its version was established
    side: str | None = None  # of a merge conflict in the stored file: "HEAD" or "upstream"
    notes: tuple[str, ...] = ()  # what of it was not read, facts the fields alone do not say


def read_stored(stored: Path, s: Stored) -> str:
    side = f"{s.side}/" if s.side else ""
    return (stored / s.commit / f"{side}{s.path}").read_text(encoding="utf-8")


def _stored_source(parts: list[Stored], basis: str) -> dict[str, Any]:
    return {
        # A fork's own commit (a merge) is cited in the fork; upstream is named beside it.
        "repository": parts[0].read_from,
        "upstream": TRTLLM,
        "commit": parts[0].commit,
        "paths": [p.path for p in parts],
        "commits": {p.path: p.commit for p in parts},
        "read_from": sorted({f"github:{p.read_from}" for p in parts}),
        "side": parts[0].side,
        "identified": "; ".join(dict.fromkeys(p.identified for p in parts)),
        "read_with": "search index read_file; names transcribed (no tree of the release reachable)",
        "basis": basis,
        "notes": [n for p in parts for n in p.notes],
    }


# The llm_args.py versions read (docs/contract.md says why no release tree was reachable). The
# fork Ataraksia/TensorRT-LLM committed a merge of upstream main (1.1.0rc6) into its own branch
# at 0.20.0 with the conflict markers left in: one stored file, two versions, both read.
_ATARAKSIA = "a451bf93888ef588251268516ac6cd4be0a124c5"
AT_0_20 = Stored(
    LLM_ARGS,
    _ATARAKSIA,
    "Ataraksia/TensorRT-LLM",
    "tensorrt_llm/version.py at the same commit says 0.20.0 on the HEAD side of its conflict",
    side="HEAD",
    notes=(
        "LLM() (llmapi/llm.py, same commit and side) takes pytorch_backend_config off its "
        "keywords before LlmArgs.from_kwargs, so PyTorch knobs such as enable_iter_perf_stats "
        "go in pytorch_backend_config (a PyTorchConfig dataclass, _torch/pyexecutor/config.py "
        "at the same commit and side); a mapping there is made a PyTorchConfig only by "
        "llm_utils.update_llm_args_with_extra_dict, which upstream's llmapi model.py calls.",
        "LlmArgs has extra='allow': an unknown key is kept and has no effect.",
    ),
)
MID_2025 = Stored(
    LLM_ARGS,
    "fcd3f31682808ae56118ae43c1d7864a3a945e6f",
    TRTLLM,
    "main between 0.20.0 and 1.0.0: BaseLlmArgs/TorchLlmArgs are pydantic (extra='forbid') as "
    "after 0.20.0, with the flat use_cuda_graph/cuda_graph_* fields 1.0 replaced by "
    "cuda_graph_config",
)
AT_1_1 = Stored(
    LLM_ARGS,
    _ATARAKSIA,
    "Ataraksia/TensorRT-LLM",
    "tensorrt_llm/version.py at the same commit says 1.1.0rc6 on the upstream/main side",
    side="upstream",
    notes=(
        "LLM() (llmapi/llm.py, same commit and side) picks TorchLlmArgs for backend 'pytorch' "
        "and raises ValueError('... got invalid argument: <key>') for a keyword that is no "
        "field name, _mpi_session or backend.",
        "quant_config is no TorchLlmArgs field (a property over a private attribute; "
        "TrtLlmArgs declares it): LLM(quant_config=...) is refused on the PyTorch backend.",
    ),
)
# The newer llmapi model files: model.py's commit also set version.py to 1.2.0rc2.
TEMPLATE_1_2 = [
    Stored(
        f"{TRITON_LLMAPI}/config.pbtxt",
        "c8c6df08bd0ead54cd47f7973e1e425c28a174cd",
        TRTLLM,
        "main; the version of this commit was not identified (its tensors are the ones the "
        "1.2.0rc2 model.py writes)",
    ),
    Stored(
        f"{TRITON_LLMAPI}/1/model.yaml",
        "c8c6df08bd0ead54cd47f7973e1e425c28a174cd",
        TRTLLM,
        "main, same commit as config.pbtxt",
    ),
    Stored(
        f"{TRITON_LLMAPI}/1/model.py",
        "b35ac1b64368513d215c57d2ed01d62d910df8da",
        TRTLLM,
        "tensorrt_llm/version.py is stored at the same commit: 1.2.0rc2",
        notes=(
            "Only the lines the extractor reads were transcribed (LLM_CONFIG_PATH, the "
            "triton_config keys, LLM(**...), the stop and text_input inputs); helpers.py "
            "of this version was not read.",
        ),
    ),
    Stored(
        LAUNCHER, "cbe4c0aed8b53848575ca3c1c6f50d33aa9da174", TRTLLM, "main; version not identified"
    ),
]
NOTE_0_19 = (
    "0.19.0's own llm_args.py was not reachable; this is the newer neighbour (0.20.0). The exact "
    "0.19.0 llmapi model (tensorrtllm_backend v0.19.0) agrees on the shape: its sample "
    "model.yaml nests use_cuda_graph under pytorch_backend_config and its model.py converts "
    "the mapping with update_llm_args_with_extra_dict. An older stored llm_args.py (search "
    "index id 5703739679, commit not named) has LlmArgs as a dataclass (an unknown keyword a "
    "TypeError)."
)
# IterationStats JSON keys (what get_stats() returns on the PyTorch backend, the C++ binding's
# to_json_str spelling): read from upstream's binding test
# (tests/unittest/bindings/test_executor_bindings.py: to_json_str gives camelCase keys) and from
# consumers of get_stats output in the search index; the C++ serializer was not reachable.
STATS_KEYS = {
    "top": sorted(
        [
            "iter",
            "iterLatencyMS",
            "numActiveRequests",
            "numQueuedRequests",
            "maxNumActiveRequests",
            "gpuMemUsage",
            "cpuMemUsage",
            "pinnedMemUsage",
            "kvCacheStats",
            "inflightBatchingStats",
        ]
    ),
    "kvCacheStats": sorted(
        [
            "maxNumBlocks",
            "freeNumBlocks",
            "usedNumBlocks",
            "tokensPerBlock",
            "allocTotalBlocks",
            "allocNewBlocks",
            "reusedBlocks",
            "missedBlocks",
            "cacheHitRate",
        ]
    ),
    "inflightBatchingStats": sorted(
        [
            "numScheduledRequests",
            "numContextRequests",
            "numGenRequests",
            "numPausedRequests",
            "numCtxTokens",
            "microBatchId",
            "avgNumDecodedTokensPerIter",
        ]
    ),
}

# NGC's TensorRT-LLM versions from 0.19.0 on -> the llm_args.py version read for it, what LLM()
# validates its keywords as there, what it takes off first, and how near the version is.
_POPS = {"pytorch_backend_config": "PyTorchConfig"}
LLM_ARGS_FOR: dict[str, tuple[Stored, str, dict[str, str], str]] = {
    "0.19.0": (AT_0_20, "LlmArgs", _POPS, "newer"),
    "0.20.0": (AT_0_20, "LlmArgs", _POPS, "same"),
    "0.21.0": (MID_2025, ROOT_CLASS, {}, "nearest"),
    "1.0.0": (AT_1_1, ROOT_CLASS, {}, "newer"),
    "1.0.3.2510": (AT_1_1, ROOT_CLASS, {}, "newer"),
    "1.1.0": (AT_1_1, ROOT_CLASS, {}, "nearest (1.1.0rc6)"),
    "1.2.0": (AT_1_1, ROOT_CLASS, {}, "older"),
    "1.2.1": (AT_1_1, ROOT_CLASS, {}, "older"),
}
TEMPLATE_AFTER_0_19 = ("0.20.0", "0.21.0", "1.0.0", "1.0.3.2510", "1.1.0", "1.2.0", "1.2.1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, required=True)
    parser.add_argument("--stored", type=Path, required=True)
    args = parser.parse_args()
    _write("llmapi_template-0.19.0", backend_template(args.mirrors, "v0.19.0"))
    newest = list(LLM_ARGS_FOR)[-1]
    for version, (snap, root, pops, basis) in LLM_ARGS_FOR.items():
        src = _stored_source([snap], f"{basis} reachable version of llm_args.py")
        if version == "0.19.0":
            src["notes"].append(NOTE_0_19)
        table = llm_args_table(read_stored(args.stored, snap), version, src, root, pops)
        if version == newest:
            table["stats_keys"] = STATS_KEYS
        _write(f"llm_args-{version}", table)
    files: dict[str, str | None] = {
        "config.pbtxt": read_stored(args.stored, TEMPLATE_1_2[0]),
        "model.yaml": read_stored(args.stored, TEMPLATE_1_2[1]),
        "model.py": read_stored(args.stored, TEMPLATE_1_2[2]),
        "launcher": read_stored(args.stored, TEMPLATE_1_2[3]),
    }
    for version in TEMPLATE_AFTER_0_19:
        src = _stored_source(TEMPLATE_1_2, "the newest reachable llmapi model (main, 1.2.0rc2)")
        _write(f"llmapi_template-{version}", template_table(version, src, files))


if __name__ == "__main__":
    main()
