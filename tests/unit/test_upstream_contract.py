"""Every rendered command line and config, checked against the upstream sources of the version
each supported NGC tag ships (tests/contract: tables, checker, scenarios; docs/contract.md).

For each tag, every example and seed scenario is rendered (or refused by the operator, which must
then name the version): the convert_checkpoint.py / quantize.py and trtllm-build argvs are parsed
with the TensorRT-LLM option tables (exact, or the nearest older and newer, named in the test id),
each rank's tritonserver arguments with the parser of that month's Triton release, and the
tensorrt_llm model's parameters with the keys the backend's template of that version reads.
"""

from __future__ import annotations

import re

import pytest

from tests.contract import check
from tests.contract.check import Against, Report, against, tables
from tests.contract.scenarios import NGC_TAGS, case, scenarios
from tritonllm.api.versions import NGC_TRTLLM
from tritonllm.triton.launch import LaunchSpec, rank_args

AGAINST = [against(tag) for tag in NGC_TAGS]


@pytest.mark.parametrize("ag", AGAINST, ids=lambda a: a.id)
def test_every_rendered_argv_and_config_matches_the_upstream_tables(ag: Against) -> None:
    total = Report()
    for name in scenarios():
        c = case(ag.ngc, name)
        if c.refused is not None:
            # A refusal tells the user which TensorRT-LLM version cannot do it.
            assert ag.trtllm in str(c.refused), (c.id, str(c.refused))
            continue
        assert c.rendered is not None
        total.add(check.check_rendered(c.rendered, ag, c.id))
    assert not total.problems, "\n".join(total.problems)
    # Not vacuous: the build, every rank and the configs were parsed.
    assert total.argvs >= len(scenarios()) and total.options > 10 * len(scenarios())
    assert total.config_items > 10 * len(scenarios())


def test_every_supported_tag_has_tables_for_each_tool() -> None:
    for tag in NGC_TAGS:
        ag = against(tag)
        assert ag.server.version == tag and ag.server.exact
        key = check.version_key(ag.trtllm)
        for tool, ts in [*ag.tools.items(), ("templates", ag.templates)]:
            keys = [check.version_key(t.version) for t in ts]
            if keys == [key]:
                assert ts[0].exact, (tag, tool)
            elif len(ts) == 2:
                assert keys[0] < key < keys[1], (tag, tool)
            else:  # past the newest reachable table: the older one only
                assert len(ts) == 1 and keys[0] < key, (tag, tool)
                assert ts[0] is tables()[tool][-1], (tag, tool)


def test_the_tables_name_their_source_and_cover_the_versions_the_doc_lists() -> None:
    for ts in tables().values():
        for t in ts:
            s = t.source
            assert s["repository"] in (
                "NVIDIA/TensorRT-LLM",
                "triton-inference-server/tensorrtllm_backend",
                "triton-inference-server/server",
                "NVIDIA/Model-Optimizer",  # hf_ptq.py, llmapi's quantization (hf_ptq_extract)
            ), t.cite
            assert re.fullmatch(r"[0-9a-f]{40}", s["commit"]), t.cite
            assert s["paths"], t.cite
            assert t.options or t.models, t.cite
    exact = {t.version for t in tables()["trtllm-build"] if t.exact}
    assert {"0.9.0", "0.10.0"} <= exact
    assert {t.version for t in tables()["templates"]} >= {"0.9.0", "0.14.0", "0.19.0"}
    assert {t.version for t in tables()["tritonserver"]} == set(NGC_TRTLLM)


def test_a_tag_between_two_tables_is_checked_against_both() -> None:
    ag = against("24.07")  # TensorRT-LLM 0.11.0: no release tree reachable, main either side
    ts = ag.tools["trtllm-build"]
    assert [t.version for t in ts] == ["0.11.0.dev2024062500", "0.12.0.dev2024080600"]
    assert "0.11.0.dev2024062500+0.12.0.dev2024080600" in ag.id
    assert [t.version for t in against("24.04").tools["trtllm-build"]] == ["0.9.0"]
    newest = against("26.07").tools["trtllm-build"]
    assert len(newest) == 1 and "(no newer table)" in check.label(newest, "1.2.1")


def test_the_launch_follows_the_per_rank_flags_of_every_upstream_launcher() -> None:
    """launch.py's docstring: every rank gets the flags launch_triton_server.py gives it."""
    shared = {
        "--model-repository",
        "--disable-auto-complete-config",
        "--backend-config",
        "--http-port",
        "--grpc-port",
        "--metrics-port",
        "--load-model",
        "--model-control-mode",
    }
    ours = {a.split("=", 1)[0] for r in (0, 1) for a in rank_args(LaunchSpec(2, "/m"), r)}
    assert shared <= ours, shared - ours
    for t in tables()["launch_triton_server"]:
        assert shared <= set(t.tritonserver_flags), (t.cite, shared - set(t.tritonserver_flags))


