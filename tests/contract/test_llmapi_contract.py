"""Runtime llmapi against the upstream sources of each version (docs/contract.md, "The LLM-API
tables"): every rendered model.yaml and tensorrt_llm config.pbtxt under every NGC tag whose
TensorRT-LLM has the llmapi model, the tables themselves, and the checker and extractor on
inputs whose answer is known.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from tests.contract import llmapi_check as check
from tests.contract import llmapi_extract as extract
from tests.contract.llmapi_check import CONFIG, LLMAPI_TAGS, MODEL_YAML
from tritonllm.api.versions import NGC_TRTLLM


def _version(tag: str) -> str:
    return NGC_TRTLLM[tag]


@pytest.mark.parametrize("tag", LLMAPI_TAGS, ids=lambda t: f"{t}[trtllm {_version(t)}]")
def test_every_rendered_llmapi_repository_matches_its_version(tag: str) -> None:
    total = check.Report()
    rendered = 0
    for name, obj in check.llmapi_scenarios().items():
        c = check.case(tag, name, obj)
        if c.files is None:
            continue  # the operator refuses it (its own tests hold the message)
        rendered += 1
        total.add(check.check_repository(c.files, _version(tag), c.id))
    assert not total.problems, "\n".join(total.problems)
    # Not vacuous: the llmapi examples and most switched scenarios render, each checked whole.
    assert rendered >= 20
    assert total.keys >= 15 * rendered and total.tensors >= 20 * rendered


def test_every_llmapi_version_has_its_own_tables() -> None:
    for tag in LLMAPI_TAGS:
        v = _version(tag)
        assert [t.version for t in check.for_version(check.llm_args_tables(), v)] == [v], tag
        assert [t.version for t in check.for_version(check.template_tables(), v)] == [v], tag


def test_the_tables_name_their_source_and_how_the_version_was_told() -> None:
    tables: list[check.LlmArgs | check.Template] = [
        *check.llm_args_tables(),
        *check.template_tables(),
    ]
    for t in tables:
        s = t.source
        assert re.fullmatch(r"[0-9a-f]{40}", s["commit"]), t.cite
        assert s["paths"] and s["identified"], t.cite
        assert s["repository"] in (extract.TRTLLM, extract.BACKEND, "Ataraksia/TensorRT-LLM")
        assert t.exact == (s.get("tag") is not None), t.cite  # only a release tag is exact
    for t in check.llm_args_tables():
        assert {"model", "tokenizer", "backend", "kv_cache_config"} <= set(t.classes["LLM"])
        assert t.nested["kv_cache_config"] == "KvCacheConfig"
        assert t.unknown_keys in ("error", "ignored")


def test_what_the_tables_say_about_iteration_statistics_and_unknown_keys() -> None:
    """The facts the renderer's version gate and the stand-in rest on."""
    raw = {
        v: json.loads((check.TABLES / f"llm_args-{v}.json").read_text())
        for v in ("0.20.0", "0.21.0", "1.2.1")
    }
    assert raw["0.20.0"]["enable_iter_perf_stats"] == "pytorch_backend_config"
    assert raw["0.20.0"]["unknown_keys"] == "ignored"  # extra='allow': a wrong key is dropped
    assert raw["0.21.0"]["enable_iter_perf_stats"] == "LLM"
    assert raw["1.2.1"]["enable_iter_perf_stats"] == "LLM"
    assert raw["1.2.1"]["unknown_keys"] == "error"
    assert raw["1.2.1"]["aliases"] == {"_mpi_session": "mpi_session"}
    assert "quant_config" not in raw["1.2.1"]["classes"]["LLM"]
    stats = raw["1.2.1"]["stats_keys"]
    assert {"numActiveRequests", "numQueuedRequests", "kvCacheStats"} <= set(stats["top"])
    assert {"maxNumBlocks", "usedNumBlocks", "reusedBlocks"} <= set(stats["kvCacheStats"])


def _render(tag: str, scenario: str) -> dict[str, Any]:
    c = check.case(tag, scenario, check.llmapi_scenarios()[scenario])
    assert c.files is not None, c.refused
    data: dict[str, Any] = yaml.safe_load(c.files[MODEL_YAML])
    return data


