"""Faults the operator survives, on the local cluster.

Real: the API server, etcd, the controllers, kopf peering, the operator process (killed with
SIGKILL, restarted). Simulated by kwok: the pods (Job pods complete after a delay, fail when
labelled) and the nodes. Each test asserts no duplicate build Job and no lost object, and prints
the time to converge (`[fault] ...` lines, the figures in docs/faults.md).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_harness import (
    Operator,
    condition,
    elapsed,
    get_cr,
    jobs,
    prepare_namespace,
    run_operator,
    wait_ready,
)
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.manifests import node_manifest
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

BUILD = "tritonllm-build-"
# A build long enough to be interrupted (kwok completes the Job pod after this delay).
SLOW_BUILD = {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "12s"}}


def small(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tritonllm.io/v1alpha1",
        "kind": "TritonLLMDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
            "model": {"source": "hf://openai-community/gpt2"},
            "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
        # kwok's pods answer no request, so a verified rollout's smoke set could never pass
        # here: these roll at once (tests/cluster/test_real_rollout.py verifies on real pods).
        "rollout": {"strategy": "Immediate"},
            **spec,
        },
    }


def uids(cluster: LocalCluster, namespace: str, name: str) -> dict[str, str]:
    """UID of every object that must outlive a fault (kind/name -> uid): the build Job and its
    plan, the engine record, the serving Deployment and Service. (A repository revision's
    ConfigMap and Job are replaced by design when a newer revision has rolled out.)"""
    out: dict[str, str] = {}
    for kind in ("jobs", "configmaps", "services", "deployments", "tllme"):
        for item in cluster.kubectl_json("get", kind, "-n", namespace)["items"]:
            meta = item["metadata"]
            if kind in ("jobs", "configmaps") and not meta["name"].startswith(BUILD):
                continue
            out[f"{kind}/{meta['name']}"] = meta["uid"]
    return out


def lost(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Objects of `before` that are gone or were replaced (another UID) in `after`."""
    return sorted(k for k, uid in before.items() if after.get(k) != uid)


def build_jobs(cluster: LocalCluster, namespace: str) -> list[str]:
    return jobs(cluster, namespace, BUILD)


def kill(op: Operator) -> None:
    """SIGKILL: no cleanup, no peering record removed, requests cut mid-flight."""
    os.killpg(op.proc.pid, signal.SIGKILL)
    op.proc.wait(timeout=10)


def wait_progress(cluster: LocalCluster, ns: str, name: str, *reasons: str) -> None:
    def probe() -> bool:
        return condition(get_cr(cluster, ns, name), "Progressing").get("reason") in reasons

    wait_for(probe, timeout=60, interval=0.3, what=f"{name} Progressing in {reasons}")


def converged(cluster: LocalCluster, ns: str, name: str, timeout: float = 120) -> dict[str, Any]:
    """Ready for the current generation."""
    obj = wait_ready(cluster, ns, name, timeout=timeout)
    gen = obj["metadata"]["generation"]
    return dict(
        wait_for(
            lambda: (o := get_cr(cluster, ns, name))["status"].get("observedGeneration") == gen
            and condition(o, "Progressing").get("reason") == "Deployed"
            and o,
            timeout=timeout,
            what=f"{name} Deployed at generation {gen}",
        )
    )


def test_operator_killed_mid_build_and_mid_rollout(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path, tag="first") as op:
        cluster.apply([small("kb", namespace, podTemplate=SLOW_BUILD)])
        wait_for(lambda: build_jobs(cluster, namespace), timeout=60, what="the build Job")
        build = cluster.kubectl_json("get", "job", build_jobs(cluster, namespace)[0], "-n",
                                     namespace)["metadata"]["uid"]
        kill(op)
    start = time.monotonic()
    with run_operator(cluster, namespace, tmp_path, tag="second") as op:
        converged(cluster, namespace, "kb")
        mid_build = elapsed(start)
        before = uids(cluster, namespace, "kb")
        cluster.apply([small("kb", namespace, podTemplate=SLOW_BUILD,
                             serving={"maxQueueDelayMicroseconds": 700})])
        wait_progress(cluster, namespace, "kb", "WritingRepository", "RollingOut")
        kill(op)
    start = time.monotonic()
    with run_operator(cluster, namespace, tmp_path, tag="third"):
        converged(cluster, namespace, "kb")
        mid_rollout = elapsed(start)
        after = uids(cluster, namespace, "kb")
    print(f"\n[fault] operator SIGKILL mid-build: Ready {mid_build} s after the restart")
    print(f"[fault] operator SIGKILL mid-rollout: Ready {mid_rollout} s after the restart")
    assert [k for k in after if k.startswith(f"jobs/{BUILD}")] == [
        k for k in before if k.startswith(f"jobs/{BUILD}")
    ]
    assert after[f"jobs/{build_jobs(cluster, namespace)[0]}"] == build  # the one build, kept
    assert lost(before, after) == []


