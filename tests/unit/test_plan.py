"""The planner, step by step, on hand-made observations (the cluster tier runs it for real)."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from tests.cases import cr
from tritonllm.api import constants as c
from tritonllm.api.deployment import InvalidDeployment, parse_deployment
from tritonllm.handlers.cache import project_workload
from tritonllm.handlers.execute import RECORDED_AS
from tritonllm.plan.conditions import Cond, merge_conditions
from tritonllm.plan.gc import optional_refs
from tritonllm.plan.observed import job_has_pod, serving_failure
from tritonllm.plan.ownership import controlled_by
from tritonllm.plan.reconcile import (
    FINALIZER,
    MAX_BUILD_ATTEMPTS,
    Decision,
    Observed,
    backoff_seconds,
    plan,
    plan_deletion,
    plan_invalid,
    unschedulable_message,
)
from tritonllm.render import ObjectRef, RenderOptions, naming, render_all

T0 = dt.datetime(2026, 11, 22, 9, 0, tzinfo=dt.UTC)
UID = "uid-1"


class World:
    """Live objects as the API server would hold them after our writes (a pure stand-in)."""

    def __init__(self, spec_patch: dict[str, Any] | None = None, **obs: Any) -> None:
        default = {"storage": {"create": {"size": "10Gi"}}}
        self.body = cr(default if spec_patch is None else spec_patch)
        self.body["metadata"].update(uid=UID, generation=1)
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.engine_status: dict[str, Any] | None = None
        self.now = T0
        self.obs = obs

    def dep(self):
        return parse_deployment(self.body)

    def observe(self, r) -> Observed:
        get = lambda kind, name: self.objects.get((kind, name))  # noqa: E731
        engine = get(c.ENGINE_KIND, r.engine_key)
        if engine is not None and self.engine_status is not None:
            engine = {**engine, "status": self.engine_status}
        # as tritonllm.handlers.observe reads them: what is rendered, and what should go
        wanted = [o.ref for o in r.objects] + optional_refs(self.dep())
        if r.verify_workload is not None:
            wanted.append(r.verify_workload.ref)
        refs = {(ref.kind, ref.name): ref for ref in wanted}
        live = {
            refs[k]: v
            for k, v in self.objects.items()
            if k[0] not in ("Job", "PersistentVolumeClaim", c.ENGINE_KIND) and k in refs
        }
        name = self.body["metadata"]["name"]
        # as the watch cache holds them (tritonllm.handlers.cache.project_workload)
        workload, verify = (
            (get("Deployment", n) or get("LeaderWorkerSet", n)) for n in (name, f"{name}-verify"))
        workload, verify = (None if w is None else project_workload(w) for w in (workload, verify))
        revisions = sorted(
            {
                o["metadata"]["labels"].get(c.LABEL_REPO_KEY)
                for (k, _), o in self.objects.items()
                if k == "ConfigMap" and o["metadata"]["labels"].get(c.LABEL_REPO_KEY)
            }
        )
        return Observed(
            now=self.now,
            store=get("PersistentVolumeClaim", "tritonllm-model-store"),
            engine=engine,
            build_job=get("Job", r.build_job.name),  # build, download or quantize Job
            build_pods=self.obs.get("build_pods", []),
            build_stall=self.obs.get("build_stall"),
            repo_stall=self.obs.get("repo_stall"),
            repo_job=get("Job", naming.repository_job_name(self.dep(), r.repository_key)),
            repo_job_shared_uid=self.obs.get("repo_job_shared_uid"),
            repo_job_orphaned=self.obs.get("repo_job_orphaned", False),
            repo_pod_exists=job_has_pod(
                get("Job", naming.repository_job_name(self.dep(), r.repository_key))),
            workload=workload,
            live=live,
            repo_revisions=revisions,
            secret_present=self.obs.get("secret_present"),
            gpu_nodes=self.obs.get("gpu_nodes"),
            gpu_capacity=self.obs.get("gpu_capacity"),
            keda_served=self.obs.get("keda_served", True),
            mpi_secret_present=self.obs.get("mpi_secret_present"),
            unschedulable=self.obs.get("unschedulable"),
            pods_refused=self.obs.get("pods_refused"),
            serving_failure=self.obs.get("serving_failure"),
            verify_workload=verify,
            verify_failure=self.obs.get("verify_failure"),
            smoke=self.obs.get("smoke"),
        )

    def step(self, opts: RenderOptions | None = None) -> Decision:
        dep = self.dep()
        r = render_all(
            dep.model_copy(update={"metadata": dep.metadata.model_copy(update={"uid": UID})}),
            opts,
        )
        p = plan(self.body, dep, r, self.observe(r))
        for obj in p.apply:
            self.objects[(obj.kind, obj.name)] = copy.deepcopy(obj.body)
        for obj in p.create:  # created with a fresh uid, which the engine record keeps
            body = copy.deepcopy(obj.body)
            body["metadata"]["uid"] = uid = f"created-{obj.kind}-{len(self.objects)}"
            self.objects[(obj.kind, obj.name)] = body
            assert p.engine_status is not None
            p.engine_status[RECORDED_AS[obj.kind]] = uid
        for obj in p.create_shared:  # POST: a name that exists is left as it is
            self.objects.setdefault((obj.kind, obj.name), copy.deepcopy(obj.body))
        for ref in p.delete:
            self.objects.pop((ref.kind, ref.name), None)
        for ref in p.delete_own:  # only what this deployment controls
            live = self.objects.get((ref.kind, ref.name))
            if live is not None and controlled_by(live, UID):
                self.objects.pop((ref.kind, ref.name))
        if p.scale:
            workload, replicas = p.scale
            wl = self.objects[(workload.kind, self.body["metadata"]["name"])]
            wl["spec"]["replicas"] = replicas
        if p.engine_status is not None:
            self.engine_status = p.engine_status
        if p.status is not None:
            self.body["status"] = p.status
        self.render = r
        return p

    def finish_job(self, name: str, ok: bool = True, uid: str = "job-uid") -> None:
        job = self.objects[("Job", name)]
        if self.engine_status and self.engine_status.get("buildJobUid") == job["metadata"].get(
                "uid"):
            self.engine_status["buildJobUid"] = uid  # the uid it was created with, in the test
        job["metadata"]["uid"] = uid
        job["status"] = {
            "conditions": [
                {
                    "type": "Complete" if ok else "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                }
            ]
        }

    def make_ready(self, replicas: int = 1) -> None:
        wl = self.objects[("Deployment", self.body["metadata"]["name"])]
        wl["metadata"]["generation"] = 1
        wl["status"] = {
            "observedGeneration": 1,
            "readyReplicas": replicas,
            "updatedReplicas": replicas,
            "replicas": replicas,
        }

    def cond(self, type_: str) -> dict[str, Any]:
        return next(x for x in self.body["status"]["conditions"] if x["type"] == type_)

    def through_jobs(self) -> None:
        """Build and repository Jobs done, the workload applied (not ready yet)."""
        self.step()
        self.finish_job(self.render.build_job["metadata"]["name"])
        self.step()
        self.finish_job(self.render.repository_job["metadata"]["name"], uid="repo")
        self.step()

    def bring_up(self) -> None:
        self.through_jobs()
        self.make_ready()
        self.step()


def kinds(p: Decision) -> list[str]:
    """What the pass writes: applied, then created as the content key's shared objects."""
    return [o["kind"] for o in (*p.apply, *p.create_shared)]


