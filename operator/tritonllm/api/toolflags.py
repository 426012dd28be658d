"""What the TensorRT-LLM build tools of each version accept, as the renderer and admission need it.

Every boundary here was read off the option tables extracted from the upstream sources
(tests/contract/tables, docs/contract.md): "since X" is the first version whose table has the
option or the value. The tables reach TensorRT-LLM 0.9.0 and 0.10.0 exactly and 0.11 ... 0.16 as
main-branch snapshots just before each release; a boundary that falls between a snapshot and the
release is set to the release whose older neighbour lacks the option (the conservative side).
Past 0.16 no release tree is reachable from here; the newest files the search index stores are
main at 1.2.0rc2 (NVIDIA/TensorRT-LLM, each file at its own commit, docs/contract.md), so 0.17 ...
1.1 sit between the 0.16 and 1.2.0rc2 snapshots and 1.2.x follows 1.2.0rc2. A rule that names a
version between them (nvfp4: 0.17) is the release notes', confirmed present by 1.2.0rc2.

The renderer (tritonllm.triton.build) writes command lines from these facts, and admission
(tritonllm.api.deployment) refuses what a version cannot do, naming the version; the contract
test (tests/unit/test_upstream_contract.py) checks both against the tables.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from .versions import OLDEST_SUPPORTED, TrtllmVersion

_V = TrtllmVersion

# --- trtllm-build ---------------------------------------------------------------------------
# --max_seq_len replaced --max_output_len (0.11.0.dev2024062500 has both, 0.10.0 only the latter).
MAX_SEQ_LEN_SINCE: Final = _V("0.11.0")
# --kv_cache_type {paged,...}: first in 0.13.0.dev2024081300; 0.12.0.dev2024080600 (the last
# commit before the 0.12 bump) lacks it, so 0.11 and 0.12 get --paged_kv_cache enable.
KV_CACHE_TYPE_SINCE: Final = _V("0.13.0")
# --multiple_profiles is a plugin option already in 0.9.0.
MULTIPLE_PROFILES_SINCE: Final = _V("0.9.0")

# --- quantize.py (ModelOpt) ------------------------------------------------------------------
# --qformat values: the 0.9.0 ... 0.16 tables all list fp8, int8_sq, int4_awq, w4a8_awq (and
# int8_wo/int4_wo, which we send through convert_checkpoint.py); none lists nvfp4, which came
# with Blackwell support in 0.17 (the release notes'; the 1.2.0rc2 snapshot lists it).
QUANTIZE_FORMAT_SINCE: Final[dict[str, TrtllmVersion]] = {
    "fp8": OLDEST_SUPPORTED,
    "int8_sq": OLDEST_SUPPORTED,
    "int4_awq": OLDEST_SUPPORTED,
    "w4a8_awq": OLDEST_SUPPORTED,
    "nvfp4": _V("0.17.0"),
}
# --calib_dataset: not in 0.9.0, in 0.10.0.
CALIB_DATASET_SINCE: Final = _V("0.10.0")


# --- convert_checkpoint.py -------------------------------------------------------------------

# spec.model.architecture -> the examples/ directory of its converter (auto: decided from
# config.json at build time).
ARCHITECTURE_DIRS: Final[dict[str, str]] = {
    "gpt2": "gpt",
    "llama": "llama",
    "mistral": "llama",
    "mixtral": "llama",
    "qwen2": "qwen",
    "gemma": "gemma",
    "phi3": "phi",
    "falcon": "falcon",
}


@dataclasses.dataclass(frozen=True)
class Converter:
    """The flag dialect of one examples/<dir>/convert_checkpoint.py; a `*_since` of None means
    that no version we could read has the option."""

    dir: str
    model_dir: str = "--model_dir"
    output_dir: str = "--output_dir"
    tp: str = "--tp_size"
    # None: the script has only a tensor-parallel size (pipeline parallelism must be 1).
    pp: str | None = "--pp_size"
    # False: the script takes `pp` but asserts it is 1 before converting anything.
    pipeline: bool = True
    # Before this version the script has no parallelism options at all (tp = pp = 1 only).
    parallel_since: TrtllmVersion = OLDEST_SUPPORTED
    # Weight-only flags: a switch and a precision option, or one option taking the precision.
    weight_only: tuple[str, ...] = ("--use_weight_only", "--weight_only_precision")
    weight_only_since: TrtllmVersion | None = OLDEST_SUPPORTED
    int8_kv_since: TrtllmVersion | None = OLDEST_SUPPORTED  # --int8_kv_cache
    fp8_kv_since: TrtllmVersion | None = None  # --fp8_kv_cache
    # Arguments every call needs (gemma: which checkpoint format it reads).
    fixed: tuple[str, ...] = ()


CONVERTERS: Final[dict[str, Converter]] = {
    c.dir: c
    for c in (
        # gpt, qwen: --int8_kv_cache in every table, --fp8_kv_cache in none.
        Converter("gpt"),
        Converter("qwen"),
        # llama: --fp8_kv_cache from 0.12.0.dev2024072300 (0.11.0.dev2024062500 lacks it).
        Converter("llama", fp8_kv_since=_V("0.12.0")),
        # gemma has its own spelling in every table: dashes, --world-size (tensor parallelism
        # only), one weight-only option; --int8_kv_cache from 0.13 (0.12.0.dev lacks it).
        Converter(
            "gemma",
            model_dir="--model-dir",
            output_dir="--output-model-dir",
            tp="--world-size",
            pp=None,
            weight_only=("--use-weight-only-with-precision",),
            int8_kv_since=_V("0.13.0"),
            fp8_kv_since=OLDEST_SUPPORTED,
            fixed=("--ckpt-type", "hf"),
        ),
        # phi: no parallelism and no weight-only options in 0.9.0/0.10.0 (0.11 dev has both);
        # no KV-cache quantization option in any table. Its --pp_size is asserted to be 1 in
        # every version that has it (0.11.0.dev2024062500 ... 1.2.0rc2).
        Converter(
            "phi",
            pipeline=False,
            parallel_since=_V("0.11.0"),
            weight_only_since=_V("0.11.0"),
            int8_kv_since=None,
            fp8_kv_since=None,
        ),
        # falcon: no KV-cache quantization option in any table.
        Converter("falcon", int8_kv_since=None, fp8_kv_since=None),
    )
}


def _lacks(flag: str, since: TrtllmVersion | None, version: TrtllmVersion) -> str | None:
    """Why a tool of `version` lacks `flag` (None: it has it)."""
    if since is None:
        return f"has no {flag}"
    if version < since:
        return f"has no {flag} (it exists since {since})"
    return None


def converter_problems(
    conv: Converter, version: TrtllmVersion, *, tp: int, pp: int, weight_only: bool, kv: str
) -> list[tuple[str, str]]:
    """(spec field, why) for each thing `conv` of `version` cannot do for this spec."""
    out: list[tuple[str, str]] = []
    where = f"{conv.dir}/convert_checkpoint.py of TensorRT-LLM {version}"
    if (tp > 1 or pp > 1) and version < conv.parallel_since:
        out.append(
            (
                "spec.engine.parallelism",
                f"{where} has no tensor or pipeline parallelism options (they exist since "
                f"{conv.parallel_since}); use tensor 1 and pipeline 1 or a newer image",
            )
        )
    elif pp > 1 and conv.pp is None:
        out.append(
            (
                "spec.engine.parallelism.pipeline",
                f"{where} splits only by tensor parallelism ({conv.tp}); use pipeline 1",
            )
        )
    elif pp > 1 and not conv.pipeline:
        out.append(
            (
                "spec.engine.parallelism.pipeline",
                f"{where} takes {conv.pp} but stops unless it is 1 (no pipeline "
                "parallelism); use pipeline 1",
            )
        )
    if weight_only:
        why = _lacks(conv.weight_only[-1], conv.weight_only_since, version)
        if why:
            out.append(("spec.engine.quantization.format", f"{where} {why} (weight-only)"))
    if kv != "none":
        flag = f"--{kv}_kv_cache"
        why = _lacks(flag, conv.int8_kv_since if kv == "int8" else conv.fp8_kv_since, version)
        if why:
            out.append(
                (
                    "spec.engine.quantization.kvCacheDtype",
                    f"{where} {why}; use kvCacheDtype none, or a ModelOpt format "
                    "(int4_awq, int8_sq, fp8), whose quantize.py quantizes the KV cache",
                )
            )
    return out
