"""Object rendering: identities, keys, security, probes, apply order and cross-object wiring."""

from __future__ import annotations

import pytest

from tests.cases import cr
from tests.helpers import container
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.render import RenderOptions, naming, render_all
from tritonllm.render.naming import engine_key

APPLY_ORDER = [
    "PersistentVolumeClaim",
    "ConfigMap",
    "Job",
    "ConfigMap",
    "Job",
    "Service",
    "NetworkPolicy",
    "Deployment",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
]


def dep(patch=None, **top):
    return parse_deployment(cr(patch, **top))


def test_apply_order() -> None:
    r = render_all(
        dep({"storage": {"create": {"size": "10Gi"}}, "autoscaling": {"maxReplicas": 3}})
    )
    assert [o["kind"] for o in r.objects] == APPLY_ORDER


def test_engine_key_is_stable_and_ignores_serving_fields() -> None:
    a = engine_key(dep())
    assert a == engine_key(dep())
    assert a == engine_key(dep({"serving": {"replicas": 3, "batching": "V1"}}))
    assert a == engine_key(dep(metadata={"name": "other", "namespace": "team-b"}))
    assert a != engine_key(dep({"engine": {"parallelism": {"tensor": 2}}}))
    assert a != engine_key(dep({"model": {"revision": "abc123"}}))
    assert a != engine_key(dep({"gpu": {"product": "NVIDIA-H200"}}))
    assert a != engine_key(dep({"image": "nvcr.io/nvidia/tritonserver:24.10-trtllm-python-py3"}))


def test_engine_key_names_the_engine_dir_and_the_shared_build_job() -> None:
    r = render_all(dep())
    assert r.engine_dir == f"/store/engines/{r.engine_key}"
    job = r.build_job if len(r.by_kind("Job")) == 1 else r.by_kind("Job")[0]
    assert job["metadata"]["name"] == f"tritonllm-build-{r.engine_key}"
    assert job["metadata"]["labels"][c.LABEL_ENGINE_KEY] == r.engine_key


def test_serving_change_keeps_engine_but_changes_repository() -> None:
    a = render_all(dep())
    b = render_all(dep({"serving": {"maxQueueDelayMicroseconds": 100}}))
    assert a.engine_key == b.engine_key
    assert a.repository_key != b.repository_key
    assert a.repository_dir != b.repository_dir


def test_replicas_only_change_touches_only_replicas() -> None:
    a = render_all(dep())
    b = render_all(dep({"serving": {"replicas": 3}}))
    assert a.repository_key == b.repository_key
    da, db = a.one("Deployment"), b.one("Deployment")
    assert da["spec"]["template"] == db["spec"]["template"]
    assert (da["spec"]["replicas"], db["spec"]["replicas"]) == (1, 3)


def test_owner_references_only_with_a_uid() -> None:
    assert "ownerReferences" not in render_all(dep()).one("Service")["metadata"]
    r = render_all(dep(metadata={"name": "demo", "uid": "1234"}))
    ref = r.one("Service")["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"]) == (c.KIND, "1234", True)
    shared = r.build_job["metadata"]["ownerReferences"][0]
    assert shared["controller"] is False  # the build Job is shared between deployments


def test_created_pvc_has_no_owner() -> None:
    r = render_all(
        dep({"storage": {"create": {"size": "10Gi"}}}, metadata={"name": "demo", "uid": "u"})
    )
    assert "ownerReferences" not in r.one("PersistentVolumeClaim")["metadata"]