def test_api_server_restart_mid_build_and_a_deletion_missed_by_expired_watches(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """The API server is killed and restarted while a build runs. Just before, with the operator
    frozen (SIGSTOP), the engine record is deleted; the operator resumes while the API server is
    down (its requests and watches fail and retry), and its watches then resume from
    resourceVersions the new API server no longer has (410 Gone): kopf lists again, and the
    deletion never arrives as an event."""
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path, log_level="DEBUG") as op:
        cluster.apply([small("ar", namespace, podTemplate=SLOW_BUILD)])
        wait_for(lambda: build_jobs(cluster, namespace), timeout=60, what="the build Job")
        key = get_cr(cluster, namespace, "ar")["status"]["engine"]["key"]
        wait_for(lambda: cluster.kubectl("get", "tllme", key, "-n", namespace, check=False)
                 .returncode == 0, timeout=30, what="the engine record")
        before = uids(cluster, namespace, "ar")
        os.killpg(op.proc.pid, signal.SIGSTOP)
        resume = threading.Timer(1.0, os.killpg, (op.proc.pid, signal.SIGCONT))
        try:
            cluster.kubectl("delete", "tllme", key, "-n", namespace)
            resume.start()  # the operator runs again while the API server is down
            down = cluster.restart("kube-apiserver", down_for=3)
        finally:
            resume.join()
            os.killpg(op.proc.pid, signal.SIGCONT)
        start = time.monotonic()
        wait_for(lambda: cluster.kubectl("get", "tllme", key, "-n", namespace, check=False)
                 .returncode == 0, timeout=60, what="the engine record re-created")
        record_back = elapsed(start)
        obj = converged(cluster, namespace, "ar")
        took = elapsed(start)
        assert op.proc.poll() is None, op.logs()[-3000:]
        after = uids(cluster, namespace, "ar")
        # kopf's own line for a 410 Gone on a watch, after which it lists again.
        assert "Restarting the watch-stream for tritonllmengines" in op.logs()
    print(f"\n[fault] API server down {down:.1f} s mid-build, engine record deleted unseen: "
          f"record back {record_back} s, Ready {took} s after the API server is back")
    assert len(build_jobs(cluster, namespace)) == 1
    assert lost(before, after) == [f"tllme/{key}"]  # re-created by the operator
    assert obj["status"]["engine"]["key"] == key
    record = cluster.kubectl_json("get", "tllme", key, "-n", namespace)
    assert record["status"]["state"] == "Ready"


