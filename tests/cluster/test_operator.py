"""The operator on the real local control plane: apply to Ready, cache, failures, deletion, quiet.

Every test runs `tritonllm run` as a subprocess against the local API server; Jobs and pods
"run" through kwok stages (Job pods succeed after a short delay, or fail when labelled).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cases import SIMULATED_EXAMPLES
from tests.cluster.operator_harness import (
    condition,
    dump,
    elapsed,
    events,
    get_cr,
    jobs,
    load_example,
    prepare_namespace,
    run_operator,
    wait_condition,
    wait_ready,
)
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

SMALL = {
    "apiVersion": "tritonllm.io/v1alpha1",
    "kind": "TritonLLMDeployment",
    "spec": {
        "image": "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
        "model": {"source": "hf://openai-community/gpt2"},
        "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
        # kwok's pods answer no request, so a verified rollout's smoke set could never pass
        # here: these roll at once (tests/cluster/test_real_rollout.py verifies on real pods).
        "rollout": {"strategy": "Immediate"},
    },
}


def small(name: str, namespace: str, **spec: object) -> dict:
    obj = {
        **SMALL,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {**SMALL["spec"], **spec},
    }
    return obj


def _deployment(cluster: LocalCluster, ns: str, name: str) -> dict:
    return cluster.kubectl_json("get", "deployment", name, "-n", ns)


@pytest.mark.parametrize("path", SIMULATED_EXAMPLES, ids=lambda p: p.stem)
def test_example_reaches_ready(
    cluster: LocalCluster, namespace: str, tmp_path: Path, path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    # The API server's Pod Security admission checks every pod the operator renders (build,
    # repository, serving; LeaderWorkerSet groups too): `restricted` admits them all as rendered.
    cluster.kubectl("label", "namespace", namespace,
                    "pod-security.kubernetes.io/enforce=restricted")
    obj = load_example(path.stem, namespace)
    with run_operator(cluster, namespace, tmp_path):
        start = time.monotonic()
        cluster.apply([obj])
        ready = wait_ready(cluster, namespace, path.stem, timeout=240)
        print(f"\n[measure] {path.stem}: apply-to-Ready {elapsed(start)} s")
    st = ready["status"]
    assert condition(ready, "Available")["status"] == "True"
    assert condition(ready, "EngineReady")["status"] == "True"
    assert condition(ready, "RepositoryReady")["status"] == "True"
    assert condition(ready, "Degraded")["status"] == "False"
    assert st["observedGeneration"] == ready["metadata"]["generation"]
    assert st["readyReplicas"] >= 1 and st["engine"]["key"]
    assert st["selector"] and st["endpoint"].startswith(f"http://{path.stem}.{namespace}.svc:")
    table = cluster.kubectl("get", "tllm", path.stem, "-n", namespace).stdout
    assert "TPXPP" in table.upper() and st["parallelism"] in table
    engine = cluster.kubectl_json("get", "tllme", st["engine"]["key"], "-n", namespace)
    assert engine["status"]["state"] == "Ready"


def test_same_engine_key_shares_one_build(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("alpha", namespace), small("beta", namespace)])
        a = wait_ready(cluster, namespace, "alpha")
        b = wait_ready(cluster, namespace, "beta")
    assert a["status"]["engine"]["key"] == b["status"]["engine"]["key"]
    builds = jobs(cluster, namespace, "tritonllm-build-")
    assert builds == [f"tritonllm-build-{a['status']['engine']['key']}"]


def test_delete_and_reapply_reuses_the_engine(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("gamma", namespace)])
        first = wait_ready(cluster, namespace, "gamma")
        key = first["status"]["engine"]["key"]
        cluster.kubectl("delete", "tllm", "gamma", "-n", namespace, "--wait=true")
        # the garbage collector removes the children, including the build Job
        wait_for(lambda: not jobs(cluster, namespace), timeout=60, what="children collected")
        cluster.apply([small("gamma", namespace)])
        again = wait_ready(cluster, namespace, "gamma")
    assert jobs(cluster, namespace, "tritonllm-build-") == []  # zero new build Jobs
    assert again["status"]["engine"]["key"] == key
    assert again["status"]["engine"]["cached"] is True
    assert condition(again, "EngineReady")["reason"] == "EngineCached"


def test_engine_change_builds_while_the_old_engine_serves(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("delta", namespace)])
        first = wait_ready(cluster, namespace, "delta")
        old_key = first["status"]["engine"]["key"]
        slow = {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "8s"}}
        cluster.apply(
            [small("delta", namespace, engine={"parallelism": {"tensor": 2}}, podTemplate=slow)]
        )
        building = wait_condition(
            cluster, namespace, "delta", "EngineReady", "False", reason="Building"
        )
        # the old pods still serve the old engine while the new one builds
        assert condition(building, "Available")["status"] == "True"
        dep = _deployment(cluster, namespace, "delta")
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert labels["tritonllm.io/engine-key"] == old_key
        done = wait_ready(cluster, namespace, "delta")
    new_key = done["status"]["engine"]["key"]
    assert new_key != old_key
    assert done["status"]["previousEngine"]["key"] == old_key
    labels = _deployment(cluster, namespace, "delta")["spec"]["template"]["metadata"]["labels"]
    assert labels["tritonllm.io/engine-key"] == new_key
    # the old engine stays in the cache for rollback
    assert cluster.kubectl("get", "tllme", old_key, "-n", namespace, check=False).returncode == 0


def test_serving_change_rolls_without_rebuilding(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("eps", namespace)])
        wait_ready(cluster, namespace, "eps")
        builds = jobs(cluster, namespace, "tritonllm-build-")
        before = _deployment(cluster, namespace, "eps")["spec"]["template"]
        cluster.apply([small("eps", namespace, serving={"maxQueueDelayMicroseconds": 500})])
        wait_for(
            lambda: _deployment(cluster, namespace, "eps")["spec"]["template"] != before,
            timeout=60,
            what="rollout of the new repository",
        )
        wait_ready(cluster, namespace, "eps")
    assert jobs(cluster, namespace, "tritonllm-build-") == builds


def test_a_serving_pod_the_scheduler_cannot_place_is_named_within_seconds(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """Five replicas of 4 GPUs where the H100 nodes have 16: the fifth pod stays Pending. The
    scheduler's verdict reaches the status from the watch of serving pods (no pod list)."""
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path) as op:
        cluster.apply([small("unplaced", namespace, engine={"parallelism": {"tensor": 4}},
                             serving={"replicas": 5})])
        try:
            wait_for(lambda: _deployment_exists(cluster, namespace, "unplaced"), timeout=120,
                     what="the serving Deployment")
        except Exception as exc:
            raise AssertionError(f"{exc}: {get_cr(cluster, namespace, 'unplaced')}") from exc
        created = time.monotonic()
        lists = op.metric("tritonllm_api_calls_total", verb="list", kind="Pod")  # the Jobs'
        obj = wait_condition(cluster, namespace, "unplaced", "Progressing", "True",
                             reason="Unschedulable", timeout=60)
        seconds = time.monotonic() - created
        message = condition(obj, "Progressing")["message"]
        assert "a serving pod cannot be scheduled: unplaced-" in message, message
        assert "Insufficient nvidia.com/gpu" in message, message
        print(f"\n[measure] serving pod unschedulable -> in the status: {seconds:.1f} s after "
              "the Deployment was created")
        # read from the watch: the operator listed no pod for it
        listed = op.metric("tritonllm_api_calls_total", verb="list", kind="Pod") - lists
        assert listed == 0, listed


