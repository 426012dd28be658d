"""Bad inputs the API server admits but cannot be carried out, on the real local API server with
the operator running (simulated GPU nodes): each ends in Degraded with the reason in the table
and an Event naming the object, the operator never adopts or deletes an object it did not
create, and it does not crash-loop.

Inputs the API server refuses itself are in tests/cases.py (INVALID, checked at admission by
test_crd_admission.py); docs/hardening.md lists both tables.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
)
from tritonllm.api.deployment import parse_deployment
from tritonllm.render import render_all
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for

pytestmark = pytest.mark.cluster

RESYNC = 3.0
IMAGE = "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3"


def tllm(name: str, ns: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tritonllm.io/v1alpha1",
        "kind": "TritonLLMDeployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"image": IMAGE, "model": {"source": "hf://openai-community/gpt2"},
                 "gpu": {"product": "NVIDIA-H100-80GB-HBM3"}, **spec},
    }


def rendered(obj: dict[str, Any]) -> Any:
    return render_all(parse_deployment(obj))


@dataclass(frozen=True)
class Fault:
    id: str
    cr: Callable[[str], dict[str, Any]]
    # Objects that exist before the CR is applied (the namespace is the argument).
    before: Callable[[str], list[dict[str, Any]]]
    reason: str
    says: str  # in the Degraded message
    # The object that must come out of it untouched: (kind, name, what it must still hold).
    untouched: tuple[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _service(ns: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "alpha", "namespace": ns, "labels": {"team": "payments"}},
             "spec": {"ports": [{"port": 8080}]}}]


def _labelled_deployment(ns: str) -> list[dict[str, Any]]:
    """A Deployment that claims to be the operator's (its label) but no deployment owns it."""
    return [{"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "beta", "namespace": ns,
                          "labels": {"app.kubernetes.io/managed-by": "tritonllm"}},
             "spec": {"selector": {"matchLabels": {"app": "beta"}},
                      "template": {"metadata": {"labels": {"app": "beta"}},
                                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}]


def _planted_secret(ns: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": "gamma-mpi-ssh", "namespace": ns},
             "stringData": {"authorized_keys": "ssh-ed25519 AAAA attacker"}}]


FAULTS = [
    Fault("service-of-the-same-name", lambda ns: tllm("alpha", ns), _service,
          "NameConflict", "Service/alpha already exists", untouched=("service", "alpha")),
    Fault("deployment-labelled-ours-owned-by-none", lambda ns: tllm("beta", ns),
          _labelled_deployment, "NameConflict", "Deployment/beta already exists",
          untouched=("deployment", "beta")),
    Fault("planted-mpi-key-secret",
          lambda ns: tllm("gamma", ns, engine={"parallelism": {"tensor": 4, "pipeline": 2}},
                          gpu={"product": "NVIDIA-H100-80GB-HBM3", "perNode": 4}),
          _planted_secret, "NameConflict", "Secret/gamma-mpi-ssh",
          untouched=("secret", "gamma-mpi-ssh")),
]


def test_name_conflicts_are_reported_and_never_adopted(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    prepare_namespace(cluster, namespace)
    for fault in FAULTS:
        cluster.apply(fault.before(namespace))
    with run_operator(cluster, namespace, tmp_path) as op:
        cluster.apply([fault.cr(namespace) for fault in FAULTS])
        for fault in FAULTS:
            name = fault.cr(namespace)["metadata"]["name"]
            obj = wait_condition(cluster, namespace, name, "Degraded", reason=fault.reason)
            assert fault.says in condition(obj, "Degraded")["message"], fault.id
            assert "rename" in condition(obj, "Degraded")["message"]
            wait_for(lambda n=name, why=fault.reason: any(
                e["reason"] == why for e in events(cluster, namespace, n)),
                     timeout=30, what=f"{fault.id}: {fault.reason} Event")
        assert op.proc.poll() is None
        for fault in FAULTS:
            kind, name = fault.untouched or ("", "")
            live = cluster.kubectl_json("get", kind, name, "-n", namespace)
            assert not live["metadata"].get("ownerReferences"), fault.id
            managers = {m["manager"] for m in live["metadata"].get("managedFields") or []}
            assert "tritonllm" not in managers, (fault.id, managers)
        # deleting the deployments leaves what was never theirs
        cluster.kubectl("delete", "tllm", "--all", "-n", namespace, "--wait=true")
    for fault in FAULTS:
        kind, name = fault.untouched or ("", "")
        assert cluster.kubectl("get", kind, name, "-n", namespace, check=False).returncode == 0


def _wait_policy_active(cluster: LocalCluster, ns: str, name: str) -> None:
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}}

    def refused() -> bool:
        proc = cluster.kubectl("create", "--dry-run=server", "-f", "-",
                               input=json.dumps(probe), check=False)
        return proc.returncode != 0

    wait_for(refused, timeout=30, interval=0.5, what="admission policy in force")


