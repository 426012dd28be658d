"""Check what runtime ``llmapi`` renders against the LLM-API tables (docs/contract.md).

For every NGC tag whose TensorRT-LLM has the llmapi model (0.19.0 on) and every deployment that
renders with ``runtime: llmapi`` (the llmapi examples; every other example and seed scenario with
``runtime: llmapi`` where the operator accepts it):

- ``tensorrt_llm/1/model.yaml``: every key but ``triton_config`` must be a field ``LLM()`` takes
  (``TorchLlmArgs`` of that version, inherited fields included: the PyTorch backend raises on any
  other); a mapping value must go to a field whose annotation names a config class, and each of its
  keys must be a field of that class; a value of an enum or ``Literal`` field must be one of its
  members; ``triton_config`` keys must be read by our model.py or by upstream's;
- ``tensorrt_llm/config.pbtxt``: every tensor upstream's llmapi model of that version also declares
  must have its data type; a tensor upstream never declared, and an upstream output or required
  input we leave out, must be listed below with the reason (docs/contract.md repeats them).

Tables per version (``llm_args-<v>.json``, ``llmapi_template-<v>.json``, made by
tests/contract/llmapi_extract.py); a version without its own table is checked against the nearest
older and newer ones, as tests/contract/check.py does for the tools.

``python -m tests.contract.llmapi_check`` prints the totals quoted in docs/contract.md.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.cases import merge
from tests.contract.check import TABLES, python_model_source, version_key
from tests.contract.scenarios import _SEED_BASE, SEEDS, _with_image, scenarios
from tritonllm.api.deployment import InvalidDeployment, parse_deployment
from tritonllm.api.versions import LLMAPI_SINCE, NGC_TRTLLM, TrtllmVersion
from tritonllm.render import render_all
from tritonllm.triton.contracts import LLMAPI_OURS_ONLY

MODEL_YAML = "tensorrt_llm/1/model.yaml"
CONFIG = "tensorrt_llm/config.pbtxt"

# Tensors of our llmapi model that no upstream llmapi model declares: the contract lists them
# with the reason (tritonllm/triton/contracts.py, LLMAPI_OURS_ONLY: our model.py reads or writes
# them itself, for the sampling, stop, logprob and token-count surface of the ensemble path).
OURS_ONLY = frozenset(LLMAPI_OURS_ONLY)
# Upstream outputs our model does not declare (contracts.py says why, beside LLMAPI_OURS_ONLY):
# upstream fills them per request only when the client sets sampling_param_return_perf_metrics;
# our model exports the deployment-wide KV-cache and timing figures as nv_trt_llm_* metrics.
TEMPLATE_ONLY: Mapping[str, str] = {
    name: "per-request perf metrics; exported as nv_trt_llm_* metrics instead"
    for name in (
        "kv_cache_reused_block",
        "kv_cache_missed_block",
        "kv_cache_alloc_new_blocks",
        "kv_cache_alloc_total_blocks",
        "kv_cache_hit_rate",
        "arrival_time_ns",
        "first_scheduled_time_ns",
        "first_token_time_ns",
        "last_token_time_ns",
        "acceptance_rate",
        "total_accepted_draft_tokens",
        "total_draft_tokens",
    )
}


# --- tables ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LlmArgs:
    version: str
    exact: bool
    source: dict[str, Any]
    classes: dict[str, list[str]]
    nested: dict[str, str]
    enums: dict[str, list[str]]
    enum_fields: dict[str, str]
    literal_fields: dict[str, list[Any]]
    unknown_keys: str

    @property
    def cite(self) -> str:
        s = self.source
        return f"LLM {self.version} ({s['repository']}@{s['commit'][:12]}:{','.join(s['paths'])})"


@dataclass(frozen=True)
class Template:
    version: str
    exact: bool
    source: dict[str, Any]
    inputs: dict[str, dict[str, Any]]
    outputs: dict[str, dict[str, Any]]
    triton_config_keys: list[str]
    triton_config_read: list[str]

    @property
    def cite(self) -> str:
        s = self.source
        where = s.get("tag") or s["commit"][:12]
        path = next(p for p in s["paths"] if p.endswith("config.pbtxt"))
        return f"llmapi template {self.version} ({s['repository']}@{where}:{path})"


T = TypeVar("T", LlmArgs, Template)


def _load(tool: str) -> list[dict[str, Any]]:
    raws = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(TABLES.glob("*.json"))]
    return sorted((r for r in raws if r["tool"] == tool), key=lambda r: version_key(r["version"]))


@functools.cache
def llm_args_tables() -> list[LlmArgs]:
    keys = LlmArgs.__dataclass_fields__
    return [LlmArgs(**{k: r[k] for k in keys}) for r in _load("LLM")]


@functools.cache
def template_tables() -> list[Template]:
    keys = Template.__dataclass_fields__
    return [Template(**{k: r.get(k, []) for k in keys}) for r in _load("llmapi_template")]


def for_version(tables: list[T], version: str) -> list[T]:
    """The table of `version`, else the nearest older and newer ones (those that exist)."""
    key = version_key(version)
    same = [t for t in tables if version_key(t.version) == key]
    if same:
        return same
    older: list[T] = [t for t in tables if version_key(t.version) < key]
    newer: list[T] = [t for t in tables if version_key(t.version) > key]
    return older[-1:] + newer[:1]


# --- checks ----------------------------------------------------------------------------------


@dataclass
class Report:
    keys: int = 0  # model.yaml keys (nested ones included) and enum values looked up
    tensors: int = 0  # config.pbtxt tensors compared
    problems: list[str] = field(default_factory=list)

    def add(self, other: Report) -> None:
        self.keys += other.keys
        self.tensors += other.tensors
        self.problems += other.problems


def _check_value(rep: Report, t: LlmArgs, cls: str, path: str, key: str, value: Any) -> None:
    where = f"{cls}.{key}"
    if where in t.enum_fields:
        rep.keys += 1
        members = t.enums[t.enum_fields[where]]
        if value not in members:
            rep.problems.append(
                f"{path}: {value!r} is not a {t.enum_fields[where]} member {members} ({t.cite})"
            )
    if where in t.literal_fields:
        rep.keys += 1
        if value not in t.literal_fields[where]:
            rep.problems.append(f"{path}: {value!r} is not one of {t.literal_fields[where]}")
    if isinstance(value, Mapping):
        target = t.nested.get(path)
        if target is None:
            rep.problems.append(f"{path}: a mapping, but {where} takes no config class ({t.cite})")
        else:
            _check_keys(rep, t, target, path, value)


def _check_keys(rep: Report, t: LlmArgs, cls: str, prefix: str, data: Mapping[str, Any]) -> None:
    allowed = set(t.classes[cls])
    for key, value in data.items():
        rep.keys += 1
        path = f"{prefix}.{key}" if prefix else key
        if key not in allowed:
            shown = "LLM() argument" if cls == "LLM" else f"{cls} field"
            rep.problems.append(f"model.yaml {path}: no {shown} of that name ({t.cite})")
            continue
        _check_value(rep, t, cls, path, key, value)


def check_model_yaml(data: Mapping[str, Any], t: LlmArgs, who: str) -> Report:
    rep = Report()
    llm = {k: v for k, v in data.items() if k != "triton_config"}
    _check_keys(rep, t, "LLM", "", llm)
    rep.problems = [f"{who}: {p}" for p in rep.problems]
    return rep


def check_triton_config(data: Mapping[str, Any], templates: list[Template], who: str) -> Report:
    """triton_config keys: read by our model.py, or by upstream's (where we render upstream's
    key, e.g. for a repository that runs upstream's model.py)."""
    rep = Report()
    ours = python_model_source("llmapi")
    theirs = {k for t in templates for k in (*t.triton_config_keys, *t.triton_config_read)}
    for key in data.get("triton_config") or {}:
        rep.keys += 1
        if f'"{key}"' not in ours and key not in theirs:
            rep.problems.append(f"{who}: triton_config.{key} is read by neither model.py")
    return rep