def _deployment_exists(cluster: LocalCluster, ns: str, name: str) -> bool:
    return cluster.kubectl("get", "deployment", name, "-n", ns, check=False).returncode == 0


def test_replicas_change_only_scales(cluster: LocalCluster, namespace: str, tmp_path: Path) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("zeta", namespace)])
        wait_ready(cluster, namespace, "zeta")
        before = _deployment(cluster, namespace, "zeta")
        repo_jobs = jobs(cluster, namespace, "tritonllm-repo-")
        cluster.kubectl("scale", "tllm", "zeta", "-n", namespace, "--replicas=2")
        ready = wait_for(
            lambda: (lambda o: o if o["status"].get("readyReplicas") == 2 else None)(
                get_cr(cluster, namespace, "zeta")
            ),
            timeout=60,
            what="2 ready replicas",
        )
    after = _deployment(cluster, namespace, "zeta")
    assert after["spec"]["replicas"] == 2
    assert after["spec"]["template"] == before["spec"]["template"]
    assert jobs(cluster, namespace, "tritonllm-repo-") == repo_jobs
    assert ready["status"]["ready"] == "2/2"


def test_failed_build_is_degraded_with_the_log_tail(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    fail = {
        "labels": {"tritonllm.io/fail": "true"},
        "annotations": {
            "tritonllm.io/fail-message": "trtllm-build: out of GPU memory",
            "tritonllm.io/fail-exit-code": "3",
        },
    }
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("eta", namespace, podTemplate=fail)])
        obj = wait_condition(
            cluster, namespace, "eta", "Degraded", "True", reason="BuildFailed", timeout=180
        )
        msg = condition(obj, "Degraded")["message"]
        assert "out of GPU memory" in msg, dump(obj["status"])
        key = obj["status"]["engine"]["key"]
        engine = cluster.kubectl_json("get", "tllme", key, "-n", namespace)
        assert engine["status"]["attempts"] >= 1
        reasons = {e["reason"] for e in events(cluster, namespace, "eta")}
        assert "BuildFailed" in reasons
        # a spec change (new engine key) starts over
        cluster.apply([small("eta", namespace, engine={"dtype": "bfloat16"})])
        fresh = wait_condition(
            cluster, namespace, "eta", "EngineReady", "False", reason="Building", timeout=60
        )
        assert fresh["status"]["engine"]["key"] != key


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("no-secret", "SecretMissing"),
        ("no-store", "StoreMissing"),
        ("no-gpu-product", "NoMatchingNodes"),
    ],
)
def test_missing_prerequisites_are_reported_without_building(
    cluster: LocalCluster, namespace: str, tmp_path: Path, case: str, reason: str
) -> None:
    prepare_namespace(cluster, namespace, secret=case != "no-secret", store=case != "no-store")
    spec: dict = {
        "model": {
            "source": "hf://meta-llama/Llama-2-7b-hf",
            "credentials": {"secretName": "hf-token"},
        },
        # 32 x 2048 tokens: what one H100 holds for Llama 2 7B (the fit planner refuses 64)
        "engine": {"limits": {"maxBatchSize": 32}},
    }
    if case == "no-gpu-product":
        spec["gpu"] = {"product": "NVIDIA-B200"}
    with run_operator(cluster, namespace, tmp_path) as op:
        cluster.apply([small("theta", namespace, **spec)])
        obj = wait_condition(cluster, namespace, "theta", "Degraded", "True", reason=reason)
        writes = op.writes()
        time.sleep(8)  # several resync periods: no hot loop, no repeated writes
        assert op.writes() == writes
        assert op.proc.poll() is None
    assert jobs(cluster, namespace) == []
    assert condition(obj, "Progressing")["status"] == "False"


