"""The deployments the contract test renders: every example and every seed scenario, under
every supported NGC tag (tritonllm.api.versions.NGC_TRTLLM).

A case either renders (its argvs and configs are checked) or is refused by the operator's
validation (parse_deployment); a refusal must name the TensorRT-LLM version it is about.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from tests.cases import EXAMPLES, merge
from tritonllm.api.deployment import InvalidDeployment, parse_deployment
from tritonllm.api.versions import NGC_TRTLLM
from tritonllm.render import Rendered, render_all

NGC_TAGS = tuple(NGC_TRTLLM)

# The seed scenarios beyond the examples (design.md): each quantization path, each converter,
# tp/pp splits, multi-node, the BLS and streaming, plugin switches. Blackwell GPUs so that no
# format is refused for the GPU (only for the version).
_SEED_BASE: dict[str, Any] = {
    "apiVersion": "tritonllm.io/v1alpha1",
    "kind": "TritonLLMDeployment",
    "metadata": {"name": "seed", "namespace": "default"},
    "spec": {
        "model": {"source": "hf://meta-llama/Llama-2-7b-hf", "architecture": "llama"},
        "engine": {"dtype": "float16"},
        "gpu": {"product": "NVIDIA-B200", "perNode": 8},
    },
}

SEEDS: dict[str, dict[str, Any]] = {
    **{
        f"quant-{fmt}": {"engine": {"quantization": {"format": fmt}}}
        for fmt in ("int8_wo", "int4_wo", "int4_awq", "w4a8_awq", "int8_sq", "fp8", "nvfp4")
    },
    "awq-64-calib": {
        "engine": {
            "quantization": {
                "format": "int4_awq",
                "awqBlockSize": 64,
                "calibrationSize": 64,
                "calibrationDataset": "cnn_dailymail",
            }
        }
    },
    "kv-int8": {"engine": {"quantization": {"kvCacheDtype": "int8"}}},
    "kv-fp8": {"engine": {"quantization": {"kvCacheDtype": "fp8"}}},
    "int4-wo-kv-int8": {"engine": {"quantization": {"format": "int4_wo", "kvCacheDtype": "int8"}}},
    "fp8-kv-fp8": {"engine": {"quantization": {"format": "fp8", "kvCacheDtype": "fp8"}}},
    **{
        f"arch-{arch}": {"model": {"architecture": arch}}
        for arch in ("gpt2", "llama", "mistral", "qwen2", "gemma", "phi3", "falcon", "auto")
    },
    # Each converter with weight-only and KV-cache quantization, and split over GPUs.
    **{
        f"arch-{arch}-{name}": {"model": {"architecture": arch}, "engine": engine}
        for arch in ("gpt2", "llama", "qwen2", "gemma", "phi3", "falcon", "auto")
        for name, engine in (
            ("int8wo-kvint8", {"quantization": {"format": "int8_wo", "kvCacheDtype": "int8"}}),
            ("int4wo-kvfp8", {"quantization": {"format": "int4_wo", "kvCacheDtype": "fp8"}}),
            ("tp2-pp2", {"parallelism": {"tensor": 2, "pipeline": 2}}),
        )
    },
    "tp2-pp2": {"engine": {"parallelism": {"tensor": 2, "pipeline": 2}}},
    "tp8-pp2-multinode": {
        "engine": {"parallelism": {"tensor": 8, "pipeline": 2}},
        "storage": {"create": {"size": "1Ti", "accessModes": ["ReadWriteMany"]}},
    },
    "bls-streaming": {"serving": {"bls": True, "streaming": True}},
    "plugins-off-profiles": {
        "engine": {
            "plugins": {
                "gemm": "disable",
                "gptAttention": "float16",
                "pagedContextFmha": False,
                "multipleProfiles": True,
            },
            "limits": {"maxBeamWidth": 4},
        }
    },
    "bfloat16-v1": {
        "engine": {"dtype": "bfloat16"},
        "serving": {"batching": "V1", "schedulerPolicy": "max_utilization"},
    },
    "kv-limits": {
        "serving": {
            "kvCache": {"maxTokens": 4096, "maxAttentionWindowSize": 2048, "enableReuse": True},
            "maxQueueSize": 16,
            "maxQueueDelayMicroseconds": 100,
        }
    },
}


@dataclass
class Case:
    ngc: str
    scenario: str
    rendered: Rendered | None
    refused: InvalidDeployment | None

    @property
    def id(self) -> str:
        return f"{self.ngc}/{self.scenario}"


def _with_image(obj: dict[str, Any], ngc: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"]["image"] = f"nvcr.io/nvidia/tritonserver:{ngc}-trtllm-python-py3"
    out["spec"].pop("trtllmVersion", None)
    return out


@functools.cache
def scenarios() -> dict[str, dict[str, Any]]:
    out = {p.stem: yaml.safe_load(p.read_text()) for p in EXAMPLES}
    for name, patch in SEEDS.items():
        out[f"seed-{name}"] = merge(_SEED_BASE, {"spec": patch})
    return out


def case(ngc: str, scenario: str) -> Case:
    try:
        dep = parse_deployment(_with_image(scenarios()[scenario], ngc))
    except InvalidDeployment as exc:
        return Case(ngc, scenario, None, exc)
    return Case(ngc, scenario, render_all(dep), None)


def all_cases() -> Iterator[Case]:
    for ngc in NGC_TAGS:
        for name in scenarios():
            yield case(ngc, name)
