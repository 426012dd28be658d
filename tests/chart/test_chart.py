"""The Helm chart: lint, template, install into the local cluster, and RBAC that suffices.

The operator image cannot run here (no container runtime: kwok only simulates pods), so the last
test proves the chart's RBAC another way: it runs `tritonllm run` with a token of the chart's
ServiceAccount and reconciles a deployment to Ready with nothing but those permissions.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import EXAMPLES, ROOT
from tests.cluster.operator_harness import (
    prepare_namespace,
    run_operator,
    wait_ready,
)
from tritonllm.api.deployment import parse_deployment
from tritonllm.cli.crd import chart_crd_texts
from tritonllm.render import RenderOptions, render_all
from tritonllm.render.jobs import engine_cleanup_job
from tritonllm.render.mpi import mpi_secret
from tritonllm_dev.autoscaling import install_keda_crds, install_prometheus_operator_crds
from tritonllm_dev.build import ensure_all
from tritonllm_dev.local import LocalCluster
from tritonllm_dev.testing import wait_for
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


def sa_kubeconfig(cluster: LocalCluster, namespace: str, sa: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (a TokenRequest token), nothing
    else: what the operator's pod would hold."""
    token = cluster.kubectl("create", "token", sa, "-n", namespace,
                            "--duration=1h").stdout.strip()
    cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": cfg["clusters"][0]["cluster"]}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": sa}}],
        "current-context": "sa",
    }))
    return path


def kubectl_as(kubeconfig: Path, *args: str, input: str | None = None,
               ) -> subprocess.CompletedProcess[str]:
    """The cached kubectl with only `kubeconfig`'s credentials (not the cluster admin's)."""
    return subprocess.run([str(KUBERNETES.path("kubectl")), f"--kubeconfig={kubeconfig}", *args],
                          input=input, capture_output=True, text=True, timeout=120, check=False)


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
        kubeconfig = sa_kubeconfig(cluster, namespace, f"{release}-tritonllm",
                                   tmp_path / "sa.kubeconfig")
        prepare_namespace(cluster, namespace)
        spec = {"image": "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
                "model": {"source": "hf://openai-community/gpt2"},
                "gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}
        # One pod, and a LeaderWorkerSet group (its MPI key Secret too), under the chart's
        # admission policy as well as its RBAC.
        multi = {**spec, "gpu": {**spec["gpu"], "perNode": 2},
                 "engine": {"parallelism": {"tensor": 2, "pipeline": 2}}}
        with run_operator(cluster, namespace, tmp_path, kubeconfig=kubeconfig) as op:
            cluster.apply([{
                "apiVersion": "tritonllm.io/v1alpha1", "kind": "TritonLLMDeployment",
                "metadata": {"name": name, "namespace": namespace}, "spec": body,
            } for name, body in (("rbac-check", spec), ("rbac-multi", multi))])
            wait_ready(cluster, namespace, "rbac-check")
            wait_ready(cluster, namespace, "rbac-multi")
            assert not refused(op.logs())
    finally:
        run_helm(helm, "uninstall", release, "--namespace", namespace,
                 "--kubeconfig", str(cluster.kubeconfig), check=False)


def admission_policy(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    return policy, binding


@pytest.mark.chart
def test_admission_policy_holds_the_operator_service_account(helm: str) -> None:
    """The default install binds a policy that matches the operator's ServiceAccount only (by
    its username) and denies, whatever RBAC grants it, what the operator never renders."""
    policy, binding = admission_policy(template(helm))
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (who,) = spec["matchConditions"]
    assert who["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:tritonllm-system:demo-tritonllm'")
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["*/*"]
    assert rule["operations"] == ["CREATE", "UPDATE", "DELETE"]
    checks = " ".join(v["expression"] for v in spec["validations"])
    assert "['kube-system','kube-public','kube-node-lease']" in checks
    for needed in ("'Opaque'", "automountServiceAccountToken == false", "serviceAccountToken",
                   "hostPath", "privileged", "variables.newOurs && variables.oldOurs"):
        assert needed in checks, needed
    # Another ServiceAccount name, another namespace: the username follows.
    policy, _ = admission_policy(template(helm, "serviceAccount.name=op"))
    assert "tritonllm-system:op'" in policy["spec"]["matchConditions"][0]["expression"]
    # Off on request (e.g. a cluster that enforces the same with its own policy engine).
    kinds = {d["kind"] for d in template(helm, "rbac.admissionPolicy.enabled=false")}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


@pytest.mark.chart
@pytest.mark.parametrize(("namespace", "sets", "says"), [
    ("kube-system", (), "the release's namespace kube-system"),
    ("ops", ("settings.namespaces={team-a,kube-public}",), "settings.namespaces names kube-public"),
])
def test_admission_policy_never_protects_the_operators_own_namespaces(
    helm: str, namespace: str, sets: tuple[str, ...], says: str
) -> None:
    """A namespace the operator must write in (its Lease, a watched namespace) cannot also be
    one it may not write in: the install fails, saying which."""
    args = ["template", "demo", str(CHART), "--namespace", namespace, *KUBE]
    for s in sets:
        args += ["--set", s]
    proc = run_helm(helm, *args, check=False)
    assert proc.returncode != 0 and says in proc.stderr, proc.stderr
    allowed = run_helm(helm, *args, "--set", "rbac.admissionPolicy.protectedNamespaces={other}")
    assert "kind: ValidatingAdmissionPolicy\n" in allowed.stdout


OURS = {"app.kubernetes.io/managed-by": "tritonllm"}


def token_secret(namespace: str) -> dict[str, Any]:
    """A Secret the token controller fills with a token of the namespace's `default`
    ServiceAccount: whoever may create it and read it back acts as that ServiceAccount."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": "minted", "namespace": namespace, "labels": OURS,
                         "annotations": {"kubernetes.io/service-account.name": "default"}}}


def workload(namespace: str, **pod: Any) -> dict[str, Any]:
    """A labelled Deployment whose pods run as the namespace's `default` ServiceAccount."""
    labels = {"app": "escalate"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "escalate", "namespace": namespace, "labels": OURS},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}],
                         **pod}}}}