def test_invalid_object_that_passed_the_schema_is_degraded(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("iota", namespace, image="registry.local/triton:custom")])
        obj = wait_condition(cluster, namespace, "iota", "Degraded", "True", reason="InvalidSpec")
    assert "spec.trtllmVersion" in condition(obj, "Degraded")["message"]
    assert jobs(cluster, namespace) == []


def test_steady_state_makes_no_writes(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path, resync=2.0) as op:
        cluster.apply([small("kappa", namespace)])
        wait_ready(cluster, namespace, "kappa")
        time.sleep(3)
        before = op.writes()
        reads_before = sum(op.metric("tritonllm_api_calls_total", verb=v) for v in ("get", "list"))
        reconciles = op.metric("tritonllm_reconciles_total")
        time.sleep(10)  # several resync reconciles
        done = op.metric("tritonllm_reconciles_total") - reconciles
        writes = op.writes() - before
        reads = sum(op.metric("tritonllm_api_calls_total", verb=v) for v in ("get", "list"))
        assert done >= 3
        assert writes == 0, op.metrics()
        # the ownership checks read only before creating: nothing per steady reconcile
        assert reads - reads_before == 0, op.metrics()
    print(f"\n[measure] API writes in {done:.0f} steady-state reconciles: {writes:.0f}")