def test_refused_writes_end_in_a_condition_not_a_crash_loop(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """A ValidatingAdmissionPolicy refuses one deployment's build plan; a ResourceQuota of
    zero Jobs refuses another's build Job: each is Degraded with the policy's or the quota's
    own words, and the operator backs off instead of retrying hot. (The build objects are
    created after the deployment's applies, so the refused plan is the first refused write of
    the first deployment; the quota's Job comes after its plan, so the plan is created.)"""
    prepare_namespace(cluster, namespace)
    delta = tllm("delta", namespace, model={"source": "hf://openai-community/gpt2",
                                            "revision": "refused"})
    plan_cm = rendered(delta).build_configmap.name
    epsilon = tllm("epsilon", namespace)
    build_job = rendered(epsilon).build_job.name
    policy = f"refuse-{namespace}"[:63]
    cluster.apply([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": policy},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{
                      "apiGroups": [""], "apiVersions": ["v1"],
                      "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
                  "validations": [{"expression": f"object.metadata.name != '{plan_cm}'",
                                   "message": "build plans of delta are not allowed here"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": policy},
         "spec": {"policyName": policy, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {
                      "kubernetes.io/metadata.name": namespace}}}}},
        {"apiVersion": "v1", "kind": "ResourceQuota",
         "metadata": {"name": "no-jobs", "namespace": namespace},
         "spec": {"hard": {"count/jobs.batch": "0"}}},
    ])
    try:
        _wait_policy_active(cluster, namespace, plan_cm)
        wait_for(lambda: cluster.kubectl_json("get", "resourcequota", "no-jobs", "-n",
                                              namespace).get("status", {}).get("hard"),
                 timeout=30, what="quota status")
        with run_operator(cluster, namespace, tmp_path, resync=RESYNC) as op:
            cluster.apply([delta, epsilon])
            obj = wait_condition(cluster, namespace, "delta", "Degraded",
                                 reason="AdmissionRefused")
            message = condition(obj, "Degraded")["message"]
            assert f"ConfigMap/{plan_cm}" in message and "not allowed here" in message
            obj = wait_condition(cluster, namespace, "epsilon", "Degraded",
                                 reason="QuotaExceeded", timeout=180)
            assert f"Job/{build_job}" in condition(obj, "Degraded")["message"]
            assert condition(obj, "Progressing")["status"] == "False"
            # backing off (one failed pass per resync period and deployment, plus those late
            # child events trigger), not a hot loop
            before = op.metric("tritonllm_reconciles_total", result="error")
            time.sleep(8)
            errors = op.metric("tritonllm_reconciles_total", result="error") - before
            assert errors <= 2 * 3 * 8 / RESYNC, errors
            assert op.proc.poll() is None
            assert any(e["reason"] == "QuotaExceeded" for e in events(cluster, namespace,
                                                                      "epsilon"))
        print(f"\n[measure] failed passes in 8 s of two refused deployments: {errors:.0f}")
        assert get_cr(cluster, namespace, "delta")["status"]["reason"] == "AdmissionRefused"
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                        policy, check=False)


def test_serving_pods_refused_by_a_quota_are_degraded(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """A quota of one pod: the build and repository Jobs run one pod at a time, the second
    serving replica is refused by the Deployment controller (not by a write of the operator),
    and the deployment says so with the quota's words."""
    prepare_namespace(cluster, namespace)
    cluster.apply([{"apiVersion": "v1", "kind": "ResourceQuota",
                    "metadata": {"name": "one-pod", "namespace": namespace},
                    "spec": {"hard": {"pods": "1"}}}])
    wait_for(lambda: cluster.kubectl_json("get", "resourcequota", "one-pod", "-n",
                                          namespace).get("status", {}).get("hard"),
             timeout=30, what="quota status")
    with run_operator(cluster, namespace, tmp_path, resync=RESYNC):
        cluster.apply([tllm("zeta", namespace, serving={"replicas": 2})])
        obj = wait_condition(cluster, namespace, "zeta", "Degraded", reason="QuotaExceeded",
                             timeout=180)
    message = condition(obj, "Degraded")["message"]
    assert "serving pods cannot be created" in message and "exceeded quota" in message
