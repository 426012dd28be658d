"""Option tables of NVIDIA Model Optimizer's examples/llm_ptq/hf_ptq.py
(tables/hf_ptq-<release>.json), the tool runtime llmapi's quantization Job runs
(tritonllm.triton.build.llmapi_quantize_argv).

Run by hand when a release is added (docs/contract.md), with a bare git mirror (a repository
fetch) of github:NVIDIA/Model-Optimizer:

    python -m tests.contract.hf_ptq_extract --mirrors /work/.mirror

Each table is read with extract.argparse_options from the file at the release tag's commit.
The releases: those TensorRT-LLM 1.x pins (requirements.txt `nvidia-modelopt[torch]~=0.37.0` in
1.1 and 1.2) and the ones around them, so that a flag the operator renders is seen to exist
across the range a Triton image may carry.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import Any

from tests.contract.extract import Git, Snapshot, _table, _write, argparse_options

MIRROR = "NVIDIA+Model-Optimizer"
REPOSITORY = "NVIDIA/Model-Optimizer"
PATH = "examples/llm_ptq/hf_ptq.py"
DATASETS_PATH = "modelopt/torch/utils/dataset_utils.py"
RELEASES = ("0.29.0", "0.31.0", "0.33.1", "0.35.1", "0.37.0", "0.39.0")


def dict_keys(source: str) -> dict[str, list[str]]:
    """Module-level `NAME = {...}` (or `NAME: T = {...}`) dicts with literal string keys -> the
    keys: hf_ptq.py validates --qformat against QUANT_CFG_CHOICES (values are ModelOpt config
    objects, not literals) and gives --kv_cache_qformat `choices=KV_QUANT_CFG_CHOICES.keys()`."""
    out: dict[str, list[str]] = {}
    for node in ast.parse(source).body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Dict):
            keys = [k.value for k in value.keys
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            if len(keys) == len(value.keys):
                out[target.id] = keys
    return out


def options_of(source: str) -> tuple[dict[str, Any], list[str]]:
    """argparse_options, with `choices=NAME.keys()` resolved, and the --qformat values."""
    options = argparse_options(source)
    dicts = dict_keys(source)
    for opt in options.values():
        name = str(opt.get("choices_unresolved") or "").removesuffix(".keys()")
        if name in dicts:
            opt["choices"] = dicts[name]
            del opt["choices_unresolved"]
    return options, dicts.get("QUANT_CFG_CHOICES", [])


def extract(mirrors: Path) -> None:
    git = Git(mirrors, MIRROR)
    for release in RELEASES:
        commit = git.commit(release)
        text = git.show(commit, PATH)
        if text is None:
            raise FileNotFoundError(f"{release} ({commit}): no {PATH}")
        snap = Snapshot(REPOSITORY, commit, MIRROR, release, exact=True)
        options, qformats = options_of(text)
        table = _table("hf_ptq", snap, [PATH], options)
        table["source"]["tag"] = release
        # --qformat takes any key of QUANT_CFG_CHOICES (checked by the script, not argparse).
        table["qformats"] = qformats
        # --dataset takes names of ModelOpt's SUPPORTED_DATASET_CONFIG (checked at calibration).
        utils = git.show(commit, DATASETS_PATH) or ""
        table["datasets"] = dict_keys(utils).get("SUPPORTED_DATASET_CONFIG", [])
        table["source"]["paths"].append(DATASETS_PATH)
        _write(f"hf_ptq-{release}", table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mirrors", type=Path, required=True)
    extract(ap.parse_args().mirrors)


if __name__ == "__main__":
    main()
