"""Quantization without engines on real containers: examples/cpu-standin-llmapi.yaml with
engine.quantization fp8 (and an fp8 KV cache), applied with `kubectl apply`, the operator running
(as a host process), everything else real on the real node `real-0`.

The Job `tritonllm-quantize-<key>` runs `tritonllm build` in the CPU stand-in image: it checks the
seeded checkpoint, runs the image's ModelOpt hf_ptq.py into engines/<key> and records the export
in artifact.json, reporting its digest; the operator anchors it and renders model.yaml naming the
quantized checkpoint; the serving pod verifies the files against the anchored digest before the
llmapi model loads them with the LLM API, and answers through the Service. A second deployment
with the same quantization inputs but another tensor parallelism finds the checkpoint and runs no
Job. Someone who rewrites the checkpoint on the store, with its artifact.json and a matching
verification marker, gets no serving pod: the deployment is Degraded with EngineTampered.

SIMULATED: the GPUs, ModelOpt's hf_ptq.py (it writes the real export's layout and quantizes
nothing) and TensorRT-LLM (the stand-in image's LLM API package). Real: the node, containers,
tritonserver, the llmapi model as rendered, the Jobs, the store.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.operator_harness import get_cr, jobs, run_operator
from tests.cluster.test_real_engine_digest import launch_plan, refused_by_the_next_pod
from tests.cluster.test_real_flow import (
    EXPECTED_4,
    _diagnose,
    _first_answer,
    _pods,
    _volume_dir,
    asks,
    seeded,
)
from tests.helpers import example_body
from tests.unit.test_engine_digest import reseal
from tritonllm.api import constants as c
from tritonllm.runtime import engine_files, verified
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

NAME = "llmapi-fp8"
TIMEOUT = 420


def quantized_cr(name: str, tensor: int) -> dict[str, Any]:
    obj = example_body("cpu-standin-llmapi")
    obj["metadata"] = {"name": name}
    obj["spec"]["engine"]["quantization"] = {"format": "fp8", "kvCacheDtype": "fp8",
                                             "calibrationSize": 16}
    obj["spec"]["engine"]["parallelism"] = {"tensor": tensor, "pipeline": 1}
    obj["spec"]["podTemplate"]["resources"] = {"cpu": "0.9", "memory": "3Gi"}
    return obj


def rewrite_checkpoint(directory: Path) -> None:
    """Change a file of the export, then artifact.json's checksums and a marker to match."""
    victim = directory / "tokenizer_config.json"
    victim.write_text(victim.read_text().replace("}", ', "rewritten": true}', 1))
    reseal(directory)


def test_an_fp8_checkpoint_is_quantized_once_anchored_and_served(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    refs = seeded(cluster, ns)
    body = quantized_cr(NAME, 1)
    ask = asks(body)
    with run_operator(cluster, ns, tmp_path, tools_image=refs["operator"]) as op:
        start = time.monotonic()
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(body))
        cr, out = _first_answer(cluster, ns, NAME, op, TIMEOUT, **ask)
        print(f"\n[measure] llmapi fp8 (quantization Job, tp 1): apply -> first answer "
              f"{time.monotonic() - start:.1f} s")
        diag = _diagnose(cluster, ns, op)
        assert out["text_output"] == EXPECTED_4, out
        key = cr["status"]["engine"]["key"]

        # One Job, on the serving GPUs, ran the image's hf_ptq.py into the key's directory.
        assert jobs(cluster, ns, "tritonllm-quantize-") == [f"tritonllm-quantize-{key}"], diag
        assert jobs(cluster, ns, "tritonllm-build-") == jobs(
            cluster, ns, "tritonllm-download-") == [], diag
        (job_pod,) = _pods(cluster, ns, c.COMPONENT_BUILD)
        limits = job_pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits[c.GPU_RESOURCE] == "1", limits
        log = cluster.kubectl("logs", job_pod["metadata"]["name"], "-n", ns).stdout
        assert "/app/Model-Optimizer/examples/llm_ptq/hf_ptq.py" in log, log[-3000:]
        assert "SIMULATED hf_ptq.py: exported fp8 (kv fp8)" in log, log[-3000:]
        export = _volume_dir(cluster, ns, "tritonllm-cpu-store") / "engines" / key
        quant = json.loads((export / "hf_quant_config.json").read_text())["quantization"]
        assert (quant["quant_algo"], quant["kv_cache_quant_algo"]) == ("FP8", "FP8")
        artifact, _ = engine_files.read_artifact(export)
        assert artifact["kind"] == "llmapi-checkpoint", artifact

        # Recorded, anchored, handed to the serving pods, checked by them.
        record = cluster.kubectl_json("get", "tllme", key, "-n", ns)["status"]
        assert record["digest"] == verified.engine_digest(artifact), record
        assert cr["status"]["engineAnchor"]["digest"] == record["digest"], cr["status"]
        plan = launch_plan(cluster, ns, cr["status"]["repository"]["key"])
        assert plan["engineDigest"]["engine"] == record["digest"] and plan["verifyCheckpoint"]
        (model_yaml,) = (export.parent.parent / "repos" / ns / "_shared").glob(
            "*/repository/tensorrt_llm/1/model.yaml")
        assert yaml.safe_load(model_yaml.read_text())["model"] == f"/store/engines/{key}"
        (server,) = _pods(cluster, ns, c.COMPONENT_SERVER)
        logs = cluster.kubectl("logs", server["metadata"]["name"], "-n", ns, "-c",
                               server["spec"]["containers"][0]["name"]).stdout
        assert f"tritonllm launch event=verified key={key}" in logs, logs[-3000:]

        # The same quantization at tp 2 (after the first is gone: the real node's cores are
        # shared): the same key, no Job.
        cluster.kubectl("delete", "tllm", NAME, "-n", ns, "--wait=true")
        wait_for(lambda: not _pods(cluster, ns, c.COMPONENT_SERVER)
                 and not jobs(cluster, ns, "tritonllm-quantize-"),
                 timeout=180, what="first deployment's pods and Jobs collected")
        second = f"{NAME}-tp2"
        start = time.monotonic()
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(quantized_cr(second, 2)))
        cr2, out2 = _first_answer(cluster, ns, second, op, TIMEOUT, **ask)
        print(f"[measure] llmapi fp8 at tp 2, checkpoint cached: apply -> first answer "
              f"{time.monotonic() - start:.1f} s")
        assert out2["text_output"] == EXPECTED_4, out2
        assert cr2["status"]["engine"]["key"] == key
        assert cr2["status"]["engine"]["cached"] is True, cr2["status"]
        assert cr2["status"]["engineAnchor"]["digest"] == record["digest"], cr2["status"]
        assert jobs(cluster, ns, "tritonllm-quantize-") == [], _diagnose(cluster, ns, op)

        # Rewritten on the store: refused by the next serving pod.
        rewrite_checkpoint(export)
        refused_by_the_next_pod(cluster, ns, second, op)
        assert get_cr(cluster, ns, second)["status"]["reason"] == "EngineTampered"