def test_fresh_object_creates_store_engine_record_and_build() -> None:
    w = World()
    p = w.step()
    assert kinds(p) == ["PersistentVolumeClaim", c.ENGINE_KIND, "Service", "NetworkPolicy"]
    # the build objects are created (never applied over a name someone took), their uids recorded
    assert [o.kind for o in p.create] == ["ConfigMap", "Job"]
    assert w.engine_status["buildJobUid"] and w.engine_status["buildPlanUid"]
    assert w.engine_status["state"] == "Building"
    assert w.cond(c.COND_ENGINE_READY)["reason"] == "Building"
    assert w.cond(c.COND_PROGRESSING)["status"] == "True"
    assert w.body["status"]["reason"] == "Building"
    assert p.requeue_after


def test_build_then_repository_then_serving_then_ready() -> None:
    w = World()
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"])
    p = w.step()
    assert p.build_result == "succeeded"
    assert w.engine_status["state"] == "Ready"
    assert ("Job", w.render.repository_job["metadata"]["name"]) in w.objects
    assert w.cond(c.COND_ENGINE_READY)["reason"] == "EngineBuilt"
    w.finish_job(w.render.repository_job["metadata"]["name"], uid="repo")
    p = w.step()
    assert "Deployment" in kinds(p)
    assert w.cond(c.COND_REPOSITORY_READY)["status"] == "True"
    assert w.body["status"]["reason"] == "RollingOut"
    w.make_ready()
    p = w.step()
    assert w.cond(c.COND_AVAILABLE)["status"] == "True"
    assert w.cond(c.COND_PROGRESSING)["status"] == "False"
    assert w.body["status"]["ready"] == "1/1" and w.body["status"]["reason"] == "Ready"
    # One Event for the pass: Progressing's step leads, Available's words follow
    ((kind, reason, message),) = p.events
    assert (kind, reason) == ("Normal", "Deployed") and "Serving: " in message