def test_build_pod_failed_or_evicted_is_retried(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)

    def build_pod() -> dict[str, Any] | None:
        items = cluster.kubectl_json("get", "pods", "-n", namespace, "-l",
                                     "app.kubernetes.io/component=engine-build")["items"]
        live = [p for p in items if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]
        return live[0] if len(live) == 1 else None

    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("ev", namespace, podTemplate=SLOW_BUILD)])
        first = wait_for(build_pod, timeout=60, what="a running build pod")
        start = time.monotonic()
        evict = {"apiVersion": "policy/v1", "kind": "Eviction",
                 "metadata": {"name": first["metadata"]["name"], "namespace": namespace}}
        cluster.kubectl("create", "--raw",
                        f"/api/v1/namespaces/{namespace}/pods/{first['metadata']['name']}"
                        "/eviction", "-f", "-", input=json.dumps(evict))
        second = wait_for(
            lambda: (p := build_pod()) and p["metadata"]["uid"] != first["metadata"]["uid"] and p,
            timeout=60, what="a replacement build pod after the eviction",
        )
        cluster.kubectl("label", "pod", second["metadata"]["name"], "-n", namespace,
                        "tritonllm.io/fail=true")
        obj = converged(cluster, namespace, "ev", timeout=150)
        took = elapsed(start)
        job = cluster.kubectl_json("get", "job", build_jobs(cluster, namespace)[0], "-n",
                                   namespace)
        record = cluster.kubectl_json("get", "tllme", obj["status"]["engine"]["key"], "-n",
                                      namespace)
    print(f"\n[fault] build pod evicted, then its replacement failed: Ready {took} s later")
    assert len(build_jobs(cluster, namespace)) == 1
    assert job["status"].get("succeeded") == 1
    assert job["status"].get("failed") == 1  # the failed pod counts, the eviction does not
    assert record["status"]["state"] == "Ready" and record["status"].get("attempts", 0) == 0
    assert condition(obj, "Degraded")["status"] == "False"


@pytest.fixture
def lost_nodes(cluster: LocalCluster) -> Iterator[list[str]]:
    """Nodes a test deletes, put back as they were afterwards (the next tests expect them)."""
    names: list[str] = []
    yield names
    for name in names:
        index = next(i for i, n in enumerate(cluster.nodes) if n.name == name)
        cluster.apply([node_manifest(cluster.nodes[index], index)])
        wait_for(
            lambda name=name: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in cluster.kubectl_json("get", "node", name)["status"].get("conditions", [])
            ),
            timeout=60,
            what=f"{name} Ready again",
        )


def serving_pods(cluster: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items = cluster.kubectl_json("get", "pods", "-n", namespace, "-l",
                                 "app.kubernetes.io/component=server")["items"]
    return [p for p in items if p["metadata"]["name"].startswith(f"{name}-")]


def test_node_lost_with_serving_pods(
    cluster: LocalCluster, namespace: str, tmp_path: Path, lost_nodes: list[str]
) -> None:
    """The node of the serving pod is deleted (lost); the pod garbage collector removes its
    pods (after its 40 s quarantine) and the replacement runs on the other H100 node."""
    prepare_namespace(cluster, namespace)
    with run_operator(cluster, namespace, tmp_path):
        cluster.apply([small("nl", namespace)])
        converged(cluster, namespace, "nl")
        before = uids(cluster, namespace, "nl")
        (pod,) = serving_pods(cluster, namespace, "nl")
        node = pod["spec"]["nodeName"]
        lost_nodes.append(node)
        start = time.monotonic()
        cluster.kubectl("delete", "node", node, "--wait=false")

        def replaced() -> bool:
            pods = serving_pods(cluster, namespace, "nl")
            return len(pods) == 1 and pods[0]["spec"].get("nodeName") not in (None, node) and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in pods[0]["status"].get("conditions", [])
            )

        wait_for(replaced, timeout=120, interval=1, what="the serving pod on another node")
        moved = elapsed(start)
        obj = converged(cluster, namespace, "nl")
        after = uids(cluster, namespace, "nl")
    print(f"\n[fault] node lost: serving pod Ready on another node {moved} s later")
    assert obj["status"]["readyReplicas"] == 1
    assert condition(obj, "Available")["status"] == "True"
    assert len(build_jobs(cluster, namespace)) == 1
    assert lost(before, after) == []


