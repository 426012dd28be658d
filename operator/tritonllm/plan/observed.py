"""What the planner is given: the observed state of one deployment, and how to read it.

The handlers fill `Observed` from the API server (through the watch caches); everything here reads
those objects without side effects: a Job's phase and failure tail, a workload's replica counts
and the engine and repository its pods run, the scheduler's complaint about a serving pod.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.engine import is_digest
from tritonllm.render import ObjectRef

from .phases import PodTimes
from .redact import log_tail
from .stalls import Stall, unschedulable

Obj = Mapping[str, Any]
# The pods that run a revision: servers (leaders), workers, and verification pods.
SERVING_COMPONENTS = (c.COMPONENT_SERVER, c.COMPONENT_WORKER, c.COMPONENT_VERIFY)


@dataclasses.dataclass(frozen=True)
class SmokeAnswer:
    """What one smoke request got (the handlers send it)."""

    status: int | None  # the HTTP status; None: no answer (refused, reset, timed out)
    text: str | None  # the answer's text_output, if it had one
    seconds: float
    error: str = ""  # why there was no answer, or the body of an error answer


@dataclasses.dataclass(frozen=True)
class SmokeRun:
    """The smoke set's answers from the verification pod of one revision."""

    revision: str
    pod: str
    answers: tuple[SmokeAnswer, ...]
    # The OpenAI request (/v1/completions on the frontend's port), sent after the set passed
    # when the pod runs the frontend; its text is the first choice's. None: not sent.
    openai: SmokeAnswer | None = None


@dataclasses.dataclass(frozen=True)
class Observed:
    """Everything the planner needs, read from the API server by the handlers."""

    now: dt.datetime
    store: Obj | None = None  # the PVC
    secret_present: bool | None = None  # None: no credentials requested
    gpu_nodes: int | None = None  # None: no product requested
    # Allocatable GPUs of each schedulable node with the product (None: nodes not watched).
    gpu_capacity: Sequence[int] | None = None
    # Whether the cluster serves KEDA's ScaledObject (read when autoscaler KEDA is asked for).
    keda_served: bool = True
    engine: Obj | None = None  # TritonLLMEngine record
    build_job: Obj | None = None
    # The build Job's pods: when it failed (their termination messages say why), and when it
    # succeeded while the engine record is not Ready yet (they report the engine's digest).
    build_pods: Sequence[Obj] = ()
    # Why the build Job's pod does not start (read only while the Job has no running pod).
    build_stall: Stall | None = None
    # The repository Job of the target content key, shared by the namespace's deployments.
    repo_job: Obj | None = None
    # Its uid when another deployment of the namespace created it (its controller is a
    # TritonLLMDeployment the watch shows with that uid): trusted like one of ours.
    repo_job_shared_uid: str | None = None
    # Its controller is a deployment of the namespace that is gone: the garbage collector
    # deletes it (an owner reference to a uid that does not exist, forged or not, is
    # collected), then the Job is created again; until then it is neither used nor in the way.
    repo_job_orphaned: bool = False
    repo_pods: Sequence[Obj] = ()
    repo_stall: Stall | None = None
    # The repository Job's pod exists (the watch of pods saw it, or the Job counts it active).
    repo_pod_exists: bool = False
    workload: Obj | None = None  # Deployment or LeaderWorkerSet
    # Live children by reference (Manifest.ref), for the hash comparison.
    live: Mapping[ObjectRef, Obj] = dataclasses.field(default_factory=dict)
    # Repository revisions (repo keys) that exist as ConfigMaps/Jobs of this deployment.
    repo_revisions: Sequence[str] = ()
    # Multi node only: whether the per-deployment MPI SSH key Secret exists (None: not needed).
    mpi_secret_present: bool | None = None
    # That Secret as read (metadata and key names), when it exists.
    mpi_secret: Obj | None = None
    # Why a serving pod cannot be scheduled (the scheduler's message), if one cannot.
    unschedulable: str | None = None
    # Why the workload's controller cannot create serving pods (its ReplicaFailure message).
    pods_refused: str | None = None
    # The last serving container that exited with an error while the rollout is not done
    # (serving_failure: pod, exit code, termination message).
    serving_failure: str | None = None
    # The first serving pod of the target revision's timestamps (tritonllm.plan.phases).
    serving_times: PodTimes | None = None
    # A verified rollout (tritonllm.plan.rollout): the live verification workload, the last
    # of its containers that exited with an error while running the target revision, and the
    # smoke set's answers from its Ready pod (sent this pass, for one revision).
    verify_workload: Obj | None = None
    verify_failure: str | None = None
    smoke: SmokeRun | None = None