def test_spec_is_never_written_and_one_field_manager(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("lam", namespace)])
        wait_ready(cluster, namespace, "lam")
    obj = cluster.kubectl_json("get", "tllm", "lam", "-n", namespace, "--show-managed-fields")
    for entry in obj["metadata"]["managedFields"]:
        if entry["manager"] == "tritonllm":
            assert entry.get("subresource") == "status", entry
            assert "f:spec" not in entry["fieldsV1"]
    children = cluster.kubectl_json(
        "get",
        "deployment,service,configmap",
        "-n",
        namespace,
        "-l",
        "app.kubernetes.io/managed-by=tritonllm",
        "--show-managed-fields",
    )["items"]
    managers = {
        e["manager"]
        for c in children
        for e in c["metadata"]["managedFields"]
        if e["operation"] == "Apply"
    }
    assert managers == {"tritonllm"}


def test_autoscaled_replicas_are_left_to_the_hpa(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply(
            [
                small(
                    "mu",
                    namespace,
                    autoscaling={
                        "minReplicas": 1,
                        "maxReplicas": 4,
                        "metric": "cpu",
                        "target": "80",
                    },
                )
            ]
        )
        wait_ready(cluster, namespace, "mu")
        hpa = cluster.kubectl_json("get", "hpa", "mu", "-n", namespace)
        assert hpa["spec"]["scaleTargetRef"]["name"] == "mu"
        # what an HPA does: scale the Deployment
        cluster.kubectl("scale", "deployment", "mu", "-n", namespace, "--replicas=3")
        time.sleep(8)
        assert _deployment(cluster, namespace, "mu")["spec"]["replicas"] == 3


def test_deletion_collects_children_and_keeps_engines_and_store(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("nu", namespace)])
        obj = wait_ready(cluster, namespace, "nu")
        assert not obj["metadata"].get("finalizers")  # none needed with the Retain policy
        cluster.kubectl("delete", "tllm", "nu", "-n", namespace, "--timeout=60s")

        def gone() -> bool:
            left = cluster.kubectl_json(
                "get",
                "deployment,service,configmap,job",
                "-n",
                namespace,
                "-l",
                "app.kubernetes.io/instance=nu",
            )
            return not left["items"]

        wait_for(gone, timeout=90, what="children garbage-collected")
    key = obj["status"]["engine"]["key"]
    assert cluster.kubectl("get", "tllme", key, "-n", namespace, check=False).returncode == 0
    assert (
        cluster.kubectl(
            "get", "pvc", "tritonllm-model-store", "-n", namespace, check=False
        ).returncode
        == 0
    )


def test_retention_delete_forgets_unused_engines_and_never_blocks(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("xi", namespace, storage={"engineRetention": "Delete"})])
        obj = wait_ready(cluster, namespace, "xi")
        assert obj["metadata"].get("finalizers")
        cluster.kubectl("delete", "tllm", "xi", "-n", namespace, "--timeout=90s")
    key = obj["status"]["engine"]["key"]
    assert cluster.kubectl("get", "tllme", key, "-n", namespace, check=False).returncode != 0
    # The engine's files go too: a Job removes them from the store (run for real on the real
    # node in tests/cluster/test_real_flow.py).
    job = cluster.kubectl_json("get", "job", f"tritonllm-clean-{key}", "-n", namespace)
    (ctr,) = job["spec"]["template"]["spec"]["containers"]
    # A shell that checks the key, then `rm -rf -- /store/engines/$key /store/checkpoints/$key`.
    assert ctr["command"][:2] == ["sh", "-c"] and ctr["command"][-1] == key
    assert 'rm -rf -- "/store/engines/$key"' in ctr["command"][2]
    assert not job["metadata"].get("ownerReferences")


def test_retention_delete_refuses_a_forged_engine_key(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """status.engine.key becomes a path in the cleanup's `rm -rf`: a status written by someone
    else (here: while no operator runs, the object already Terminating) deletes nothing."""
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("kappa", namespace, storage={"engineRetention": "Delete"})])
        obj = wait_ready(cluster, namespace, "kappa")
    key = obj["status"]["engine"]["key"]
    cluster.kubectl("delete", "tllm", "kappa", "-n", namespace, "--wait=false")
    forged = {"status": {"engine": {"key": "../../repos", "path": "/store/repos"}}}
    cluster.kubectl("patch", "tllm", "kappa", "-n", namespace, "--subresource=status",
                    "--type=merge", "-p", json.dumps(forged))
    with run_operator(cluster, namespace, tmp_path, tag="op2"):
        wait_for(
            lambda: cluster.kubectl("get", "tllm", "kappa", "-n", namespace,
                                    check=False).returncode != 0,
            timeout=60, what="kappa deleted (the finalizer released)",
        )
    reasons = [e["reason"] for e in events(cluster, namespace, "kappa")]
    assert "UnsafeEngineKey" in reasons, reasons
    assert jobs(cluster, namespace, "tritonllm-clean-") == []
    # The real engine was not forgotten either: nothing was deleted on a forged key.
    assert cluster.kubectl("get", "tllme", key, "-n", namespace, check=False).returncode == 0


