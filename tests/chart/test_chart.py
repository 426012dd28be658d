"""The Helm chart: lint, template, install into the local cluster, and RBAC that suffices.

The operator image cannot run here (no container runtime: kwok only simulates pods), so the last
test proves the chart's RBAC another way: it runs `tritonllm run` with a token of the chart's
ServiceAccount and reconciles a deployment to Ready with nothing but those permissions.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import ROOT
from tests.cluster.operator_harness import (
    prepare_namespace,
    run_operator,
    wait_ready,
)
from tritonllm.cli.crd import chart_crd_texts
from tritonllm_dev.build import ensure_all
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.versions import HELM, KUBERNETES

CHART = ROOT / "charts" / "tritonllm"
# Offline `helm template` assumes Kubernetes 1.20; the chart needs >= 1.30 (we test on 1.36).
KUBE = ("--kube-version", KUBERNETES.version)


# A 403 the API server answered, in the operator's log ("403 Forbidden", "status 403"); not the
# milliseconds of a log line's time ("13:40:31,403"), which a plain substring test would match.
FORBIDDEN = re.compile(r"Forbidden|(?<![,.\d])403(?!\d)")


def refused(logs: str) -> bool:
    return FORBIDDEN.search(logs) is not None


@pytest.fixture(scope="module")
def helm() -> str:
    ensure_all()  # builds helm (and the cluster binaries) on a fresh machine
    return str(HELM.path("helm"))


def run_helm(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}")
    return proc


def template(helm: str, *sets: str) -> list[dict[str, Any]]:
    args = ["template", "demo", str(CHART), "--namespace", "tritonllm-system", *KUBE]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(run_helm(helm, *args).stdout) if d]


@pytest.mark.chart
def test_chart_lints(helm: str) -> None:
    out = run_helm(helm, "lint", str(CHART), "--strict")
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.chart
def test_chart_crds_are_the_generated_ones() -> None:
    for name, text in chart_crd_texts().items():
        assert (CHART / "templates" / "crds" / name).read_text() == text


@pytest.mark.chart
def test_template_renders_operator_with_least_privilege(helm: str) -> None:
    docs = template(helm)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service",
            "Role", "RoleBinding"} <= kinds
    assert "ClusterKopfPeering" not in kinds  # a Lease elects the acting replica
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert "pods/exec" not in resources
    assert "tritonllmdeployments/status" in resources
    dep = next(d for d in docs if d["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    c = pod["containers"][0]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["TRITONLLM_LEADER_ELECTION"] == "tritonllm" and dep["spec"]["replicas"] == 2
    assert env["TRITONLLM_LEADER_ELECTION_NAMESPACE"] == "tritonllm-system"
    # The Lease holder's id is the pod's name: the Lease shows which pod acts.
    assert env["POD_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}


@pytest.mark.chart
def test_template_renders_a_kopf_peering_per_watched_namespace(helm: str) -> None:
    docs = template(helm, "settings.namespaces={team-a,team-b}", "settings.leaderElection=")
    peerings = [(d["kind"], d["metadata"].get("namespace")) for d in docs
                if d["apiVersion"].startswith("kopf.dev/")]
    assert peerings == [("KopfPeering", "team-a"), ("KopfPeering", "team-b")]
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in ctr["volumeMounts"]


@pytest.mark.chart
def test_image_digest_pins_the_operator_and_tools_image(helm: str) -> None:
    digest = "sha256:" + "ab" * 32
    images = {}
    for sets in ((), ("image.tag=1.2.3", f"image.digest={digest}")):
        (dep,) = [d for d in template(helm, *sets) if d["kind"] == "Deployment"]
        (ctr,) = dep["spec"]["template"]["spec"]["containers"]
        tools = {e["name"]: e.get("value") for e in ctr["env"]}["TRITONLLM_TOOLS_IMAGE"]
        images[bool(sets)] = (ctr["image"], tools)
    assert images[False][0].startswith("ghcr.io/tritonllm/tritonllm:")
    assert images[True] == (f"ghcr.io/tritonllm/tritonllm@{digest}",) * 2


@pytest.mark.chart
@pytest.mark.parametrize("digest", ["sha256:abc", "latest", "sha512:" + "a" * 128,
                                    "sha256:" + "A" * 64])
def test_image_digest_is_schema_checked(helm: str, digest: str) -> None:
    args = ["template", "demo", str(CHART), *KUBE, "--set", f"image.digest={digest}"]
    proc = run_helm(helm, *args, check=False)
    assert proc.returncode != 0 and "/image/digest" in proc.stderr, proc.stderr


@pytest.mark.chart
def test_template_refuses_replicas_without_peering(helm: str) -> None:
    args = ["template", "demo", str(CHART), *KUBE, "--set", "settings.peering=",
            "--set", "settings.leaderElection="]
    proc = run_helm(helm, *args, check=False)
    assert proc.returncode != 0 and "needs settings.leaderElection or settings.peering" in (
        proc.stderr)


@pytest.mark.chart
@pytest.mark.cluster
def test_install_into_the_local_cluster(helm: str, cluster: LocalCluster, namespace: str) -> None:
    run_helm(helm, "install", "tllm", str(CHART), "--namespace", namespace,
             "--kubeconfig", str(cluster.kubeconfig), "--set", "settings.peering=",
             "--set", "replicaCount=1", "--set", "crds.install=false", "--wait",
             "--timeout", "120s")
    dep = cluster.kubectl_json("get", "deployment", "tllm-tritonllm", "-n", namespace)
    assert dep["status"].get("readyReplicas") == 1  # simulated by kwok
    run_helm(helm, "uninstall", "tllm", "--namespace", namespace,
             "--kubeconfig", str(cluster.kubeconfig))


@pytest.mark.chart
@pytest.mark.cluster
def test_chart_rbac_is_enough_to_reconcile(helm: str, cluster: LocalCluster, namespace: str,
                                           tmp_path: Path) -> None:
    release = f"rbac-{namespace[-6:]}"
    run_helm(helm, "install", release, str(CHART), "--namespace", namespace,
             "--kubeconfig", str(cluster.kubeconfig), "--set", "settings.peering=",
             "--set", "replicaCount=1", "--set", "crds.install=false")
    try:
        sa = f"{release}-tritonllm"
        token = cluster.kubectl("create", "token", sa, "-n", namespace,
                                "--duration=1h").stdout.strip()
        cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
        server = cfg["clusters"][0]["cluster"]
        restricted = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": server}],
            "users": [{"name": sa, "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "local", "user": sa}}],
            "current-context": "sa",
        }
        kubeconfig = tmp_path / "sa.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(restricted))
        prepare_namespace(cluster, namespace)
        with run_operator(cluster, namespace, tmp_path, kubeconfig=kubeconfig) as op:
            cluster.apply([{
                "apiVersion": "tritonllm.io/v1alpha1", "kind": "TritonLLMDeployment",
                "metadata": {"name": "rbac-check", "namespace": namespace},
                "spec": {"image": "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
                         "model": {"source": "hf://openai-community/gpt2"},
                         "gpu": {"product": "NVIDIA-H100-80GB-HBM3"}},
            }])
            wait_ready(cluster, namespace, "rbac-check")
            assert not refused(op.logs())
    finally:
        run_helm(helm, "uninstall", release, "--namespace", namespace,
                 "--kubeconfig", str(cluster.kubeconfig), check=False)


# Verbs the operator's code uses, per resource (docs/hardening.md derives them from its API
# calls); the chart grants exactly these.
OPERATOR_VERBS = {
    "tritonllmdeployments": {"list", "watch", "patch"},
    "tritonllmdeployments/status": {"patch"},
    "tritonllmengines": {"list", "watch", "create", "patch", "delete"},
    "tritonllmengines/status": {"patch"},
    "configmaps": {"get", "list", "watch", "create", "patch", "delete"},
    "services": {"get", "list", "watch", "create", "patch", "delete"},
    "jobs": {"get", "list", "watch", "create", "patch", "delete"},
    "deployments": {"get", "list", "watch", "create", "patch", "delete"},
    "leaderworkersets": {"get", "list", "watch", "create", "patch"},
    "deployments/scale": {"patch"},
    "leaderworkersets/scale": {"patch"},
    "horizontalpodautoscalers": {"get", "list", "watch", "create", "patch", "delete"},
    "poddisruptionbudgets": {"get", "list", "watch", "create", "patch", "delete"},
    "networkpolicies": {"get", "list", "watch", "create", "patch", "delete"},
    "scaledobjects": {"get", "list", "watch", "create", "patch", "delete"},
    "podmonitors": {"get", "list", "watch", "create", "patch", "delete"},
    "persistentvolumeclaims": {"list", "watch", "create", "patch"},
    "secrets": {"get", "create"},
    "pods": {"list", "watch"},  # serving pods watched for failures and phase times
    "events": {"create", "list"},
}


def _verbs(rules: list[dict[str, Any]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for rule in rules:
        for res in rule["resources"]:
            out.setdefault(res, set()).update(rule["verbs"])
    return out


@pytest.mark.chart
def test_rbac_grants_only_the_verbs_the_code_uses(helm: str) -> None:
    docs = template(helm)
    role = next(d for d in docs if d["kind"] == "ClusterRole"
                and d["metadata"]["name"] == "demo-tritonllm")
    granted = _verbs(role["rules"])
    for res, verbs in OPERATOR_VERBS.items():
        assert granted.pop(res) == verbs, res
    # what remains is kopf's: the CRD scan, the schedule's Namespace, GPU nodes
    assert granted == {
        "customresourcedefinitions": {"get", "list", "watch"},
        "namespaces": {"get", "list", "watch"},
        "nodes": {"list", "watch"},
    }
    # Leader election (tritonllm.k8s.lease): one Lease in the release's namespace.
    (lease,) = [d for d in docs if d["kind"] == "Role"]
    assert lease["metadata"]["namespace"] == "tritonllm-system"
    assert _verbs(lease["rules"]) == {"leases": {"get", "create", "update"}}
    # With kopf peering instead, its cluster-wide object.
    peered = next(d for d in template(helm, "settings.leaderElection=")
                  if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "demo-tritonllm")
    assert _verbs(peered["rules"])["clusterkopfpeerings"] == {"get", "list", "watch", "patch"}


@pytest.mark.chart
def test_watched_namespaces_get_roles_not_a_cluster_role(helm: str) -> None:
    docs = template(helm, "settings.namespaces={team-a,team-b}", "settings.leaderElection=")
    roles = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role"}
    assert sorted(roles) == ["team-a", "team-b"]
    for role in roles.values():
        granted = _verbs(role["rules"])
        assert granted.pop("kopfpeerings") == {"get", "list", "watch", "patch"}
        assert granted == OPERATOR_VERBS
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    cluster = next(d for d in docs if d["kind"] == "ClusterRole"
                   and d["metadata"]["name"] == "demo-tritonllm")
    assert set(_verbs(cluster["rules"])) == {"customresourcedefinitions", "namespaces", "nodes"}
    peerings = [d for d in docs if d["kind"] == "KopfPeering"]
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]


@pytest.mark.chart
def test_user_roles_aggregate_into_edit_and_view(helm: str) -> None:
    docs = {d["metadata"]["name"]: d for d in template(helm) if d["kind"] == "ClusterRole"}
    edit, view = docs["tritonllm-edit"], docs["tritonllm-view"]
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert "create" in _verbs(edit["rules"])["tritonllmdeployments"]
    assert _verbs(view["rules"])["tritonllmdeployments"] == {"get", "list", "watch"}
    assert "create" not in _verbs(edit["rules"])["tritonllmengines"]


@pytest.mark.chart
@pytest.mark.cluster
def test_namespaced_rbac_is_enough_to_reconcile_and_no_more(
    helm: str, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """settings.namespaces: the operator reconciles to Ready with only its Role in the watched
    namespace (and the cluster-scoped reads), and `kubectl auth can-i` shows what it cannot do."""
    release = f"ns-{namespace[-6:]}"
    run_helm(helm, "install", release, str(CHART), "--namespace", namespace,
             "--kubeconfig", str(cluster.kubeconfig), "--set", "settings.peering=",
             "--set", "replicaCount=1", "--set", f"settings.namespaces={{{namespace}}}",
             "--set", "rbac.userRoles=false", "--set", "crds.install=false")
    sa = f"system:serviceaccount:{namespace}:{release}-tritonllm"

    def can(verb: str, res: str, ns: str | None = namespace) -> bool:
        where = ["-n", ns] if ns else []
        proc = cluster.kubectl("auth", "can-i", verb, res, f"--as={sa}", *where, check=False)
        return proc.stdout.strip() == "yes"

    try:
        assert can("patch", "services") and can("create", "networkpolicies")
        assert not can("patch", "secrets") and not can("delete", "persistentvolumeclaims")
        assert can("get", "secrets") and not can("list", "secrets") and not can("watch", "secrets")
        assert not can("delete", "leaderworkersets") and not can("create", "pods/exec")
        assert not can("get", "secrets", "kube-system") and not can("list", "configmaps", None)
        token = cluster.kubectl("create", "token", f"{release}-tritonllm", "-n", namespace,
                                "--duration=1h").stdout.strip()
        cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
        kubeconfig = tmp_path / "sa.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": cfg["clusters"][0]["cluster"]}],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa"}}],
            "current-context": "sa",
        }))
        prepare_namespace(cluster, namespace)
        with run_operator(cluster, namespace, tmp_path, kubeconfig=kubeconfig) as op:
            cluster.apply([{
                "apiVersion": "tritonllm.io/v1alpha1", "kind": "TritonLLMDeployment",
                "metadata": {"name": "ns-check", "namespace": namespace},
                "spec": {"image": "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
                         "model": {"source": "hf://openai-community/gpt2"},
                         "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
                         "serving": {"replicas": 2}},
            }])
            wait_ready(cluster, namespace, "ns-check")
            assert not refused(op.logs())
    finally:
        run_helm(helm, "uninstall", release, "--namespace", namespace,
                 "--kubeconfig", str(cluster.kubeconfig), check=False)