# --- the checker itself catches each kind of mistake -------------------------------------------


def _table(tool: str, version: str) -> check.Table:
    return next(t for t in tables()[tool] if t.version == version)


def test_checker_reports_unknown_options_missing_values_and_values_outside_choices() -> None:
    t = _table("trtllm-build", "0.9.0")
    rep = check.check_argparse(
        ["--max_seq_len", "8", "--gemm_plugin", "int8", "--workers"], t, "case"
    )
    assert any("unknown option --max_seq_len" in p and "0.9.0" in p for p in rep.problems)
    assert any("--gemm_plugin int8 is not one of" in p for p in rep.problems)
    assert any("--workers without its value" in p for p in rep.problems)
    assert all("NVIDIA/TensorRT-LLM@250d9c293d5e" in p for p in rep.problems)
    # A version's own flag dialect passes.
    ok = check.check_argparse(["--max_output_len", "8", "--paged_kv_cache", "enable"], t, "case")
    assert ok.problems == [] and ok.options == 2


def test_checker_reports_gemma_flags_in_the_llama_dialect() -> None:
    t = _table("convert_checkpoint-gemma", "0.10.0")
    rep = check.check_argparse(["--model_dir", "/w", "--tp_size", "2"], t, "case")
    assert any("unknown option --model_dir" in p for p in rep.problems)
    assert check.check_argparse(["--model-dir", "/w", "--world-size", "2"], t, "c").problems == []


def test_checker_takes_a_later_value_only_on_the_operators_rule() -> None:
    newest = _table("quantize", "0.16.0.dev2024121000")
    argv = ["--qformat", "nvfp4"]
    assert check.check_argparse(argv, newest, "c", "0.17.0").problems == []
    assert check.check_argparse(argv, newest, "c", "0.17.0").trusted
    # Not before the rule's version, and never in a table of the exact version.
    assert check.check_argparse(argv, newest, "c", "0.16.0").problems
    assert check.check_argparse(argv, _table("quantize", "0.10.0"), "c", "0.10.0").problems


def test_checker_reports_tritonserver_flags_and_values() -> None:
    t = check.server_table("24.04")
    args = ["--allow-http=maybe", "--disable-auto-complete-config=1", "--no-such-flag=1"]
    rep = check.check_tritonserver(args, t, "case")
    assert len(rep.problems) == 3, rep.problems
    good = ["--backend-config=python,shm-region-prefix-name=prefix0_", "--log-info=false"]
    assert check.check_tritonserver(good, t, "case").problems == []


def test_checker_reports_parameters_the_template_does_not_read_and_placeholders() -> None:
    files = {
        "tensorrt_llm/config.pbtxt": 'parameters {\n  key: "executor_worker_path"\n  value {\n'
        '    string_value: "/x"\n  }\n}\n',
        "preprocessing/config.pbtxt": 'parameters {\n  key: "tokenizer_dir"\n  value {\n'
        '    string_value: "${tokenizer_dir}"\n  }\n}\n',
    }
    rep = check.check_repository(files, [_table("templates", "0.9.0")], "case")
    assert any("executor_worker_path" in p and "templates 0.9.0" in p for p in rep.problems)
    assert any("keeps a ${…} placeholder" in p for p in rep.problems)
    newer = check.check_repository(
        {"tensorrt_llm/config.pbtxt": files["tensorrt_llm/config.pbtxt"]},
        [_table("templates", "0.10.0")],
        "case",
    )
    assert newer.problems == []


def test_checker_compares_tensors_with_the_template_of_the_exact_version() -> None:
    rendered = case("24.09", "gpt2-medium").rendered
    assert rendered is not None
    text = rendered.repository["tensorrt_llm/config.pbtxt"]
    t = _table("templates", "0.13.0")
    assert check.check_tensors("tensorrt_llm", text, t, "tensorrt_llm", "c").problems == []
    renamed = text.replace('"random_seed"', '"seed"').replace('"input_lengths"', '"in_lens"')
    retyped = renamed.replace(
        'name: "end_id"\n  data_type: TYPE_INT32', 'name: "end_id"\n  data_type: TYPE_INT64'
    )
    problems = check.check_tensors("tensorrt_llm", retyped, t, "tensorrt_llm", "c").problems
    assert any("input seed is not in templates 0.13.0" in p for p in problems), problems
    assert any("lacks the input input_lengths" in p for p in problems), problems  # required
    assert not any("random_seed" in p for p in problems), problems  # optional upstream
    assert any("end_id is TYPE_INT64, TYPE_INT32" in p for p in problems), problems


# --- the main-branch snapshot read from the search index (1.2.0rc2) ---------------------------


def test_a_release_candidate_ranks_between_the_dev_snapshots_and_its_release() -> None:
    order = ["0.16.0.dev2024121000", "0.17.0", "1.1.0", "1.2.0rc2", "1.2.0", "1.2.1"]
    assert sorted(reversed(order), key=check.version_key) == order
    assert check.version_key("1.0.3.2510") > check.version_key("1.0.3")


