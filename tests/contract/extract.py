"""Build the option tables under tests/contract/tables/ from upstream git trees.

Run by hand when a version is added (docs/contract.md); the tests only read the committed JSON.
Every table is a set of facts read from one file (or a few) at one commit: option names, whether
each takes a value, its nargs and its choices; template parameter keys and placeholders. Nothing
of the upstream code is kept.

    python -m tests.contract.extract --mirrors /work/.mirror
    python -m tests.contract.extract --stored /tmp/stored   # the 1.2.0rc2 tables (STORED_FILES)

`--mirrors` is a folder of bare git mirrors named ``<owner>+<name>/repo`` (what a repository
fetch leaves); each source below names the mirror it is read from and the upstream
repository its commit belongs to (a fork holds the same commit ids as its upstream). `--stored`
is a folder of single files read from the search index, ``<commit>/<path>``.

Readers:
- argparse scripts (convert_checkpoint.py, quantize.py, launch_triton_server.py, trtllm-build's
  tensorrt_llm/commands/build.py): every ``*.add_argument(...)`` call, read with :mod:`ast`;
  ``choices`` is kept when it is a literal or a module-level literal name, else recorded as
  unresolved (the check then skips the value, and says so).
- trtllm-build's plugin options (tensorrt_llm/plugin/plugin.py): ``add_plugin_argument`` adds one
  option per PluginConfig field listed in ``cli_plugin_args``; str fields take a plugin dtype
  (``plugin_options`` / ``DEFAULT_PLUGIN_DTYPE_OPTIONS`` / ``PLUGIN_DTYPE_OPTIONS_MAP``, None
  spelled "disable"), bool fields take enable/disable, other fields a value of their type; since
  PluginConfig became a pydantic model the dtype choices are each field's ``Literal[...]``.
- tritonserver (src/command_line_parser.cc): each ``{OPTION_X, "name", Option::ArgKind`` entry.
- config.pbtxt templates: the ``key:`` of every ``parameters`` block and every ``${name}``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TABLES = Path(__file__).resolve().parent / "tables"

TRTLLM = "NVIDIA/TensorRT-LLM"
BACKEND = "triton-inference-server/tensorrtllm_backend"
SERVER = "triton-inference-server/server"

# The converters the project renders (tritonllm.triton.build.ARCHITECTURE_DIRS values).
CONVERTERS = ("gpt", "llama", "qwen", "gemma", "phi", "falcon")
TEMPLATE_MODELS = (
    "preprocessing",
    "postprocessing",
    "tensorrt_llm",
    "tensorrt_llm_bls",
    "ensemble",
)


@dataclass(frozen=True)
class Snapshot:
    """One upstream tree: which repository's commit, read from which local mirror."""

    repository: str
    commit: str
    mirror: str  # <owner>+<name> under --mirrors
    label: str  # the version the tables are filed under
    exact: bool  # the release commit itself (False: a main-branch commit before the release)


# TensorRT-LLM trees reachable from this project's machine (docs/contract.md says why these):
# the release commits of 0.9.0 and 0.10.0, then for each later series the last main-branch
# commit before the version bump (the release branch was cut from about there). Labels are the
# version.py string at that commit.
_ANAPPLE = "anapple-hub+TensorRT-LLM"  # holds the 0.9.0 and 0.10.0 release commits
_LAIPAANG = "laipaang+TensorRT-LLM"  # holds main from 2024-04 to 2024-12
TRTLLM_SNAPSHOTS = tuple(
    Snapshot(TRTLLM, commit, mirror, label, exact)
    for commit, mirror, label, exact in (
        ("250d9c293d5edbc2a45c20775b3150b1eb68b364", _ANAPPLE, "0.9.0", True),
        ("9bd15f1937f52658fb116f30d58fea786ce5d03b", _ANAPPLE, "0.10.0", True),
        ("9691e12bce7ae1c126c435a049eb516eb119486c", _LAIPAANG, "0.11.0.dev2024062500", False),
        ("be9cd719f7d3149a5267c854284d83f717da0771", _LAIPAANG, "0.12.0.dev2024080600", False),
        ("78f5c2936b7bdaa56859075a3f2fcc5a63952134", _LAIPAANG, "0.13.0.dev2024090300", False),
        ("8681b3a4c0ccc1028bb48d83aacbb690af8f55e7", _LAIPAANG, "0.14.0.dev2024100800", False),
        ("c629546ce429623c8a163633095230154a6f0574", _LAIPAANG, "0.15.0.dev2024111200", False),
        ("b171e879563ff0ba4eb35b94cf0e59a471e13d80", _LAIPAANG, "0.16.0.dev2024121000", False),
    )
)