def test_iteration_statistics_are_asked_for_only_where_llm_takes_the_argument() -> None:
    # 25.07 ships 0.20.0 (the knob lives in pytorch_backend_config), 25.08 ships 0.21.0.
    assert "enable_iter_perf_stats" not in _render("25.07", "cpu-standin-llmapi")
    assert _render("25.08", "cpu-standin-llmapi")["enable_iter_perf_stats"] is True


# --- the checker catches each kind of mistake --------------------------------------------------


def _table(version: str) -> check.LlmArgs:
    (t,) = check.for_version(check.llm_args_tables(), version)
    return t


def test_checker_reports_unknown_keys_nested_keys_enum_values_and_stray_mappings() -> None:
    t = _table("1.2.1")
    data = {
        "model": "/m",
        "max_batch_sizes": 4,
        "kv_cache_config": {"free_gpu_memory_fraction": 0.5, "bogus_fraction": 1},
        "scheduler_config": {"capacity_scheduler_policy": "MAX_UTILISATION"},
        "tensor_parallel_size": {"size": 2},
        "triton_config": {"max_batch_size": 0},
    }
    rep = check.check_model_yaml(data, t, "case")
    assert any("max_batch_sizes: no LLM() argument" in p for p in rep.problems)
    assert any("kv_cache_config.bogus_fraction: no KvCacheConfig field" in p for p in rep.problems)
    assert any("'MAX_UTILISATION' is not a CapacitySchedulerPolicy" in p for p in rep.problems)
    assert any("tensor_parallel_size: a mapping" in p for p in rep.problems)
    assert len(rep.problems) == 4 and all(p.startswith("case: ") for p in rep.problems)
    assert all("Ataraksia/TensorRT-LLM@a451bf93888e" in p for p in rep.problems)


def test_checker_reports_a_triton_config_key_neither_model_reads() -> None:
    templates = check.for_version(check.template_tables(), "1.2.1")
    ok = check.check_triton_config({"triton_config": {"decoupled": True}}, templates, "c")
    bad = check.check_triton_config({"triton_config": {"max_batch_sizes": 0}}, templates, "c")
    assert not ok.problems and ok.keys == 1
    assert bad.problems == ["c: triton_config.max_batch_sizes is read by neither model.py"]


_PBTXT = """
name: "tensorrt_llm"
backend: "python"
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "sampling_param_top_k" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
  { name: "sampling_param_made_up" data_type: TYPE_INT32 dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
"""


def test_checker_reports_wrong_tensor_types_unknown_tensors_and_missing_outputs() -> None:
    (t,) = check.for_version(check.template_tables(), "0.19.0")
    rep = check.check_tensors(_PBTXT, t, "case")
    assert any(
        p.startswith("case: input sampling_param_top_k is TYPE_FP32, TYPE_INT32 in")
        for p in rep.problems
    )
    assert any("input sampling_param_made_up is in no llmapi template" in p for p in rep.problems)
    # 0.19.0's outputs finish_reason, stop_reason and cumulative_logprob are missing.
    missing = sorted(
        p.split("lacks the output ")[1].split()[0] for p in rep.problems if "lacks the output" in p
    )
    assert missing == ["cumulative_logprob", "finish_reason", "stop_reason"]
    assert "tensorrtllm_backend@v0.19.0" in rep.problems[0]


def test_a_version_between_two_tables_is_checked_against_both() -> None:
    tables = check.llm_args_tables()
    assert [t.version for t in check.for_version(tables, "1.1.5")] == ["1.1.0", "1.2.0"]
    assert [t.version for t in check.for_version(tables, "9.0.0")] == ["1.2.1"]


# --- the extractor on sources whose answer is known --------------------------------------------