def test_two_replicas_the_survivor_takes_over_a_build(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    cluster.apply([{"apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
                    "metadata": {"name": "tritonllm", "namespace": namespace}}])
    with (
        run_operator(cluster, namespace, tmp_path, peering="tritonllm", tag="a") as a,
        run_operator(cluster, namespace, tmp_path, peering="tritonllm", tag="b") as b,
    ):
        time.sleep(3)  # the peers see each other; one pauses
        cluster.apply([small("tr", namespace, podTemplate=SLOW_BUILD)])
        wait_for(lambda: build_jobs(cluster, namespace), timeout=60, what="the build Job")
        status = "TritonLLMDeployment/status"

        def actors() -> list[Any]:
            return [op for op in (a, b)
                    if op.metric("tritonllm_api_calls_total", verb="apply", kind=status) > 0]

        # The status write follows the Job's creation in the same pass, not always at once.
        wait_for(actors, timeout=30, what="a replica's status write")
        time.sleep(2)  # a second acting replica would have written by now too
        acting = actors()
        assert len(acting) == 1, "exactly one replica acts"
        survivor = b if acting[0] is a else a
        start = time.monotonic()
        os.killpg(acting[0].proc.pid, signal.SIGTERM)  # a rolling update's stop
        acting[0].proc.wait(timeout=30)
        try:
            # The stopped replica took its record out of the peering object, so the survivor
            # resumed at once (not when the record expires: kopf's peering lifetime, 60 s).
            converged(cluster, namespace, "tr")
        except TimeoutError as exc:  # what each replica did: the stopped one's last lines too
            raise AssertionError("\n".join([str(exc), "--- stopped:", acting[0].logs()[-4000:],
                                             "--- survivor:", survivor.logs()[-8000:]])) from exc
        took = elapsed(start)
        assert survivor.metric("tritonllm_api_calls_total", verb="apply", kind=status) > 0
        assert f"left KopfPeering 'tritonllm' in namespace {namespace}" in acting[0].logs()
    print(f"\n[fault] acting replica stopped mid-build: the other finished it in {took} s")
    assert len(build_jobs(cluster, namespace)) == 1


def test_a_refused_finalizer_release_is_retried_until_it_succeeds(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """engineRetention Delete: while a ValidatingAdmissionPolicy refuses every update of the
    deployment, the pass that sees its deletion cannot release the finalizer. Once the policy is
    gone the object goes, with no further event on it: the release is retried with the capped
    backoff (it used to be forgotten, and the object stayed Terminating)."""
    prepare_namespace(cluster, namespace)
    name = "fin"
    policy = f"keep-finalizer-{namespace}"[:63]
    with run_operator(cluster, namespace, tmp_path) as op:
        cluster.apply([small(name, namespace, storage={"engineRetention": "Delete"})])
        obj = wait_ready(cluster, namespace, name)
        assert obj["metadata"].get("finalizers")
        cluster.apply([
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
             "metadata": {"name": policy},
             "spec": {"failurePolicy": "Fail",
                      "matchConstraints": {"resourceRules": [{
                          "apiGroups": ["tritonllm.io"], "apiVersions": ["*"],
                          "operations": ["UPDATE"], "resources": ["tritonllmdeployments"]}]},
                      "validations": [{"expression": f"object.metadata.name != '{name}'",
                                       "message": "updates of fin are refused for this test"}]}},
            {"apiVersion": "admissionregistration.k8s.io/v1",
             "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": policy},
             "spec": {"policyName": policy, "validationActions": ["Deny"],
                      "matchResources": {"namespaceSelector": {"matchLabels": {
                          "kubernetes.io/metadata.name": namespace}}}}},
        ])
        try:
            wait_for(lambda: cluster.kubectl(
                "annotate", "tllm", name, "-n", namespace, "probe=1", "--dry-run=server",
                check=False).returncode != 0, timeout=30, interval=0.5,
                what="admission policy in force")
            errors = op.metric("tritonllm_reconciles_total", result="error")
            cluster.kubectl("delete", "tllm", name, "-n", namespace, "--wait=false")
            wait_for(lambda: op.metric("tritonllm_reconciles_total", result="error")
                     >= errors + 2, timeout=30, what="two refused finalizer releases")
            live = get_cr(cluster, namespace, name)
            assert live["metadata"].get("deletionTimestamp") and live["metadata"]["finalizers"]
        finally:
            cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                            policy, check=False)
        released = time.monotonic()
        wait_for(lambda: cluster.kubectl("get", "tllm", name, "-n", namespace,
                                         check=False).returncode != 0,
                 timeout=90, what="the deployment deleted once the policy is gone")
        assert op.proc.poll() is None
    print(f"\n[fault] finalizer release refused, then allowed: deleted "
          f"{time.monotonic() - released:.1f} s after the policy went")
