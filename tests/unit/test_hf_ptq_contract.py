"""llmapi's quantization command against ModelOpt's real hf_ptq.py options (the committed tables
tests/contract/tables/hf_ptq-<release>.json, read from NVIDIA/Model-Optimizer by
tests/contract/hf_ptq_extract.py), and the SIMULATED hf_ptq.py of the stand-in image against the
same table: it must accept exactly what the real one accepts."""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.cases import ROOT, cr
from tests.contract.check import TABLES, Table, check_argparse, tables
from tritonllm.api.deployment import parse_deployment
from tritonllm.api.spec import LLMAPI_FORMATS, LLMAPI_KV_DTYPES, MODELOPT_CALIB_DATASETS
from tritonllm.render import render_all

FAKE = ROOT / "images" / "triton-standin" / "fakes" / "hf_ptq.py"
PINNED = "0.37.0"  # TensorRT-LLM 1.1 and 1.2: requirements.txt nvidia-modelopt[torch]~=0.37.0


def hf_ptq_tables() -> list[Table]:
    return tables()["hf_ptq"]


def qformats(table: Table) -> list[str]:
    raw = json.loads((TABLES / f"hf_ptq-{table.version}.json").read_text())
    return list(raw["qformats"])


def fake() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fake_hf_ptq", FAKE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FORMATS = [f for f in LLMAPI_FORMATS if f != "none"]


@pytest.mark.parametrize(("fmt", "kv", "remote"),
                         list(itertools.product(FORMATS, LLMAPI_KV_DTYPES, (False, True))))
def test_every_rendered_quantization_is_accepted_by_every_hf_ptq_release(
    fmt: str, kv: str, remote: bool
) -> None:
    quant = {"format": fmt, "kvCacheDtype": kv, "calibrationDataset": "cnn_dailymail"}
    if fmt.endswith("awq"):
        quant["awqBlockSize"] = 64
    r = render_all(parse_deployment(cr({
        "runtime": "llmapi", "image": "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3",
        "engine": {"quantization": quant},
        "model": {"source": "hf://meta-llama/Llama-2-7b-hf", "trustRemoteCode": remote},
    })))
    argv = r.build_plan["steps"][-1]["argv"]
    assert argv[1].endswith("/llm_ptq/hf_ptq.py")
    assert len(hf_ptq_tables()) >= 6
    for table in hf_ptq_tables():
        report = check_argparse(argv[2:], table, f"llmapi {fmt}")
        assert not report.problems, report.problems
        assert argv[argv.index("--qformat") + 1] in qformats(table), table.cite


def test_the_tables_cite_modelopt_releases_at_their_tags() -> None:
    versions = [t.version for t in hf_ptq_tables()]
    assert PINNED in versions
    for t in hf_ptq_tables():
        assert t.source["repository"] == "NVIDIA/Model-Optimizer" and t.exact
        assert t.source["tag"] == t.version and len(t.source["commit"]) == 40


def test_the_simulated_hf_ptq_takes_exactly_the_real_options() -> None:
    parser: argparse.ArgumentParser = fake().parser()
    ours = {s for s in parser._option_string_actions if s.startswith("--")} - {"--help"}
    pinned = next(t for t in hf_ptq_tables() if t.version == PINNED)
    # BooleanOptionalAction adds --no-verbose beside the --verbose the table names.
    assert ours - {"--no-verbose"} == set(pinned.options)
    for name, opt in pinned.options.items():
        action = parser._option_string_actions[name]
        assert (action.nargs != 0) == opt["value"] or name == "--verbose", name
        if opt["choices"] is not None:
            assert list(action.choices or []) == opt["choices"], name


def test_the_simulated_hf_ptq_knows_the_real_qformats() -> None:
    pinned = next(t for t in hf_ptq_tables() if t.version == PINNED)
    assert sorted(fake().QUANT_ALGOS) == sorted(qformats(pinned))


def test_admission_and_the_simulated_hf_ptq_know_the_real_calibration_datasets() -> None:
    raw = json.loads((TABLES / f"hf_ptq-{PINNED}.json").read_text())
    assert list(MODELOPT_CALIB_DATASETS) == raw["datasets"] == list(fake().DATASETS)
    # Five names every tabled release knows: one of them calibrates under any of these ModelOpt
    # releases (docs/examples.md says so).
    for table in hf_ptq_tables():
        known = json.loads((TABLES / f"hf_ptq-{table.version}.json").read_text())["datasets"]
        assert {"cnn_dailymail", "pile", "pg19", "wikipedia", "c4"} <= set(known), table.cite
    assert Path(FAKE).read_text().startswith("#!/usr/bin/python3\n")