# TensorRT-LLM files read from a code search index (docs/contract.md, "Sources"): no
# tree after December 2024 can be mirrored here, but the index stores single files of
# NVIDIA/TensorRT-LLM's main branch, each at the commit that changed it. The newest stored
# version of each file is main as of the index's last crawl: the newest stored version.py and
# README.md (commit 7b437aaa, "release-1.2.0rc2" badge) both say 1.2.0rc2, so these tables are
# filed under that pre-release (exact=False; each path keeps its own commit).
# `--stored DIR` holds them as DIR/<commit>/<path> (argparse calls and PluginConfig fields
# transcribed from the index's text; nothing of it is committed).
STORED_VERSION = "1.2.0rc2"
STORED_EVIDENCE = (
    "newest stored tensorrt_llm/version.py (b35ac1b64368) and README.md (7b437aaa73bf) "
    "of NVIDIA/TensorRT-LLM in the search index both say 1.2.0rc2"
)
STORED_FILES: dict[str, tuple[str, str]] = {
    # table -> (path, commit), the newest stored version of each
    "trtllm-build": (
        "tensorrt_llm/commands/build.py",
        "65f1d1536e18aea3380e6e270e00895a709333eb",
    ),
    "trtllm-build:plugin": (
        "tensorrt_llm/plugin/plugin.py",
        "c20322ffd3dc0740ca530c9fad989b22e64f6e06",
    ),
    "quantize": ("examples/quantization/quantize.py", "c8c6df08bd0ead54cd47f7973e1e425c28a174cd"),
    "convert_checkpoint-gpt": (
        "examples/models/core/gpt/convert_checkpoint.py",
        "cb4c622cf5bb97009451f7f44609498a48a2b11d",
    ),
    "convert_checkpoint-llama": (
        "examples/models/core/llama/convert_checkpoint.py",
        "fd96a08bdc489f41f139b295935b10ed43652fa1",
    ),
    "convert_checkpoint-qwen": (
        "examples/models/core/qwen/convert_checkpoint.py",
        "65b31db1b401d3752b8ebe7c29093cbfb6af04b7",
    ),
    "convert_checkpoint-gemma": (
        "examples/models/core/gemma/convert_checkpoint.py",
        "fbbc05dd1445fb8545148cfcb51b8e2bdcf28cfa",
    ),
    "convert_checkpoint-phi": (
        "examples/models/core/phi/convert_checkpoint.py",
        "567239fcd40bda119965a3a8abf43856c63c9527",
    ),
    # falcon left models/core for models/contrib.
    "convert_checkpoint-falcon": (
        "examples/models/contrib/falcon/convert_checkpoint.py",
        "b93e14ca093e446615f3009cae6ca5a33c4f2f56",
    ),
    # The Triton backend's launcher and templates, in TensorRT-LLM since 0.20.
    "launch_triton_server": (
        "triton_backend/scripts/launch_triton_server.py",
        "0b06796b2c7895930fecff48a1e205ab14a19c51",
    ),
    "templates:tensorrt_llm": (
        "triton_backend/all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt",
        "2a9abd9536aa62ad3e4b9314be9286b1b1be523b",
    ),
    "templates:preprocessing": (
        "triton_backend/all_models/inflight_batcher_llm/preprocessing/config.pbtxt",
        "808059da341493bbf8deb9380aef745e4f546909",
    ),
    "templates:postprocessing": (
        "triton_backend/all_models/inflight_batcher_llm/postprocessing/config.pbtxt",
        "89fd9b74ab7ae753b4c6b3db25a400dca7ea54a0",
    ),
    "templates:tensorrt_llm_bls": (
        "triton_backend/all_models/inflight_batcher_llm/tensorrt_llm_bls/config.pbtxt",
        "bff88ea886779f832686acb3f165e2b919c95b77",
    ),
    "templates:ensemble": (
        "triton_backend/all_models/inflight_batcher_llm/ensemble/config.pbtxt",
        "2a9abd9536aa62ad3e4b9314be9286b1b1be523b",
    ),
}

