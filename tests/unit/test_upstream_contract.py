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
    assert total.argvs >= len(scenarios()) and total.options > 20 * len(scenarios()) // 2


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