@dataclasses.dataclass(frozen=True)
class JobObs:
    """What a Job tells us."""

    phase: str  # Missing | Active | Succeeded | Failed
    reason: str = ""
    message: str = ""
    uid: str = ""
    running: bool = False  # Active with a ready (running) pod

    @staticmethod
    def of(job: Obj | None, pods: Sequence[Obj] = ()) -> JobObs:
        if job is None:
            return JobObs("Missing")
        st = job.get("status") or {}
        uid = job["metadata"].get("uid", "")
        for cond in st.get("conditions") or []:
            if cond.get("status") != "True":
                continue
            if cond["type"] == "Complete":
                return JobObs("Succeeded", uid=uid)
            if cond["type"] == "Failed":
                reason, message = cond.get("reason", "Failed"), cond.get("message", "")
                tail = termination_message(pods)
                return JobObs("Failed", reason, tail or log_tail(message), uid)
        if st.get("succeeded"):
            return JobObs("Succeeded", uid=uid)
        return JobObs("Active", uid=uid, running=job_running(job))


def job_has_pod(job: Obj | None) -> bool:
    """Whether a Job's pod exists (status.active: pending or running; it holds its place in a
    pod quota from then on)."""
    return bool(((job or {}).get("status") or {}).get("active"))


def job_running(job: Obj | None) -> bool:
    """Whether a Job has a running pod (status.ready: its pods with the Ready condition)."""
    return bool(((job or {}).get("status") or {}).get("ready"))


def job_finished(job: Obj | None) -> bool:
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    done = any(x.get("type") in ("Complete", "Failed") and x.get("status") == "True"
               for x in conditions)
    return done or bool(((job or {}).get("status") or {}).get("succeeded"))


def job_failed(job: Obj | None) -> bool:
    """Whether a Job has failed (only then are its pods worth reading)."""
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return any(x.get("type") == "Failed" and x.get("status") == "True" for x in conditions)


def termination_message(pods: Sequence[Obj]) -> str:
    """The last failed container's termination message (the log tail, with
    terminationMessagePolicy FallbackToLogsOnError), redacted of secrets and shortened."""
    for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True):
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            said = _exited(cs, (cs.get("state") or {}).get("terminated") or {})
            if said:
                return said
    return ""


def _exited(cs: Obj, term: Obj) -> str | None:
    """`container C exited with code N (reason): <termination message>` for a terminated state
    with an error; None for a running container or a status 0."""
    if not term or term.get("exitCode", 0) == 0:
        return None
    head = f"container {cs.get('name')} exited with code {term.get('exitCode')}"
    head += f" ({term['reason']})" if term.get("reason") else ""
    msg = (term.get("message") or "").strip()
    return f"{head}: {log_tail(msg)}" if msg else head


def build_report(job: Obj | None, pods: Sequence[Obj]) -> dict[str, str]:
    """The digests a succeeded build reported (tritonllm.runtime.verified.report_engine): the
    termination message of a container that exited 0, in a pod whose controller is this very
    Job (a pod of the same name label made by someone else is not read). {} when none did, or
    what it said is not a report."""
    uid = ((job or {}).get("metadata") or {}).get("uid")
    for pod in pods:
        owners = pod["metadata"].get("ownerReferences") or []
        if not uid or not any(o.get("controller") and o.get("uid") == uid for o in owners):
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            if term.get("exitCode") != 0:
                continue
            try:
                said = json.loads(term.get("message") or "")
            except ValueError:
                continue
            if isinstance(said, dict) and is_digest(said.get("engineDigest")):
                report = {"digest": said["engineDigest"]}
                if is_digest(said.get("fingerprintDigest")):
                    report["fingerprintDigest"] = said["fingerprintDigest"]
                return report
    return {}