def test_the_versions_after_0_16_are_checked_against_the_1_2_0rc2_snapshot() -> None:
    """0.17 ... 1.1 between the 0.16 main snapshot and 1.2.0rc2; 1.2.x against 1.2.0rc2 alone."""
    for tag in ("25.01", "25.06", "25.12"):
        tools = against(tag).tools
        assert [t.version for t in tools["trtllm-build"]] == ["0.16.0.dev2024121000", "1.2.0rc2"]
        assert [t.version for t in tools["convert_checkpoint-falcon"]][-1] == "1.2.0rc2"
    assert [t.version for t in against("25.06").templates] == ["0.19.0", "1.2.0rc2"]
    for tag in ("26.03", "26.07"):
        ag = against(tag)
        assert [t.version for t in ag.tools["quantize"]] == ["1.2.0rc2"]
        assert "tools 1.2.0rc2(no newer table)" in ag.id
    snap = _table("trtllm-build", "1.2.0rc2")
    assert not snap.exact and "1.2.0rc2" in snap.source["version_evidence"]
    assert set(snap.source["commits"]) == set(snap.source["paths"])


def test_plugin_options_of_the_pydantic_plugin_config() -> None:
    """Since PluginConfig became a pydantic model, add_plugin_argument() derives each option from
    the field's annotation (tensorrt_llm/plugin/plugin.py at c20322ff)."""
    from tests.contract.extract import plugin_options

    source = (
        'Dtype = Literal["auto", "float16", None]\n'
        "class PluginConfig(BaseModel):\n"
        '    dtype: str = Field(default="float16")\n'
        '    gpt_attention_plugin: Optional[Dtype] = Field(default="auto")\n'
        '    gemm_swiglu_plugin: Optional[Literal["fp8", None]] = Field(default=None)\n'
        "    context_fmha: bool = Field(default=True)\n"
        "    tokens_per_block: int = Field(default=32)\n"
        "    paged_kv_cache: Optional[bool] = Field(default=None)\n"
        'cli_plugin_args = ["gpt_attention_plugin", "gemm_swiglu_plugin", "context_fmha",\n'
        '                   "tokens_per_block"]\n'
    )
    opts = plugin_options(source)
    assert set(opts) == {
        "--gpt_attention_plugin",
        "--gemm_swiglu_plugin",
        "--context_fmha",
        "--tokens_per_block",
    }
    assert opts["--gpt_attention_plugin"]["choices"] == ["auto", "float16", "disable"]
    assert opts["--gemm_swiglu_plugin"]["choices"] == ["fp8", "disable"]
    assert opts["--context_fmha"]["choices"] == ["enable", "disable"]
    assert opts["--tokens_per_block"]["choices"] is None and opts["--tokens_per_block"]["value"]


def test_the_snapshot_knows_what_trtllm_build_dropped_and_added_after_0_16() -> None:
    t = _table("trtllm-build", "1.2.0rc2")
    assert "--auto_parallel" in _table("trtllm-build", "0.16.0.dev2024121000").options
    rep = check.check_argparse(
        ["--auto_parallel", "2", "--gemm_plugin", "nvfp4", "--paged_state", "on"], t, "c"
    )
    assert any("unknown option --auto_parallel" in p for p in rep.problems), rep.problems
    assert any("--paged_state on is not one of" in p for p in rep.problems), rep.problems
    assert not any("--gemm_plugin" in p for p in rep.problems), rep.problems


def test_checker_reports_a_converter_the_runtime_would_not_find() -> None:
    falcon = _table("convert_checkpoint-falcon", "1.2.0rc2")
    assert falcon.source["paths"] == ["examples/models/contrib/falcon/convert_checkpoint.py"]
    old_layout = ["{dir}/convert_checkpoint.py", "models/core/{dir}/convert_checkpoint.py"]
    rep = check.check_converter_path(old_layout, "falcon", falcon, "c")
    assert any("examples/models/contrib/falcon/convert_checkpoint.py" in p for p in rep.problems)
    ours = case("26.07", "seed-arch-falcon").rendered
    assert ours is not None
    step = next(s for s in ours.build_plan["steps"] if s["name"] == "convert")
    assert check.check_converter_path(step["converterPaths"], "falcon", falcon, "c").problems == []


def test_phi_with_pipeline_parallelism_is_refused_naming_the_version() -> None:
    """phi's converter takes --pp_size but asserts it is 1 (0.11.0.dev2024062500 ... 1.2.0rc2)."""
    for tag in ("24.07", "25.01", "26.07"):
        c = case(tag, "seed-arch-phi3-tp2-pp2")
        assert c.refused is not None, tag
        assert NGC_TRTLLM[tag] in str(c.refused) and "pipeline 1" in str(c.refused)
    assert case("26.07", "seed-arch-phi3").rendered is not None
