"""The fit planner in the operator, on the real local API server (simulated H100 nodes).

Llama-2-7B in float16 at the default limits (64 sequences x 2048 tokens, 512 KiB of KV cache per
token on one GPU: 64 GiB) does not fit one 79.6 GiB H100 next to its 12.6 GiB of weights, and
fits two: `parallelism.auto` serves it with tp=2 (status.fit has the table, the build Job asks
for 2 GPUs), and an explicit tp=1 is refused with the arithmetic before any Job exists.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_harness import (
    condition,
    events,
    get_cr,
    jobs,
    prepare_namespace,
    run_operator,
    wait_condition,
)
from tritonllm.api.deployment import parse_deployment
from tritonllm.render import render_all
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

IMAGE = "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3"
H100 = "NVIDIA-H100-80GB-HBM3"


def llama(name: str, ns: str, parallelism: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "tritonllm.io/v1alpha1",
        "kind": "TritonLLMDeployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"image": IMAGE, "model": {"source": "hf://meta-llama/Llama-2-7b-hf"},
                 "engine": {"parallelism": parallelism}, "gpu": {"product": H100}},
    }


def gpus_of(job: dict[str, Any]) -> str:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return str(container["resources"]["limits"]["nvidia.com/gpu"])


def test_auto_chooses_and_explicit_is_refused_before_any_build(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path) as op:
        cluster.apply([llama("sized", namespace, {"auto": True}),
                       llama("refused", namespace, {"tensor": 1})])

        obj = wait_for(lambda: (lambda o: o if (o.get("status") or {}).get("fit") and
                                (o.get("status") or {}).get("engine") else None)(
            get_cr(cluster, namespace, "sized")), timeout=120, what="sized: status.fit")
        fit = obj["status"]["fit"]
        assert fit["auto"] is True and fit["chosen"] == "tp=2 pp=1", fit
        assert [(r["tensor"], r["pipeline"], r["fits"]) for r in fit["table"]] == [
            (1, 1, False), (2, 1, True)]
        assert fit["requestedTokens"] == 64 * 2048 and fit["gpuProduct"] == H100
        assert obj["status"]["parallelism"] == "2x1"
        assert obj["status"]["engine"]["tensorParallel"] == 2
        # the spec as the user wrote it: auto, no tensor chosen there
        assert obj["spec"]["engine"]["parallelism"]["auto"] is True
        assert obj["spec"]["engine"]["parallelism"]["tensor"] == 1
        job = render_all(parse_deployment(llama("sized", namespace, {"auto": True}))).build_job
        wait_for(lambda: job.name in jobs(cluster, namespace), timeout=60,
                 what="sized build Job")
        assert gpus_of(cluster.kubectl_json("get", "job", job.name, "-n", namespace)) == "2"

        obj = wait_condition(cluster, namespace, "refused", "Degraded", reason="DoesNotFit")
        message = condition(obj, "Degraded")["message"]
        assert "spec.engine.parallelism: tp=1 pp=1 does not fit: weights 12.6 GiB" in message
        assert f"> 0.9 x 65.3 GiB left of {H100}'s 79.6 GiB" in message
        assert "tp=2 pp=1 fits" in message
        assert condition(obj, "Progressing")["status"] == "False"
        wait_for(lambda: any(e["reason"] == "DoesNotFit"
                             for e in events(cluster, namespace, "refused")),
                 timeout=30, what="DoesNotFit Event")
        time.sleep(3)  # a resync later: still nothing built for it
        assert jobs(cluster, namespace, "refused") == []
        assert op.proc.poll() is None