# tensorrtllm_backend release tags (templates and launcher moved into TensorRT-LLM after 0.19).
BACKEND_TAGS = (
    "v0.9.0", "v0.10.0", "v0.11.0", "v0.12.0", "v0.13.0", "v0.14.0", "v0.15.0", "v0.16.0",
    "v0.17.0", "v0.18.0", "v0.18.1", "v0.18.2", "v0.19.0",
)

# Triton server release branches, one per NGC month the project supports.
SERVER_BRANCHES = (
    "r24.04", "r24.05", "r24.06", "r24.07", "r24.08", "r24.09", "r24.10", "r24.11", "r24.12",
    "r25.01", "r25.02", "r25.03", "r25.04", "r25.05", "r25.06", "r25.07", "r25.08", "r25.09",
    "r25.10", "r25.11", "r25.12", "r26.01", "r26.02", "r26.03", "r26.04", "r26.05", "r26.06",
    "r26.07",
)


# --- reading git --------------------------------------------------------------------------


class Git:
    def __init__(self, mirrors: Path, mirror: str) -> None:
        self.dir = mirrors / mirror / "repo"

    def run(self, *args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(self.dir), *args],
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def show(self, commit: str, path: str) -> str | None:
        try:
            return self.run("show", f"{commit}:{path}")
        except subprocess.CalledProcessError:
            return None

    def commit(self, ref: str) -> str:
        return self.run("rev-parse", f"{ref}^{{commit}}").strip()


# --- argparse -----------------------------------------------------------------------------

_NO_VALUE_ACTIONS = {"store_true", "store_false", "store_const", "count", "help", "version"}


def _literal(node: ast.AST | None, names: dict[str, Any]) -> tuple[bool, Any]:
    """(resolved, value) for a literal or a module-level name bound to a literal."""
    if node is None:
        return True, None
    if isinstance(node, ast.Name) and node.id in names:
        return True, names[node.id]
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False, ast.unparse(node)


def _module_literals(tree: ast.Module) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                ok, value = _literal(stmt.value, {})
                if ok:
                    out[target.id] = value
    return out


def argparse_options(source: str) -> dict[str, dict[str, Any]]:
    """Every option string of every add_argument call in `source`."""
    tree = ast.parse(source)
    names = _module_literals(tree)
    options: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            continue
        flags = [
            a.value
            for a in node.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
        ]
        if not flags:
            continue  # a positional argument
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        _, action = _literal(kw.get("action"), names)
        _, nargs = _literal(kw.get("nargs"), names)
        resolved, choices = _literal(kw.get("choices"), names)
        entry: dict[str, Any] = {
            "value": not (isinstance(action, str) and action in _NO_VALUE_ACTIONS),
            "nargs": nargs,
            "choices": _choices(choices) if resolved else None,
        }
        if not resolved:
            entry["choices_unresolved"] = choices
        if isinstance(action, str) and action not in {"store"}:
            entry["action"] = action
        for flag in flags:
            options[flag] = entry
    return options


def _choices(value: Any) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        value = list(value)
    return [v for v in value]


# --- trtllm-build plugin options ------------------------------------------------------------


def _annotation_kind(node: ast.AST) -> str:
    text = ast.unparse(node)
    if text in ("str", "Optional[str]"):
        return "str"
    if text == "bool":
        return "bool"
    return text


def _plugin_config_fields(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """(name, annotation) of each annotated field of plugin.py's PluginConfig."""
    config = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PluginConfig"
    )
    for stmt in config.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            yield stmt.target.id, stmt.annotation