def test_the_first_workload_starts_once_the_repository_pod_exists() -> None:
    """Nothing serves yet: the serving pods start while the repository Job writes (they wait
    for the directory it renames into place), not after; a change of a running deployment still
    waits for the Job to complete."""
    w = World()
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"])
    p = w.step()  # the repository Job is created; its pod does not exist yet
    assert "Job" in kinds(p) and "Deployment" not in kinds(p)
    repo_job = w.objects[("Job", w.render.repository_job["metadata"]["name"])]
    repo_job["status"] = {"active": 1}  # its pod exists (pending or running)
    p = w.step()
    assert "Deployment" in kinds(p)
    assert w.cond(c.COND_REPOSITORY_READY)["status"] == "False"
    assert w.cond(c.COND_PROGRESSING)["reason"] == "WritingRepository"
    w.make_ready()  # ready before the Job is complete (kwok): not Deployed yet
    w.step()
    assert w.cond(c.COND_READY)["status"] == "False"
    w.finish_job(repo_job["metadata"]["name"], uid="repo")
    w.step()
    assert w.cond(c.COND_READY)["status"] == "True"
    # a change: the new repository Job's pod exists, the workload stays as it is
    old = w.objects[("Deployment", w.body["metadata"]["name"])]["spec"]["template"]
    w.body["spec"]["serving"] = {"maxQueueDelayMicroseconds": 500}
    w.body["metadata"]["generation"] = 2
    first_key = w.render.repository_key
    w.step()
    assert w.render.repository_key != first_key  # a new revision, a new repository Job
    job = w.objects[("Job", w.render.repository_job["metadata"]["name"])]
    job["status"] = {"active": 1}
    p = w.step()
    assert "Deployment" not in kinds(p)
    assert w.objects[("Deployment", w.body["metadata"]["name"])]["spec"]["template"] == old


def test_ready_sums_up_the_rollout_and_posts_no_event_of_its_own() -> None:
    w = World()
    p = w.step()
    assert (w.cond(c.COND_READY)["status"], w.cond(c.COND_READY)["reason"]) == ("False", "Building")
    w.finish_job(w.render.build_job["metadata"]["name"])
    w.step()
    w.finish_job(w.render.repository_job["metadata"]["name"], uid="repo")
    w.step()
    assert w.cond(c.COND_READY)["reason"] == "RollingOut"
    w.make_ready()
    p = w.step()
    ready = w.cond(c.COND_READY)
    assert (ready["status"], ready["reason"]) == ("True", "Deployed")
    assert ready["message"] == w.cond(c.COND_PROGRESSING)["message"]
    assert "Deployed" in [r for _, r, _ in p.events]  # from Progressing, once
    assert [r for _, r, _ in p.events].count("Deployed") == 1
    assert [x["type"] for x in w.body["status"]["conditions"]][-1] == c.COND_READY