def escalations(namespace: str) -> list[tuple[dict[str, Any], str]]:
    """What the operator's ServiceAccount could do with its RBAC alone, and the words of the
    policy that refuses each."""
    no_token = {"automountServiceAccountToken": False}
    projected = {"name": "t", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}
    return [
        (token_secret(namespace), "only Opaque Secrets, not kubernetes.io/service-account-token"),
        (workload(namespace), "get no ServiceAccount token"),
        (workload(namespace, serviceAccountName="default", automountServiceAccountToken=True),
         "get no ServiceAccount token"),
        (workload(namespace, **no_token, volumes=[projected]), "get no ServiceAccount token"),
        (workload(namespace, **no_token, volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
         "mount no hostPath"),
        (workload(namespace, **no_token, hostPID=True), "share no host namespace"),
        ({"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "x", "namespace": "kube-system", "labels": OURS}},
         "may not write in namespace kube-system"),
        ({"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "x", "namespace": namespace}},
         "only objects labelled app.kubernetes.io/managed-by=tritonllm"),
    ]


def every_rendered_object(namespace: str) -> list[dict[str, Any]]:
    """Every object the operator creates for every example (verification workloads, scale to
    zero's activator, KEDA, PodMonitors, LeaderWorkerSets, the MPI key Secret, the engine
    cleanup Job), in `namespace`."""
    out: list[dict[str, Any]] = []
    for path in EXAMPLES:
        body = yaml.safe_load(path.read_text())
        body["metadata"].update(namespace=namespace, uid="0b9d1c52-6a1e-4f0e-9c53-5c1f3e7d2a10")
        dep = parse_deployment(body)
        r = render_all(dep, RenderOptions(pod_monitors=True))
        verify = [r.verify_workload] if r.verify_workload else []
        out += [m.body for m in (*r.objects, *verify, mpi_secret(dep, {"id_ed25519": "k"}))]
        out.append(engine_cleanup_job(dep, r.engine_key, RenderOptions()))
    return out


@pytest.mark.chart
@pytest.mark.cluster
def test_operator_service_account_cannot_mint_a_token(
    helm: str, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """With the chart's default (every namespace), RBAC lets the operator's ServiceAccount create
    Secrets and workloads anywhere: a service-account-token Secret, or a pod that mounts a
    token, would give it any ServiceAccount's rights. As that ServiceAccount (its own token),
    each such request is refused by the chart's admission policy, while every object the
    operator renders for every example is admitted (server-side dry runs: nothing is kept)."""
    install_keda_crds(cluster)  # ScaledObjects and PodMonitors are among the rendered objects
    install_prometheus_operator_crds(cluster)
    release = f"vap-{namespace[-6:]}"
    run_helm(helm, "install", release, str(CHART), "--namespace", namespace,
             "--kubeconfig", str(cluster.kubeconfig), "--set", "settings.peering=",
             "--set", "replicaCount=1", "--set", "crds.install=false",
             "--set", "rbac.userRoles=false")
    try:
        kubeconfig = sa_kubeconfig(cluster, namespace, f"{release}-tritonllm",
                                   tmp_path / "sa.kubeconfig")
        cluster.apply([{"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "someone-elses", "namespace": namespace}}])
        policy = f"ValidatingAdmissionPolicy '{release}-tritonllm-operator'"
        minted = json.dumps(token_secret(namespace))
        # The API server loads a new policy from its watch: enforced within moments.
        wait_for(lambda: kubectl_as(kubeconfig, "create", "--dry-run=server", "-f", "-",
                                    input=minted).returncode != 0, timeout=30,
                 what="the token Secret refused (policy status: " + cluster.kubectl(
                     "get", "validatingadmissionpolicy", f"{release}-tritonllm-operator",
                     "-o", "jsonpath={.status}", check=False).stdout + ")")
        attempts = [*escalations(namespace), (None, "only objects labelled")]
        for obj, says in attempts:
            if obj is None:  # deleting (or changing) an object that is not the operator's
                done = kubectl_as(kubeconfig, "delete", "configmap", "someone-elses",
                                  "-n", namespace, "--dry-run=server")
            else:
                done = kubectl_as(kubeconfig, "create", "--dry-run=server", "-f", "-",
                                  input=json.dumps(obj))
            assert done.returncode != 0, (says, done.stdout)
            assert policy in done.stderr and says in done.stderr, done.stderr
        # The policy is the operator's only: the cluster's admin may still create the Secret.
        admin = cluster.kubectl("create", "--dry-run=server", "-f", "-", check=False,
                                input=minted)
        assert admin.returncode == 0, admin.stderr
        # Nothing the operator renders is refused.
        objects = every_rendered_object(namespace)
        assert {o["kind"] for o in objects} >= {
            "Secret", "Job", "Deployment", "LeaderWorkerSet", "ScaledObject", "PodMonitor",
            "ConfigMap", "Service", "NetworkPolicy", "PodDisruptionBudget",
            "PersistentVolumeClaim", "HorizontalPodAutoscaler"}
        done = kubectl_as(kubeconfig, "create", "--dry-run=server", "-f", "-",
                          input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("(server dry run)") == len(objects), done.stdout
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
    "replicasets": {"get"},  # a verification pod's controller (tritonllm.handlers.smoke)
    "statefulsets": {"get"},
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
        kubeconfig = sa_kubeconfig(cluster, namespace, f"{release}-tritonllm",
                                   tmp_path / "sa.kubeconfig")
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
