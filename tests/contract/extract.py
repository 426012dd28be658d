"""Build the option tables under tests/contract/tables/ from upstream git trees.

Run by hand when a version is added (docs/contract.md); the tests only read the committed JSON.
Every table is a set of facts read from one file (or a few) at one commit: option names, whether
each takes a value, its nargs and its choices; template parameter keys and placeholders. Nothing
of the upstream code is kept.

    python -m tests.contract.extract --mirrors /work/.mirror

`--mirrors` is a folder of bare git mirrors named ``<owner>+<name>/repo`` (what the session's
`fetch` tool leaves); each source below names the mirror it is read from and the upstream
repository its commit belongs to (a fork holds the same commit ids as its upstream).

Readers:
- argparse scripts (convert_checkpoint.py, quantize.py, launch_triton_server.py, trtllm-build's
  tensorrt_llm/commands/build.py): every ``*.add_argument(...)`` call, read with :mod:`ast`;
  ``choices`` is kept when it is a literal or a module-level literal name, else recorded as
  unresolved (the check then skips the value, and says so).
- trtllm-build's plugin options (tensorrt_llm/plugin/plugin.py): ``add_plugin_argument`` adds one
  option per PluginConfig field listed in ``cli_plugin_args``; str fields take a plugin dtype
  (``plugin_options`` / ``DEFAULT_PLUGIN_DTYPE_OPTIONS`` / ``PLUGIN_DTYPE_OPTIONS_MAP``, None
  spelled "disable"), bool fields take enable/disable, other fields a value of their type.
- tritonserver (src/command_line_parser.cc): each ``{OPTION_X, "name", Option::ArgKind`` entry.
- config.pbtxt templates: the ``key:`` of every ``parameters`` block and every ``${name}``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
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


def plugin_options(source: str) -> dict[str, dict[str, Any]]:
    """The options add_plugin_argument() adds, from PluginConfig and its module's lists."""
    tree = ast.parse(source)
    names = _module_literals(tree)
    cli = names.get("cli_plugin_args")
    if cli is None:
        raise ValueError("plugin.py: no literal cli_plugin_args")
    dtype_options = names.get("DEFAULT_PLUGIN_DTYPE_OPTIONS", names.get("plugin_options"))
    per_plugin: dict[str, list[Any]] = names.get("PLUGIN_DTYPE_OPTIONS_MAP", {})
    if dtype_options is None:
        raise ValueError("plugin.py: no literal plugin dtype options")
    config = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PluginConfig"
    )
    options: dict[str, dict[str, Any]] = {}
    for stmt in config.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        name = stmt.target.id.lstrip("_")
        if name not in cli:
            continue
        kind = _annotation_kind(stmt.annotation)
        if kind == "str":
            choices = per_plugin.get(name, dtype_options)
            choices = [c if c else "disable" for c in choices]
        elif kind == "bool":
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


def _balanced(text: str, start: int, open_: str, close: str) -> int:
    """The index just past the bracket that closes the one at `start`."""
    depth = 0
    for j in range(start, len(text)):
        depth += 1 if text[j] == open_ else -1 if text[j] == close else 0
        if depth == 0:
            return j + 1
    raise ValueError(f"unbalanced {open_}{close}")


def _tensors(text: str, field: str) -> dict[str, dict[str, Any]]:
    """Each `{ name, data_type, optional }` entry of the top-level `field [ ... ]` list."""
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
            out[name.group(1)] = {
                "data_type": dtype.group(1),
                "optional": bool(_OPTIONAL.search(entry)),
            }
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


def extract_backend(mirrors: Path, tag: str) -> None:
    git = Git(mirrors, "triton-inference-server+tensorrtllm_backend")
    commit = git.commit(tag)
    label = tag.removeprefix("v")
    snap = Snapshot(BACKEND, commit, "triton-inference-server+tensorrtllm_backend", label, True)
    launcher = "scripts/launch_triton_server.py"
    text = git.show(commit, launcher) or ""
    table = _table("launch_triton_server", snap, [launcher], argparse_options(text))
    # The tritonserver flags the launcher itself writes (literal "--x" strings, "=" cut off).
    table["tritonserver_flags"] = sorted(
        set(re.findall(r"""['"](--[a-z][a-z0-9-]+)""", text)) - set(table["options"])
    )
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
    parser.add_argument("--mirrors", type=Path, required=True)
    args = parser.parse_args()
    for snap in TRTLLM_SNAPSHOTS:
        extract_trtllm(args.mirrors, snap)
    for tag in BACKEND_TAGS:
        extract_backend(args.mirrors, tag)
    for branch in SERVER_BRANCHES:
        extract_server(args.mirrors, branch)


if __name__ == "__main__":
    main()