def test_ready_is_false_with_the_reason_of_degraded() -> None:
    w = World()
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"], ok=False)
    w.step()
    degraded, ready = w.cond(c.COND_DEGRADED), w.cond(c.COND_READY)
    assert (degraded["status"], degraded["reason"]) == ("True", "BuildFailed")
    assert (ready["status"], ready["reason"]) == ("False", "BuildFailed")
    assert ready["message"] == degraded["message"]


def test_steady_state_writes_nothing() -> None:
    w = World()
    w.bring_up()
    p = w.step()
    assert (p.apply, p.delete, p.scale, p.status, p.engine_status, p.events) == (
        [],
        [],
        None,
        None,
        None,
        [],
    )


def test_last_transition_time_changes_only_on_flip() -> None:
    old = [
        {
            "type": "Available",
            "status": "True",
            "reason": "Serving",
            "message": "1 of 1",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    merged, flips = merge_conditions(
        old,
        [Cond("Available", "True", "Serving", "2 of 2")],
        generation=2,
        now="2026-11-22T00:00:00Z",
    )
    assert merged[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z" and not flips
    merged, flips = merge_conditions(
        old,
        [Cond("Available", "False", "NoReadyReplicas")],
        generation=2,
        now="2026-11-22T00:00:00Z",
    )
    assert merged[0]["lastTransitionTime"] == "2026-11-22T00:00:00Z" and len(flips) == 1


def test_failed_build_reports_log_tail_and_retries_with_backoff() -> None:
    pod = {
        "metadata": {"creationTimestamp": "2026-11-22T09:00:00Z"},
        "status": {
            "containerStatuses": [
                {
                    "name": "build",
                    "state": {
                        "terminated": {
                            "exitCode": 3,
                            "reason": "Error",
                            "message": "trtllm-build: CUDA out of memory",
                        }
                    },
                }
            ]
        },
    }
    w = World(build_pods=[pod])
    w.step()
    job = w.render.build_job["metadata"]["name"]
    w.finish_job(job, ok=False, uid="j1")
    p = w.step()
    assert p.build_result == "failed"
    assert w.engine_status["attempts"] == 1
    degraded = w.cond(c.COND_DEGRADED)
    assert degraded["status"] == "True" and degraded["reason"] == "BuildFailed"
    assert "CUDA out of memory" in degraded["message"]
    assert ("Warning", "BuildFailed") in [(t, r) for t, r, _ in p.events]
    assert ObjectRef("batch/v1", "Job", "default", job) not in p.delete  # still backing off
    # the same failed Job is counted once
    p = w.step()
    assert w.engine_status["attempts"] == 1 and p.build_result is None
    w.now = T0 + dt.timedelta(seconds=backoff_seconds(1) + 1)
    p = w.step()
    assert ObjectRef("batch/v1", "Job", "default", job) in p.delete
    p = w.step()
    assert ("Job", job) in [(o.kind, o.name) for o in p.create]


def test_build_gives_up_after_the_attempt_limit() -> None:
    w = World()
    w.step()
    job = w.render.build_job["metadata"]["name"]
    for attempt in range(1, MAX_BUILD_ATTEMPTS + 1):
        w.finish_job(job, ok=False, uid=f"j{attempt}")
        w.step()
        w.now += dt.timedelta(seconds=backoff_seconds(attempt) + 1)
        w.step()
        if attempt < MAX_BUILD_ATTEMPTS:
            w.step()  # recreate
    assert w.engine_status["attempts"] == MAX_BUILD_ATTEMPTS
    assert w.cond(c.COND_PROGRESSING)["status"] == "False"
    assert ("Job", job) in w.objects  # no more retries: the failed Job stays for inspection


def test_missing_secret_blocks_without_building() -> None:
    w = World(
        {
            "model": {"credentials": {"secretName": "hf-token"}},
            "storage": {"create": {"size": "1Gi"}},
        },
        secret_present=False,
    )
    p = w.step()
    assert "Job" not in kinds(p) and c.ENGINE_KIND not in kinds(p)
    d = w.cond(c.COND_DEGRADED)
    assert d["reason"] == "SecretMissing" and "hf-token" in d["message"]
    assert p.requeue_after == 60


def test_missing_store_names_the_field() -> None:
    w = World({})
    w.step()
    d = w.cond(c.COND_DEGRADED)
    assert d["reason"] == "StoreMissing" and "spec.storage" in d["message"]


def test_no_node_with_the_gpu_product() -> None:
    w = World(
        {"gpu": {"product": "NVIDIA-B200"}, "storage": {"create": {"size": "1Gi"}}}, gpu_nodes=0
    )
    w.step()
    assert w.cond(c.COND_DEGRADED)["reason"] == "NoMatchingNodes"


def test_cached_engine_skips_the_build() -> None:
    w = World()
    w.step()
    w.engine_status = {"state": "Ready", "attempts": 0, "builtFor": "someone-else"}
    w.objects.pop(("Job", w.render.build_job["metadata"]["name"]))
    p = w.step()
    assert "Job" in kinds(p)  # the repository Job only
    assert all(not o["metadata"]["name"].startswith("tritonllm-build") for o in p.apply)
    assert w.cond(c.COND_ENGINE_READY)["reason"] == "EngineCached"
    assert w.body["status"]["engine"]["cached"] is True


def test_engine_change_keeps_old_engine_serving_until_the_new_one_is_ready() -> None:
    w = World()
    w.bring_up()
    old_key = w.render.engine_key
    w.body["spec"]["engine"] = {"parallelism": {"tensor": 2}}
    w.body["metadata"]["generation"] = 2
    p = w.step()
    assert "Deployment" not in kinds(p)
    assert w.cond(c.COND_AVAILABLE)["status"] == "True"  # old pods still serve
    assert w.render.engine_key != old_key
    w.finish_job(w.render.build_job["metadata"]["name"], uid="b2")
    w.step()
    w.finish_job(w.render.repository_job["metadata"]["name"], uid="r2")
    p = w.step()
    assert "Deployment" in kinds(p)
    assert w.body["status"]["previousEngine"]["key"] == old_key


def test_replicas_change_during_a_build_scales_the_running_workload() -> None:
    w = World()
    w.bring_up()
    w.body["spec"]["engine"] = {"dtype": "bfloat16"}
    w.body["spec"]["serving"] = {"replicas": 3}
    p = w.step()
    assert p.scale == (ObjectRef("apps/v1", "Deployment", "default", "demo"), 3)


def test_autoscaled_replicas_are_never_touched() -> None:
    w = World({"autoscaling": {"maxReplicas": 4}, "storage": {"create": {"size": "1Gi"}}})
    w.bring_up()
    w.objects[("Deployment", "demo")]["spec"]["replicas"] = 4  # the HPA scaled up
    p = w.step()
    assert p.scale is None and "Deployment" not in kinds(p)


def test_serving_only_change_rolls_without_rebuilding() -> None:
    w = World()
    w.bring_up()
    key = w.render.engine_key
    w.body["spec"]["serving"] = {"maxQueueDelayMicroseconds": 100}
    p = w.step()
    assert w.render.engine_key == key
    assert not any(o["metadata"]["name"].startswith("tritonllm-build") for o in p.apply)
    assert "Job" in kinds(p)  # a new repository revision


def test_invalid_spec_is_degraded_and_touches_nothing() -> None:
    body = cr({"engine": {"parallelism": {"tensor": 0}}})
    body["metadata"]["generation"] = 3
    try:
        parse_deployment(body)
    except InvalidDeployment as exc:
        p = plan_invalid(body, exc, Observed(now=T0))
    assert not p.apply and not p.delete
    degraded = next(x for x in p.status["conditions"] if x["type"] == c.COND_DEGRADED)
    assert degraded["reason"] == "InvalidSpec"
    assert "spec.engine.parallelism.tensor" in degraded["message"]
    assert degraded["observedGeneration"] == 3


def test_multi_node_creates_the_mpi_secret_on_the_first_pass() -> None:
    """Its name is computable: waiting for the engine would leave it free for someone else."""
    w = World({"engine": {"parallelism": {"tensor": 8, "pipeline": 2}},
               "storage": {"create": {"size": "1Gi"}}}, mpi_secret_present=False)
    p = w.step()
    assert p.create_mpi_secret and "LeaderWorkerSet" not in kinds(p)
    w.obs["mpi_secret_present"] = True
    w.finish_job(w.render.build_job["metadata"]["name"])
    w.step()
    w.finish_job(w.render.repository_job["metadata"]["name"], uid="repo")
    p = w.step()
    assert not p.create_mpi_secret and "LeaderWorkerSet" in kinds(p)
    # blocked by a missing prerequisite: the Secret is still created first
    w = World({"engine": {"parallelism": {"tensor": 8, "pipeline": 2}}},
              mpi_secret_present=False)
    p = w.step()
    assert w.cond(c.COND_DEGRADED)["reason"] == "StoreMissing" and p.create_mpi_secret


def test_only_retention_delete_gets_a_finalizer() -> None:
    w = World()
    p = w.step()
    assert p.finalizers is None  # Retain: no finalizer, nothing can block deletion
    w = World({"storage": {"create": {"size": "1Gi"}, "engineRetention": "Delete"}})
    p = w.step()
    assert p.finalizers == [FINALIZER]
    w.body["metadata"]["finalizers"] = p.finalizers
    assert w.step().finalizers is None
    w.body["spec"]["storage"]["engineRetention"] = "Retain"
    assert w.step().finalizers == []


def test_deletion_forgets_unused_engines_and_always_releases_the_finalizer() -> None:
    body = {"metadata": {"name": "a", "finalizers": ["other/keep", FINALIZER]}}
    assert plan_deletion(body, ["a"]) == (True, ["other/keep"])
    assert plan_deletion(body, ["a", "b"]) == (False, ["other/keep"])


def test_unschedulable_serving_pod_is_named_in_progressing() -> None:
    pods = [{"metadata": {"name": "demo-abc", "labels": {c.LABEL_COMPONENT: "server"}},
             "status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                        "reason": "Unschedulable",
                                        "message": "0/4 nodes: Insufficient nvidia.com/gpu"}]}}]
    assert "Insufficient nvidia.com/gpu" in unschedulable_message(pods)
    w = World(unschedulable=unschedulable_message(pods))
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"])
    w.step()
    w.finish_job(w.render.repository_job["metadata"]["name"], uid="repo")
    w.step()
    w.step()
    prog = w.cond(c.COND_PROGRESSING)
    assert prog["reason"] == "Unschedulable" and "nvidia.com/gpu" in prog["message"]


