"""Objects planted under the names the operator computes, on the real API server with the operator
running (simulated GPU nodes): a finished Job under the build Job's name with the operator's
labels never makes the engine Ready, a Secret under the MPI key Secret's name with the operator's
labels and a controller reference to the deployment never reaches a worker; and a build shared by
two deployments survives the deletion of the one that started it. The pure rules are in
tests/unit/test_forged_ownership.py.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_harness import (
    condition,
    events,
    get_cr,
    prepare_namespace,
    run_operator,
    wait_condition,
    wait_ready,
)
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.render import naming, render_all
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

IMAGE = "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3"
GPU = {"product": "NVIDIA-H100-80GB-HBM3"}


def tllm(name: str, ns: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION, "kind": c.KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"image": IMAGE, "model": {"source": "hf://openai-community/gpt2"}, "gpu": GPU,
                 **spec},
    }


def planted_build_job(obj: dict[str, Any]) -> dict[str, Any]:
    """The build Job as the operator would render it (name, labels, pod template: all
    computable from the spec), created by someone else before the deployment exists."""
    job = copy.deepcopy(render_all(parse_deployment(obj)).build_job.body)
    job["metadata"].pop("ownerReferences", None)  # the deployment has no uid yet
    job["spec"]["template"]["metadata"].setdefault("annotations", {})[
        "pod-complete.stage.kwok.x-k8s.io/delay"] = "1s"
    return job


def planted_mpi_secret(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    """The MPI key Secret as the operator would write it (labels, a controller reference to
    the deployment: its uid is readable by whoever may read the deployment), but someone
    else's keys."""
    dep = parse_deployment(obj)
    owner = {"apiVersion": c.API_VERSION, "kind": c.KIND, "name": dep.name, "uid": uid,
             "controller": True}
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": naming.mpi_secret_name(dep), "namespace": dep.namespace,
                         "labels": naming.base_labels(dep, c.COMPONENT_SERVER),
                         "ownerReferences": [owner]},
            "stringData": {c.MPI_SSH_CLIENT_PUB: "ssh-ed25519 AAAA attacker\n"}}


def managers(live: dict[str, Any]) -> set[str]:
    return {m["manager"] for m in live["metadata"].get("managedFields") or []}


def test_planted_build_job_and_mpi_secret_are_refused(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    single = tllm("delta", namespace)
    multi = tllm("epsilon", namespace, engine={"parallelism": {"tensor": 4, "pipeline": 2}},
                 gpu={**GPU, "perNode": 4})
    job = planted_build_job(single)
    cluster.apply([job])
    job_name = job["metadata"]["name"]
    wait_for(lambda: any(x["type"] == "Complete" and x["status"] == "True" for x in (
        cluster.kubectl_json("get", "job", job_name, "-n", namespace).get("status") or {}
    ).get("conditions") or []), timeout=120, what="the planted Job Complete")
    planted = cluster.kubectl_json("get", "job", job_name, "-n", namespace)
    # The race won: the deployments exist, the operator has not reconciled them yet, and the
    # Secret is planted with a controller reference to the deployment's uid.
    cluster.apply([single, multi])
    secret = planted_mpi_secret(multi, get_cr(cluster, namespace, "epsilon")["metadata"]["uid"])
    cluster.apply([secret])
    with run_operator(cluster, namespace, tmp_path) as op:
        for name, says in (("delta", f"Job/{job_name}"),
                           ("epsilon", f"Secret/{secret['metadata']['name']}")):
            obj = wait_condition(cluster, namespace, name, "Degraded", reason="NameConflict")
            assert says in condition(obj, "Degraded")["message"], name
            wait_for(lambda n=name: any(e["reason"] == "NameConflict"
                                        for e in events(cluster, namespace, n)),
                     timeout=30, what=f"{name}: NameConflict Event")
        time.sleep(8)  # several resyncs: still refused, never Ready
        for name in ("delta", "epsilon"):
            obj = get_cr(cluster, namespace, name)
            assert condition(obj, "EngineReady").get("status") != "True", name
            assert condition(obj, "Degraded")["reason"] == "NameConflict", name
        key = naming.engine_key(parse_deployment(single))
        record = cluster.kubectl_json("get", "tllme", "-n", namespace, "-o", "json")["items"]
        assert all(r["metadata"]["name"] != key or (r.get("status") or {}).get("state") != "Ready"
                   for r in record)
        # nothing of epsilon's started with the planted keys, nothing was built for delta
        assert cluster.kubectl_json("get", "leaderworkersets", "-n", namespace)["items"] == []
        assert cluster.kubectl_json("get", "deployments", "-n", namespace)["items"] == []
        assert op.proc.poll() is None
    live = cluster.kubectl_json("get", "job", job_name, "-n", namespace)
    assert live["metadata"]["uid"] == planted["metadata"]["uid"]
    assert "tritonllm" not in managers(live) and not live["metadata"].get("ownerReferences")
    live = cluster.kubectl_json("get", "secret", secret["metadata"]["name"], "-n", namespace)
    assert "tritonllm" not in managers(live)
    assert "mpiSecretUid" not in (get_cr(cluster, namespace, "epsilon").get("status") or {})


def test_a_shared_build_outlives_the_deployment_that_started_it(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    slow = {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "25s"}}
    first, second = tllm("zeta", namespace, podTemplate=slow), tllm("eta", namespace,
                                                                     podTemplate=slow)
    job_name = render_all(parse_deployment(first)).build_job.name
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([first])
        wait_condition(cluster, namespace, "zeta", "EngineReady", "False", reason="Building")
        uid = cluster.kubectl_json("get", "job", job_name, "-n", namespace)["metadata"]["uid"]
        cluster.apply([second])

        def owners() -> list[str]:
            live = cluster.kubectl_json("get", "job", job_name, "-n", namespace)
            return sorted(r["name"] for r in live["metadata"].get("ownerReferences") or [])

        wait_for(lambda: owners() == ["eta", "zeta"], timeout=30, what="both owners")
        cluster.kubectl("delete", "tllm", "zeta", "-n", namespace, "--wait=true")
        time.sleep(5)  # the garbage collector has acted on zeta's dependents by now
        live = cluster.kubectl_json("get", "job", job_name, "-n", namespace)
        assert live["metadata"]["uid"] == uid  # the same build, still running
        wait_for(lambda: owners() == ["eta"], timeout=30, what="zeta's reference dropped")
        ready = wait_ready(cluster, namespace, "eta", timeout=180)
    assert ready["status"]["engine"]["key"] == job_name.removeprefix("tritonllm-build-")
    assert condition(ready, "EngineReady")["status"] == "True"