def _ours(pbtxt_text: str) -> dict[str, dict[str, str]]:
    cfg = text_format.Parse(pbtxt_text, model_config_pb2.ModelConfig())
    return {
        kind: {t.name: model_config_pb2.DataType.Name(t.data_type) for t in tensors}
        for kind, tensors in (("inputs", cfg.input), ("outputs", cfg.output))
    }


def check_tensors(pbtxt_text: str, t: Template, who: str) -> Report:
    rep = Report()
    upstream = {n for u in template_tables() for k in ("inputs", "outputs") for n in getattr(u, k)}
    for kind, ours in _ours(pbtxt_text).items():
        theirs: dict[str, dict[str, Any]] = getattr(t, kind)
        rep.tensors += len(ours)
        for name in sorted(ours.keys() - theirs.keys()):
            if name not in upstream and name not in OURS_ONLY:
                rep.problems.append(
                    f"{who}: {kind[:-1]} {name} is in no llmapi template nor "
                    f"in OURS_ONLY ({t.cite})"
                )
        for name in sorted(theirs.keys() - ours.keys()):
            needed = kind == "outputs" or not theirs[name]["optional"]
            if needed and name not in TEMPLATE_ONLY:
                rep.problems.append(f"{who}: lacks the {kind[:-1]} {name} of {t.cite}")
        for name in sorted(ours.keys() & theirs.keys()):
            if theirs[name]["data_type"] != ours[name]:
                rep.problems.append(
                    f"{who}: {kind[:-1]} {name} is {ours[name]}, "
                    f"{theirs[name]['data_type']} in {t.cite}"
                )
    return rep