@pytest.mark.parametrize("refused,reason", [
    ('pods "demo-x" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1',
     "QuotaExceeded"),
    ('pods "demo-x" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true',
     "AdmissionRefused"),
    ('pods "demo-x" is forbidden: maximum memory usage per Container is 1Gi, but limit is 8Gi',
     "LimitRangeExceeded"),
])
def test_serving_pods_the_cluster_refuses_are_degraded(refused: str, reason: str) -> None:
    w = World(pods_refused=refused)
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"])
    w.step()
    w.finish_job(w.render.repository_job["metadata"]["name"], uid="repo")
    w.step()
    w.step()
    degraded = w.cond(c.COND_DEGRADED)
    assert degraded["status"] == "True" and degraded["reason"] == reason
    assert refused in degraded["message"]


def _failed_leader(exit_code: int = 17, state: str = "lastState") -> dict[str, Any]:
    message = ("[timeout] no SSH login to the workers after 20s: "
               "demo-0-1.demo-0.ns:2222 (no SSH banner)")
    term = {"terminated": {"exitCode": exit_code, "reason": "Error", "message": message}}
    return {"metadata": {"name": "demo-0", "namespace": "ns", "uid": "u1",
                         "labels": {c.LABEL_COMPONENT: "server", c.LABEL_INSTANCE: "demo"}},
            "status": {"containerStatuses": [{"name": "triton", "restartCount": 1,
                                              "state": {"running": {}}, state: term}]}}


