"""A build or repository Job whose pod does not start: the status names what holds it and the fix.

Pure (tritonllm.plan.stalls, the planner through tests.unit.test_plan.World) and the bounded
reads that feed it (tritonllm.handlers.observe.PodChecks.job_stall, against the fake API server).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from tests.fake_kube import FakeKube
from tests.unit.test_plan import World
from tritonllm.api import constants as c
from tritonllm.api import reasons as r
from tritonllm.handlers.observe import PodChecks
from tritonllm.plan.stalls import Stall, job_stall
from tritonllm.plan.status import STALL_REQUEUE_SECONDS

UNBOUND = ("0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. "
           "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")
NO_PRODUCT = ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
              "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")
NO_GPUS = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
TAINT = "0/1 nodes are available: 1 node(s) had untolerated taint {team: a}."
QUOTA = ('Error creating: pods "tritonllm-build-x-abcde" is forbidden: exceeded quota: gpus, '
         'requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=0, limited: '
         'requests.nvidia.com/gpu=0')
# The LimitRanger admission plugin's words (a maximum, a minimum, a ratio).
LIMIT_MAX = ('Error creating: pods "tritonllm-build-x-abcde" is forbidden: maximum memory usage '
             'per Container is 1Gi, but limit is 4Gi')
LIMIT_MIN = ('Error creating: pods "tritonllm-repo-x-abcde" is forbidden: minimum cpu usage per '
             'Pod is 200m, but request is 100m')
LIMIT_RATIO = ('Error creating: pods "tritonllm-build-x-abcde" is forbidden: memory max limit to '
               'request ratio per Container is 2, but provided ratio is 4.000000')
POD_SECURITY = ('Error creating: pods "tritonllm-build-x-abcde" is forbidden: violates '
                'PodSecurity "restricted:latest": runAsNonRoot != true')


def pod(name: str = "tritonllm-build-x-abcde", *, scheduler: str | None = None,
        waiting: tuple[str, str, str] | None = None, phase: str = "Pending",
        created: str = "2026-11-22T09:00:00Z") -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if scheduler is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable", "message": scheduler}]
    if waiting is not None:
        container, reason, message = waiting
        key = "initContainerStatuses" if container == "tools" else "containerStatuses"
        status[key] = [{"name": container,
                        "state": {"waiting": {"reason": reason, "message": message}}}]
    return {"kind": "Pod", "metadata": {"name": name, "creationTimestamp": created},
            "status": status}


def event(message: str, reason: str = "FailedCreate") -> dict[str, Any]:
    return {"reason": reason, "message": message, "lastTimestamp": "2026-11-22T09:00:05Z"}


# --- what holds a pod -----------------------------------------------------------------------


@pytest.mark.parametrize("pods,events,reason,said", [
    ([pod(scheduler=UNBOUND)], [], r.UNSCHEDULABLE, "unbound immediate PersistentVolumeClaims"),
    ([pod(scheduler=NO_PRODUCT)], [], r.UNSCHEDULABLE, "node affinity/selector"),
    ([pod(waiting=("tools", "ImagePullBackOff", 'Back-off pulling image "registry.invalid/t"'))],
     [], r.IMAGE_PULL_FAILED, "container tools: ImagePullBackOff: Back-off pulling image"),
    ([pod(waiting=("build", "ErrImagePull", "not found"))], [], r.IMAGE_PULL_FAILED,
     "container build: ErrImagePull"),
    ([pod(waiting=("build", "InvalidImageName", "couldn't parse image name"))], [],
     r.IMAGE_PULL_FAILED, "InvalidImageName"),
    ([pod(waiting=("build", "CreateContainerConfigError", 'secret "hf" not found'))], [],
     r.POD_NOT_STARTING, 'secret "hf" not found'),
    ([], [event(QUOTA)], r.QUOTA_EXCEEDED, "exceeded quota: gpus"),
    ([], [event(LIMIT_MAX)], r.LIMIT_RANGE_EXCEEDED, "maximum memory usage per Container"),
    ([], [event(LIMIT_MIN)], r.LIMIT_RANGE_EXCEEDED, "minimum cpu usage per Pod"),
    ([], [event(LIMIT_RATIO)], r.LIMIT_RANGE_EXCEEDED, "limit to request ratio"),
    ([], [event(POD_SECURITY)], r.ADMISSION_REFUSED, "violates PodSecurity"),
])
def test_each_reason_a_job_pod_does_not_start(
    pods: list[dict[str, Any]], events: list[dict[str, Any]], reason: str, said: str
) -> None:
    stall = job_stall(pods, events)
    assert stall is not None and stall.reason == reason and said in stall.said, stall


def test_a_pod_on_its_way_is_no_stall() -> None:
    assert job_stall([pod()]) is None  # created, not yet placed: the scheduler has not spoken
    assert job_stall([pod(waiting=("build", "ContainerCreating", ""))]) is None  # pulling
    assert job_stall([]) is None  # the Job controller has not created it yet
    assert job_stall([], [event("Created pod: x", reason="SuccessfulCreate")]) is None
    # An older pod that failed does not speak for the newest one.
    old = pod("old", scheduler=UNBOUND, phase="Failed", created="2026-11-22T08:00:00Z")
    assert job_stall([old, pod("new")]) is None


def test_the_newest_pod_speaks_and_long_messages_are_cut() -> None:
    older = pod("a", scheduler=NO_GPUS, created="2026-11-22T08:00:00Z")
    newer = pod("b", scheduler=UNBOUND + " x" * 1000, created="2026-11-22T09:00:00Z")
    stall = job_stall([older, newer])
    assert stall is not None and stall.said.startswith("pod b: ") and stall.pod == "b"
    assert len(stall.said) <= 600 and stall.said.endswith("...")


# --- the planner: EngineReady, Progressing, Degraded, the Event, the fix ----------------------


def building(stall: Stall | None, spec: dict[str, Any] | None = None) -> tuple[World, Any]:
    """A deployment whose build Job was created; the next pass sees `stall`."""
    w = World({"storage": {"create": {"size": "10Gi"}}, **(spec or {})})
    w.step()  # creates the engine record and the build Job
    w.obs["build_stall"] = stall
    return w, w.step()


def test_build_pod_on_an_unbound_claim_names_the_claim_and_the_fix() -> None:
    w, p = building(job_stall([pod(scheduler=UNBOUND)]))
    job = w.render.build_job["metadata"]["name"]
    engine = w.cond(c.COND_ENGINE_READY)
    assert (engine["status"], engine["reason"]) == ("False", "Unschedulable")
    assert engine["message"].startswith(f"Job {job} cannot start its build pod: pod ")
    assert "unbound immediate PersistentVolumeClaims" in engine["message"]
    assert "claim tritonllm-model-store (spec.storage.claimName) is not bound" in engine["message"]
    assert "kubectl describe pvc tritonllm-model-store -n default" in engine["message"]
    # Progressing and the `kubectl get tllm` column say the same; nothing is Degraded (a claim
    # may still bind, e.g. once a provisioner runs).
    assert w.cond(c.COND_PROGRESSING)["reason"] == "Unschedulable"
    assert w.cond(c.COND_READY)["reason"] == "Unschedulable"
    assert w.body["status"]["reason"] == "Unschedulable"
    assert w.cond(c.COND_DEGRADED)["status"] == "False"
    # One Warning Event with the same words, though EngineReady stays False (no flip)...
    assert p.events == [("Warning", "Unschedulable", engine["message"])]
    # ...and looked at again soon: pods are not watched.
    assert p.requeue_after == STALL_REQUEUE_SECONDS
    # The next pass with the same stall posts nothing again and writes nothing.
    again = w.step()
    assert again.events == [] and again.status is None


def test_build_pod_with_no_node_of_the_gpu_product_names_the_product() -> None:
    product = "NVIDIA-H200"
    w, _ = building(job_stall([pod(scheduler=NO_PRODUCT)]), {"gpu": {"product": product}})
    message = w.cond(c.COND_ENGINE_READY)["message"]
    assert f"no node matches {c.GPU_PRODUCT_LABEL}={product} (spec.gpu.product) and " \
           "spec.podTemplate.nodeSelector" in message
    assert f"kubectl get nodes -L {c.GPU_PRODUCT_LABEL}" in message


@pytest.mark.parametrize("said,fix", [
    (NO_GPUS, "not enough free GPUs of spec.gpu.product"),
    (TAINT, "spec.podTemplate.tolerations"),
    ("0/1 nodes are available: 1 Insufficient memory.", "lower spec.podTemplate.resources"),
    ("something new", "kubectl describe pod tritonllm-build-x-abcde -n default"),
])
def test_other_scheduler_verdicts_get_their_fix(said: str, fix: str) -> None:
    w, _ = building(job_stall([pod(scheduler=said)]))
    assert fix in w.cond(c.COND_ENGINE_READY)["message"]


def test_build_pod_that_cannot_pull_names_the_image_fields() -> None:
    stall = job_stall([pod(waiting=("build", "ImagePullBackOff", "Back-off pulling image"))])
    w, p = building(stall)
    engine = w.cond(c.COND_ENGINE_READY)
    assert engine["reason"] == "ImagePullFailed"
    assert "spec.image" in engine["message"] and "imagePullSecrets" in engine["message"]
    assert [(t, reason) for t, reason, _ in p.events] == [("Warning", "ImagePullFailed")]
    assert w.cond(c.COND_DEGRADED)["status"] == "False"


def test_build_pod_missing_a_secret_is_not_starting() -> None:
    w, _ = building(job_stall([pod(waiting=("build", "CreateContainerConfigError", "no key"))]))
    engine = w.cond(c.COND_ENGINE_READY)
    assert engine["reason"] == "PodNotStarting" and "kubectl describe pod" in engine["message"]


@pytest.mark.parametrize("message,reason,fix", [
    (QUOTA, "QuotaExceeded", "raise the namespace's ResourceQuota"),
    (LIMIT_MAX, "LimitRangeExceeded", "`kubectl describe limitrange -n "),
    (POD_SECURITY, "AdmissionRefused", "ask the cluster's administrators"),
])
def test_build_pod_the_api_server_refuses_is_degraded(message: str, reason: str, fix: str) -> None:
    w, p = building(job_stall([], [event(message)]))
    job = w.render.build_job["metadata"]["name"]
    degraded = w.cond(c.COND_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", reason)
    assert degraded["message"].startswith(f"Job {job} cannot create its build pod: ")
    assert message in degraded["message"] and fix in degraded["message"]
    assert w.cond(c.COND_ENGINE_READY)["reason"] == reason
    assert p.events == [("Warning", reason, degraded["message"])]  # once, not per condition


def test_a_build_pod_that_starts_clears_the_stall() -> None:
    w, _ = building(job_stall([pod(scheduler=UNBOUND)]))
    w.obs["build_stall"] = None
    job = w.render.build_job["metadata"]["name"]
    w.objects[("Job", job)]["status"] = {"ready": 1}  # its pod runs
    p = w.step()
    engine = w.cond(c.COND_ENGINE_READY)
    assert (engine["reason"], engine["message"]) == ("Building", f"Job {job} is running the build")
    assert p.requeue_after is not None and p.requeue_after > STALL_REQUEUE_SECONDS


def test_repository_pod_stall_is_named_in_repository_ready_and_progressing() -> None:
    w = World()
    w.step()
    w.finish_job(w.render.build_job["metadata"]["name"])
    w.step()  # the engine is ready: creates the repository Job
    w.obs["repo_stall"] = job_stall([pod("repo-pod", scheduler=UNBOUND)])
    p = w.step()
    job = w.render.repository_job["metadata"]["name"]
    repo = w.cond(c.COND_REPOSITORY_READY)
    assert repo["reason"] == "Unschedulable"
    assert repo["message"].startswith(f"Job {job} cannot start its repository pod: pod repo-pod")
    assert "spec.storage.claimName" in repo["message"]
    assert w.cond(c.COND_PROGRESSING)["reason"] == "Unschedulable"
    assert ("Warning", "Unschedulable", repo["message"]) in p.events
    assert p.requeue_after == STALL_REQUEUE_SECONDS


# --- the Job's pods come from the watch; only a Job with no pod seen is asked for Events ---


def job_pod(name: str, job: str, ns: str = "team", **kw: Any) -> dict[str, Any]:
    """A Job's pod as the watch of pods delivers it."""
    body = pod(name, **kw)
    body["metadata"] = {"name": name, "namespace": ns, "creationTimestamp": "2026-11-22T09:00:00Z",
                        "labels": {"job-name": job, c.LABEL_COMPONENT: c.COMPONENT_REPOSITORY}}
    return body