_SOURCE = """
from dataclasses import dataclass
class Policy(StrEnum):
    A = "A"
    B = "B"
class Strict(BaseModel):
    model_config = {"extra": "forbid"}
class Inner(Strict):
    policy: Policy = None
    kind: Literal["x", "y"] = "x"
    order: ClassVar[int] = 1
class Base(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = Field()
    inner: Optional[Inner] = None
    session: object = Field(default=None, alias="_session")
    _private: int = PrivateAttr(0)
class Torch(Base):
    model_config = {"extra": "forbid"}
    knob: bool = False
@dataclass
class Old:
    model: str
    _session: object = None
def update_llm_args_with_extra_dict(llm_args, d):
    field_mapping = {"inner": Inner, "old": Old}
"""


def test_extractor_reads_fields_inheritance_extra_aliases_enums_and_literals() -> None:
    src: dict[str, Any] = {"commit": "0" * 40}
    t = extract.llm_args_table(_SOURCE, "9.9.9", src, root="Torch")
    assert t["classes"]["LLM"] == ["inner", "knob", "model", "session"]
    assert t["classes"]["Inner"] == ["kind", "policy"]  # ClassVar is no field
    assert t["nested"] == {"inner": "Inner"}
    assert t["unknown_keys"] == "error" and t["unknown_nested_keys"] == {"Inner": "error"}
    assert t["aliases"] == {"_session": "session"}
    assert t["enums"] == {"Policy": ["A", "B"], "Inner.kind": ["x", "y"], "Inner.policy": "Policy"}
    assert t["extra_dict_converts"] == ["inner", "old"]
    base = extract.llm_args_table(_SOURCE, "9.9.9", {}, root="Base", pops={"old": "Old"})
    assert base["unknown_keys"] == "ignored"  # extra="allow"
    assert base["unknown_nested_keys"]["Old"] == "error"  # a dataclass: TypeError
    assert base["classes"]["Old"] == ["_session", "model"]  # a dataclass takes _x too
    assert base["nested"]["old"] == "Old" and "old" in base["classes"]["LLM"]


def test_extractor_reads_tensors_model_files_and_the_launcher() -> None:
    tensors = extract.tensors(_PBTXT, "input")
    assert tensors["text_input"] == {"data_type": "TYPE_STRING", "dims": [-1], "optional": False}
    assert tensors["sampling_param_top_k"]["optional"] is True
    model_py = (
        "p = os.environ.get('LLM_CONFIG_PATH', 'model.yaml')\n"
        "x = triton_config['decoupled']\n"
        "y = int(tc['a']) if 'cancellation_check_period_ms' in triton_config else 1\n"
        "v = get_parameter(self.model_config, 'gpu_device_ids')\n"
        "s = get_input_scalar_by_name(request, 'stop')\n"
        "llm = LLM(**args)\n"
    )
    facts = extract.model_facts(model_py, None)
    assert facts == {
        "env": ["LLM_CONFIG_PATH"],
        "triton_config_read": ["cancellation_check_period_ms", "decoupled"],
        "parameters_read": ["gpu_device_ids"],
        "request_inputs_read": ["stop"],
        "llm_built_with": ["LLM"],
    }
    script = (
        'cmd="${@:1}"\nrank=${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-0}}\n'
        "export TLLM_SPAWN_PROXY_PROCESS=1\nf() {\n    local port=$(x)\n"
        '    export ADDR="tcp://127.0.0.1:${port}"\n}\n'
        "python3 -m tensorrt_llm.llmapi.mgmn_worker_node\n"
    )
    assert extract.launcher_facts(script) == {
        "env_read": ["OMPI_COMM_WORLD_RANK", "SLURM_PROCID"],
        "env_exported": ["ADDR", "TLLM_SPAWN_PROXY_PROCESS"],
        "modules_run": ["tensorrt_llm.llmapi.mgmn_worker_node"],
        "runs_its_arguments": True,
    }
    assert extract.yaml_facts("model: m\ntriton_config:\n  decoupled: false\n") == {
        "model_yaml_keys": ["model"],
        "triton_config_keys": ["decoupled"],
    }


def test_the_rendered_config_and_model_yaml_are_the_files_checked() -> None:
    c = check.case("26.07", "cpu-standin-llmapi", check.llmapi_scenarios()["cpu-standin-llmapi"])
    assert c.files is not None and {MODEL_YAML, CONFIG} <= set(c.files)