def check_repository(files: Mapping[str, str], trtllm: str, who: str) -> Report:
    rep = Report()
    data = yaml.safe_load(files[MODEL_YAML])
    templates = for_version(template_tables(), trtllm)
    for t in for_version(llm_args_tables(), trtllm):
        rep.add(check_model_yaml(data, t, who))
    rep.add(check_triton_config(data, templates, who))
    for tmpl in templates:
        rep.add(check_tensors(files[CONFIG], tmpl, who))
    return rep


# --- the deployments -------------------------------------------------------------------------

LLMAPI_TAGS = tuple(tag for tag, v in NGC_TRTLLM.items() if TrtllmVersion(v) >= LLMAPI_SINCE)


def llmapi_scenarios() -> dict[str, dict[str, Any]]:
    """Every example and seed scenario with runtime llmapi (as written, or switched to it)."""
    out: dict[str, dict[str, Any]] = {}
    for name, obj in {
        **scenarios(),
        **{f"seed-{n}": merge(_SEED_BASE, {"spec": p}) for n, p in SEEDS.items()},
    }.items():
        llmapi = copy.deepcopy(obj)
        written = llmapi["spec"].get("runtime") == "llmapi"
        llmapi["spec"]["runtime"] = "llmapi"
        out[name if written else f"{name}@llmapi"] = llmapi
    return out


@dataclass
class Case:
    ngc: str
    scenario: str
    files: dict[str, str] | None
    refused: InvalidDeployment | None

    @property
    def id(self) -> str:
        return f"{self.ngc}/{self.scenario}"


def case(ngc: str, scenario: str, obj: dict[str, Any]) -> Case:
    try:
        dep = parse_deployment(_with_image(obj, ngc))
    except InvalidDeployment as exc:
        return Case(ngc, scenario, None, exc)
    return Case(ngc, scenario, render_all(dep).repository, None)


def all_cases(tags: tuple[str, ...] = LLMAPI_TAGS) -> Iterator[Case]:
    objs = llmapi_scenarios()
    for ngc in tags:
        for name, obj in objs.items():
            yield case(ngc, name, obj)


def main() -> None:
    total = Report()
    cases = refused = 0
    for c in all_cases():
        cases += 1
        if c.files is None:
            refused += 1
            continue
        total.add(check_repository(c.files, NGC_TRTLLM[c.ngc], c.id))
    print(
        f"{cases} (tag, deployment) cases on {len(LLMAPI_TAGS)} tags, {refused} refused by the "
        f"operator, {total.keys} model.yaml keys and values looked up, {total.tensors} "
        f"config.pbtxt tensors compared, {len(total.problems)} problems"
    )
    for p in total.problems:
        print("  ", p)


if __name__ == "__main__":
    main()