def test_a_job_pod_seen_by_the_watch_says_why_with_no_request() -> None:
    ns, name = "team", "tritonllm-build-k"
    job = {"kind": "Job", "metadata": {"name": name, "namespace": ns, "uid": "j1"},
           "status": {"active": 1}}
    kube = FakeKube([])
    checks = PodChecks()
    assert checks.pod_changed(job_pod("p1", name, scheduler=UNBOUND)) is None  # no reconcile
    assert checks.job_pod_seen(ns, name)

    async def go() -> None:
        stall = await checks.job_stall(kube, ns, name, job)
        assert stall is not None and stall.reason == "Unschedulable"
        # placed and pulling: nothing holds it
        checks.pod_changed(job_pod("p1", name, waiting=("build", "ContainerCreating", "")))
        assert await checks.job_stall(kube, ns, name, job) is None
        # A running pod or a finished Job: nothing to say.
        assert await checks.job_stall(kube, ns, name, {**job, "status": {"ready": 1}}) is None
        done = {**job, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
        assert await checks.job_stall(kube, ns, name, done) is None

    asyncio.run(go())
    assert kube.calls == []
    # an ended pod keeps its phase only (its Job is about to say so: no Event list meanwhile);
    # a deleted one is forgotten
    ended = job_pod("p1", name)
    ended["status"]["phase"] = "Succeeded"
    checks.pod_changed(ended)
    assert checks._job_pods[(ns, name)] == {"p1": {"metadata": {"name": "p1"},
                                                   "status": {"phase": "Succeeded"}}}
    assert asyncio.run(checks.job_stall(kube, ns, name, job)) is None and kube.calls == []
    checks.pod_gone(ended)
    assert checks._job_pods == {} and not checks.job_pod_seen(ns, name)


def test_the_first_repository_pod_seen_asks_for_its_deployments_reconcile() -> None:
    """Its deployment's first workload may start once the Job's pod exists (plan.serving)."""
    checks = PodChecks()
    first = job_pod("r1", "demo-repo-k")
    first["metadata"]["labels"][c.LABEL_INSTANCE] = "demo"
    assert checks.pod_changed(first) == "demo"
    assert checks.pod_changed(first) is None  # seen before: no new reconcile


def test_a_job_with_no_pod_is_asked_for_its_failed_create_events() -> None:
    ns, name = "team", "tritonllm-build-k"
    job = {"kind": "Job", "metadata": {"name": name, "namespace": ns, "uid": "j1"},
           "status": {}}
    refused = {"kind": "Event", "metadata": {"name": "e1", "namespace": ns},
               "involvedObject": {"kind": "Job", "name": name, "uid": "j1"},
               **event(QUOTA)}
    earlier_job = {**refused, "metadata": {"name": "e0", "namespace": ns},
                   "involvedObject": {"kind": "Job", "name": name, "uid": "j0"},
                   **event(POD_SECURITY)}
    kube = FakeKube([refused, earlier_job])
    checks = PodChecks()
    stall = asyncio.run(checks.job_stall(kube, ns, name, job))
    assert stall is not None and stall.reason == "QuotaExceeded" and QUOTA in stall.said
    assert asyncio.run(checks.job_stall(kube, ns, name, job)) == stall  # remembered
    assert [x.kind for x in kube.calls] == ["Event"]  # at most once per JOB_RECHECK_SECONDS
    checks._jobs[(ns, name)] = (0.0, stall)  # JOB_RECHECK_SECONDS later
    asyncio.run(checks.job_stall(kube, ns, name, job))
    assert [x.kind for x in kube.calls] == ["Event", "Event"]


def test_passes_side_by_side_ask_once_for_a_shared_jobs_failed_create_events() -> None:
    """The deployments that share a repository Job reconcile side by side: while one lookup of
    its FailedCreate Events is under way the others wait for it instead of listing too, and a
    waiter cancelled midway does not cancel it for the rest."""
    ns, name = "team", "tritonllm-repo-k"
    job = {"kind": "Job", "metadata": {"name": name, "namespace": ns, "uid": "j1"},
           "status": {}}
    refused = {"kind": "Event", "metadata": {"name": "e1", "namespace": ns},
               "involvedObject": {"kind": "Job", "name": name, "uid": "j1"}, **event(QUOTA)}

    class SlowKube(FakeKube):
        async def list(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
            await asyncio.sleep(0.05)  # an answer that takes a while
            return await super().list(*args, **kwargs)

    kube = SlowKube([refused])
    checks = PodChecks()

    async def go() -> list[Any]:
        first = asyncio.ensure_future(checks.job_stall(kube, ns, name, job))
        await asyncio.sleep(0)
        first.cancel()  # its pass is cancelled: the lookup goes on for the others
        return await asyncio.gather(*(checks.job_stall(kube, ns, name, job) for _ in range(20)))

    stalls = asyncio.run(go())
    assert {s.reason for s in stalls} == {"QuotaExceeded"}
    assert [x.kind for x in kube.calls] == ["Event"]
    assert checks._asking == {}


def test_a_job_younger_than_the_grace_period_is_not_asked_for_events() -> None:
    """The Job controller creates the pod within seconds, as a rule: no Event list before."""
    ns, name = "team", "tritonllm-repo-k"
    created = dt.datetime(2026, 11, 22, 9, 0, 0, tzinfo=dt.UTC)
    job = {"kind": "Job", "metadata": {"name": name, "namespace": ns, "uid": "j1",
                                       "creationTimestamp": "2026-11-22T09:00:00Z"},
           "status": {}}
    kube = FakeKube([])
    checks = PodChecks()
    young = created + dt.timedelta(seconds=PodChecks.JOB_GRACE_SECONDS - 1)
    assert asyncio.run(checks.job_stall(kube, ns, name, job, at=young)) is None
    assert kube.calls == []
    old = created + dt.timedelta(seconds=PodChecks.JOB_GRACE_SECONDS)
    assert asyncio.run(checks.job_stall(kube, ns, name, job, at=old)) is None
    assert [x.kind for x in kube.calls] == ["Event"]


def test_a_serving_failure_seen_once_is_kept_until_every_replica_is_ready() -> None:
    """From the watch of serving pods: a failed leader is gone seconds later (its group is
    recreated), so the failure is remembered, reported once, and forgotten when ready."""
    from tests.unit.test_plan import _failed_leader
    from tritonllm.api.deployment import TritonLLMDeployment

    checks = PodChecks()
    pod = _failed_leader()
    assert checks.pod_changed(pod) == "demo"
    assert checks.pod_changed(pod) is None  # the same failure again: no new reconcile
    dep = TritonLLMDeployment.model_validate({
        "apiVersion": "tritonllm.io/v1alpha1", "kind": "TritonLLMDeployment",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {"image": "nvcr.io/nvidia/tritonserver:24.07-trtllm-python-py3",
                 "model": {"source": "hf://org/model"}}})
    rolling = {"spec": {"replicas": 1}, "status": {"readyReplicas": 0}}
    failure = checks.serving_failure(dep, rolling)
    assert failure is not None and "demo-0-1.demo-0.ns:2222" in failure
    assert checks.serving_failure(dep, {"spec": {"replicas": 1},
                                        "status": {"readyReplicas": 1}}) is None
    assert checks.serving_failure(dep, rolling) is None  # forgotten once ready



def test_a_failure_seen_only_in_the_deleted_pod_is_reported() -> None:
    """kopf hands a handler only the latest of the events within its batch window: a leader's
    error exit and its deletion by LeaderWorkerSet may come as one DELETED event."""
    from tests.unit.test_plan import _deleted_leader

    checks = PodChecks()
    gone = _deleted_leader("2026-11-27T11:59:58Z")
    assert checks.pod_gone(gone) == "demo"  # a new failure: reconcile
    assert checks.pod_gone(gone) is None  # known already
    assert checks.pod_changed(gone) is None
    assert checks.pod_gone(_deleted_leader("2026-11-27T12:00:05Z")) is None  # stopped: nothing
    verify = _deleted_leader("2026-11-27T11:59:58Z")
    verify["metadata"]["labels"][c.LABEL_COMPONENT] = c.COMPONENT_VERIFY
    assert PodChecks().pod_gone(verify) is None  # a verification pod's end is read elsewhere
