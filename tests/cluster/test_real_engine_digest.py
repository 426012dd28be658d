"""The engine digest anchored outside the store, on real containers: the CPU stand-in's build
Job reports its digest in its termination message, the operator records it in the
TritonLLMEngine status and in the launch plan; someone then rewrites the engine on the store
together with its artifact.json (and a verification marker to match), and the next serving pod
refuses to serve it: the deployment is Degraded with reason EngineTampered.

The store is rewritten from the host, through the claim's local-path directory (the real node is
this machine): what a pod that mounts the claim writable could do. Nothing is simulated but the
GPUs (and TensorRT-LLM, by the CPU stand-in image's tools).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.operator_harness import Operator, get_cr, run_operator, wait_condition
from tests.cluster.test_real_flow import (
    EXAMPLE,
    _diagnose,
    _first_answer,
    _pods,
    _volume_dir,
    seeded,
)
from tests.helpers import example_body
from tests.unit.test_engine_digest import rewrite_store
from tritonllm.runtime import engine_files, verified
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

NAME = "digest"


def digest_cr() -> dict[str, Any]:
    obj = example_body(EXAMPLE.stem)
    obj["metadata"] = {"name": NAME}
    obj["spec"]["engine"]["parallelism"] = {"tensor": 1, "pipeline": 1}
    obj["spec"]["podTemplate"]["resources"] = {"cpu": "0.9", "memory": "3Gi"}
    return obj


def launch_plan(cluster: LocalCluster, ns: str, repo_key: str) -> dict[str, Any]:
    cms = cluster.kubectl_json("get", "configmap", "-n", ns,
                               "-l", f"tritonllm.io/repository-key={repo_key}")["items"]
    data = next(cm["data"] for cm in cms if any(k.endswith("launch.json") for k in cm["data"]))
    return dict(json.loads(next(v for k, v in data.items() if k.endswith("launch.json"))))


def refused_by_the_next_pod(cluster: LocalCluster, ns: str, name: str, op: Operator
                            ) -> dict[str, Any]:
    """After the store was rewritten: the serving pod deleted, the next one refuses the engine.
    The deployment's Degraded condition (reason EngineTampered, an engine digest mismatch)."""
    (pod,) = [p["metadata"]["name"] for p in _pods(cluster, ns, "server")]
    cluster.kubectl("delete", "pod", pod, "-n", ns, "--wait=false")
    try:
        obj = wait_condition(cluster, ns, name, "Degraded", "True",
                             reason="EngineTampered", timeout=240)
    except Exception as exc:
        raise AssertionError(f"{exc}\n{_diagnose(cluster, ns, op)}") from exc
    degraded = next(x for x in obj["status"]["conditions"] if x["type"] == "Degraded")
    print(f"\nDegraded={degraded['status']} {degraded['reason']}: {degraded['message']}")
    assert "engine digest mismatch" in degraded["message"], degraded
    return dict(degraded)


def test_a_serving_pod_refuses_an_engine_rewritten_on_the_store(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    refs = seeded(cluster, ns)
    with run_operator(cluster, ns, tmp_path, tools_image=refs["operator"]) as op:
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(digest_cr()))
        cr, _ = _first_answer(cluster, ns, NAME, op, 420)
        key, repo_key = cr["status"]["engine"]["key"], cr["status"]["repository"]["key"]
        engine = _volume_dir(cluster, ns, "tritonllm-cpu-store") / "engines" / key

        # Reported by the build pod, recorded by the operator, handed to the serving pods.
        record = cluster.kubectl_json("get", "tllme", key, "-n", ns)["status"]
        artifact, _ = engine_files.read_artifact(engine)
        assert record["digest"] == verified.engine_digest(artifact), record
        assert record["fingerprintDigest"].startswith("sha256:"), record
        plan = launch_plan(cluster, ns, repo_key)
        assert plan["engineDigest"]["engine"] == record["digest"], plan

        rewrite_store(engine)  # an engine file, artifact.json and a marker, all rewritten
        degraded = refused_by_the_next_pod(cluster, ns, NAME, op)
        assert "exited with code 18" in degraded["message"], degraded
        # No pod of the deployment serves the rewritten engine.
        wait_for(lambda: all(not all(s.get("ready") for s in
                                     p["status"].get("containerStatuses") or [{}])
                             for p in _pods(cluster, ns, "server")),
                 timeout=60, interval=1, what="no serving pod Ready")
        assert get_cr(cluster, ns, NAME)["status"]["reason"] == "EngineTampered"
