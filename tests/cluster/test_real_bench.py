"""`tritonllm bench` against a deployment on the real node: examples/cpu-standin.yaml served by
real containers (tensor parallelism 2, the CPU stand-in for TensorRT-LLM), benchmarked by
deployment name from the host (its Service's cluster IP, gRPC through tritonclient), the report
stored in a ConfigMap the deployment owns. Needs the real node (TRITONLLM_TEST_REAL_NODE=1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.operator_harness import run_operator
from tests.cluster.test_real_flow import EXAMPLE, SEED, _diagnose, _first_answer, restrict
from tests.helpers import example_body
from tritonllm_dev import images
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.node import REGISTRY_ADDR

pytestmark = pytest.mark.cluster


def test_bench_a_deployment_by_name_on_the_real_node(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    refs = images.ensure_images(REGISTRY_ADDR)
    restrict(cluster, ns)
    cluster.kubectl("apply", "-n", ns, "-f", str(SEED))
    cluster.kubectl("wait", "-n", ns, "--for=condition=complete", "job/cpu-standin-seed",
                    "--timeout=240s", timeout=270)
    name = example_body(EXAMPLE.stem)["metadata"]["name"]
    with run_operator(cluster, ns, tmp_path, tools_image=refs["operator"]) as op:
        cluster.kubectl("apply", "-n", ns, "-f", str(EXAMPLE))
        _first_answer(cluster, ns, name, op, 420)
        out = tmp_path / "bench.json"
        done = subprocess.run(
            [sys.executable, "-m", "tritonllm.cli.main", "bench", name, "-n", ns,
             "--concurrency", "1,4", "--requests", "8", "--max-tokens", "8",
             "--prompt", "hello world", "--json", str(out), "--configmap"],
            capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)})
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{_diagnose(cluster, ns)}"
        print(f"\n[measure] tritonllm bench {name} (real node):\n{done.stdout}")
        report = json.loads(out.read_text())
        assert [(lv["concurrency"], lv["requests"], lv["errors"]) for lv in report["levels"]] \
            == [(1, 8, 0), (4, 8, 0)]
        assert all(lv["latency_ms_p50"] > 0 for lv in report["levels"])
        stored = cluster.kubectl_json("get", "configmap", f"{name}-bench", "-n", ns)
        assert json.loads(stored["data"]["results.json"])["levels"] == report["levels"]
        (owner,) = stored["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("TritonLLMDeployment", name)
