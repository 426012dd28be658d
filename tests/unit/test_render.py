"""Object rendering: identities, keys, security, probes, apply order and cross-object wiring."""

from __future__ import annotations

import pytest

from tests.cases import cr
from tests.helpers import container
from tritonllm.api import constants as c
from tritonllm.api.deployment import parse_deployment
from tritonllm.render import RenderOptions, render_all
from tritonllm.render.naming import engine_key

APPLY_ORDER = [
    "PersistentVolumeClaim",
    "ConfigMap",
    "Job",
    "ConfigMap",
    "Job",
    "Service",
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
    assert a != engine_key(dep({"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}))
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
    from tritonllm.runtime import common

    expected = {common.EXIT_INVALID, common.EXIT_NO_SPACE, common.EXIT_AUTH, common.EXIT_GPUS,
                common.EXIT_NO_CONVERTER, common.EXIT_MISMATCH, common.EXIT_VERSION,
                common.EXIT_NOT_FOUND}
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
    r = render_all(dep({"model": {"tokenizer": {"source": "hf://org/tok"}}}))
    step = r.build_plan["steps"][1]
    assert step == {"name": "download-tokenizer", "kind": "huggingface", "repo": "org/tok",
                    "revision": "main", "localDir": "/store/models/hf/org/tok/main",
                    "tokenFile": None}