def test_a_failed_serving_container_is_named_with_its_termination_message() -> None:
    failure = serving_failure(_failed_leader())
    assert failure is not None
    assert failure.startswith("pod demo-0: container triton exited with code 17 (Error)")
    assert "demo-0-1.demo-0.ns:2222" in failure
    # A rank drained on SIGTERM exits 0; a Job's pod is not a serving pod.
    assert serving_failure(_failed_leader(exit_code=0)) is None
    job_pod = _failed_leader()
    job_pod["metadata"]["labels"][c.LABEL_COMPONENT] = "build"
    assert serving_failure(job_pod) is None


def _deleted_leader(finished: str, *, restarts: int = 0) -> dict[str, Any]:
    """A leader whose current run ended (`finished`) and that is deleted: asked at 12:00:00,
    with a 30 s grace period."""
    pod = _failed_leader(state="state")
    cs = pod["status"]["containerStatuses"][0]
    cs["restartCount"], cs["lastState"] = restarts, {}
    cs["state"]["terminated"]["finishedAt"] = finished
    pod["metadata"].update(deletionTimestamp="2026-11-27T12:00:30Z",
                           deletionGracePeriodSeconds=30)
    return pod


def test_a_run_that_failed_before_its_pod_was_deleted_still_counts() -> None:
    """LeaderWorkerSet deletes a failed group at once: the leader's last state may show its
    error exit only with the deletion already under way. A run that ended after the deletion
    was asked was stopped, whatever its code."""
    failed = serving_failure(_deleted_leader("2026-11-27T11:59:58Z"))
    assert failed is not None and "exited with code 17" in failed
    assert serving_failure(_deleted_leader("2026-11-27T12:00:05Z")) is None  # stopped
    assert serving_failure(_deleted_leader("2026-11-27T12:00:00Z")) is None  # the same second
    unfinished = _deleted_leader("")
    assert serving_failure(unfinished) is None
    unreadable = _deleted_leader("2026-11-27T11:59:58Z")
    unreadable["metadata"]["deletionTimestamp"] = "soon"
    assert serving_failure(unreadable) is None  # as stopped: nothing is known to end before
    # the run before its last restart counts, whenever it ended
    restarted = _deleted_leader("2026-11-27T12:00:05Z", restarts=1)
    restarted["status"]["containerStatuses"][0]["lastState"] = _failed_leader()["status"][
        "containerStatuses"][0]["lastState"]
    assert serving_failure(restarted) is not None


def test_a_failed_serving_container_degrades_the_rollout_until_it_is_ready() -> None:
    w = World(serving_failure=serving_failure(_failed_leader()))
    w.through_jobs()
    w.step()
    degraded, progressing = w.cond(c.COND_DEGRADED), w.cond(c.COND_PROGRESSING)
    assert (degraded["status"], degraded["reason"]) == ("True", "ServingPodFailed")
    assert "demo-0-1.demo-0.ns:2222" in degraded["message"]
    assert progressing["reason"] == "ServingPodFailed"
