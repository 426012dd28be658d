"""Read the world of one deployment: everything the planner's Observed holds.

From the watch caches (tritonllm.handlers.cache), with no API request, except for pods and
Secrets, which are not cached. Serving pods are watched (label-selected) for three things only,
kept per deployment by PodChecks.pod_changed: a container that exits with an error, the
scheduler's verdict on a pod it cannot place, and the timestamps that time the revision's phases;
the pods of build and repository Jobs for why one does not start (what the scheduler or the
kubelet says of it), kept until the pod is deleted (an ended pod by its phase only). Listed
only when needed: the pods of a failed Job (their termination messages say why), the
FailedCreate Events of a Job of which no pod was seen PodChecks.JOB_GRACE_SECONDS after its
creation (did the API server refuse it?), at most once per PodChecks.JOB_RECHECK_SECONDS per
Job, and a verified rollout's verification pod once it is Ready (tritonllm.handlers.smoke). The
two Secrets a deployment names (the user's token, the MPI keys) are read by name (SecretChecks).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.deployment import TritonLLMDeployment
from tritonllm.api.settings import OperatorSettings
from tritonllm.k8s.client import Kube
from tritonllm.plan import (
    ObjectRef,
    Observed,
    PodTimes,
    Stall,
    engine_anchor,
    failure_state,
    is_cache_hit,
    is_ours,
    job_failed,
    job_finished,
    job_has_pod,
    job_running,
    job_stall,
    optional_refs,
    pod_workloads,
    record_status,
    serving_failure,
    shared_controller,
    unschedulable_message,
)
from tritonllm.render import Rendered, RenderOptions, naming
from tritonllm.render.serving import template_revision, verify_name

from .cache import POD_MONITORS_CRD, SCALED_OBJECTS_CRD, Cache, project_secret
from .smoke import SmokeChecks

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class BeforeRender:
    """What a pass reads before it renders: the engine record, the serving workload and the
    render options that they and the cluster decide."""

    engine: Obj | None
    workload: Obj | None
    opts: RenderOptions


def read_before_render(
    cache: Cache, settings: OperatorSettings, dep: TritonLLMDeployment, engine_key: str,
    body: Obj | None = None,
) -> BeforeRender:
    """`body`: the deployment as the pass read it (else read again from the cache)."""
    engine = cache.get(c.ENGINE_KIND, dep.namespace, engine_key)
    workload = cache.get(dep.spec.topology.workload_kind, dep.namespace, dep.name)
    recorded = record_status(engine)
    # the digests the build reported, as the deployment's status anchored them (the launch plan
    # carries them to the serving pods): a recreated record does not change them unasked
    body = body if body is not None else cache.get(c.KIND, dep.namespace, dep.name) or {}
    anchor = engine_anchor(body, engine_key, recorded)
    opts = RenderOptions(
        settings=settings,  # whole: a setting added later reaches rendering with no copy here
        pod_monitors=cache.serves(POD_MONITORS_CRD),
        engine_cached=is_cache_hit(recorded, dep.metadata.uid or ""),
        observed_replicas=handover_replicas(dep, workload),
        engine_digest=anchor.digest if anchor is not None else None,
        engine_fingerprints=anchor.fingerprintDigest if anchor is not None else None,
        # whether the running pods have the OpenAI frontend decides whether it is added now
        live_revision=template_revision(workload),
    )
    return BeforeRender(engine, workload, opts)


def handover_replicas(dep: TritonLLMDeployment, workload: dict[str, Any] | None) -> int | None:
    """The live replica count to keep in the workload's apply, while autoscaling and until the
    autoscaler has written it once: server-side apply would otherwise drop a field only the
    operator owned, and the count would fall back to 1. After that the apply leaves replicas
    out, so the operator never writes a count an autoscaler owns."""
    spec = (workload or {}).get("spec") or {}
    if dep.spec.autoscaling is None or not spec.get("replicasOnlyOurs"):
        return None
    return int(spec["replicas"])


async def observe(
    kube: Kube,
    cache: Cache,
    settings: OperatorSettings,
    dep: TritonLLMDeployment,
    r: Rendered,
    before: BeforeRender,
    *,
    now: dt.datetime,
    pods: PodChecks,
    secrets: SecretChecks,
    smoke: SmokeChecks,
    rollout: Obj | None,
) -> Observed:
    """Everything else the planner is given, read once the objects are rendered (`rollout`:
    status.rollout as it is)."""
    ns, spec = dep.namespace, dep.spec
    engine, workload = before.engine, before.workload
    verify = cache.get(spec.topology.workload_kind, ns, verify_name(dep))
    target = template_revision(r.workload.body)
    build_job = cache.get("Job", ns, r.build_job.name)
    repo_job = cache.get("Job", ns, r.repository_job.name)
    cred = spec.model.credentials
    token = await secrets.get(kube, ns, cred.secretName) if cred else None
    product = spec.gpu.product if settings.check_gpu_nodes else None
    mpi_name = naming.mpi_secret_name(dep)
    mpi = await secrets.get(kube, ns, mpi_name) if spec.topology.multi_node else None
    if mpi is not None and not is_ours(mpi, dep.metadata.uid or ""):
        secrets.forget(ns, mpi_name)  # not ours: looked at again next time (it may be gone)
    return Observed(
        now=now,
        store=cache.get("PersistentVolumeClaim", ns, spec.storage.claimName),
        secret_present=None if cred is None else token is not None and cred.key in token["keys"],
        gpu_nodes=cache.gpu_nodes(product) if product else None,
        gpu_capacity=cache.gpu_capacity(product) if product else None,
        keda_served=cache.serves(SCALED_OBJECTS_CRD),
        engine=engine,
        build_job=build_job,
        build_pods=await _failed_pods(kube, ns, build_job, or_reported=_building(engine)),
        build_stall=await pods.job_stall(kube, ns, r.build_job.name, build_job),
        repo_job=repo_job,
        **_repository_job_owner(cache, dep, repo_job),
        repo_pods=await _failed_pods(kube, ns, repo_job),
        repo_stall=await pods.job_stall(kube, ns, r.repository_job.name, repo_job),
        repo_pod_exists=job_has_pod(repo_job) or pods.job_pod_seen(ns, r.repository_job.name),
        workload=workload,
        live=_live(cache, dep, r, workload),
        repo_revisions=cache.repository_revisions(ns, dep.name),
        mpi_secret_present=mpi is not None if spec.topology.multi_node else None,
        mpi_secret=mpi,
        unschedulable=pods.unschedulable(dep, workload, verify),
        serving_failure=pods.serving_failure(dep, workload),
        serving_times=pods.serving_times(dep, r.repository_key),
        pods_refused=((workload or {}).get("status") or {}).get("replicaFailure"),
        verify_workload=verify,
        verify_failure=pods.verify_failure(dep, target) if verify is not None else None,
        smoke=await smoke.run(kube, dep, verify, target, rollout),
    )


def _live(
    cache: Cache, dep: TritonLLMDeployment, r: Rendered, workload: Obj | None
) -> dict[ObjectRef, Obj]:
    """Live children by reference: what is rendered, plus an HPA/PDB that should go."""
    refs = [o.ref for o in r.objects if o.kind not in ("Job", "PersistentVolumeClaim")]
    if r.verify_workload is not None:
        refs.append(r.verify_workload.ref)
    refs += [ref for ref in optional_refs(dep) if ref not in refs]
    live: dict[ObjectRef, Obj] = {}
    for ref in refs:
        own = ref == r.workload.ref
        found = workload if own else cache.get(ref.kind, r.namespace, ref.name)
        if found is not None:
            live[ref] = found
    return live


def _repository_job_owner(cache: Cache, dep: TritonLLMDeployment, job: Obj | None
                          ) -> dict[str, Any]:
    """Whose the content key's repository Job is, as Observed takes it: `repo_job_shared_uid`,
    its uid when another deployment of the namespace created it (its controller is a
    TritonLLMDeployment the watch shows with that uid); `repo_job_orphaned`, when the
    deployment it was created for is gone (the garbage collector removes it)."""
    if shared_controller(job) is None:
        return {"repo_job_shared_uid": None, "repo_job_orphaned": False}
    assert job is not None
    controller = cache.deployment_controls(dep.namespace, job)
    shared_uid = None
    if controller is not None and controller != (dep.metadata.uid or ""):
        shared_uid = str(job["metadata"].get("uid") or "") or None
    return {"repo_job_shared_uid": shared_uid, "repo_job_orphaned": controller is None}


def _building(engine: Obj | None) -> bool:
    """The engine record is not Ready: a succeeded build Job's pod has its digest to report."""
    return ((engine or {}).get("status") or {}).get("state") != "Ready"