def serving_failure(pod: Obj) -> str | None:
    """A serving pod's container that exited with an error, now or before its last restart:
    `pod P: container C exited with code N (reason): <termination message>`. None for any other
    pod (a Job's), and for a container that stopped with status 0 (a drained rank)."""
    labels = pod["metadata"].get("labels") or {}
    if labels.get(c.LABEL_COMPONENT) not in SERVING_COMPONENTS:
        return None
    # A container that ends while its pod is deleted was stopped, whatever its status: only the
    # run before its last restart counts then, and a run that had ended before the deletion
    # began (a failed group's leader, deleted by LeaderWorkerSet once it failed).
    deletion = _deletion_began(pod["metadata"])
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        current = (cs.get("state") or {}).get("terminated") or {}
        if deletion is not None and not _ended_before(current, deletion):
            current = {}  # stopped by the deletion
        for term in (current, (cs.get("lastState") or {}).get("terminated") or {}):
            said = _exited(cs, term)
            if said:
                return f"pod {pod['metadata'].get('name')}: {said}"
    return None


def failure_state(pod: Obj) -> tuple[Any, ...]:
    """What `serving_failure` reads of a pod, but for the termination messages: its uid, role
    and deletion, and each container's restart count and ended runs (code, end). Its answer
    changes only with this, so the watch's handler redacts a pod's message once per run that
    ended (per restart), not on every event of the pod (a readiness flip, a condition)."""
    meta = pod["metadata"]

    def ended(term: Any) -> tuple[Any, ...] | None:
        return (term.get("exitCode"), term.get("finishedAt")) if term else None

    return (
        meta.get("uid"), (meta.get("labels") or {}).get(c.LABEL_COMPONENT),
        meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds"),
        tuple((cs.get("name"), cs.get("restartCount"),
               ended((cs.get("state") or {}).get("terminated")),
               ended((cs.get("lastState") or {}).get("terminated")))
              for cs in (pod.get("status") or {}).get("containerStatuses") or []),
    )


def _deletion_began(meta: Obj) -> dt.datetime | None:
    """When the pod's deletion was asked (its deletionTimestamp less the grace period); None
    when it is not being deleted."""
    if not meta.get("deletionTimestamp"):
        return None
    stamp = _time(meta["deletionTimestamp"])
    if stamp is None:
        return dt.datetime.min.replace(tzinfo=dt.UTC)  # unreadable: nothing ended before it
    return stamp - dt.timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0))


def _ended_before(term: Obj, moment: dt.datetime) -> bool:
    finished = _time(term.get("finishedAt"))
    return finished is not None and finished < moment


def _time(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def unschedulable_message(pods: Sequence[Obj]) -> str | None:
    """The scheduler's message for the first serving pod it cannot place (GPUs, affinity)."""
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(c.LABEL_COMPONENT) not in SERVING_COMPONENTS:
            continue
        message = unschedulable(pod)
        if message is not None:
            return f"{pod['metadata']['name']}: {message}".strip()
    return None


@dataclasses.dataclass(frozen=True)
class WorkloadObs:
    """A Deployment's or LeaderWorkerSet's replica counts, and what its pod template runs."""

    exists: bool
    desired: int = 0
    ready: int = 0
    updated: int = 0
    done: bool = False  # rolled out: observed, every replica updated and ready
    engine_key: str | None = None
    repo_key: str | None = None

    @staticmethod
    def of(workload: Obj | None) -> WorkloadObs:
        if workload is None:
            return WorkloadObs(exists=False)
        spec, st = workload.get("spec") or {}, workload.get("status") or {}
        desired = int(spec.get("replicas", 1))
        ready = int(st.get("readyReplicas", 0))
        updated = int(st.get("updatedReplicas", 0))
        observed = st.get("observedGeneration", 0) >= workload["metadata"].get("generation", 0)
        tmpl = spec.get("template") or (spec.get("leaderWorkerTemplate") or {}).get(
            "leaderTemplate"
        )
        labels = ((tmpl or {}).get("metadata") or {}).get("labels") or {}
        return WorkloadObs(
            exists=True,
            desired=desired,
            ready=ready,
            updated=updated,
            done=observed and updated >= desired and ready >= desired,
            engine_key=labels.get(c.LABEL_ENGINE_KEY),
            repo_key=labels.get(c.LABEL_REPO_KEY),
        )