def test_pod_security_and_shm() -> None:
    d = render_all(dep({"podTemplate": {"runAsUser": 1000, "shmSize": "4Gi"}})).one("Deployment")
    pod = d["spec"]["template"]["spec"]
    sec = container(d)["securityContext"]
    assert sec["allowPrivilegeEscalation"] is False
    assert sec["capabilities"] == {"drop": ["ALL"]}
    assert sec["runAsNonRoot"] is True and pod["securityContext"]["fsGroup"] == 1000
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "4Gi"}
    mount = next(m for m in container(d)["volumeMounts"] if m["name"] == "dshm")
    assert mount["mountPath"] == "/dev/shm"
    tol = pod["tolerations"][0]
    assert tol == {"key": c.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(("cached", "budget"), [(True, 15 * 60), (False, 45 * 60)])
def test_startup_budget_depends_on_cached_engine(cached: bool, budget: int) -> None:
    d = render_all(dep(), RenderOptions(engine_cached=cached)).one("Deployment")
    probe = container(d)["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == budget
    # Asked often: its period is latency between tritonserver ready and a Ready pod.
    assert probe["periodSeconds"] == 2
    assert probe["httpGet"]["path"] == "/v2/health/ready"
    assert container(d)["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"


def test_service_selects_serving_pods_and_names_ports() -> None:
    r = render_all(dep())
    svc, d = r.one("Service"), r.one("Deployment")
    labels = d["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in svc["spec"]["selector"].items())
    assert d["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {
        "http": 8000,
        "grpc": 8001,
        "metrics": 8002,
        "openai": 9000,
    }
    assert r.selector == ",".join(f"{k}={v}" for k, v in sorted(svc["spec"]["selector"].items()))


def test_rollout_never_drops_below_desired() -> None:
    strategy = render_all(dep()).one("Deployment")["spec"]["strategy"]
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_a_deleted_serving_pod_serves_on_until_the_endpoints_forget_it() -> None:
    d = render_all(dep()).one("Deployment")
    assert container(d)["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    # preStop sleep + tritonserver's drain (--exit-timeout-secs 30) fit the grace period.
    assert d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 5 + 30


def test_autoscaling_keeps_observed_replicas() -> None:
    d = dep({"autoscaling": {"maxReplicas": 5}})
    assert "replicas" not in render_all(d).one("Deployment")["spec"]
    live = render_all(d, RenderOptions(observed_replicas=3)).one("Deployment")
    assert live["spec"]["replicas"] == 3


def test_pvc_source_on_another_claim_is_mounted_read_only() -> None:
    r = render_all(dep({"model": {"source": "pvc://weights/llama-2-7b"}}))
    job = r.build_job
    vols = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert vols["model-source"]["persistentVolumeClaim"] == {
        "claimName": "weights",
        "readOnly": True,
    }
    assert r.build_plan["weightsDir"] == "/source/llama-2-7b"


def test_repository_configmap_holds_every_file_and_the_plans() -> None:
    r = render_all(dep())
    cm = next(o for o in r.by_kind("ConfigMap") if o["metadata"]["name"].endswith(r.repository_key))
    assert cm["immutable"] is True
    keys = set(cm["data"])
    assert {p.replace("/", "__") for p in r.repository} <= keys
    assert {"launch.json", "repository.json"} <= keys


def test_permanent_build_exit_codes_match_the_runtime() -> None:
    from tritonllm.render.jobs import PERMANENT_EXIT_CODES
    from tritonllm.runtime import report

    expected = {report.EXIT_INVALID, report.EXIT_NO_SPACE, report.EXIT_AUTH, report.EXIT_GPUS,
                report.EXIT_NO_CONVERTER, report.EXIT_MISMATCH, report.EXIT_VERSION,
                report.EXIT_NOT_FOUND}
    assert set(PERMANENT_EXIT_CODES) == expected
    rules = render_all(dep()).build_job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJob"


def test_multi_node_pods_mount_the_ssh_keys_outside_the_plan_mount() -> None:
    r = render_all(dep({"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}}))
    lws = r.one("LeaderWorkerSet")
    mounts = {m["mountPath"] for m in container(lws, template="leaderTemplate")["volumeMounts"]}
    assert "/etc/tritonllm-ssh" in mounts and c.PLAN_MOUNT in mounts
    assert r.launch_plan["ssh"]["keyDir"] == "/etc/tritonllm-ssh"


def test_separate_tokenizer_is_downloaded_to_its_own_dir() -> None:
    d = dep({"model": {"tokenizer": {"source": "hf://org/tok"}}})
    r = render_all(d)
    step = r.build_plan["steps"][1]
    # Under the tokenizer's name and revision, in the directory of its download key.
    dkey = naming.download_key(d, "hf://org/tok", "main")
    assert step == {"name": "download-tokenizer", "kind": "huggingface", "repo": "org/tok",
                    "revision": "main", "localDir": f"/store/models/hf/org/tok/main/{dkey}",
                    "tokenFile": None}


def test_network_policy_opens_the_serving_ports_to_the_namespace_and_named_sources() -> None:
    r = render_all(dep({"networkPolicy": {"fromNamespaces": ["gateway"],
                                          "fromCidrs": ["10.8.0.0/16"]}}))
    np = r.network_policy
    assert np is not None and np.name == r.service.name
    spec = np["spec"]
    labels = r.workload["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]  # one node: no traffic between serving pods is needed
    assert sorted(p["port"] for p in rule["ports"]) == [
        c.HTTP_PORT, c.GRPC_PORT, c.METRICS_PORT, c.OPENAI_PORT]
    assert rule["from"][0] == {"podSelector": {}}  # the deployment's own namespace
    values = rule["from"][1]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert values == ["gateway"]
    assert rule["from"][2] == {"ipBlock": {"cidr": "10.8.0.0/16"}}


def test_network_policy_multi_node_lets_only_the_deployments_pods_reach_sshd_and_mpi() -> None:
    r = render_all(dep({"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}}))
    serving, group = r.network_policy["spec"]["ingress"]
    assert "ports" not in group  # sshd and the ports MPI/NCCL choose at run time
    assert group["from"] == [{"podSelector": {
        "matchLabels": {c.LABEL_NAME: c.APP_NAME, c.LABEL_INSTANCE: "demo"},
        "matchExpressions": [{"key": c.LABEL_COMPONENT, "operator": "In",
                              "values": ["server", "worker", "verify"]}]}}]
    assert c.MPI_SSH_PORT not in [p["port"] for p in serving["ports"]]


def test_network_policy_can_be_turned_off() -> None:
    r = render_all(dep({"networkPolicy": {"enabled": False}}))
    assert r.network_policy is None
    assert "NetworkPolicy" not in [o.kind for o in r.objects]


def test_a_tokenizer_on_a_third_claim_is_mounted_not_read_from_the_models() -> None:
    r = render_all(dep({"model": {"source": "pvc://weights/llama",
                                  "tokenizer": {"source": "pvc://tokenizers/llama"}}}))
    pod = r.workload["spec"]["template"]["spec"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
              if "persistentVolumeClaim" in v}
    assert claims["model-source"] == "weights" and claims["tokenizer-source"] == "tokenizers"
    mounts = {m["name"]: m["mountPath"] for m in container(r.workload)["volumeMounts"]}
    assert mounts["tokenizer-source"] == "/source-tokenizer"
    assert any("/source-tokenizer/llama" in text for text in r.repository.values())
    job_pod = r.repository_job["spec"]["template"]["spec"]
    assert "tokenizers" in {v["persistentVolumeClaim"]["claimName"] for v in job_pod["volumes"]
                            if "persistentVolumeClaim" in v}


def _writable(job: dict, name: str) -> set[str]:
    """Where a Job's container may write on the store: the mounts of the store volume that are
    not read-only."""
    mounts = container(job, name)["volumeMounts"]
    store = [m for m in mounts if m["name"] == "model-store"]
    return {m["mountPath"] for m in store if not m.get("readOnly")}


def test_build_job_writes_only_its_engine_checkpoint_and_download() -> None:
    r = render_all(dep())
    key = r.engine_key
    mounts = container(r.build_job, "build")["volumeMounts"]
    assert {"name": "model-store", "mountPath": "/store", "readOnly": True} in mounts
    assert _writable(r.build_job, "build") == {
        f"/store/engines/{key}", f"/store/checkpoints/{key}", r.build_plan["weightsDir"]
    }
    for m in mounts:
        if m.get("subPath"):
            assert m["mountPath"] == f"/store/{m['subPath']}"
    env = {e["name"]: e.get("value") for e in container(r.build_job, "build")["env"]}
    assert env["HF_HOME"] == f"{c.SCRATCH_MOUNT}/huggingface"  # its own scratch, not the store's
    assert r.build_plan["engineDir"] == f"/store/engines/{key}"


@pytest.mark.parametrize(
    ("patch", "writable"),
    [
        ({"model": {"source": "pvc://tritonllm-model-store/models/m"}}, {"engines", "checkpoints"}),
        ({"model": {"source": "pvc://weights/m"}}, {"engines", "checkpoints"}),
        ({"model": {"tokenizer": {"source": "hf://org/tok"}}},
         {"engines", "checkpoints", "models/hf/meta-llama", "models/hf/org"}),
    ],
    ids=["store-claim", "other-claim", "hf-tokenizer"],
)
def test_build_job_writes_no_model_it_does_not_download(patch: dict, writable: set) -> None:
    r = render_all(dep(patch))
    got = {"/".join(p.split("/")[2:5]) if "/hf/" in p else p.split("/")[2]
           for p in _writable(r.build_job, "build")}
    assert got == writable


def test_repository_job_writes_only_the_directory_of_its_content_key() -> None:
    a = render_all(dep(metadata={"name": "a", "namespace": "team-1"}))
    b = render_all(dep(metadata={"name": "b", "namespace": "team-2"}))
    ka, kb = a.repository_key, b.repository_key
    wa, wb = _writable(a.repository_job, "repository"), _writable(b.repository_job, "repository")
    assert wa == {f"/store/repos/team-1/_shared/{ka}"}
    assert wb == {f"/store/repos/team-2/_shared/{kb}"}
    assert a.launch_plan["modelRepository"] == f"/store/repos/team-1/_shared/{ka}/repository"
    # A second deployment of the namespace with the same repository shares the Job and the
    # directory (the key is a content hash: the name is not in it); another serving setting
    # is another key, directory and Job.
    a2 = render_all(dep(metadata={"name": "a2", "namespace": "team-1"}))
    assert (a2.repository_key, a2.repository_job.name) == (ka, a.repository_job.name)
    assert a2.repository_configmap.name != a.repository_configmap.name  # its pods' own plan
    changed = render_all(dep({"serving": {"maxQueueDelayMicroseconds": 100}},
                             metadata={"name": "a2", "namespace": "team-1"}))
    assert changed.repository_key != ka and changed.repository_job.name != a.repository_job.name
    assert not wa & _writable(changed.repository_job, "repository")
    # Nothing one deployment's Jobs may write is another's: different engines, repositories.
    b_meta = {"name": "b", "namespace": "team-2"}
    other = render_all(dep({"engine": {"dtype": "bfloat16"}}, metadata=b_meta))
    assert not _writable(a.build_job, "build") - {a.build_plan["weightsDir"]} & _writable(
        other.build_job, "build"
    )
    assert not wa & _writable(other.repository_job, "repository")


def test_serving_pods_mount_the_store_read_only() -> None:
    r = render_all(dep())
    mounts = container(r.one("Deployment"))["volumeMounts"]
    store = [m for m in mounts if m["name"] == "model-store"]
    assert store == [{"name": "model-store", "mountPath": "/store", "readOnly": True}]


def test_leader_logs_in_with_mpiruns_own_ssh_command() -> None:
    r = render_all(dep({"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}}))
    argv = r.launch_plan["argv"]
    assert r.launch_plan["ssh"]["agent"] == argv[argv.index("plm_rsh_agent") + 1]