async def _failed_pods(
    kube: Kube, namespace: str, job: Obj | None, *, or_reported: bool = False
) -> list[Obj]:
    """The pods of a failed Job; with `or_reported`, of a succeeded one too (its report)."""
    if job is None or not (job_failed(job) or (or_reported and job_finished(job))):
        return []
    return await kube.list("v1", "Pod", namespace, labels={"job-name": job["metadata"]["name"]})


def _all_ready(workload: Obj) -> bool:
    """Every replica the workload asks for is ready."""
    desired = (workload.get("spec") or {}).get("replicas", 1)
    return bool((workload.get("status") or {}).get("readyReplicas", 0) >= desired)


def _age_seconds(obj: Obj, now: dt.datetime) -> float:
    """Seconds since the object's creationTimestamp (an object without one counts as old)."""
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return (now - dt.datetime.fromisoformat(str(created))).total_seconds()
    except ValueError:
        return float("inf")


# The pods of our Jobs, as the watch of pods delivers them (component label), and what of their
# status says why one does not start.
JOB_COMPONENTS = frozenset({c.COMPONENT_BUILD, c.COMPONENT_REPOSITORY})
JOB_POD_STATUS = ("phase", "conditions", "initContainerStatuses", "containerStatuses")


def made_by_ours(cache: Cache, pod: Obj) -> bool:
    """Whether a serving or verification pod was made by a workload of the deployment its
    instance label names, as the watch shows them (tritonllm.plan.ownership.pod_workloads). A
    pod that only carries our labels, anyone may create: nothing of it is read (its termination
    message would be redacted on every event and reported as the deployment's). A Job's pod:
    True (only why it does not start is read of it)."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    if labels.get(c.LABEL_COMPONENT) in JOB_COMPONENTS:
        return True
    namespace = meta.get("namespace")
    for kind, name in pod_workloads(pod):
        workload = cache.get(kind, namespace, name)
        controller = shared_controller(workload)
        if (controller is not None and controller[0] == labels.get(c.LABEL_INSTANCE)
                and cache.deployment_controls(namespace, workload)):
            return True
    return False


class PodChecks:
    """What the watch of serving pods tells about each deployment (a container's failure, the
    scheduler's verdict on a pod it cannot place, the revision's phase times), with no request;
    and why a Job's pod does not start, looked up at most once per JOB_RECHECK_SECONDS per Job
    while it has no running pod (a Job shared by several deployments is looked up once for
    all)."""

    JOB_RECHECK_SECONDS = 10.0
    # A Job of which no pod has been seen is asked for its FailedCreate Events only once it is
    # this old: the Job controller creates its pod within seconds, as a rule.
    JOB_GRACE_SECONDS = 5.0
    JOBS_PRUNE_AT = 1024  # answers past JOB_RECHECK_SECONDS are dropped beyond this many

    def __init__(self) -> None:
        # Per deployment, the serving and verification pods the scheduler cannot place, with its
        # message (from the watch: the PodScheduled condition; no pod list).
        self._unplaced: dict[tuple[str, str], dict[str, str]] = {}
        self._jobs: dict[tuple[str, str], tuple[float, Stall | None]] = {}
        self._jobs_prune_at = self.JOBS_PRUNE_AT
        # The FailedCreate lookup under way per Job: the passes of the deployments that share a
        # Job, run side by side, wait for one list instead of each making its own.
        self._asking: dict[tuple[str, str], asyncio.Future[Stall | None]] = {}
        # Per Job, its pods as the watch shows them (an ended one by its phase only), until
        # deleted: what job_stall reads.
        self._job_pods: dict[tuple[str, str], dict[str, Obj]] = {}
        # The last serving container failure of each deployment: (its identity, message).
        self._failed: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {}
        # The last verification pod failure of each deployment: (its revision, message).
        self._verify_failed: dict[tuple[str, str], tuple[str, str]] = {}
        # Per deployment, per repository revision: the timestamps of its first serving pod.
        self._times: dict[tuple[str, str], dict[str, PodTimes]] = {}
        # Per serving pod (uid): serving_failure's answer for its failure_state, so that a
        # termination message is redacted once per run that ended, not on every pod event.
        self._said: dict[str, tuple[tuple[Any, ...], str | None]] = {}

    def pod_changed(self, pod: Obj) -> str | None:
        """From the watch of serving pods: remember a container that exited with an error (a
        failed leader is gone seconds later, when LeaderWorkerSet recreates its group, so a
        list would miss it), and the timestamps that time the revision's phases. Returns the
        deployment's name when a new failure or the first ready pod is worth a reconcile."""
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(c.LABEL_COMPONENT) in JOB_COMPONENTS:
            first = self._job_pod(pod, gone=False)
            # a repository pod seen first: its deployment's first workload may start now
            # (tritonllm.plan.serving); otherwise the Job's own events and the stall requeue
            # reconcile
            repository = labels.get(c.LABEL_COMPONENT) == c.COMPONENT_REPOSITORY
            return labels.get(c.LABEL_INSTANCE) if first and repository else None
        message = self._serving_failure(pod)
        name = (meta.get("labels") or {}).get(c.LABEL_INSTANCE)
        if not name:
            return None
        placed = self._record_unplaced(meta.get("namespace", ""), name, pod)
        if (meta.get("labels") or {}).get(c.LABEL_COMPONENT) == c.COMPONENT_VERIFY:
            return self._verify_changed(meta.get("namespace", ""), name, pod, message) or placed
        timed = self._record_times(meta.get("namespace", ""), name, pod)
        if message is None:
            return name if timed or placed else None
        return name if self._record_failure(name, pod, message) else None

    def _record_failure(self, name: str, pod: Obj, message: str) -> bool:
        """Keep a serving container's error exit; True when it is a new one (this pod, these
        restart counts)."""
        meta = pod["metadata"]
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        restarts = tuple(str(cs.get("restartCount", 0)) for cs in statuses)
        identity = (meta.get("uid", ""), *restarts)
        key = (meta.get("namespace", ""), name)
        if self._failed.get(key, ((), ""))[0] == identity:
            return False
        self._failed[key] = (identity, message)
        return True

    def pod_gone(self, pod: Obj) -> str | None:
        """A serving pod was deleted: the scheduler no longer needs to place it. Its last state
        may be the first we see of a container that exited with an error: kopf hands a handler
        only the latest of the events that come within its batch window, and LeaderWorkerSet
        deletes a failed group at once. Returns the deployment's name when that failure is new
        (worth a reconcile)."""
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(c.LABEL_COMPONENT) in JOB_COMPONENTS:
            self._job_pod(pod, gone=True)
            return None
        name = labels.get(c.LABEL_INSTANCE)
        if not name:
            return None
        self._unplaced.get((meta.get("namespace", ""), name), {}).pop(meta.get("name"), None)
        if labels.get(c.LABEL_COMPONENT) == c.COMPONENT_VERIFY:
            self._said.pop(str(meta.get("uid") or ""), None)
            return None
        message = self._serving_failure(pod, gone=True)
        return name if message is not None and self._record_failure(name, pod, message) else None

    SAID_MAX = 4096  # pods whose deletion the watch never showed are dropped beyond this many

    def _serving_failure(self, pod: Obj, *, gone: bool = False) -> str | None:
        """serving_failure(pod), computed (its message redacted) only when the pod's
        failure_state differs from the last event's; `gone`: the pod was deleted, its entry
        goes."""
        uid = str(pod["metadata"].get("uid") or "")
        state = failure_state(pod)
        known = self._said.pop(uid, None) if gone else self._said.get(uid)
        if known is not None and known[0] == state:
            return known[1]
        message = serving_failure(pod)
        if uid and not gone:
            self._said[uid] = (state, message)
            if len(self._said) > self.SAID_MAX:
                self._said.pop(next(iter(self._said)))  # the oldest
        return message

    def forget_pod(self, pod: Obj) -> None:
        """A pod that no workload of ours made was deleted (or ours, after its workload): only
        what was kept of it goes (nothing is read from it)."""
        meta = pod["metadata"]
        self._said.pop(str(meta.get("uid") or ""), None)
        key = (meta.get("namespace", ""), (meta.get("labels") or {}).get(c.LABEL_INSTANCE) or "")
        unplaced = self._unplaced.get(key)
        if unplaced is not None:
            unplaced.pop(meta.get("name"), None)
            if not unplaced:
                del self._unplaced[key]

    def _job_pod(self, pod: Obj, *, gone: bool) -> bool:
        """Keep what says why a Job's pod does not start (tritonllm.plan.stalls.job_stall), for
        each pod of a Job, until the pod is deleted (an ended one: its phase only). True when
        this is the first pod seen of its Job."""
        meta, status = pod["metadata"], pod.get("status") or {}
        job = (meta.get("labels") or {}).get("job-name")
        if not job:
            return False
        key, name = (meta.get("namespace", ""), job), str(meta.get("name", ""))
        first = key not in self._job_pods
        pods = self._job_pods.setdefault(key, {})
        if gone:
            pods.pop(name, None)
        elif status.get("phase") in ("Succeeded", "Failed"):
            pods[name] = {"metadata": {"name": name}, "status": {"phase": status["phase"]}}
        else:
            pods[name] = {
                "metadata": {"name": name, "creationTimestamp": meta.get("creationTimestamp")},
                "status": {k: status[k] for k in JOB_POD_STATUS if k in status},
            }
        if not pods:
            del self._job_pods[key]
        return first and not gone

    def job_pod_seen(self, namespace: str, job: str) -> bool:
        """Whether the watch of pods has shown a pod of this Job."""
        return (namespace, job) in self._job_pods

    def _record_unplaced(self, namespace: str, name: str, pod: Obj) -> str | None:
        """Keep the scheduler's verdict on the pod; the deployment's name when it changed."""
        said = unschedulable_message([pod])
        key, pod_name = (namespace, name), pod["metadata"].get("name", "")
        pods = dict(self._unplaced.get(key) or {})
        if pods.get(pod_name) == said:
            return None
        if said is None:
            pods.pop(pod_name, None)
        else:
            pods[pod_name] = said
        if pods:
            self._unplaced[key] = pods
        else:
            self._unplaced.pop(key, None)
        return name

    def _verify_changed(
        self, namespace: str, name: str, pod: Obj, message: str | None
    ) -> str | None:
        """A verification pod's container that exited with an error fails its revision's
        verification (tritonllm.plan.rollout): remembered with the revision it ran."""
        if message is None:
            return None
        revision = (pod["metadata"].get("annotations") or {}).get(c.ANNOTATION_REVISION, "")
        key = (namespace, name)
        if self._verify_failed.get(key) == (revision, message):
            return None
        self._verify_failed[key] = (revision, message)
        return name

    def verify_failure(self, dep: TritonLLMDeployment, revision: str | None) -> str | None:
        """The failure of a verification pod that ran `revision`, if one failed."""
        found = self._verify_failed.get((dep.namespace, dep.name))
        return found[1] if found is not None and found[0] == revision else None

    KEEP_REVISIONS = 3

    def _record_times(self, namespace: str, name: str, pod: Obj) -> bool:
        """Keep the timestamps of a revision's first serving pod (the leader of a group): the
        first to become ready, or until one is, the latest. True when it just became ready (the
        end of the timeline: worth a reconcile; the other steps are read on the next one)."""
        labels = pod["metadata"].get("labels") or {}
        repo = labels.get(c.LABEL_REPO_KEY)
        times = PodTimes.of(pod)
        if labels.get(c.LABEL_COMPONENT) != c.COMPONENT_SERVER or not repo or times is None:
            return False
        revisions = self._times.setdefault((namespace, name), {})
        known = revisions.get(repo)
        if known == times or (known is not None and known.ready and not times.ready):
            return False
        revisions[repo] = times
        while len(revisions) > self.KEEP_REVISIONS:
            revisions.pop(next(iter(revisions)))
        return bool(times.ready)

    def serving_times(self, dep: TritonLLMDeployment, repo_key: str) -> PodTimes | None:
        return self._times.get((dep.namespace, dep.name), {}).get(repo_key)

    def serving_failure(self, dep: TritonLLMDeployment, workload: Obj | None) -> str | None:
        """The last serving failure while the workload has replicas not ready; forgotten once
        every replica is ready."""
        key = (dep.namespace, dep.name)
        if workload is not None and _all_ready(workload):
            self._failed.pop(key, None)
            return None
        found = self._failed.get(key)
        return found[1] if found else None

    async def job_stall(
        self, kube: Kube, namespace: str, name: str, job: Obj | None,
        *, at: dt.datetime | None = None,
    ) -> Stall | None:
        """Why the Job's pod does not start, if it has none running (tritonllm.plan.stalls): from
        its pods as the watch shows them; with none seen, from its FailedCreate Events."""
        key = (namespace, name)
        if job is None or job_finished(job) or job_running(job):
            self._jobs.pop(key, None)
            return None
        pods = list((self._job_pods.get(key) or {}).values())
        if pods:  # from the watch: no request
            return job_stall(pods)
        if _age_seconds(job, at or dt.datetime.now(dt.UTC)) < self.JOB_GRACE_SECONDS:
            return None  # the Job controller creates its pod within seconds, as a rule
        # No pod of it seen: did the API server refuse to create one? (its FailedCreate Events,
        # asked at most once per JOB_RECHECK_SECONDS)
        now = time.monotonic()
        checked = self._jobs.get(key)
        if checked is not None and now - checked[0] < self.JOB_RECHECK_SECONDS:
            return checked[1]
        asking = self._asking.get(key)
        if asking is None:
            asking = asyncio.ensure_future(self._failed_create(kube, namespace, name, job))
            self._asking[key] = asking

            def done(f: asyncio.Future[Stall | None]) -> None:
                self._asking.pop(key, None)
                if not f.cancelled():
                    f.exception()  # retrieved: every waiter may have been cancelled

            asking.add_done_callback(done)
        # shielded: one waiter's pass cancelled does not cancel the lookup the others wait on
        return await asyncio.shield(asking)

    async def _failed_create(self, kube: Kube, namespace: str, name: str, job: Obj
                             ) -> Stall | None:
        uid = job["metadata"].get("uid", "")
        fields = {"involvedObject.kind": "Job", "involvedObject.name": name,
                  "reason": "FailedCreate"}
        if uid:
            fields["involvedObject.uid"] = uid
        events = await kube.list("v1", "Event", namespace, labels={}, fields=fields)
        stall = job_stall([], events)
        now = time.monotonic()
        self._jobs[(namespace, name)] = (now, stall)
        if len(self._jobs) > self._jobs_prune_at:  # a Job deleted unfinished: none asks again
            self._jobs = {k: v for k, v in self._jobs.items()
                          if now - v[0] < self.JOB_RECHECK_SECONDS}
            self._jobs_prune_at = max(self.JOBS_PRUNE_AT, 2 * len(self._jobs))
        return stall

    def unschedulable(
        self, dep: TritonLLMDeployment, workload: Obj | None, verify: Obj | None
    ) -> str | None:
        """The scheduler's message for a serving or verification pod it cannot place, while
        the serving or the verification workload has replicas not ready."""
        key = (dep.namespace, dep.name)
        waiting = [w for w in (workload, verify) if w is not None and not _all_ready(w)]
        unplaced = self._unplaced.get(key) or {}
        return next(iter(unplaced.values()), None) if waiting else None

    def forget(self, namespace: str, name: str) -> None:
        self._unplaced.pop((namespace, name), None)
        self._failed.pop((namespace, name), None)
        self._verify_failed.pop((namespace, name), None)
        self._times.pop((namespace, name), None)