def plugin_options(source: str) -> dict[str, dict[str, Any]]:
    """The options add_plugin_argument() adds, from PluginConfig and its module's lists."""
    tree = ast.parse(source)
    names = _module_literals(tree)
    cli = names.get("cli_plugin_args")
    if cli is None:
        raise ValueError("plugin.py: no literal cli_plugin_args")
    if "DEFAULT_PLUGIN_DTYPE_OPTIONS" not in names and "plugin_options" not in names:
        return _pydantic_plugin_options(tree, cli)
    dtype_options = names.get("DEFAULT_PLUGIN_DTYPE_OPTIONS", names.get("plugin_options"))
    per_plugin: dict[str, list[Any]] = names.get("PLUGIN_DTYPE_OPTIONS_MAP", {})
    if dtype_options is None:
        raise ValueError("plugin.py: no literal plugin dtype options")
    options: dict[str, dict[str, Any]] = {}
    for field, annotation in _plugin_config_fields(tree):
        name = field.lstrip("_")
        if name not in cli:
            continue
        kind = _annotation_kind(annotation)
        if kind == "str":
            choices = per_plugin.get(name, dtype_options)
            choices = [c if c else "disable" for c in choices]
        elif kind == "bool":
            choices = ["enable", "disable"]
        else:
            choices = None
        options["--" + name] = {"value": True, "nargs": None, "choices": choices, "plugin": True}
    return options


def _literal_members(node: ast.AST, aliases: dict[str, ast.AST]) -> list[Any] | None:
    """The members of a `Literal[...]` (through a module-level alias), else None."""
    if isinstance(node, ast.Name) and node.id in aliases:
        node = aliases[node.id]
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "Literal":
        inner = node.slice
        elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        return [ast.literal_eval(e) for e in elts]
    return None


def _pydantic_plugin_options(tree: ast.Module, cli: list[str]) -> dict[str, dict[str, Any]]:
    """Since PluginConfig became a pydantic model (2025), add_plugin_argument() derives each
    option from the field's annotation: an `Optional[Literal[...]]` (directly or through an
    alias such as DefaultPluginDtype) gives its members as choices, None spelled "disable";
    a plain `bool` gives enable/disable; anything else takes a value of that type."""
    aliases = {
        t.id: stmt.value
        for stmt in tree.body
        if isinstance(stmt, ast.Assign)
        for t in stmt.targets
        if isinstance(t, ast.Name)
    }
    options: dict[str, dict[str, Any]] = {}
    for name, ann in _plugin_config_fields(tree):
        if name not in cli:
            continue
        optional = isinstance(ann, ast.Subscript) and ast.unparse(ann.value) == "Optional"
        members = _literal_members(ann.slice, aliases) if optional else None
        choices: list[Any] | None
        if members is not None:
            choices = list(dict.fromkeys(m if m else "disable" for m in [*members, None]))
        elif ast.unparse(ann) == "bool":
            choices = ["enable", "disable"]
        else:
            choices = None
        options["--" + name] = {"value": True, "nargs": None, "choices": choices, "plugin": True}
    return options


# --- tritonserver -------------------------------------------------------------------------

# The third field is an Option::Arg* kind, or a string naming the value's form
# ("<string>,<string>=<string>" for --backend-config): both take a value.
_SERVER_OPTION = re.compile(
    r'\{\s*OPTION_\w+\s*,\s*"([a-z0-9-]+)"\s*,\s*(?:Option::Arg(\w+)|"([^"]*)")'
)


def tritonserver_options(source: str) -> dict[str, dict[str, Any]]:
    options: dict[str, dict[str, Any]] = {}
    for name, kind, form in _SERVER_OPTION.findall(source):
        kind = kind or "Form"
        options["--" + name] = {
            "value": kind != "None",
            "nargs": None,
            # ParseOption<bool> of the parser accepts these spellings.
            "choices": ["true", "false", "1", "0", "on", "off"] if kind == "Bool" else None,
            "kind": kind.lower() if kind != "Form" else form,
        }
    return options


# --- config.pbtxt templates -----------------------------------------------------------------

_PARAM_KEY = re.compile(r'parameters\s*(?::\s*)?\{\s*key\s*:\s*"([^"]+)"', re.S)
_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")
_COMMENT = re.compile(r"#[^\n]*")


_NAME = re.compile(r'\bname\s*:\s*"([^"]+)"')
_DTYPE = re.compile(r"\bdata_type\s*:\s*(\S+)")
_OPTIONAL = re.compile(r"\boptional\s*:\s*true\b")
_DIMS = re.compile(r"\bdims\s*:\s*\[([^\]]*)\]")


def _balanced(text: str, start: int, open_: str, close: str) -> int:
    """The index just past the bracket that closes the one at `start`."""
    depth = 0
    for j in range(start, len(text)):
        depth += 1 if text[j] == open_ else -1 if text[j] == close else 0
        if depth == 0:
            return j + 1
    raise ValueError(f"unbalanced {open_}{close}")