def test_retention_delete_keeps_an_engine_another_deployment_still_names_as_previous(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("lam", namespace, storage={"engineRetention": "Delete"}),
                       small("mu", namespace)])
        key = wait_ready(cluster, namespace, "lam")["status"]["engine"]["key"]
        assert wait_ready(cluster, namespace, "mu")["status"]["engine"]["key"] == key
        # mu changes engine: it builds a new one, and names the one its pods served as previous.
        changed = small("mu", namespace, engine={"limits": {"maxBatchSize": 4}})
        cluster.apply([changed])

        def rebuilt() -> dict | None:
            st = get_cr(cluster, namespace, "mu").get("status") or {}
            prev = (st.get("previousEngine") or {}).get("key")
            return st if prev == key and st["engine"]["key"] != key else None

        st = wait_for(rebuilt, timeout=120, what="mu names the old engine as previousEngine")
        cluster.kubectl("delete", "tllm", "lam", "-n", namespace, "--timeout=90s")
    assert cluster.kubectl("get", "tllme", key, "-n", namespace, check=False).returncode == 0
    assert f"tritonllm-clean-{key}" not in jobs(cluster, namespace, "tritonllm-clean-")
    assert st["engine"]["key"] != key


def test_deletion_is_never_blocked_when_the_operator_is_gone(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """Documented escape hatch: without an operator, removing the finalizer deletes the object."""
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("omi", namespace, storage={"engineRetention": "Delete"})])
        wait_ready(cluster, namespace, "omi")
    cluster.kubectl("delete", "tllm", "omi", "-n", namespace, "--wait=false")
    cluster.kubectl(
        "patch",
        "tllm",
        "omi",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
    )
    wait_for(
        lambda: cluster.kubectl("get", "tllm", "omi", "-n", namespace, check=False).returncode != 0,
        timeout=30,
        what="deleted",
    )


def test_two_operator_replicas_never_duplicate_work(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    cluster.apply(
        [
            {
                "apiVersion": "kopf.dev/v1",
                "kind": "KopfPeering",
                "metadata": {"name": "tritonllm", "namespace": namespace},
            }
        ]
    )
    with (
        run_operator(cluster, namespace, tmp_path, peering="tritonllm", tag="a") as a,
        run_operator(cluster, namespace, tmp_path, peering="tritonllm", tag="b") as b,
    ):
        time.sleep(3)  # peers see each other; the lower-priority one pauses
        cluster.apply([small("pi", namespace), small("rho", namespace)])
        wait_ready(cluster, namespace, "pi")
        wait_ready(cluster, namespace, "rho")
        time.sleep(6)
        status_writes = [
            op.metric("tritonllm_api_calls_total", verb="apply", kind="TritonLLMDeployment/status")
            for op in (a, b)
        ]
    assert len(jobs(cluster, namespace, "tritonllm-build-")) == 1
    # only one replica acted
    assert sorted(w > 0 for w in status_writes) == [False, True], status_writes


def test_operator_metrics_and_health(cluster: LocalCluster, namespace: str, tmp_path: Path) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path) as op:
        cluster.apply([small("sigma", namespace)])
        wait_ready(cluster, namespace, "sigma")
        text = op.metrics()
        assert op.healthy()
        assert op.metric("tritonllm_engine_builds_total", result="succeeded") >= 1
        assert op.metric("tritonllm_deployments", condition="Available", status="True") == 1
    for name in (
        "tritonllm_reconciles_total",
        "tritonllm_reconcile_duration_seconds",
        "tritonllm_engine_builds_total",
        "tritonllm_deployments",
    ):
        assert name in text, name
    assert f"[{namespace}/sigma]" in op.logs()  # per-object log lines