class SecretChecks:
    """The Secrets a deployment names, read by name: the operator neither lists nor watches
    Secrets (no other Secret of the cluster reaches it). A Secret found is read again at most
    once per RECHECK_SECONDS (a steady-state reconcile sends no request); one not found, on
    every reconcile that needs it (it blocks the deployment until it appears). Only key names
    and ownership are kept, never values."""

    RECHECK_SECONDS = 300.0
    PRUNE_AT = 4096

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], tuple[float, Obj]] = {}
        self._prune_at = self.PRUNE_AT

    async def get(self, kube: Kube, namespace: str, name: str) -> Obj | None:
        key = (namespace, name)
        now = time.monotonic()
        hit = self._found.get(key)
        if hit is not None and now - hit[0] < self.RECHECK_SECONDS:
            return hit[1]
        live = await kube.get("v1", "Secret", namespace, name)
        if live is None:
            self._found.pop(key, None)
            return None
        slim = project_secret(live)
        self._found[key] = (now, slim)
        if len(self._found) > self._prune_at:  # drop what nobody asked for since
            self._found = {k: v for k, v in self._found.items()
                           if now - v[0] < self.RECHECK_SECONDS}
            self._prune_at = max(self.PRUNE_AT, 2 * len(self._found))
        return slim

    def forget(self, namespace: str, name: str) -> None:
        self._found.pop((namespace, name), None)