def _tensors(text: str, field: str, dims: bool = False) -> dict[str, dict[str, Any]]:
    """Each `{ name, data_type, optional }` entry of the top-level `field [ ... ]` list; with
    `dims`, its dims too (None where it has none)."""
    m = re.search(rf"^{field}\s*\[", text, re.M)
    if not m:
        return {}
    block = text[m.end() - 1 : _balanced(text, m.end() - 1, "[", "]")]
    out: dict[str, dict[str, Any]] = {}
    i = block.find("{")
    while i != -1:
        end = _balanced(block, i, "{", "}")
        entry = block[i:end]
        name, dtype = _NAME.search(entry), _DTYPE.search(entry)
        if name and dtype:
            tensor: dict[str, Any] = {
                "data_type": dtype.group(1),
                "optional": bool(_OPTIONAL.search(entry)),
            }
            if dims:
                shape = _DIMS.search(entry)
                tensor["dims"] = [int(d) for d in shape.group(1).split(",")] if shape else None
            out[name.group(1)] = tensor
        i = block.find("{", end)
    return out


def template_facts(source: str) -> dict[str, Any]:
    text = _COMMENT.sub("", source)
    return {
        "parameters": sorted(set(_PARAM_KEY.findall(text))),
        "placeholders": sorted(set(_PLACEHOLDER.findall(text))),
        # Tensor name -> data type as written (a TYPE_* or a ${placeholder}) and optional.
        "inputs": _tensors(text, "input"),
        "outputs": _tensors(text, "output"),
    }


# --- writing ------------------------------------------------------------------------------


def _write(name: str, table: dict[str, Any]) -> None:
    TABLES.mkdir(parents=True, exist_ok=True)
    path = TABLES / f"{name}.json"
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _source(snap: Snapshot, paths: list[str]) -> dict[str, Any]:
    return {
        "repository": snap.repository,
        "commit": snap.commit,
        "paths": paths,
        "read_from": f"github:{snap.mirror.replace('+', '/')}",
    }


def _table(tool: str, snap: Snapshot, paths: list[str], options: dict[str, Any]) -> dict[str, Any]:
    return {
        "tool": tool,
        "version": snap.label,
        "exact": snap.exact,
        "source": _source(snap, paths),
        "options": dict(sorted(options.items())),
    }


def _first(git: Git, commit: str, paths: tuple[str, ...]) -> tuple[str, str]:
    for path in paths:
        text = git.show(commit, path)
        if text is not None:
            return path, text
    raise FileNotFoundError(f"{commit}: none of {paths}")


def extract_trtllm(mirrors: Path, snap: Snapshot) -> None:
    git = Git(mirrors, snap.mirror)
    commit = git.commit(snap.commit)
    assert commit == snap.commit, (commit, snap.commit)
    version = git.show(commit, "tensorrt_llm/version.py") or ""
    if f'"{snap.label}"' not in version:
        raise ValueError(f"{commit}: version.py does not say {snap.label}")
    build = "tensorrt_llm/commands/build.py"
    plugin = "tensorrt_llm/plugin/plugin.py"
    options = argparse_options(git.show(commit, build) or "")
    options.update(plugin_options(git.show(commit, plugin) or ""))
    _write(f"trtllm-build-{snap.label}", _table("trtllm-build", snap, [build, plugin], options))
    for conv in CONVERTERS:
        path, text = _first(
            git,
            commit,
            (
                f"examples/{conv}/convert_checkpoint.py",
                f"examples/models/core/{conv}/convert_checkpoint.py",
            ),
        )
        _write(
            f"convert_checkpoint-{conv}-{snap.label}",
            _table(f"convert_checkpoint-{conv}", snap, [path], argparse_options(text)),
        )
    path, text = _first(git, commit, ("examples/quantization/quantize.py",))
    _write(f"quantize-{snap.label}", _table("quantize", snap, [path], argparse_options(text)))


def _stored_table(
    tool: str, files: list[tuple[str, str]], options: dict[str, Any]
) -> dict[str, Any]:
    commit0 = files[0][1]
    return {
        "tool": tool,
        "version": STORED_VERSION,
        "exact": False,
        "source": {
            "repository": TRTLLM,
            "commit": commit0,
            "paths": [p for p, _ in files],
            "commits": {p: c for p, c in files},
            "read_from": "search index (stored file versions of the main branch)",
            "version_evidence": STORED_EVIDENCE,
        },
        "options": dict(sorted(options.items())),
    }


def extract_stored(stored: Path) -> None:
    """The tables of the files in STORED_FILES, read from `stored`/<commit>/<path>."""

    def text(key: str) -> str:
        path, commit = STORED_FILES[key]
        return (stored / commit / path).read_text(encoding="utf-8")

    build = argparse_options(text("trtllm-build"))
    build.update(plugin_options(text("trtllm-build:plugin")))
    files = [STORED_FILES["trtllm-build"], STORED_FILES["trtllm-build:plugin"]]
    _write(f"trtllm-build-{STORED_VERSION}", _stored_table("trtllm-build", files, build))
    for tool in STORED_FILES:
        if tool.startswith(("trtllm-build", "templates:")):
            continue
        table = _stored_table(tool, [STORED_FILES[tool]], argparse_options(text(tool)))
        if tool == "launch_triton_server":
            table["tritonserver_flags"] = _launcher_flags(text(tool), table["options"])
        _write(f"{tool}-{STORED_VERSION}", table)
    keys = [k for k in STORED_FILES if k.startswith("templates:")]
    templates = _stored_table("templates", [STORED_FILES[k] for k in keys], {})
    del templates["options"]
    templates["models"] = {k.split(":", 1)[1]: template_facts(text(k)) for k in keys}
    _write(f"templates-{STORED_VERSION}", templates)


def _launcher_flags(text: str, options: dict[str, Any]) -> list[str]:
    """The tritonserver flags the launcher itself writes (literal "--x" strings, "=" cut off)."""
    return sorted(set(re.findall(r"""['"](--[a-z][a-z0-9-]+)""", text)) - set(options))


def extract_backend(mirrors: Path, tag: str) -> None:
    git = Git(mirrors, "triton-inference-server+tensorrtllm_backend")
    commit = git.commit(tag)
    label = tag.removeprefix("v")
    snap = Snapshot(BACKEND, commit, "triton-inference-server+tensorrtllm_backend", label, True)
    launcher = "scripts/launch_triton_server.py"
    text = git.show(commit, launcher) or ""
    table = _table("launch_triton_server", snap, [launcher], argparse_options(text))
    table["tritonserver_flags"] = _launcher_flags(text, table["options"])
    table["source"]["tag"] = tag
    _write(f"launch_triton_server-{label}", table)
    models: dict[str, Any] = {}
    paths = []
    for model in TEMPLATE_MODELS:
        path = f"all_models/inflight_batcher_llm/{model}/config.pbtxt"
        text = git.show(commit, path)
        if text is not None:
            models[model] = template_facts(text)
            paths.append(path)
    llmapi = "all_models/llmapi/tensorrt_llm/config.pbtxt"
    text = git.show(commit, llmapi)
    if text is not None:
        models["llmapi:tensorrt_llm"] = template_facts(text)
        paths.append(llmapi)
    templates = {
        "tool": "templates",
        "version": label,
        "exact": True,
        "source": {**_source(snap, paths), "tag": tag},
        "models": models,
    }
    _write(f"templates-{label}", templates)


def extract_server(mirrors: Path, branch: str) -> None:
    git = Git(mirrors, "triton-inference-server+server")
    commit = git.commit(branch)
    path = "src/command_line_parser.cc"
    mirror = "triton-inference-server+server"
    snap = Snapshot(SERVER, commit, mirror, branch.removeprefix("r"), True)
    table = _table("tritonserver", snap, [path], tritonserver_options(git.show(commit, path) or ""))
    table["source"]["branch"] = branch
    _write(f"tritonserver-{snap.label}", table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path)
    parser.add_argument("--stored", type=Path, help="files read from the search index")
    args = parser.parse_args()
    if args.stored:
        extract_stored(args.stored)
    if not args.mirrors:
        return
    for snap in TRTLLM_SNAPSHOTS:
        extract_trtllm(args.mirrors, snap)
    for tag in BACKEND_TAGS:
        extract_backend(args.mirrors, tag)
    for branch in SERVER_BRANCHES:
        extract_server(args.mirrors, branch)


if __name__ == "__main__":
    main()
